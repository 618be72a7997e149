package io.kvferry.bench;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerConfig;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * One role (prefill or decode) as its own process: every TP rank of the instance runs in this
 * JVM on its own driver thread, and each prints one JSON {@link RoleReport} line on stdout.
 */
public final class RoleRunner {
    private static final ObjectMapper JSON = new ObjectMapper();

    private RoleRunner() {}

    static KVManager manager(BenchConfig config, DisaggregationMode mode, int rank, String bootstrapAddr, RankPool pool) {
        return manager(config, mode, rank, 0, 0, bootstrapAddr, "127.0.0.1", pool);
    }

    static KVManager manager(BenchConfig config, DisaggregationMode mode, int rank, int cpRank, int dpRank,
                             String bootstrapAddr, String host, RankPool pool) {
        String[] hp = splitHostPort(bootstrapAddr);
        KVManagerConfig.Builder b = KVManagerConfig.builder()
                .attnTp(config.tp(mode), rank)
                .ppSize(config.pp(mode))
                .allCpRanksTransfer(config.allCpRanks())
                .mla(config.shape().mla())
                .bootstrap(hp[0], Integer.parseInt(hp[1]))
                .authToken(config.authToken())
                .listenHost(host);
        if (config.transferWorkers() > 0) b.transferWorkers(config.transferWorkers());
        if (config.bootstrapTimeoutMillis() > 0) b.bootstrapTimeout(java.time.Duration.ofMillis(config.bootstrapTimeoutMillis()));
        if (config.faults().failureProbability() > 0) b.failureInjectionProbability(config.faults().failureProbability());
        if (mode == DisaggregationMode.PREFILL) b.attnCp(config.prefillCp(), cpRank).dp(config.prefillDp(), dpRank);
        KVManagerConfig mc = b.build();
        return KVFerry.createManager(config.transport(), pool.kvArgs(rank), mode, mc);
    }

    static String[] splitHostPort(String addr) {
        int i = addr.lastIndexOf(':');
        if (i <= 0) throw new IllegalArgumentException("bootstrap address must be host:port, got '" + addr + "'");
        String host = addr.substring(0, i);
        if (host.startsWith("[") && host.endsWith("]")) host = host.substring(1, host.length() - 1);
        return new String[]{host, addr.substring(i + 1)};
    }

    /** Runs the given TP ranks (of every PP stage) of one role in this JVM; prints one JSON line per rank. */
    public static boolean runRole(DisaggregationMode mode, BenchConfig config, String bootstrapAddr, List<Integer> ranks,
                                  String host, PrintStream out) throws Exception {
        List<KVManager> managers = new ArrayList<>();
        List<RankPool> pools = new ArrayList<>();
        ExecutorService exec = Executors.newFixedThreadPool(config.rankCount(mode));
        try {
            List<Future<RoleReport>> futures = new ArrayList<>();
            java.util.concurrent.atomic.AtomicInteger progress = new java.util.concurrent.atomic.AtomicInteger();
            launch(mode, config, bootstrapAddr, ranks, host, exec, managers, pools, futures, progress);
            if (mode == DisaggregationMode.DECODE) {
                // "progress N" lines let a parent (kvferry chaos) time a fault to land mid-transfer.
                Thread.ofPlatform().daemon().start(() -> {
                    int last = 0;
                    while (!Thread.currentThread().isInterrupted()) {
                        int now = progress.get();
                        if (now != last) {
                            synchronized (out) {
                                out.println("progress " + now);
                                out.flush();
                            }
                            last = now;
                        }
                        try {
                            Thread.sleep(50);
                        } catch (InterruptedException e) {
                            return;
                        }
                    }
                });
            }
            boolean allOk = true;
            for (int i = 0; i < futures.size(); i++) {
                // Leaks: rooms the manager still tracks plus pages/rows the driver never got back.
                RoleReport rep = futures.get(i).get().withLeakedRooms(trackedRooms(managers.get(i)) + pools.get(i).outstanding());
                allOk &= rep.failed() == 0 && rep.corrupted() == 0;
                synchronized (out) {
                    out.println(JSON.writeValueAsString(rep));
                    out.flush();
                }
            }
            return allOk;
        } finally {
            exec.shutdownNow();
            for (KVManager m : managers) m.close();
            if (exec.awaitTermination(10, java.util.concurrent.TimeUnit.SECONDS)) {
                for (RankPool p : pools) p.close();
            }
        }
    }

    /** Rooms a manager still tracks (a leak once every request concluded). */
    static int trackedRooms(KVManager m) {
        if (m instanceof io.kvferry.conn.PrefillKVManager p) return p.trackedRooms();
        if (m instanceof io.kvferry.conn.DecodeKVManager d) return d.trackedRooms();
        return 0;
    }

    /**
     * Creates the pools, managers and driver tasks of one role: every PP stage × the given TP ranks.
     * The caller owns what is added to {@code managers} and {@code pools} and closes them.
     *
     * @param progress counted by decode rank 0 of stage 0 as requests conclude; may be null
     */
    static void launch(DisaggregationMode mode, BenchConfig config, String addr, List<Integer> tpRanks, String host,
                       ExecutorService exec, List<KVManager> managers, List<RankPool> pools,
                       List<Future<RoleReport>> futures, java.util.concurrent.atomic.AtomicInteger progress) {
        Workload w = config.workload();
        boolean prefill = mode == DisaggregationMode.PREFILL;
        int groups = prefill ? config.prefillDp() : 1, cps = prefill ? config.prefillCp() : 1;
        for (int dp = 0; dp < groups; dp++) {
            for (int cp = 0; cp < cps; cp++) {
                for (int stage = 0; stage < config.pp(mode); stage++) {
                    for (int r : tpRanks) {
                        long seed = w.seed() * 31 + (prefill ? 1000 : 2000) + 100L * stage + r + 10_000L * cp + 100_000L * dp;
                        RankPool pool = new RankPool(config.shape(), w.pageSize(), config.tp(mode), r, config.pp(mode), stage,
                                w.poolPages(), w.concurrency() + 2, seed);
                        pools.add(pool);
                        KVManager m = manager(config, mode, r, cp, dp, addr, host, pool);
                        managers.add(m);
                        if (prefill) {
                            m.registerToBootstrap();
                            int group = dp;
                            futures.add(exec.submit(() -> new PrefillDriver(m, pool, w, addr, pool.rank, group,
                                    config.prefillDp()).withDeadline(deadline(config)).withFaults(config.faults()).run()));
                        } else {
                            java.util.concurrent.atomic.AtomicInteger p = r == 0 && stage == 0 ? progress : null;
                            futures.add(exec.submit(() -> new DecodeDriver(m, pool, w, addr, pool.rank, p)
                                    .withDeadline(deadline(config)).withFaults(config.faults()).run()));
                        }
                    }
                }
            }
        }
    }

    /** Reads a role process's stdout until it ends: report lines are parsed, other lines echoed to {@code progress}. */
    static List<RoleReport> readReports(Process p, String role, PrintStream progress) throws IOException {
        return readReports(p, role, progress, null);
    }

    /** As above; "progress N" lines from a decode process update {@code concluded}. */
    static List<RoleReport> readReports(Process p, String role, PrintStream progress,
                                        java.util.concurrent.atomic.AtomicInteger concluded) throws IOException {
        List<RoleReport> reports = new ArrayList<>();
        try (java.io.BufferedReader r = new java.io.BufferedReader(
                new java.io.InputStreamReader(p.getInputStream(), java.nio.charset.StandardCharsets.UTF_8))) {
            String line;
            while ((line = r.readLine()) != null) {
                if (line.startsWith("{\"role\"")) reports.add(JSON.readValue(line, RoleReport.class));
                else if (line.startsWith("progress ")) {
                    if (concluded != null) concluded.set(Integer.parseInt(line.substring(9).trim()));
                }
                else if (progress != null) progress.println("[" + role + "] " + line);
            }
        }
        return reports;
    }

    private static long deadline(BenchConfig c) {
        return c.deadlineMillis() > 0 ? System.nanoTime() + c.deadlineMillis() * 1_000_000L : 0;
    }

    /** Starts {@code kvferry <role>} as a separate JVM with the same class path, sharing the options. */
    public static Process spawn(String role, BenchConfig config, String bootstrapAddr) throws IOException {
        List<String> cmd = new ArrayList<>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.add("--enable-native-access=ALL-UNNAMED");
        cmd.add("-Xmx1g");
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add("io.kvferry.cli.Main");
        cmd.add(role);
        cmd.addAll(roleArgs(config, bootstrapAddr));
        ProcessBuilder pb = new ProcessBuilder(cmd);
        pb.redirectError(ProcessBuilder.Redirect.INHERIT);
        pb.redirectInput(ProcessBuilder.Redirect.PIPE);
        // The token goes through the environment, not argv, so it does not show in process listings.
        if (config.authToken() != null) pb.environment().put("KVFERRY_AUTH_TOKEN", config.authToken());
        return pb.start();
    }

    static List<String> roleArgs(BenchConfig c, String bootstrapAddr) {
        Workload w = c.workload();
        List<String> a = new ArrayList<>(List.of(
                "--bootstrap", bootstrapAddr,
                "--model", c.shape().name(),
                "--kv-heads", Integer.toString(c.shape().kvHeads()),
                "--requests", Integer.toString(w.requests()),
                "--prompt-tokens", Integer.toString(w.promptTokens()),
                "--page-size", Integer.toString(w.pageSize()),
                "--chunk-tokens", Integer.toString(w.chunkTokens()),
                "--concurrency", Integer.toString(w.concurrency()),
                "--prefix-every", Integer.toString(w.prefixEvery()),
                "--seed", Long.toString(w.seed()),
                "--transport", c.transport(),
                "--prefill-tp", Integer.toString(c.prefillTp()),
                "--decode-tp", Integer.toString(c.decodeTp()),
                "--prefill-pp", Integer.toString(c.prefillPp()),
                "--decode-pp", Integer.toString(c.decodePp()),
                "--prefill-cp", Integer.toString(c.prefillCp()),
                "--prefill-dp", Integer.toString(c.prefillDp()),
                "--transfer-workers", Integer.toString(c.transferWorkers()),
                "--bootstrap-timeout-ms", Long.toString(c.bootstrapTimeoutMillis()),
                "--deadline-ms", Long.toString(c.deadlineMillis()),
                "--abort-prob", Double.toString(c.faults().abortProbability()),
                "--slow-decode-ms", Long.toString(c.faults().slowDecodeMillis()),
                "--failure-prob", Double.toString(c.faults().failureProbability()),
                "--exit-on-stdin-eof"));
        if (c.shape().mla()) a.add("--mla");
        if (c.allCpRanks()) a.add("--all-cp-ranks");
        return a;
    }

}
