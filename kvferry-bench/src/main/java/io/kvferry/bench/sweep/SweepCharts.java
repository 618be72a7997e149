package io.kvferry.bench.sweep;

import com.fasterxml.jackson.databind.node.ObjectNode;
import org.knowm.xchart.BitmapEncoder;
import org.knowm.xchart.XYChart;
import org.knowm.xchart.XYChartBuilder;
import org.knowm.xchart.XYSeries;
import org.knowm.xchart.style.Styler;
import org.knowm.xchart.style.lines.SeriesLines;
import org.knowm.xchart.style.markers.SeriesMarkers;

import java.awt.Color;
import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * The sweep's PNG charts, drawn with XChart (org.knowm.xchart: maintained, Apache-2.0, renders to a
 * BufferedImage and PNG through javax.imageio, no display needed; chosen over JFreeChart for its small
 * API for exactly these line charts):
 * <ul>
 *   <li>{@value #BANDWIDTH_PNG}: transfer_gbps against the mean bytes per data-path op (log scale), one
 *       line per transport and concurrency, with the memcpy (per page size), iperf3 (single stream, flat)
 *       and ucx_perftest (at each ucx point's op size) lines measured in the same sweep;</li>
 *   <li>{@value #LATENCY_PNG}: latency from arrival (p50, p99, p999, log scale) against the offered load
 *       (the achieved rate of each point is in the CSV).</li>
 * </ul>
 */
final class SweepCharts {
    static final String BANDWIDTH_PNG = "bandwidth_vs_op_size.png";
    static final String LATENCY_PNG = "latency_vs_offered_load.png";
    static final int WIDTH = 900;
    static final int HEIGHT = 560;

    private SweepCharts() {}

    /** Draws the charts whose points exist; returns the files written. */
    static List<Path> draw(Path dir, List<ObjectNode> rows, Map<Long, Double> memcpyByItem, Double iperf3) throws IOException {
        // Charts render off-screen; a server has no display.
        if (System.getProperty("java.awt.headless") == null) System.setProperty("java.awt.headless", "true");
        List<Path> out = new ArrayList<>();
        List<ObjectNode> bw = rows.stream().filter(r -> r.path("kind").asText().equals("bandwidth")
                && r.path("block_bytes").asLong() > 0).toList();
        if (!bw.isEmpty()) out.add(bandwidth(dir.resolve(BANDWIDTH_PNG), bw, memcpyByItem, iperf3));
        List<ObjectNode> load = rows.stream().filter(r -> r.path("kind").asText().equals("load")).toList();
        if (!load.isEmpty()) out.add(latency(dir.resolve(LATENCY_PNG), load));
        return out;
    }

    private static Path bandwidth(Path file, List<ObjectNode> rows, Map<Long, Double> memcpyByItem, Double iperf3)
            throws IOException {
        XYChart c = new XYChartBuilder().width(WIDTH).height(HEIGHT).title("kvferry bench --sweep: bandwidth vs op size")
                .xAxisTitle("mean bytes per data-path op (log)").yAxisTitle("GB/s").build();
        style(c);
        // Up to a dozen series: a column on the right, not a row that runs off the image.
        c.getStyler().setLegendPosition(Styler.LegendPosition.OutsideE);
        c.getStyler().setLegendLayout(Styler.LegendLayout.Vertical);
        c.getStyler().setXAxisLogarithmic(true);
        Map<String, List<ObjectNode>> series = new TreeMap<>();
        for (ObjectNode r : rows) {
            series.computeIfAbsent(r.path("transport").asText() + " c=" + r.path("concurrency").asInt(), k -> new ArrayList<>()).add(r);
        }
        double minX = Double.MAX_VALUE, maxX = 0;
        for (Map.Entry<String, List<ObjectNode>> e : series.entrySet()) {
            List<ObjectNode> pts = e.getValue().stream().sorted(Comparator.comparingLong(r -> r.path("block_bytes").asLong())).toList();
            List<Double> x = pts.stream().map(r -> (double) r.path("block_bytes").asLong()).toList();
            List<Double> y = pts.stream().map(r -> r.path("transfer_gbps").asDouble()).toList();
            c.addSeries(e.getKey(), x, y).setMarker(SeriesMarkers.CIRCLE);
            minX = Math.min(minX, x.getFirst());
            maxX = Math.max(maxX, x.getLast());
        }
        List<Double> mx = new ArrayList<>(), my = new ArrayList<>();
        memcpyByItem.forEach((item, g) -> {
            if (g > 0) {
                mx.add((double) item);
                my.add(g);
            }
        });
        if (!mx.isEmpty()) {
            c.addSeries("memcpy (1 thread)", mx, my).setMarker(SeriesMarkers.DIAMOND).setLineStyle(SeriesLines.DASH_DASH);
            minX = Math.min(minX, mx.getFirst());
            maxX = Math.max(maxX, mx.getLast());
        }
        if (iperf3 != null && maxX > 0) {
            c.addSeries("iperf3 (1 stream)", List.of(minX, maxX), List.of(iperf3, iperf3))
                    .setMarker(SeriesMarkers.NONE).setLineStyle(SeriesLines.DASH_DASH);
        }
        List<ObjectNode> perftest = rows.stream().filter(r -> r.path("ucx_perftest_gbps").asDouble() > 0)
                .sorted(Comparator.comparingLong(r -> r.path("block_bytes").asLong())).toList();
        if (!perftest.isEmpty()) {
            c.addSeries("ucx_perftest", perftest.stream().map(r -> (double) r.path("block_bytes").asLong()).toList(),
                    perftest.stream().map(r -> r.path("ucx_perftest_gbps").asDouble()).toList())
                    .setMarker(SeriesMarkers.TRIANGLE_UP).setLineStyle(SeriesLines.DASH_DASH);
        }
        return save(c, file);
    }

    private static Path latency(Path file, List<ObjectNode> rows) throws IOException {
        XYChart c = new XYChartBuilder().width(WIDTH).height(HEIGHT).title("kvferry bench --sweep: latency from arrival vs offered load")
                .xAxisTitle("offered load (requests/s, Poisson)").yAxisTitle("latency from arrival (ms, log)").build();
        style(c);
        c.getStyler().setYAxisLogarithmic(true);
        List<ObjectNode> pts = rows.stream().filter(r -> r.path("offered_rate").asDouble() > 0)
                .sorted(Comparator.comparingDouble(r -> r.path("offered_rate").asDouble())).toList();
        List<Double> x = pts.stream().map(r -> r.path("offered_rate").asDouble()).toList();
        for (String p : List.of("p50", "p99", "p999")) {
            // A log axis cannot show 0: a percentile below the histogram's resolution is drawn at 1 µs.
            List<Double> y = pts.stream().map(r -> Math.max(0.001, r.path("request_latency_ms").path(p).asDouble())).toList();
            c.addSeries(p, x, y).setMarker(SeriesMarkers.CIRCLE);
        }
        return save(c, file);
    }

    private static void style(XYChart c) {
        c.getStyler().setLegendPosition(Styler.LegendPosition.OutsideS);
        c.getStyler().setLegendLayout(Styler.LegendLayout.Horizontal);
        c.getStyler().setChartBackgroundColor(Color.WHITE);
        c.getStyler().setPlotGridLinesVisible(true);
        c.getStyler().setDefaultSeriesRenderStyle(XYSeries.XYSeriesRenderStyle.Line);
    }

    private static Path save(XYChart c, Path file) throws IOException {
        String name = file.getFileName().toString();
        String base = file.resolveSibling(name.substring(0, name.length() - ".png".length())).toString();
        BitmapEncoder.saveBitmap(c, base, BitmapEncoder.BitmapFormat.PNG);
        return file;
    }
}
