package io.kvferry.chaos;

import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.LeakCheck;
import io.kvferry.testkit.RoleOptions;
import io.kvferry.testkit.RoleEvent;
import io.kvferry.testkit.RoleReport;
import io.kvferry.testkit.RoleRunner;

import com.fasterxml.jackson.annotation.JsonProperty;
import io.kvferry.KVFerry;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.RankEndpoint;

import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The fault harness behind {@code kvferry chaos}: a registry here, prefill and decode as separate
 * JVMs driving the bench workload, one injected fault, and a verdict. Passing means no request
 * hung, none reported Success with wrong bytes, and no room, page, thread, socket or native memory
 * was left behind; restart and partition scenarios also require recovery, partition also detection.
 */
public final class ChaosRunner {
    /** Scenarios this build runs. */
    public static final List<String> SCENARIOS = List.of("kill-prefill", "kill-decode", "bad-frames", "abort-storm",
            "slow-decode", "failure-injection", "restart-prefill", "restart-decode", "partition");

    /** The faults a scenario injects through the drivers or the library (none for the process-level ones). */
    public static BenchConfig.Faults faultsFor(String scenario) {
        return switch (scenario) {
            case "abort-storm" -> new BenchConfig.Faults(0.25, 0, 0);
            case "slow-decode" -> new BenchConfig.Faults(0, 100, 0);
            case "failure-injection" -> new BenchConfig.Faults(0, 0, 0.1);
            default -> BenchConfig.Faults.NONE;
        };
    }

    /**
     * The verdict; {@code --json} prints it as the last line.
     *
     * @param leaks      what {@code leaked} is made of: rooms, pages (KV pages and aux/state rows), threads
     *                   ({@code kvferry-*} alive after teardown), sockets, native_bytes (above the baseline)
     * @param detectMs   from the fault to the first Failed on each side; partition also reports
     *                   {@code prefill_reset} / {@code decode_reset} for its RST phase
     * @param recovered  restart and partition: requests succeeded after the fault was over (null = not judged)
     * @param detected   partition: both sides failed the affected rooms while the link was still blackholed
     * @param cycles     fault cycles run (more than one with {@code --duration})
     */
    public record Result(String scenario, int requests, int succeeded, int failed, int hung, int corrupted, int leaked,
                         Map<String, Long> leaks,
                         @JsonProperty("detect_ms") Map<String, Long> detectMs,
                         @JsonProperty("recovered") Boolean recovered,
                         @JsonProperty("detected") Boolean detected,
                         int cycles,
                         @JsonProperty("first_failures") List<String> firstFailures) {
        /** hung, corrupted and leaked are 0; recovery and detection hold where they are judged. */
        public boolean passed() {
            return hung == 0 && corrupted == 0 && leaked == 0 && !Boolean.FALSE.equals(recovered)
                    && !Boolean.FALSE.equals(detected);
        }
    }

    /** Requests the decode must have concluded before the fault, so it lands on a working pair. */
    static final int FAULT_AFTER_REQUESTS = 2;
    /** partition: heartbeats of both roles, so a blackholed link is declared dead after 1 s. */
    static final long PARTITION_HEARTBEAT_MS = 200;
    static final int PARTITION_HEARTBEAT_MISSES = 5;
    /** partition: how long the link stays blackholed (the heartbeat timeout plus a margin for both sides). */
    public static final long BLACKHOLE_MS = PARTITION_HEARTBEAT_MS * PARTITION_HEARTBEAT_MISSES + 1500;
    /**
     * partition: the proxied link's pace. The link must be the bottleneck: with a faster link the
     * prefill can be idle, every room waiting for metadata, when the blackhole strikes; then it has
     * no room to fail by heartbeat (its rooms fail later by bootstrap timeout) and detection cannot
     * be judged. Paced, the prefill always has rooms whose bytes are still queued behind the link.
     */
    static final long PARTITION_LINK_BYTES_PER_SECOND = 256L << 20;
    /** partition: how long requests may take to succeed again once the link is restored or reset. */
    static final long RECOVERY_WAIT_MS = 30_000;
    /** Scenarios whose prefill waits {@link #PATIENT_BOOTSTRAP_TIMEOUT_MS} for metadata instead of chaos's short timeout. */
    static final java.util.Set<String> PATIENT_PREFILL = java.util.Set.of("restart-decode", "slow-decode", "bad-frames");
    /** The prefill's bootstrap timeout in those: its rooms wait for a slow or restarted decode. */
    static final long PATIENT_BOOTSTRAP_TIMEOUT_MS = 20_000;
    /** kill-prefill: how long the decode retries the dead (still registered) prefill for a new request. */
    static final long KILLED_PREFILL_INFO_TIMEOUT_MS = 2000;
    /** Role processes run with Native Memory Tracking so the leak check sees Arena and direct memory. */
    static final List<String> ROLE_JVM_FLAGS = List.of("-XX:NativeMemoryTracking=summary");

    private final BenchConfig config;
    private final PrintStream progress;
    private final long faultAfterMillis;
    private long durationMillis;

    /** @param faultAfterMillis extra delay before the fault, once the first requests concluded */
    public ChaosRunner(BenchConfig config, PrintStream progress, long faultAfterMillis) {
        this.config = config;
        this.progress = progress;
        this.faultAfterMillis = faultAfterMillis;
    }

    /**
     * Soak: repeat the scenario's load/fault cycle (fresh processes each time) until this much time
     * passed, and report the sums (detect_ms: the worst cycle). 0 = one cycle (the default).
     */
    public ChaosRunner withDuration(long millis) {
        if (millis < 0) throw new IllegalArgumentException("duration must be >= 0");
        this.durationMillis = millis;
        return this;
    }

    public Result run(String scenario) throws Exception {
        if (!SCENARIOS.contains(scenario)) {
            throw new IllegalArgumentException("unknown scenario '" + scenario + "'; this build runs " + SCENARIOS);
        }
        int minRequests = FAULT_AFTER_REQUESTS + 6 * config.workload().concurrency();
        if (scenario.equals("partition") && config.workload().requests() < minRequests) {
            throw new IllegalArgumentException("partition needs at least " + minRequests + " requests (--requests) at concurrency "
                    + config.workload().concurrency() + ", so that requests remain to succeed after the blackhole and the reset");
        }
        if (durationMillis <= 0) return runOnce(scenario, 0);
        long until = System.nanoTime() + durationMillis * 1_000_000L;
        List<Result> cycles = new ArrayList<>();
        do {
            Result r = runOnce(scenario, cycles.size());
            cycles.add(r);
            if (progress != null) {
                progress.printf("chaos %s cycle %d: succeeded=%d/%d hung=%d corrupted=%d leaked=%d detect_ms=%s%s%n", scenario,
                        cycles.size(), r.succeeded(), r.requests(), r.hung(), r.corrupted(), r.leaked(), r.detectMs(),
                        r.passed() ? "" : " FAIL");
            }
        } while (System.nanoTime() < until);
        return aggregate(cycles);
    }

    /** Sums of the cycles; detect_ms is the worst cycle per side; recovered/detected must hold in every cycle. */
    public static Result aggregate(List<Result> cycles) {
        if (cycles.size() == 1) return cycles.get(0);
        int requests = 0, ok = 0, failed = 0, hung = 0, corrupted = 0, leaked = 0, n = 0;
        Map<String, Long> leaks = new LinkedHashMap<>(), detect = new LinkedHashMap<>();
        Boolean recovered = null, detected = null;
        List<String> failures = new ArrayList<>();
        for (Result r : cycles) {
            requests += r.requests();
            ok += r.succeeded();
            failed += r.failed();
            hung += r.hung();
            corrupted += r.corrupted();
            leaked += r.leaked();
            n += r.cycles();
            r.leaks().forEach((k, v) -> leaks.merge(k, v, Long::sum));
            r.detectMs().forEach((k, v) -> {
                if (!detect.containsKey(k) || (v != null && (detect.get(k) == null || v > detect.get(k)))) detect.put(k, v);
            });
            if (r.recovered() != null) recovered = (recovered == null || recovered) && r.recovered();
            if (r.detected() != null) detected = (detected == null || detected) && r.detected();
            for (String f : r.firstFailures()) if (failures.size() < 5) failures.add(f);
        }
        return new Result(cycles.get(0).scenario(), requests, ok, failed, hung, corrupted, leaked, leaks, detect, recovered,
                detected, n, failures);
    }

    /** What happened during the fault, for the verdict. */
    private static final class Timeline {
        long faultAt;
        int concludedBeforeFault;
        long restoreAt;
        long resetAt;
        Boolean recovered;
    }

    /** One load/fault cycle with fresh processes; cycle N > 0 runs the workload with seed + N (other rooms and faults). */
    private Result runOnce(String scenario, int cycle) throws Exception {
        BenchConfig config = this.config.faults().equals(BenchConfig.Faults.NONE)
                ? this.config.withFaults(faultsFor(scenario)) : this.config;
        PrintStream quiet = progress != null ? progress : new PrintStream(OutputStream.nullOutputStream());
        boolean partition = scenario.equals("partition");
        List<FaultProxy> proxies = new ArrayList<>();
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, config.authToken())) {
            String addr = "127.0.0.1:" + registry.port();
            RoleOptions prefillOpts = RoleOptions.NONE, decodeOpts = RoleOptions.NONE;
            if (partition) {
                // Every prefill rank publishes a proxy's port; the proxy learns the rank's real port from its stdout.
                List<Integer> ports = new ArrayList<>();
                for (int i = 0; i < config.rankCount(io.kvferry.api.DisaggregationMode.PREFILL); i++) {
                    FaultProxy x = new FaultProxy("rank" + i, PARTITION_LINK_BYTES_PER_SECOND);
                    proxies.add(x);
                    ports.add(x.port());
                }
                prefillOpts = new RoleOptions(ports, PARTITION_HEARTBEAT_MS, PARTITION_HEARTBEAT_MISSES, 0);
                decodeOpts = new RoleOptions(List.of(), PARTITION_HEARTBEAT_MS, PARTITION_HEARTBEAT_MISSES, 0);
            } else if (scenario.equals("kill-prefill")) {
                // The prefill never comes back: requests started after the kill fail after 2 s instead of 15 s.
                decodeOpts = new RoleOptions(List.of(), 0, 0, KILLED_PREFILL_INFO_TIMEOUT_MS);
            }
            List<String> seed = cycle == 0 ? List.of() : List.of("--seed", Long.toString(config.workload().seed() + cycle));
            List<String> prefillArgs = concat(seed, prefillOpts.args());
            if (PATIENT_PREFILL.contains(scenario)) {
                // No peer dies for good here, so no request may be lost to the short chaos bootstrap timeout: a slow decode
                // must only slow its prefill down, and a restarted decode repeats the stream, so the prefill's waiting rooms
                // must outlive its start-up (seconds on a loaded machine) instead of timing out 4 every 2 s.
                prefillArgs = concat(prefillArgs, List.of("--bootstrap-timeout-ms",
                        Long.toString(Math.max(config.bootstrapTimeoutMillis(), PATIENT_BOOTSTRAP_TIMEOUT_MS))));
            }
            Process prefill = RoleRunner.spawn("prefill", config, addr, ROLE_JVM_FLAGS, prefillArgs);
            Process decode = RoleRunner.spawn("decode", config, addr, ROLE_JVM_FLAGS, concat(seed, decodeOpts.args()));
            ExecutorService exec = Executors.newFixedThreadPool(3);
            List<Process> started = new ArrayList<>(List.of(prefill, decode));
            try {
                Future<List<RoleReport>> pf = exec.submit(() -> RoleRunner.readReports(prefill, "prefill", quiet,
                        event -> onEndpoint(event, proxies)));
                AtomicInteger concluded = new AtomicInteger(), succeeded = new AtomicInteger();
                Future<List<RoleReport>> df = exec.submit(() -> RoleRunner.readReports(decode, "decode", quiet, event -> {
                    if (!(event instanceof RoleEvent.Progress p)) return;
                    succeeded.set(p.succeeded());
                    concluded.set(p.concluded());
                }));
                // Strike mid-transfer: once the pair has concluded a few requests (or after the given time at most).
                long strikeBy = System.nanoTime() + 60_000_000_000L;
                while (concluded.get() < FAULT_AFTER_REQUESTS && System.nanoTime() < strikeBy) Thread.sleep(5);
                Thread.sleep(faultAfterMillis);
                Timeline t = new Timeline();
                t.faultAt = System.currentTimeMillis();
                t.concludedBeforeFault = concluded.get();
                Process restarted = null;
                Future<List<RoleReport>> rf = null;
                switch (scenario) {
                    case "kill-prefill" -> prefill.destroyForcibly();
                    case "kill-decode" -> decode.destroyForcibly();
                    case "bad-frames" -> sendBadFrames(addr);
                    case "restart-prefill", "restart-decode" -> {
                        // Kill one side and start a fresh process behind the same registry; its peer keeps running.
                        boolean pre = scenario.equals("restart-prefill");
                        (pre ? prefill : decode).destroyForcibly().waitFor(10, TimeUnit.SECONDS);
                        restarted = RoleRunner.spawn(pre ? "prefill" : "decode", config, addr, ROLE_JVM_FLAGS,
                                pre ? prefillArgs : concat(seed, decodeOpts.args()));
                        Process r = restarted;
                        rf = exec.submit(() -> RoleRunner.readReports(r, pre ? "prefill" : "decode", quiet));
                    }
                    case "partition" -> partition(config, proxies, decode, concluded, succeeded, t, quiet);
                    default -> {
                        // abort-storm, slow-decode, failure-injection: injected by the drivers / library all along
                    }
                }
                long wait = Math.max(60_000, config.deadlineMillis() + 30_000);
                if (restarted != null) started.add(restarted);
                List<RoleReport> pre = pf.get(wait, TimeUnit.MILLISECONDS);
                List<RoleReport> dec = df.get(wait, TimeUnit.MILLISECONDS);
                if (rf != null) {
                    List<RoleReport> fresh = rf.get(wait, TimeUnit.MILLISECONDS);
                    if (scenario.equals("restart-prefill")) pre = fresh;
                    else dec = fresh;
                }
                return verdict(config, scenario, pre, dec, t);
            } finally {
                exec.shutdownNow();
                for (Process p : started) p.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            }
        } finally {
            for (FaultProxy x : proxies) x.close();
        }
    }

    private static List<String> concat(List<String> a, List<String> b) {
        List<String> out = new ArrayList<>(a);
        out.addAll(b);
        return out;
    }

    /** A prefill rank's endpoint: proxy {@code rank} forwards there. */
    private static void onEndpoint(RoleEvent event, List<FaultProxy> proxies) {
        if (!(event instanceof RoleEvent.Endpoint e) || e.rank() >= proxies.size()) return;
        proxies.get(e.rank()).upstream(new java.net.InetSocketAddress(e.host(), e.port()));
    }

    /**
     * Blackhole every prefill link longer than the heartbeat timeout, restore it and wait for a
     * request to succeed through it again; then reset every link (RST) and wait again. The decode
     * reconnects on its own: nothing is restarted.
     */
    private static void partition(BenchConfig config, List<FaultProxy> proxies, Process decode, AtomicInteger concluded,
                                  AtomicInteger succeeded, Timeline t, PrintStream log) throws InterruptedException {
        for (FaultProxy x : proxies) x.blackhole();
        log.println("[chaos] link blackholed for " + BLACKHOLE_MS + " ms");
        Thread.sleep(BLACKHOLE_MS);
        int okAtRestore = succeeded.get(), closed = 0;
        t.restoreAt = System.currentTimeMillis();
        for (FaultProxy x : proxies) closed += x.restore();
        log.println("[chaos] link restored (" + closed + " blackholed connection(s) closed)");
        boolean healed = awaitSuccess(succeeded, okAtRestore, decode);
        boolean healedAfterReset = true;
        int n = config.workload().requests(), window = config.workload().concurrency();
        // Reset only while requests remain to be started after it, so recovery can be judged.
        if (healed && n - concluded.get() > 2 * window) {
            int okAtReset = succeeded.get(), reset = 0;
            t.resetAt = System.currentTimeMillis();
            for (FaultProxy x : proxies) reset += x.reset();
            log.println("[chaos] link reset (" + reset + " connection(s))");
            healedAfterReset = awaitSuccess(succeeded, okAtReset, decode);
        }
        t.recovered = healed && healedAfterReset;
    }

    /** Waits until the decode verified more than {@code before} requests; false if it ended or time ran out first. */
    private static boolean awaitSuccess(AtomicInteger succeeded, int before, Process decode) throws InterruptedException {
        long until = System.nanoTime() + RECOVERY_WAIT_MS * 1_000_000L;
        while (System.nanoTime() < until) {
            if (succeeded.get() > before) return true;
            if (!decode.isAlive()) return succeeded.get() > before;
            Thread.sleep(10);
        }
        return false;
    }

    private Result verdict(BenchConfig config, String scenario, List<RoleReport> pre, List<RoleReport> dec, Timeline t) {
        int n = config.workload().requests();
        boolean decodeAlive = !scenario.equals("kill-decode");
        // After a decode restart the fresh decode repeats the stream: what the old one finished fails there
        // (the prefill already cleared those rooms); recovery means the fresh pair completed requests.
        List<RoleReport> judge = decodeAlive ? dec : pre;
        java.util.Set<Integer> failedIdx = new java.util.HashSet<>();
        int hung = 0, corrupted = 0, leaked = 0;
        LeakCheck.Leaks leaks = LeakCheck.Leaks.NONE;
        List<String> failures = new ArrayList<>();
        for (RoleReport r : judge) {
            failedIdx.addAll(r.failedRequests());
            hung += r.hung();
            corrupted += r.corrupted();
        }
        for (List<RoleReport> side : List.of(pre, dec)) {
            for (RoleReport r : side) {
                leaked += r.leaks().total();
                leaks = leaks.plus(r.leaks());
                for (String d : r.leaks().details()) failures.add(r.role() + " leak: " + d); // leaks first: they fail the run
            }
        }
        for (List<RoleReport> side : List.of(pre, dec)) {
            for (RoleReport r : side) {
                for (String f : r.firstFailures()) if (failures.size() < 5) failures.add(r.role() + ": " + f);
            }
        }
        // A side that was killed reports nothing: its requests are judged by the survivor.
        if (judge.isEmpty()) hung = n;
        // Detection time is what a peer's death or a partition measures; the other scenarios inject faults all along.
        Map<String, Long> detect = new LinkedHashMap<>();
        boolean part = scenario.equals("partition");
        detect.put("prefill", scenario.equals("kill-decode") || part ? firstFailureAfter(pre, t.faultAt) : null);
        detect.put("decode", scenario.equals("kill-prefill") || part ? firstFailureAfter(dec, t.faultAt) : null);
        Boolean recovered = null, detected = null;
        if (scenario.startsWith("restart-")) {
            int ok = 0;
            for (RoleReport r : judge) ok += r.succeeded();
            // A fresh decode's successes all came after the restart; the surviving decode must beat its pre-fault count.
            recovered = scenario.equals("restart-decode") ? ok > 0 : ok > t.concludedBeforeFault;
        }
        if (part) {
            recovered = Boolean.TRUE.equals(t.recovered);
            // Both sides must have failed the affected rooms while the link was still blackholed (heartbeats),
            // not only once the proxy closed it at the restore.
            long window = t.restoreAt - t.faultAt;
            Long p = detect.get("prefill"), d = detect.get("decode");
            detected = p != null && d != null && p < window && d < window;
            if (t.resetAt > 0) {
                detect.put("prefill_reset", firstFailureAfter(pre, t.resetAt));
                detect.put("decode_reset", firstFailureAfter(dec, t.resetAt));
            }
        }
        Map<String, Long> leakMap = new LinkedHashMap<>();
        leakMap.put("rooms", (long) leaks.rooms());
        leakMap.put("pages", (long) leaks.pages());
        leakMap.put("threads", (long) leaks.threads());
        leakMap.put("sockets", (long) leaks.sockets());
        leakMap.put("native_bytes", leaks.nativeBytes());
        return new Result(scenario, n, n - failedIdx.size(), failedIdx.size(), hung, corrupted, leaked, leakMap, detect,
                recovered, detected, 1, failures.size() > 5 ? failures.subList(0, 5) : failures);
    }

    /** Milliseconds from {@code since} to the first failure a side saw at or after it, or null when it saw none. */
    private static Long firstFailureAfter(List<RoleReport> reports, long since) {
        long first = 0;
        for (RoleReport r : reports) {
            for (long at : r.failureTimesMillis()) {
                if (at >= since && (first == 0 || at < first)) first = at;
            }
        }
        return first == 0 ? null : first - since;
    }

    /**
     * Hostile traffic at the prefill rank's control port: random bytes, a forged 2 GiB length, a
     * wrong magic, an unknown type and a HELLO with a wrong token. The run must still succeed whole.
     */
    private void sendBadFrames(String addr) throws IOException {
        BenchConfig config = this.config;
        RankEndpoint ep;
        try (BootstrapClient client = new BootstrapClient(addr, config.authToken())) {
            ep = client.fetchRankEndpoint(0, 0, 0, 0);
        }
        Random rnd = new Random(7);
        List<byte[]> attacks = new ArrayList<>();
        byte[] noise = new byte[4096];
        rnd.nextBytes(noise);
        attacks.add(noise);
        int magic = io.kvferry.protocol.Wire.MAGIC, version = io.kvferry.protocol.Wire.VERSION;
        int transferInfo = io.kvferry.protocol.MessageType.TRANSFER_INFO.code();
        attacks.add(header(magic, version, transferInfo, 0, Integer.MAX_VALUE)); // TRANSFER_INFO claiming ~2 GiB
        attacks.add(header(0x12345678, version, 1, 0, 16));                       // wrong magic
        attacks.add(header(magic, version, 99, 0, 0));                             // unknown type
        attacks.add(header(magic, version + 4, 1, 0, 0));                          // unknown version
        attacks.add(io.kvferry.protocol.FrameCodec.encode(new io.kvferry.protocol.Hello("wrong-token", "intruder", "tcp", 0, 1,
                0, config.workload().pageSize(), "bf16", new io.kvferry.protocol.MemoryDescriptor(new long[0], new long[0],
                new int[0], new long[0], new long[0], List.of()))).array());
        for (byte[] a : attacks) {
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress(ep.rankIp(), ep.rankPort()), 2000);
                s.setSoTimeout(2000);
                s.getOutputStream().write(a);
                s.getOutputStream().flush();
                try {
                    s.getInputStream().read(new byte[256]); // the prefill answers or closes; either is fine
                } catch (IOException ignored) {
                    // reset by the peer: also a rejection
                }
            }
        }
    }

    private static byte[] header(int magic, int version, int type, int flags, int length) {
        return ByteBuffer.allocate(12).order(ByteOrder.LITTLE_ENDIAN).putInt(magic).put((byte) version).put((byte) type)
                .putShort((short) flags).putInt(length).array();
    }
}
