package io.kvferry.bench;

import io.kvferry.memory.HugePageArena;
import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.MemoryBudget;
import io.kvferry.testkit.RankPool;
import io.kvferry.testkit.RoleOptions;
import io.kvferry.testkit.RoleReport;
import io.kvferry.testkit.RoleRunner;
import io.kvferry.testkit.RoomMemoryProbe;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVManager;
import io.kvferry.ops.ClusterStatus;
import io.kvferry.ops.RegistryOps;
import io.kvferry.registry.BootstrapRegistryServer;
import io.kvferry.registry.RegistryOptions;
import io.kvferry.testkit.RoleEvent;
import io.kvferry.testkit.RoleOps;
import io.kvferry.ucx.UcxTransportProvider;
import org.HdrHistogram.Histogram;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.IntStream;

/**
 * Runs the bench: a bootstrap registry, prefill ranks and decode ranks, either all in this JVM
 * (threads, TCP over loopback) or as separate JVMs started with {@code kvferry prefill} and
 * {@code kvferry decode}; then merges their reports into one {@link BenchResult}.
 */
public final class BenchRunner {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final int PREFILL_GRACE_SECONDS = 20;

    private final BenchConfig config;
    private final PrintStream progressOut;
    /** Where the final scrape of every role goes (--metrics-dump), or null. */
    private Path metricsDump;
    /** The final scrapes, by role process, as they arrive. */
    private final Map<String, String> finalScrapes = new ConcurrentHashMap<>();
    /** The registry's cluster view (decode processes are added as they announce their endpoints). */
    private volatile ClusterStatus cluster;
    /** One JVM with --room-memory: the probe every driver shares (null otherwise). */
    private RoomMemoryProbe embeddedProbe;

    public BenchRunner(BenchConfig config, PrintStream progressOut) {
        this.config = config;
        this.progressOut = progressOut;
    }

    /** Writes the final scrape of every role to {@code file} and names it in the result ({@code metrics_dump}). */
    public BenchRunner withMetricsDump(Path file) {
        this.metricsDump = file;
        return this;
    }

    public BenchResult run(boolean processes) throws Exception {
        return run(processes, false);
    }

    /** Runs without the memcpy baseline (for correctness tests that do not report speed). */
    public BenchResult runWithoutBaselines(boolean processes) throws Exception {
        return run(processes, false, false);
    }

    /** @param iperf3 also measure iperf3's loopback bandwidth as a TCP baseline */
    public BenchResult run(boolean processes, boolean iperf3) throws Exception {
        return run(processes, iperf3, true);
    }

    private BenchResult run(boolean processes, boolean iperf3, boolean memcpyBaseline) throws Exception {
        MemoryBudget.requireBothRoles(config, MemoryBudget.availableBytes());
        long itemBytes = config.shape().pageBytes(config.workload().pageSize(), config.decodeTp());
        // memcpy is measured before and after the transfers (this VM's memory bandwidth drifts): their median.
        double[] memcpyBefore = memcpyBaseline ? MemcpyBaseline.rounds(itemBytes, config.suite().hugePages()) : new double[0];
        double iperf = iperf3 ? IperfBaseline.measure() : -1;
        if (iperf3 && iperf < 0 && progressOut != null) {
            progressOut.println("[bench] iperf3 baseline unavailable (install iperf3, e.g. apt-get install iperf3)");
        }
        List<RoleReport> reports;
        // The bench's own process: the registry (its page, /status, shows the cluster while the bench runs) and,
        // embedded, every rank; /metrics and /status.json of the ranks on an endpoint of its own.
        try (BootstrapRegistryServer registry = BootstrapRegistryServer.start("127.0.0.1", 0, RegistryOptions.defaults(config.authToken()));
             RoleOps ops = RoleOps.serve("bench", "127.0.0.1", processes ? -1 : 0)) {
            String addr = "127.0.0.1:" + registry.port();
            cluster = RegistryOps.mount(registry, ops.prometheus(), List.of());
            if (progressOut != null) {
                progressOut.println("[bench] status page: http://" + addr + "/status"
                        + (ops.baseUrl() == null ? "" : " (this process: " + ops.baseUrl() + "/status, " + ops.baseUrl() + "/metrics)"));
            }
            reports = processes ? runProcesses(addr) : runEmbedded(addr, ops);
            if (processes) finalScrapes.put("bench process (registry)", ops.scrape());
        }
        if (metricsDump != null) writeMetricsDump(metricsDump);
        double memcpy = memcpyBaseline ? MemcpyBaseline.median(memcpyBefore, MemcpyBaseline.rounds(itemBytes, config.suite().hugePages())) : 0;
        // After the transfers (their mean op size is known only now), with nothing else running.
        UcxPerftestBaseline.Result ucxPerftest = null;
        if (memcpyBaseline && "ucx".equals(config.transport())) {
            long ops = 0, bytes = 0;
            for (RoleReport r : reports) {
                ops += r.datapathOps();
                bytes += r.datapathBytes();
            }
            long opBytes = ops > 0 ? bytes / ops : itemBytes;
            ucxPerftest = UcxPerftestBaseline.measure(opBytes, UcxTransportProvider.peerErrorHandling());
            if (ucxPerftest == null && progressOut != null) {
                progressOut.println("[bench] ucx_perftest baseline unavailable (install it: apt-get install ucx-utils)");
            }
        }
        return merge(reports, processes, memcpy, iperf, ucxPerftest);
    }

    // ------------------------------------------------------------------ embedded

    /** One file: each role's final scrape under a comment naming it (Prometheus text format 0.0.4 per section). */
    private void writeMetricsDump(Path file) throws IOException {
        StringBuilder b = new StringBuilder("# kvferry bench metrics dump: the final scrape of every role\n");
        for (Map.Entry<String, String> e : new TreeMap<>(finalScrapes).entrySet()) {
            b.append("# ---- ").append(e.getKey()).append('\n').append(e.getValue());
            if (!e.getValue().endsWith("\n")) b.append('\n');
        }
        Path parent = file.toAbsolutePath().getParent();
        if (parent != null) Files.createDirectories(parent);
        Files.writeString(file, b.toString());
    }

    private List<RoleReport> runEmbedded(String addr, RoleOps ops) throws Exception {
        List<KVManager> managers = new ArrayList<>();
        List<RankPool> pools = new ArrayList<>();
        int ranks = config.rankCount(DisaggregationMode.PREFILL) + config.rankCount(DisaggregationMode.DECODE);
        ExecutorService exec = Executors.newFixedThreadPool(ranks + 1);
        AtomicInteger progress = new AtomicInteger();
        // One JVM holds both roles: one room-memory probe for every driver, measuring both sides' rooms together.
        embeddedProbe = config.suite().probeRooms() > 0 ? new RoomMemoryProbe(ranks, config.suite().probeRooms(), "both") : null;
        try {
            List<Future<RoleReport>> futures = new ArrayList<>();
            RoleRunner.launch(DisaggregationMode.PREFILL, config, addr, range(config.prefillTp()), "127.0.0.1", exec,
                    managers, pools, futures, null, null, RoleOptions.NONE, ops, embeddedProbe);
            RoleRunner.launch(DisaggregationMode.DECODE, config, addr, range(config.decodeTp()), "127.0.0.1", exec,
                    managers, pools, futures, progress, null, RoleOptions.NONE, ops, embeddedProbe);
            Future<?> ticker = exec.submit(() -> showProgress(progress));
            List<RoleReport> reports = new ArrayList<>();
            for (Future<RoleReport> f : futures) reports.add(get(f));
            ticker.cancel(true);
            // Every request concluded; the ranks are still up (their rooms gauges too).
            finalScrapes.put("bench process (embedded prefill + decode + registry)", ops.scrape());
            return reports;
        } finally {
            exec.shutdownNow();
            for (KVManager m : managers) {
                ops.left(m);
                m.close();
            }
            // Pools are freed only once no driver thread can touch them.
            if (exec.awaitTermination(10, TimeUnit.SECONDS)) {
                for (RankPool p : pools) p.close();
            }
        }
    }

    private static List<Integer> range(int n) {
        return IntStream.range(0, n).boxed().toList();
    }

    private static <T> T get(Future<T> f) throws Exception {
        try {
            return f.get();
        } catch (ExecutionException e) {
            if (e.getCause() instanceof Exception ex) throw ex;
            throw e;
        }
    }

    private void showProgress(AtomicInteger progress) {
        int total = config.workload().totalRequests();
        long start = System.nanoTime();
        try {
            while (!Thread.currentThread().isInterrupted()) {
                Thread.sleep(1000);
                if (progressOut != null) {
                    progressOut.printf("[bench] %d/%d requests concluded on decode rank 0, %.1f s%n", progress.get(), total,
                            (System.nanoTime() - start) / 1e9);
                }
            }
        } catch (InterruptedException ignored) {
            // done
        }
    }

    // ------------------------------------------------------------------ processes

    private List<RoleReport> runProcesses(String addr) throws Exception {
        List<Process> children = new ArrayList<>();
        Thread hook = new Thread(() -> children.forEach(Process::destroyForcibly));
        Runtime.getRuntime().addShutdownHook(hook);
        try {
            // The room-memory probe reads native memory from NMT (every Arena and direct allocation) when it is on.
            List<String> jvmFlags = config.suite().probeRooms() > 0 ? List.of("-XX:NativeMemoryTracking=summary") : List.of();
            Process prefill = RoleRunner.spawn("prefill", config, addr, jvmFlags, List.of());
            children.add(prefill);
            Process decode = RoleRunner.spawn("decode", config, addr, jvmFlags, List.of());
            children.add(decode);
            ExecutorService exec = Executors.newFixedThreadPool(2);
            try {
                Future<List<RoleReport>> p = exec.submit(() -> collect(prefill, "prefill"));
                Future<List<RoleReport>> d = exec.submit(() -> collect(decode, "decode"));
                List<RoleReport> out = new ArrayList<>(get(d));
                try {
                    out.addAll(p.get(PREFILL_GRACE_SECONDS, TimeUnit.SECONDS));
                } catch (TimeoutException e) {
                    // Decode is done; prefill rooms whose decode failed before sending metadata would wait for
                    // the bootstrap timeout (300 s). The decode report already counts those requests as failed.
                    if (progressOut != null) {
                        progressOut.println("[bench] prefill still waiting " + PREFILL_GRACE_SECONDS
                                + " s after decode finished (requests decode failed); stopping it");
                    }
                    prefill.destroyForcibly();
                } catch (ExecutionException e) {
                    if (progressOut != null) progressOut.println("[bench] prefill process: " + e.getCause().getMessage());
                }
                return out;
            } finally {
                exec.shutdownNow();
            }
        } finally {
            for (Process c : children) {
                c.destroy();
                if (!c.waitFor(5, TimeUnit.SECONDS)) c.destroyForcibly().waitFor(5, TimeUnit.SECONDS);
            }
            Runtime.getRuntime().removeShutdownHook(hook);
        }
    }

    /** Reads a role process's stdout: its last lines are one JSON report per rank. */
    private List<RoleReport> collect(Process p, String role) throws IOException, InterruptedException {
        List<RoleReport> reports = RoleRunner.readReports(p, role, progressOut, (RoleEvent e) -> {
            switch (e) {
                case RoleEvent.Status s -> {
                    // Prefill processes publish theirs with their registrations; a decode's is added here.
                    if (role.equals("decode") && cluster != null) cluster.watch(s.url() + "/status.json");
                    if (progressOut != null) progressOut.println("[bench] " + role + " process: " + s.url() + "/status");
                }
                case RoleEvent.Metrics m -> finalScrapes.put(role + " process", m.prometheus());
                default -> {
                    // endpoints and progress are the chaos harness's
                }
            }
        });
        int rc = p.waitFor();
        int expected = config.rankCount(role.equals("prefill") ? DisaggregationMode.PREFILL : DisaggregationMode.DECODE);
        if (reports.size() != expected) {
            throw new IllegalStateException(role + " process exited with status " + rc + " after " + reports.size()
                    + " of " + expected + " rank reports");
        }
        return reports;
    }

    // ------------------------------------------------------------------ merge

    /** One result from the ranks' reports and the baselines (package-private for tests of the arithmetic). */
    BenchResult merge(List<RoleReport> reports, boolean processes, double memcpy, double iperf,
                      UcxPerftestBaseline.Result ucxPerftest) {
        int n = config.workload().totalRequests();
        Set<Integer> failedIdx = new HashSet<>();
        long verified = 0;
        double elapsed = 0;
        int corrupted = 0;
        long pathBytes = 0, pathNanos = 0, pathOps = 0, pairedBytes = 0, pairedNanos = 0;
        double transferGbps = 0;
        Map<String, Long> paths = new TreeMap<>();
        Histogram h = new Histogram(3);
        List<String> failures = new ArrayList<>();
        long prefillReports = reports.stream().filter(r -> r.role().equals("prefill")).count();
        int prefillRanks = config.rankCount(DisaggregationMode.PREFILL);
        if (processes && prefillReports < prefillRanks) {
            // The prefill process was stopped after its grace period, or exited, before it reported: say so
            // first, since the figures only prefill ranks measure read as if it had moved nothing.
            failures.add("prefill: " + (prefillRanks - prefillReports) + " of " + prefillRanks + " rank reports missing (the process"
                    + " was stopped or exited first): datapath_*, transfer_gbps, block_bytes, batch_size, post_ms and transfer_ms"
                    + " count only the ranks that reported");
        }
        for (RoleReport r : reports) {
            failedIdx.addAll(r.failedRequests());
            for (String f : r.firstFailures()) if (failures.size() < 5) failures.add(r.role() + "[" + r.rank() + "]: " + f);
            pathBytes += r.datapathBytes();
            pathNanos += r.datapathBusyNanos();
            pathOps += r.datapathOps();
            // Ranks move their shares at the same time: the bandwidths add up, not the times.
            if (r.datapathActiveNanos() > 0) transferGbps += r.datapathBytes() / (double) r.datapathActiveNanos();
            pairedBytes += r.pairedMemcpyBytes();
            pairedNanos += r.pairedMemcpyNanos();
            if (r.role().equals("decode")) {
                r.dataPaths().forEach((k, v) -> paths.merge(k, v, Long::sum));
                verified += r.bytes();
                elapsed = Math.max(elapsed, r.elapsedSeconds());
                corrupted += r.corrupted();
                r.latencyMicros().addTo(h);
            }
        }
        Map<String, Double> lat = new LinkedHashMap<>();
        lat.put("p50", h.getTotalCount() == 0 ? 0 : h.getValueAtPercentile(50) / 1000.0);
        lat.put("p99", h.getTotalCount() == 0 ? 0 : h.getValueAtPercentile(99) / 1000.0);
        lat.put("max", h.getTotalCount() == 0 ? 0 : h.getMaxValue() / 1000.0);
        double gbps = elapsed > 0 ? verified / elapsed / 1e9 : 0;
        double pathGbps = pathNanos > 0 ? pathBytes / (double) pathNanos : 0;
        double perftest = ucxPerftest == null ? 0 : ucxPerftest.gbps();
        double paired = pairedNanos > 0 ? pairedBytes / (double) pairedNanos : 0;
        return new BenchResult(config.shape().name(), config.transport(), processes, config.prefillTp(), config.decodeTp(),
                config.prefillPp(), config.decodePp(), config.prefillCp(), config.prefillDp(),
                config.shape().mla(), config.shape().kvHeads(), n, config.workload().warmup(), n - failedIdx.size(),
                failedIdx.size(), corrupted, verified, round(elapsed), round(gbps), lat, round(memcpy),
                memcpy > 0 ? round(gbps / memcpy) : 0, iperf > 0 ? round(iperf) : null,
                iperf > 0 ? round(gbps / iperf) : null, iperf > 0 && transferGbps > 0 ? round(transferGbps / iperf) : null,
                config.tcpStripes(), config.checksum().label(), paths,
                round(pathGbps), round(transferGbps), memcpy > 0 ? round(transferGbps / memcpy) : 0,
                paired > 0 ? round(paired) : null, paired > 0 && pathNanos > 0 ? round(pathGbps / paired) : null,
                pathBytes, pathOps > 0 ? pathBytes / pathOps : 0,
                memcpy > 0 && pathNanos > 0 ? round(pathGbps / memcpy) : 0,
                perftest > 0 ? round(perftest) : null,
                ucxPerftest == null ? null : ucxPerftest.rounds().stream().map(BenchRunner::round).toList(),
                perftest > 0 && transferGbps > 0 ? round(transferGbps / perftest) : null,
                ucxPerftest == null ? null : ucxPerftest.command(), failures,
                metricsDump == null ? null : metricsDump.toAbsolutePath().toString(),
                suiteFigures(reports, processes, measuredSucceeded(failedIdx), elapsed, pathBytes, pathOps));
    }

    /** Measured requests that succeeded: a failed warm-up request (index below the warm-up count) is not one of them. */
    private int measuredSucceeded(Set<Integer> failedIdx) {
        int warmup = config.workload().warmup();
        int failedMeasured = (int) failedIdx.stream().filter(i -> i >= warmup).count();
        return config.workload().requests() - failedMeasured;
    }

    /** The benchmark suite's columns (SuiteFigures): measured requests only. */
    private SuiteFigures suiteFigures(List<RoleReport> reports, boolean processes, int succeededMeasured, double elapsed,
                                      long pathBytes, long pathOps) {
        return SuiteFigures.merge(reports, config.suite().pages().cliName(), config.suite().ratePerSecond(),
                config.workload().requests(), Math.max(0, succeededMeasured), elapsed, pathBytes, pathOps, processes,
                embeddedProbe).withHugePages(config.suite().hugePages()
                ? "on (thp " + HugePageArena.transparentHugePageMode() + ")" : "off").withPollLag(PollLagFigures.fromScrapes(finalScrapes.values()));
    }

    private static double round(double v) {
        return Math.round(v * 1000) / 1000.0;
    }

    public static String toJson(BenchResult r) throws IOException {
        return JSON.writeValueAsString(r);
    }
}
