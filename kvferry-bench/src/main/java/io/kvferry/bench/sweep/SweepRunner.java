package io.kvferry.bench.sweep;

import io.kvferry.bench.BenchResult;
import io.kvferry.bench.BenchRunner;
import io.kvferry.bench.IperfBaseline;
import io.kvferry.bench.MemcpyBaseline;
import io.kvferry.bench.UcxPerftestBaseline;
import io.kvferry.testkit.MemoryBudget;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.fasterxml.jackson.dataformat.csv.CsvMapper;
import com.fasterxml.jackson.dataformat.csv.CsvSchema;
import io.kvferry.api.KVFerrySettings;
import io.kvferry.ucx.UcxTransportProvider;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Runs a {@link SweepPlan} and writes, under one directory: {@code points/ID.json} per point (the
 * bench's JSON plus the point's settings and the baselines measured in the same sweep),
 * {@code baselines.json}, {@code sweep.csv} (one row per point, {@link #CSV_COLUMNS}) and the PNG
 * charts of {@link SweepCharts}. Every point's pools are checked against the memory available before
 * the first one runs. A point that fails to run is recorded with its error and the sweep goes on.
 */
public final class SweepRunner {
    /** The CSV's columns, in order; dotted names are fields of the bench JSON's nested objects. */
    public static final List<String> CSV_COLUMNS = List.of("id", "kind", "transport", "processes", "model", "pages",
            "page_size", "prompt_tokens", "concurrency", "offered_rate", "requests", "warmup", "succeeded", "failed",
            "corrupted", "block_bytes", "batch_size", "gbps", "transfer_gbps", "datapath_gbps", "avg_latency_ms",
            "request_latency_ms.p50", "request_latency_ms.p99", "request_latency_ms.p999", "prepare_ms.avg",
            "prepare_ms.p99", "post_ms.avg", "post_ms.p99", "transfer_ms.avg", "transfer_ms.p99", "achieved_rate",
            "rooms_per_s", "cpu_us_per_room.prefill", "cpu_us_per_room.decode", "memcpy_gbps", "iperf3_gbps",
            "ucx_perftest_gbps");

    private static final ObjectMapper JSON = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT);

    /**
     * What the sweep produced.
     *
     * @param pointFiles one JSON per point, in run order
     * @param failedPoints points that did not run, or ran with failed or corrupted requests
     */
    public record Outcome(Path dir, List<Path> pointFiles, Path csv, Path baselines, List<Path> charts, int failedPoints) {}

    private final SweepPlan plan;
    private final Path dir;
    private final PrintStream err;
    private final boolean terminal;

    /**
     * @param err      where progress goes (stderr)
     * @param terminal redraw the progress bar in place (stderr is a terminal) rather than one line per step
     */
    public SweepRunner(SweepPlan plan, Path dir, PrintStream err, boolean terminal) {
        this.plan = plan;
        this.dir = dir;
        this.err = err;
        this.terminal = terminal;
    }

    /** As above, redrawing in place only when stderr is a terminal. */
    public SweepRunner(SweepPlan plan, Path dir, PrintStream err) {
        this(plan, dir, err, ProgressBar.stderrIsTerminal());
    }

    /**
     * Refuses the sweep when any point's pools do not fit in {@code available} bytes (negative:
     * unknown, no check), naming the point and the numbers, before anything runs.
     */
    public static void requireFits(SweepPlan plan, long available) {
        for (SweepPlan.Point p : plan.points()) MemoryBudget.requireBothRoles(p.config(), available, "sweep point " + p.id());
    }

    public Outcome run() throws IOException {
        requireFits(plan, MemoryBudget.availableBytes());
        Files.createDirectories(dir.resolve("points"));
        boolean ucx = plan.points().stream().anyMatch(p -> p.config().transport().equals("ucx"));
        if (ucx) {
            String why = new UcxTransportProvider().unavailableReason(KVFerrySettings.fromEnvironment());
            if (why != null) throw new IllegalArgumentException("the sweep has ucx points but UCX is unavailable: " + why);
        }
        Map<Long, Double> memcpyByItem = new TreeMap<>();
        for (SweepPlan.Point p : plan.points()) {
            if (p.kind() == SweepPlan.Kind.BANDWIDTH) memcpyByItem.put(itemBytes(p), 0.0);
        }
        int ucxPoints = (int) plan.points().stream().filter(p -> p.config().transport().equals("ucx")).count();
        int steps = plan.points().size() + memcpyByItem.size() + (plan.iperf3() ? 1 : 0)
                + (plan.ucxPerftest() ? ucxPoints : 0);
        ProgressBar bar = new ProgressBar(err, steps, terminal);

        // Baselines first (memcpy per page size, iperf3 once), then the points; ucx_perftest right after each ucx point.
        for (long item : memcpyByItem.keySet()) {
            String label = "memcpy baseline, " + item + " B items";
            bar.start(label);
            memcpyByItem.put(item, round(MemcpyBaseline.measure(item)));
            bar.finish(label);
        }
        Double iperf = null;
        if (plan.iperf3()) {
            bar.start("iperf3 baseline");
            double g = IperfBaseline.measure();
            iperf = g > 0 ? round(g) : null;
            bar.finish("iperf3 baseline");
            if (iperf == null) bar.note("iperf3 baseline unavailable (install iperf3): the chart has no iperf3 line");
        }

        List<Path> files = new ArrayList<>();
        List<ObjectNode> rows = new ArrayList<>();
        int failedPoints = 0;
        for (SweepPlan.Point p : plan.points()) {
            String label = describe(p);
            bar.start(label);
            ObjectNode node;
            try {
                BenchResult r = new BenchRunner(p.config(), null).runWithoutBaselines(p.processes());
                node = JSON.valueToTree(r);
                if (r.failed() > 0 || r.corrupted() > 0) failedPoints++;
            } catch (Exception e) {
                node = JSON.createObjectNode();
                node.put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
                failedPoints++;
                bar.note(p.id() + " failed: " + e.getMessage());
            }
            ObjectNode out = JSON.createObjectNode();
            out.put("id", p.id());
            out.put("kind", p.kind().name().toLowerCase());
            out.put("page_size", p.config().workload().pageSize());
            out.put("prompt_tokens", p.config().workload().promptTokens());
            out.put("concurrency", p.config().workload().concurrency());
            out.put("page_item_bytes", itemBytes(p));
            out.setAll(node);
            // Baselines of the same sweep replace the per-run ones the points skip (memcpy is not measured for load points).
            applyBaselines(out, p.kind() == SweepPlan.Kind.BANDWIDTH ? memcpyByItem.get(itemBytes(p)) : null, iperf);
            bar.finish(label);
            if (plan.ucxPerftest() && p.config().transport().equals("ucx")) {
                String pl = "ucx_perftest at " + p.id();
                bar.start(pl);
                long op = out.path("block_bytes").asLong(itemBytes(p));
                UcxPerftestBaseline.Result u = UcxPerftestBaseline.measure(op > 0 ? op : itemBytes(p),
                        UcxTransportProvider.peerErrorHandling());
                if (u != null) {
                    out.put("ucx_perftest_gbps", round(u.gbps()));
                    out.put("ucx_perftest_command", u.command());
                } else {
                    bar.note("ucx_perftest unavailable at " + p.id() + " (install ucx-utils)");
                }
                bar.finish(pl);
            }
            Path f = dir.resolve("points").resolve(p.id() + ".json");
            JSON.writeValue(f.toFile(), out);
            files.add(f);
            if (!out.has("error")) rows.add(out);
        }

        Map<String, Object> base = new LinkedHashMap<>();
        base.put("memcpy_gbps_by_item_bytes", memcpyByItem);
        base.put("iperf3_gbps", iperf);
        Path baselines = dir.resolve("baselines.json");
        JSON.writeValue(baselines.toFile(), base);
        Path csv = dir.resolve("sweep.csv");
        writeCsv(csv, rows);
        List<Path> charts = SweepCharts.draw(dir, rows, memcpyByItem, iperf);
        return new Outcome(dir, files, csv, baselines, charts, failedPoints);
    }

    /**
     * Puts the sweep's baselines into a point's JSON with the ratios to them, computed as the bench computes
     * them; a baseline not measured (null) is a null figure and null ratios, never a ratio of 0. The point ran
     * without baselines, so its own ratios (0 for memcpy) say nothing and are replaced.
     */
    static void applyBaselines(ObjectNode point, Double memcpyGbps, Double iperf3Gbps) {
        double gbps = point.path("gbps").asDouble(0), transfer = point.path("transfer_gbps").asDouble(0);
        double datapath = point.path("datapath_gbps").asDouble(0);
        boolean memcpy = memcpyGbps != null && memcpyGbps > 0, iperf = iperf3Gbps != null && iperf3Gbps > 0;
        putOrNull(point, "memcpy_gbps", memcpy ? memcpyGbps : null);
        putOrNull(point, "ratio_to_memcpy", memcpy ? round(gbps / memcpyGbps) : null);
        putOrNull(point, "ratio_transfer_to_memcpy", memcpy ? round(transfer / memcpyGbps) : null);
        putOrNull(point, "ratio_datapath_to_memcpy", memcpy && datapath > 0 ? round(datapath / memcpyGbps) : null);
        putOrNull(point, "iperf3_gbps", iperf ? iperf3Gbps : null);
        putOrNull(point, "ratio_to_iperf3", iperf ? round(gbps / iperf3Gbps) : null);
        putOrNull(point, "ratio_transfer_to_iperf3", iperf && transfer > 0 ? round(transfer / iperf3Gbps) : null);
    }

    private static void putOrNull(ObjectNode node, String field, Double value) {
        if (value == null) node.putNull(field);
        else node.put(field, value.doubleValue());
    }

    static String describe(SweepPlan.Point p) {
        return p.kind() == SweepPlan.Kind.BANDWIDTH
                ? p.config().transport() + " page=" + p.config().workload().pageSize() + " c=" + p.config().workload().concurrency()
                : p.config().transport() + " rate=" + Math.round(p.config().suite().ratePerSecond()) + "/s";
    }

    /** Bytes of one page of one KV buffer on a decode rank: the memcpy baseline's item size. */
    static long itemBytes(SweepPlan.Point p) {
        return p.config().shape().pageBytes(p.config().workload().pageSize(), p.config().decodeTp());
    }

    /** One row per point, {@link #CSV_COLUMNS}; a missing figure is an empty cell. */
    static void writeCsv(Path csv, List<ObjectNode> rows) throws IOException {
        CsvSchema.Builder schema = CsvSchema.builder().setUseHeader(true);
        for (String c : CSV_COLUMNS) schema.addColumn(c);
        List<Map<String, Object>> table = new ArrayList<>();
        for (ObjectNode r : rows) {
            Map<String, Object> row = new LinkedHashMap<>();
            for (String c : CSV_COLUMNS) {
                JsonNode v = c.contains(".") ? r.path(c.substring(0, c.indexOf('.'))).path(c.substring(c.indexOf('.') + 1)) : r.path(c);
                row.put(c, v.isMissingNode() || v.isNull() ? "" : v.isNumber() ? v.numberValue() : v.asText());
            }
            table.add(row);
        }
        new CsvMapper().writer(schema.build()).writeValue(csv.toFile(), table);
    }

    private static double round(double v) {
        return Math.round(v * 1000) / 1000.0;
    }
}
