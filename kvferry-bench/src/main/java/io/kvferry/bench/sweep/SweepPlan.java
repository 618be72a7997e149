package io.kvferry.bench.sweep;

import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.ModelShape;
import io.kvferry.testkit.Workload;

import java.util.ArrayList;
import java.util.List;

/**
 * The points of {@code kvferry bench --sweep}: a bandwidth grid (op size through the page size ×
 * transport × concurrency) and an offered-load series (open loop at increasing {@code --rate}), each
 * point one bench run derived from the command line's configuration (model, TP, token, …).
 *
 * @param points      in the order they run
 * @param ucxPerftest measure ucx_perftest at each ucx point's op size (slow: seconds per size)
 * @param iperf3      measure single-stream iperf3 once (the TCP line of the bandwidth chart)
 */
public record SweepPlan(List<Point> points, boolean ucxPerftest, boolean iperf3) {

    /** What a point measures: bandwidth (closed loop) or latency under an offered load (open loop). */
    public enum Kind { BANDWIDTH, LOAD }

    /**
     * One run.
     *
     * @param id        file name of its JSON (unique, [a-z0-9-])
     * @param kind      which chart it belongs to
     * @param config    the run
     * @param processes prefill and decode as separate JVMs
     */
    public record Point(String id, Kind kind, BenchConfig config, boolean processes) {}

    /** Sizes of the default sweep; the quick one (tests, a first look) is far smaller. */
    public record Grid(String model, List<Integer> pageSizes, List<String> transports, List<Integer> concurrencies,
                       int promptTokens, int requests, int warmup, String loadModel, int loadPromptTokens, int loadConcurrency,
                       List<Double> rates, double loadSeconds, int maxLoadRequests) {

        /**
         * The default: llama-3.1-8b KV of 256-token requests (32 MiB each), pages of 1, 4, 16 and 64 tokens
         * (2, 8, 32, 128 KiB per page per buffer) × tcp, shm, ucx × concurrency 1 and 4, 6 measured requests
         * each; then 32 KiB rooms (tiny model) offered at 500 to 8,000 requests/s. A few minutes on 2 cores.
         */
        public static Grid standard(List<String> transports) {
            return new Grid("llama-3.1-8b", List.of(1, 4, 16, 64), transports, List.of(1, 4), 256, 6, 2,
                    "tiny", 16, 64, List.of(500.0, 1000.0, 2000.0, 4000.0, 8000.0), 1.5, 12_000);
        }

        /** A sweep in seconds: two page sizes of the tiny model over tcp and inproc, two offered loads. */
        public static Grid quick() {
            return new Grid("tiny", List.of(4, 16), List.of("tcp", "inproc"), List.of(2), 64, 4, 1,
                    "tiny", 16, 8, List.of(100.0, 200.0), 0.5, 200);
        }
    }

    /**
     * Builds the points from a base configuration: its model shape is replaced by the grid's model for
     * the bandwidth points (and the load model for the load points); everything else (TP, token, seed,
     * page layout, transfer workers) is kept.
     */
    public static SweepPlan of(BenchConfig base, Grid g, boolean processes, boolean ucxPerftest, boolean iperf3) {
        List<Point> points = new ArrayList<>();
        Workload bw = base.workload();
        BenchConfig bwBase = base.withShape(ModelShape.preset(g.model()));
        for (String t : g.transports()) {
            for (int ps : g.pageSizes()) {
                for (int c : g.concurrencies()) {
                    Workload w = new Workload(g.requests(), g.promptTokens(), ps, Math.max(ps, bw.chunkTokens()), c,
                            bw.prefixEvery(), bw.seed(), g.warmup());
                    BenchConfig pc = bwBase.withTransport(t).withWorkload(w)
                            .withSuite(new BenchConfig.Suite(base.suite().pages(), 0, 0, base.suite().hugePages(), base.suite().changeFeed()));
                    points.add(new Point("bw-" + t + "-page" + ps + "-c" + c, Kind.BANDWIDTH, pc, processes));
                }
            }
        }
        BenchConfig loadBase = base.withShape(ModelShape.preset(g.loadModel())).withTransport("tcp");
        for (double rate : g.rates()) {
            int n = (int) Math.max(20, Math.min(g.maxLoadRequests(), Math.round(rate * g.loadSeconds())));
            Workload w = new Workload(n, g.loadPromptTokens(), 16, Math.max(16, bw.chunkTokens()), g.loadConcurrency(),
                    0, bw.seed(), Math.max(1, g.warmup()));
            BenchConfig pc = loadBase.withWorkload(w).withSuite(new BenchConfig.Suite(base.suite().pages(), rate, 0, base.suite().hugePages(), base.suite().changeFeed()))
                    .withFaultTimeouts(base.bootstrapTimeoutMillis(), (long) (2_000.0 * n / rate) + 120_000);
            points.add(new Point("load-tcp-rate" + Math.round(rate), Kind.LOAD, pc, processes));
        }
        return new SweepPlan(List.copyOf(points), ucxPerftest, iperf3);
    }
}
