package io.kvferry.testkit;


import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.Knob;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;

/**
 * One role (prefill or decode) as its own process: every TP rank of the instance runs in this
 * JVM on its own driver thread, and each prints one JSON {@link RoleReport} line on stdout.
 */
public final class RoleRunner {
    private static final ObjectMapper JSON = new ObjectMapper();

    private RoleRunner() {}

    public static KVManager manager(BenchConfig config, DisaggregationMode mode, int rank, String bootstrapAddr, RankPool pool) {
        return manager(config, mode, rank, 0, 0, bootstrapAddr, "127.0.0.1", pool);
    }

    public static KVManager manager(BenchConfig config, DisaggregationMode mode, int rank, int cpRank, int dpRank,
                             String bootstrapAddr, String host, RankPool pool) {
        return manager(config, mode, rank, cpRank, dpRank, bootstrapAddr, host, pool, RoleOptions.NONE, 0);
    }

    /** @param index the manager's launch index in its process (selects its advertised port) */
    public static KVManager manager(BenchConfig config, DisaggregationMode mode, int rank, int cpRank, int dpRank,
                             String bootstrapAddr, String host, RankPool pool, RoleOptions opts, int index) {
        return manager(config, mode, rank, cpRank, dpRank, bootstrapAddr, host, pool, opts, index, RoleOps.NONE);
    }

    /** As above, recording into the process's registry and (prefill) publishing its status URL. */
    public static KVManager manager(BenchConfig config, DisaggregationMode mode, int rank, int cpRank, int dpRank,
                             String bootstrapAddr, String host, RankPool pool, RoleOptions opts, int index, RoleOps ops) {
        KVManagerConfig mc = managerConfig(config, mode, rank, cpRank, dpRank, bootstrapAddr, host, opts, index, ops);
        return KVFerry.createManager(config.transport(), pool.kvArgs(rank), mode, mc);
    }

    /**
     * Builds the manager configs the role processes of {@code config} will build (rank 0 of each side), so that a
     * knob they would refuse ({@code --set KVFERRY_CONNECT_TIMEOUT_MS=abc}) is refused before any process starts:
     * role processes that exit on it left {@code bench --processes} with a stack trace and {@code chaos} waiting.
     *
     * @throws IllegalArgumentException naming the knob, as the library does
     */
    public static void checkSettings(BenchConfig config, RoleOptions opts) {
        for (DisaggregationMode mode : List.of(DisaggregationMode.PREFILL, DisaggregationMode.DECODE)) {
            managerConfig(config, mode, 0, 0, 0, "127.0.0.1:1", "127.0.0.1", opts, 0, RoleOps.NONE);
        }
    }

    private static KVManagerConfig managerConfig(BenchConfig config, DisaggregationMode mode, int rank, int cpRank, int dpRank,
                                                 String bootstrapAddr, String host, RoleOptions opts, int index, RoleOps ops) {
        String[] hp = splitHostPort(bootstrapAddr);
        KVManagerConfig.Builder b = KVManagerConfig.builder()
                .attnTp(config.tp(mode), rank)
                .ppSize(config.pp(mode))
                .allCpRanksTransfer(config.allCpRanks())
                .mla(config.shape().mla())
                .bootstrap(hp[0], Integer.parseInt(hp[1]))
                .authToken(config.authToken())
                .listenHost(host)
                .meterRegistry(ops.meters())
                .statusUrl(ops.statusUrl());
        if (config.transferWorkers() > 0) b.transferWorkers(config.transferWorkers());
        b.tcpStripes(config.tcpStripes());
        if (config.bootstrapTimeoutMillis() > 0) b.bootstrapTimeout(Duration.ofMillis(config.bootstrapTimeoutMillis()));
        if (config.faults().failureProbability() > 0) b.failureInjectionProbability(config.faults().failureProbability());
        if (mode == DisaggregationMode.PREFILL && config.faults().corruptProbability() > 0) {
            b.corruptionInjectionProbability(config.faults().corruptProbability());
        }
        b.checksum(config.checksum());
        if (mode == DisaggregationMode.PREFILL) b.attnCp(config.prefillCp(), cpRank).dp(config.prefillDp(), dpRank);
        // Other balancers than follow_bootstrap_room: the prefill publishes each room's group (/register_dp_rank).
        if (mode == DisaggregationMode.PREFILL && config.workload().dpRoundRobin()) b.loadBalanceMethod("round_robin");
        if (mode == DisaggregationMode.PREFILL && (opts.advertisePort(index) > 0 || opts.advertiseHost() != null)) {
            b.advertise(opts.advertiseHost(), opts.advertisePort(index));
        }
        if (mode == DisaggregationMode.DECODE && opts.prefillInfoTimeoutMillis() > 0) {
            b.prefillInfoTimeout(Duration.ofMillis(opts.prefillInfoTimeoutMillis()));
        }
        if (opts.heartbeatMillis() > 0 || opts.heartbeatMisses() > 0) {
            KVManagerConfig defaults = KVManagerConfig.builder().build();
            b.heartbeat(opts.heartbeatMillis() > 0 ? opts.heartbeatInterval() : defaults.heartbeatInterval(),
                    opts.heartbeatMisses() > 0 ? opts.heartbeatMisses() : defaults.heartbeatMisses());
        }
        return b.build();
    }

    public static String[] splitHostPort(String addr) {
        int i = addr.lastIndexOf(':');
        if (i <= 0) throw new IllegalArgumentException("bootstrap address must be host:port, got '" + addr + "'");
        String host = addr.substring(0, i);
        if (host.startsWith("[") && host.endsWith("]")) host = host.substring(1, host.length() - 1);
        String port = addr.substring(i + 1);
        int p;
        try {
            p = Integer.parseInt(port);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("bootstrap address '" + addr + "' has a bad port '" + port + "' (want host:port)");
        }
        if (p < 1 || p > 65_535) throw new IllegalArgumentException("bootstrap address '" + addr + "' has port " + p + " outside [1, 65535]");
        return new String[]{host, port};
    }

    /** Runs the given TP ranks (of every PP stage) of one role in this JVM; prints one JSON line per rank. */
    public static boolean runRole(DisaggregationMode mode, BenchConfig config, String bootstrapAddr, List<Integer> ranks,
                                  String host, PrintStream out) throws Exception {
        return runRole(mode, config, bootstrapAddr, ranks, host, out, RoleOptions.NONE);
    }

    /**
     * As above with link settings. Prefill ranks print {@code endpoint I HOST:PORT} (their bound
     * endpoint, launch index I) once started; decode rank 0 prints {@code progress CONCLUDED SUCCEEDED}
     * as requests conclude. The reports are printed after teardown, with what was not returned:
     * each rank's rooms and pool pages, and on the first report the process's threads, sockets and
     * native memory beyond the baseline taken before any manager existed ({@link LeakCheck}).
     */
    public static boolean runRole(DisaggregationMode mode, BenchConfig config, String bootstrapAddr, List<Integer> ranks,
                                  String host, PrintStream out, RoleOptions opts) throws Exception {
        return runRole(mode, config, bootstrapAddr, ranks, host, out, opts, -1);
    }

    /**
     * As above, with a status endpoint on {@code statusPort} (0 = any free port, negative = none): the
     * process prints {@code {"type":"status","url":…}} once it serves, its prefill ranks publish it in
     * their registrations, and once every request concluded it prints its final scrape
     * ({@code {"type":"metrics",…}}) before tearing down.
     */
    public static boolean runRole(DisaggregationMode mode, BenchConfig config, String bootstrapAddr, List<Integer> ranks,
                                  String host, PrintStream out, RoleOptions opts, int statusPort) throws Exception {
        try (RoleOps ops = RoleOps.serve(mode.name().toLowerCase(Locale.ROOT), host, statusPort)) {
            if (ops.baseUrl() != null) {
                synchronized (out) {
                    out.println(RoleEvent.line(new RoleEvent.Status(ops.baseUrl())));
                    out.flush();
                }
            }
            return runRole(mode, config, bootstrapAddr, ranks, host, out, opts, ops);
        }
    }

    private static boolean runRole(DisaggregationMode mode, BenchConfig config, String bootstrapAddr, List<Integer> ranks,
                                   String host, PrintStream out, RoleOptions opts, RoleOps ops) throws Exception {
        LeakCheck.Snapshot baseline = LeakCheck.baseline();
        List<KVManager> managers = new ArrayList<>();
        List<RankPool> pools = new ArrayList<>();
        List<RoleReport> reports = new ArrayList<>();
        ExecutorService exec = Executors.newFixedThreadPool(config.rankCount(mode));
        Thread progressPrinter = null;
        int driversLeft = 0;
        try {
            List<Future<RoleReport>> futures = new ArrayList<>();
            AtomicInteger progress = new AtomicInteger();
            AtomicInteger successes = new AtomicInteger();
            // The room-memory probe measures this JVM: this role's ranks here are its parties.
            RoomMemoryProbe probe = config.suite().probeRooms() > 0
                    ? new RoomMemoryProbe(config.rankCount(mode) / config.tp(mode) * ranks.size(), config.suite().probeRooms(),
                    mode.name().toLowerCase(Locale.ROOT))
                    : null;
            launch(mode, config, bootstrapAddr, ranks, host, exec, managers, pools, futures, progress, successes, opts, ops, probe);
            for (int i = 0; i < managers.size(); i++) {
                Optional<InetSocketAddress> endpoint = managers.get(i).controlEndpoint();
                if (endpoint.isPresent()) {
                    InetSocketAddress ep = endpoint.get();
                    String h = ep.getAddress() == null || ep.getAddress().isAnyLocalAddress() ? "127.0.0.1" : ep.getHostString();
                    synchronized (out) {
                        out.println(RoleEvent.line(new RoleEvent.Endpoint(i, h, ep.getPort())));
                        out.flush();
                    }
                }
            }
            if (mode == DisaggregationMode.DECODE) {
                // Progress events let a parent (kvferry chaos) time a fault to land mid-transfer and watch recovery.
                progressPrinter = Thread.ofPlatform().daemon().name("role-progress").start(() -> {
                    int last = 0;
                    while (true) {
                        int now = progress.get();
                        if (now != last) {
                            synchronized (out) {
                                out.println(RoleEvent.line(new RoleEvent.Progress(now, successes.get())));
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
            for (int i = 0; i < futures.size(); i++) {
                RoleReport rep = futures.get(i).get();
                if (i == 0 && probe != null && probe.result() != null) {
                    rep = rep.withFigures(rep.figures().withRoomMemory(probe.result()));
                }
                // Rooms the manager still tracks and pages/rows the driver never got back, once every request concluded.
                reports.add(rep.withLeaks(new LeakCheck.Leaks(trackedRooms(managers.get(i)), pools.get(i).outstanding(), 0, 0, 0,
                        List.of())));
            }
            String scrape = ops.scrape();
            if (!scrape.isEmpty()) {
                synchronized (out) {
                    out.println(RoleEvent.line(new RoleEvent.Metrics(scrape)));
                    out.flush();
                }
            }
        } finally {
            if (progressPrinter != null) {
                progressPrinter.interrupt();
                progressPrinter.join(1000);
            }
            exec.shutdownNow();
            for (KVManager m : managers) {
                ops.left(m);
                m.close();
            }
            if (exec.awaitTermination(10, TimeUnit.SECONDS)) {
                for (RankPool p : pools) p.close();
            } else {
                driversLeft = Math.max(1, ((ThreadPoolExecutor) exec).getActiveCount());
            }
        }
        // Teardown done: threads, sockets and native memory must be back to the baseline.
        LeakCheck.Leaks proc = LeakCheck.since(baseline, LEAK_WAIT_MILLIS);
        proc = proc.plus(driversThatDidNotStop(driversLeft));
        boolean allOk = true;
        for (int i = 0; i < reports.size(); i++) {
            RoleReport rep = reports.get(i);
            if (i == 0) rep = rep.withLeaks(rep.leaks().plus(proc));
            allOk &= rep.failed() == 0 && rep.corrupted() == 0;
            synchronized (out) {
                out.println(JSON.writeValueAsString(rep));
                out.flush();
            }
        }
        return allOk;
    }

    /** How long a torn-down role waits for its threads to exit and its sockets and memory to be released. */
    static final long LEAK_WAIT_MILLIS = 2000;

    /** Rooms a manager still tracks (a leak once every request concluded). */
    public static int trackedRooms(KVManager m) {
        return m.stats().trackedRooms();
    }

    /**
     * Creates the pools, managers and driver tasks of one role: every PP stage × the given TP ranks.
     * The caller owns what is added to {@code managers} and {@code pools} and closes them.
     *
     * @param progress counted by decode rank 0 of stage 0 as requests conclude; may be null
     */
    public static void launch(DisaggregationMode mode, BenchConfig config, String addr, List<Integer> tpRanks, String host,
                       ExecutorService exec, List<KVManager> managers, List<RankPool> pools,
                       List<Future<RoleReport>> futures, AtomicInteger progress) {
        launch(mode, config, addr, tpRanks, host, exec, managers, pools, futures, progress, null, RoleOptions.NONE, RoleOps.NONE, null);
    }

    /** As below, recording into {@code ops} (its managers show on its status page). */
    public static void launch(DisaggregationMode mode, BenchConfig config, String addr, List<Integer> tpRanks, String host,
                       ExecutorService exec, List<KVManager> managers, List<RankPool> pools,
                       List<Future<RoleReport>> futures, AtomicInteger progress, RoleOps ops) {
        launch(mode, config, addr, tpRanks, host, exec, managers, pools, futures, progress, null, RoleOptions.NONE, ops, null);
    }

    /** As above; decode rank 0 of stage 0 also counts verified successes in {@code successes} (may be null). */
    public static void launch(DisaggregationMode mode, BenchConfig config, String addr, List<Integer> tpRanks, String host,
                       ExecutorService exec, List<KVManager> managers, List<RankPool> pools,
                       List<Future<RoleReport>> futures, AtomicInteger progress,
                       AtomicInteger successes, RoleOptions opts) {
        launch(mode, config, addr, tpRanks, host, exec, managers, pools, futures, progress, successes, opts, RoleOps.NONE, null);
    }

    /**
     * As above; with {@code config.suite().probeRooms() > 0} every driver takes part in {@code probe}
     * (shared by every driver of this JVM, both roles in one JVM; one of its parties per driver).
     */
    public static void launch(DisaggregationMode mode, BenchConfig config, String addr, List<Integer> tpRanks, String host,
                       ExecutorService exec, List<KVManager> managers, List<RankPool> pools,
                       List<Future<RoleReport>> futures, AtomicInteger progress,
                       AtomicInteger successes, RoleOptions opts, RoleOps ops, RoomMemoryProbe probe) {
        if (config.suite().probeRooms() > 0 && probe == null) {
            throw new IllegalArgumentException("the room-memory probe needs a RoomMemoryProbe for the drivers");
        }
        Workload w = config.workload();
        boolean prefill = mode == DisaggregationMode.PREFILL;
        int groups = prefill ? config.prefillDp() : 1, cps = prefill ? config.prefillCp() : 1;
        long poolCount = MemoryBudget.poolCount(mode, config, tpRanks.size());
        long perPool = MemoryBudget.poolBytes(mode, config);
        MemoryBudget.require(mode.name().toLowerCase(Locale.ROOT), poolCount, perPool, MemoryBudget.availableBytes());
        for (int dp = 0; dp < groups; dp++) {
            for (int cp = 0; cp < cps; cp++) {
                for (int stage = 0; stage < config.pp(mode); stage++) {
                    for (int r : tpRanks) {
                        long seed = w.seed() * 31 + (prefill ? 1000 : 2000) + 100L * stage + r + 10_000L * cp + 100_000L * dp;
                        RankPool pool = new RankPool(config.shape(), w.pageSize(), config.tp(mode), r, config.pp(mode), stage,
                                w.poolPages(), w.concurrency() + 2, seed, !prefill && RankPool.sharedFor(config.transport()),
                                config.suite().pages(), w.maxPagesPerRequest(), config.suite().hugePages());
                        pools.add(pool);
                        KVManager m = manager(config, mode, r, cp, dp, addr, host, pool, opts, managers.size(), ops);
                        managers.add(m);
                        ops.joined(m);
                        if (prefill) {
                            m.registerToBootstrap();
                            int group = dp;
                            futures.add(exec.submit(() -> new PrefillDriver(m, pool, w, addr, pool.rank, group,
                                    config.prefillDp()).withDeadline(deadline(config)).withFaults(config.faults())
                                    .withPairedMemcpy(config.pairedMemcpy()).withProbe(probe)
                                    .withChangeFeed(config.suite().changeFeed()).run()));
                        } else {
                            boolean first = r == 0 && stage == 0;
                            AtomicInteger p = first ? progress : null, ok = first ? successes : null;
                            futures.add(exec.submit(() -> new DecodeDriver(m, pool, w, addr, pool.rank, p)
                                    .withSuccessCounter(ok).withDeadline(deadline(config)).withFaults(config.faults())
                                    .withSuite(config.suite()).withProbe(probe).run()));
                        }
                    }
                }
            }
        }
    }

    /** Reads a role process's stdout until it ends: report lines are parsed, other lines echoed to {@code progress}. */
    public static List<RoleReport> readReports(Process p, String role, PrintStream progress) throws IOException {
        return readReports(p, role, progress, (Consumer<RoleEvent>) null);
    }

    /** As above; progress events from a decode process update {@code concluded}. */
    public static List<RoleReport> readReports(Process p, String role, PrintStream progress,
                                        AtomicInteger concluded) throws IOException {
        return readReports(p, role, progress, line -> {
            if (concluded != null && line instanceof RoleEvent.Progress pr) concluded.set(pr.concluded());
        });
    }

    /**
     * As above; the role's {@link RoleEvent}s (progress from a decode, endpoints from a prefill) go to
     * {@code control}; other non-report lines are echoed to {@code progress}.
     */
    public static List<RoleReport> readReports(Process p, String role, PrintStream progress,
                                        Consumer<RoleEvent> control) throws IOException {
        List<RoleReport> reports = new ArrayList<>();
        try (BufferedReader r = new BufferedReader(
                new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
            String line;
            while ((line = r.readLine()) != null) {
                if (line.startsWith("{\"role\"")) reports.add(JSON.readValue(line, RoleReport.class));
                else if (line.startsWith(RoleEvent.PREFIX)) {
                    RoleEvent e = RoleEvent.parse(line); // malformed: an IOException naming the line
                    if (control != null) control.accept(e);
                }
                else if (progress != null) progress.println("[" + role + "] " + line);
            }
        } catch (JsonProcessingException e) {
            throw e; // a report that does not parse is a bug, not a kill
        } catch (IOException e) {
            // Process.destroy closes the pipe under a blocked reader ("Stream closed"): a killed role just ends here.
            try {
                if (!p.waitFor(5, TimeUnit.SECONDS)) throw e;
            } catch (InterruptedException ie) {
                Thread.currentThread().interrupt();
                throw e;
            }
        }
        return reports;
    }

    private static long deadline(BenchConfig c) {
        return c.deadlineMillis() > 0 ? System.nanoTime() + c.deadlineMillis() * 1_000_000L : 0;
    }

    /** Starts {@code kvferry <role>} as a separate JVM with the same class path, sharing the options. */
    public static Process spawn(String role, BenchConfig config, String bootstrapAddr) throws IOException {
        return spawn(role, config, bootstrapAddr, List.of(), List.of());
    }

    /**
     * As above with extra JVM flags (kvferry chaos adds {@code -XX:NativeMemoryTracking=summary} for
     * the leak check) and extra role arguments (e.g. {@link RoleOptions#args()}).
     */
    public static Process spawn(String role, BenchConfig config, String bootstrapAddr, List<String> jvmFlags,
                                List<String> extraArgs) throws IOException {
        return spawn(role, config, bootstrapAddr, jvmFlags, extraArgs, List.of(), ProcessBuilder.Redirect.INHERIT);
    }

    /**
     * As above, run through {@code launcher} (e.g. {@code ip netns exec NS}: a command that execs the rest
     * in place, so the process is the JVM itself) with the role's standard error sent to {@code stderr}.
     */
    public static Process spawn(String role, BenchConfig config, String bootstrapAddr, List<String> jvmFlags,
                                List<String> extraArgs, List<String> launcher, ProcessBuilder.Redirect stderr)
            throws IOException {
        List<String> cmd = new ArrayList<>(launcher);
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.add("--enable-native-access=ALL-UNNAMED");
        cmd.add("-Xmx1g");
        cmd.add("-XX:+ExitOnOutOfMemoryError"); // a role out of heap exits (the parent reports it) instead of living on half-dead
        String logLevel = System.getProperty("org.slf4j.simpleLogger.defaultLogLevel");
        if (logLevel != null) cmd.add("-Dorg.slf4j.simpleLogger.defaultLogLevel=" + logLevel); // --verbose reaches the roles
        for (Knob k : KVFerry.knobs()) { // kvferry --set reaches the roles (knobs only: nothing secret rides on argv)
            String v = System.getProperty(k.key());
            if (v != null) cmd.add("-D" + k.key() + "=" + v);
        }
        cmd.addAll(jvmFlags);
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add("io.kvferry.cli.Main");
        cmd.add(role);
        cmd.addAll(withOverrides(roleArgs(config, bootstrapAddr), extraArgs));
        ProcessBuilder pb = new ProcessBuilder(cmd);
        pb.redirectError(stderr);
        pb.redirectInput(ProcessBuilder.Redirect.PIPE);
        // The token goes through the environment, not argv, so it does not show in process listings.
        if (config.authToken() != null) pb.environment().put("KVFERRY_AUTH_TOKEN", config.authToken());
        return pb.start();
    }

    /**
     * The shared arguments followed by the extra ones; a valued option given in both (e.g. {@code --seed}
     * for a soak cycle) takes the extra one's value.
     */
    public static List<String> withOverrides(List<String> shared, List<String> extra) {
        Set<String> overridden = new HashSet<>();
        for (int i = 0; i + 1 < extra.size(); i++) {
            if (extra.get(i).startsWith("--") && !extra.get(i + 1).startsWith("--")) overridden.add(extra.get(i));
        }
        List<String> out = new ArrayList<>();
        for (int i = 0; i < shared.size(); i++) {
            String a = shared.get(i);
            boolean valued = i + 1 < shared.size() && !shared.get(i + 1).startsWith("--");
            if (overridden.contains(a) && valued) {
                i++; // drop the option and its value
                continue;
            }
            out.add(a);
        }
        out.addAll(extra);
        return out;
    }

    public static List<String> roleArgs(BenchConfig c, String bootstrapAddr) {
        Workload w = c.workload();
        List<String> a = new ArrayList<>(List.of(
                "--bootstrap", bootstrapAddr,
                "--model", c.shape().name(),
                "--kv-heads", Integer.toString(c.shape().kvHeads()),
                "--requests", Integer.toString(w.requests()),
                "--warmup", Integer.toString(w.warmup()),
                "--prompt-tokens", Integer.toString(w.promptTokens()),
                "--page-size", Integer.toString(w.pageSize()),
                "--chunk-tokens", Integer.toString(w.chunkTokens()),
                "--concurrency", Integer.toString(w.concurrency()),
                "--prefix-every", Integer.toString(w.prefixEvery()),
                "--seed", Long.toString(w.seed()),
                "--transport", c.transport(),
                "--tcp-stripes", Integer.toString(c.tcpStripes()),
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
                "--corrupt-prob", Double.toString(c.faults().corruptProbability()),
                "--checksum", c.checksum().label(),
                "--exit-on-stdin-eof"));
        if (c.shape().mla()) a.add("--mla");
        if (c.allCpRanks()) a.add("--all-cp-ranks");
        if (w.dpRoundRobin()) a.addAll(List.of("--prefill-dp-balance", "round_robin"));
        if (c.pairedMemcpy()) a.add("--paired-memcpy");
        // The benchmark suite's settings, only when set (role processes of older command lines stay valid).
        if (c.suite().pages() != PageLayout.FRAGMENTED) a.addAll(List.of("--pages", c.suite().pages().cliName()));
        if (c.suite().openLoop()) a.addAll(List.of("--rate", Double.toString(c.suite().ratePerSecond())));
        if (c.suite().probeRooms() > 0) a.addAll(List.of("--probe-rooms", Integer.toString(c.suite().probeRooms())));
        if (!c.suite().hugePages()) a.addAll(List.of("--huge-pages", "off"));
        if (c.suite().changeFeed()) a.addAll(List.of("--poll", "feed"));
        return a;
    }


    /**
     * Driver threads still running after teardown: each is a leaked thread (its pools stay mapped, since a
     * driver may still touch them), so a run with one never reads as leak-free.
     */
    static LeakCheck.Leaks driversThatDidNotStop(int threads) {
        if (threads == 0) return LeakCheck.Leaks.NONE;
        return new LeakCheck.Leaks(0, 0, threads, 0, 0, List.of(threads + " driver thread(s) did not stop within 10 s of teardown: pools not freed"));
    }
}
