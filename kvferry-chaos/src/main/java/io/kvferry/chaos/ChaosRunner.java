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

import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
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
    /** Scenarios this build runs ({@link ChaosScenarios#ALL}). */
    public static final List<String> SCENARIOS = ChaosScenarios.ALL.stream().map(ChaosScenario::name).toList();

    /** The faults a scenario injects through the drivers or the library (none for the process-level ones). */
    public static BenchConfig.Faults faultsFor(String scenario) {
        ChaosScenario s = ChaosScenarios.byName(scenario);
        return s == null ? BenchConfig.Faults.NONE : s.faults();
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
    /** partition: how long the link stays blackholed (tests wait on it). */
    public static final long BLACKHOLE_MS = ChaosScenarios.Partition.BLACKHOLE_MS;
    /** The prefill's bootstrap timeout in patient scenarios: its rooms wait for a slow or restarted decode. */
    static final long PATIENT_BOOTSTRAP_TIMEOUT_MS = 20_000;
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

    public Result run(String name) throws Exception {
        ChaosScenario scenario = ChaosScenarios.byName(name);
        if (scenario == null) {
            throw new IllegalArgumentException("unknown scenario '" + name + "'; this build runs " + SCENARIOS);
        }
        int minRequests = scenario.minRequests(config);
        if (config.workload().requests() < minRequests) {
            throw new IllegalArgumentException(name + " needs at least " + minRequests + " requests (--requests) at concurrency "
                    + config.workload().concurrency() + ", so that requests remain to succeed after the fault");
        }
        if (durationMillis <= 0) return runOnce(scenario, 0);
        long until = System.nanoTime() + durationMillis * 1_000_000L;
        List<Result> cycles = new ArrayList<>();
        do {
            Result r = runOnce(scenario, cycles.size());
            cycles.add(r);
            if (progress != null) {
                progress.printf("chaos %s cycle %d: succeeded=%d/%d hung=%d corrupted=%d leaked=%d detect_ms=%s%s%n", name,
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

    /** One load/fault cycle with fresh processes; cycle N > 0 runs the workload with seed + N (other rooms and faults). */
    private Result runOnce(ChaosScenario scenario, int cycle) throws Exception {
        BenchConfig config = this.config.faults().equals(BenchConfig.Faults.NONE)
                ? this.config.withFaults(scenario.faults()) : this.config;
        PrintStream quiet = progress != null ? progress : new PrintStream(OutputStream.nullOutputStream());
        List<FaultProxy> proxies = new ArrayList<>();
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, config.authToken())) {
            String addr = "127.0.0.1:" + registry.port();
            ChaosScenario.Setup setup = new ChaosScenario.Setup(config, proxies);
            RoleOptions prefillOpts = scenario.prefillOptions(setup), decodeOpts = scenario.decodeOptions(setup);
            List<String> seed = cycle == 0 ? List.of() : List.of("--seed", Long.toString(config.workload().seed() + cycle));
            List<String> prefillArgs = concat(seed, prefillOpts.args());
            List<String> decodeArgs = concat(seed, decodeOpts.args());
            if (scenario.patientPrefill()) {
                // No peer dies for good here, so no request may be lost to the short chaos bootstrap timeout: a slow decode
                // must only slow its prefill down, and a restarted decode repeats the stream, so the prefill's waiting rooms
                // must outlive its start-up (seconds on a loaded machine) instead of timing out 4 every 2 s.
                prefillArgs = concat(prefillArgs, List.of("--bootstrap-timeout-ms",
                        Long.toString(Math.max(config.bootstrapTimeoutMillis(), PATIENT_BOOTSTRAP_TIMEOUT_MS))));
            }
            Process prefill = RoleRunner.spawn("prefill", config, addr, ROLE_JVM_FLAGS, prefillArgs);
            Process decode = RoleRunner.spawn("decode", config, addr, ROLE_JVM_FLAGS, decodeArgs);
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
                ChaosScenario.Timeline t = new ChaosScenario.Timeline();
                t.faultAt = System.currentTimeMillis();
                t.concludedBeforeFault = concluded.get();
                Restart restart = new Restart();
                List<String> prefillArgsFinal = prefillArgs;
                scenario.strike(new ChaosScenario.Strike() {
                    public BenchConfig config() { return config; }
                    public String registry() { return addr; }
                    public Process prefill() { return prefill; }
                    public Process decode() { return decode; }
                    public AtomicInteger concluded() { return concluded; }
                    public AtomicInteger succeeded() { return succeeded; }
                    public List<FaultProxy> proxies() { return proxies; }
                    public ChaosScenario.Timeline timeline() { return t; }
                    public PrintStream log() { return quiet; }

                    public void restart(boolean prefillSide) throws Exception {
                        // Kill one side and start a fresh process behind the same registry; its peer keeps running.
                        (prefillSide ? prefill : decode).destroyForcibly().waitFor(10, TimeUnit.SECONDS);
                        Process fresh = RoleRunner.spawn(prefillSide ? "prefill" : "decode", config, addr, ROLE_JVM_FLAGS,
                                prefillSide ? prefillArgsFinal : decodeArgs);
                        started.add(fresh);
                        restart.prefillSide = prefillSide;
                        restart.reports = exec.submit(() -> RoleRunner.readReports(fresh, prefillSide ? "prefill" : "decode", quiet));
                    }
                });
                long wait = Math.max(60_000, config.deadlineMillis() + 30_000);
                List<RoleReport> pre = pf.get(wait, TimeUnit.MILLISECONDS);
                List<RoleReport> dec = df.get(wait, TimeUnit.MILLISECONDS);
                if (restart.reports != null) {
                    List<RoleReport> fresh = restart.reports.get(wait, TimeUnit.MILLISECONDS);
                    if (restart.prefillSide) pre = fresh;
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

    /** A side restarted by the scenario: whose reports replace whose. */
    private static final class Restart {
        boolean prefillSide;
        Future<List<RoleReport>> reports;
    }

    private static List<String> concat(List<String> a, List<String> b) {
        List<String> out = new ArrayList<>(a);
        out.addAll(b);
        return out;
    }

    /** A prefill rank's endpoint: proxy {@code rank} forwards there. */
    private static void onEndpoint(RoleEvent event, List<FaultProxy> proxies) {
        if (!(event instanceof RoleEvent.Endpoint e) || e.rank() >= proxies.size()) return;
        proxies.get(e.rank()).upstream(new InetSocketAddress(e.host(), e.port()));
    }

    private Result verdict(BenchConfig config, ChaosScenario scenario, List<RoleReport> pre, List<RoleReport> dec,
                           ChaosScenario.Timeline t) {
        int n = config.workload().requests();
        // After a decode restart the fresh decode repeats the stream: what the old one finished fails there
        // (the prefill already cleared those rooms); recovery means the fresh pair completed requests.
        List<RoleReport> judge = scenario.decodeSurvives() ? dec : pre;
        Set<Integer> failedIdx = new HashSet<>();
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
        detect.put("prefill", scenario.detectsOnPrefill() ? firstFailureAfter(pre, t.faultAt) : null);
        detect.put("decode", scenario.detectsOnDecode() ? firstFailureAfter(dec, t.faultAt) : null);
        ChaosScenario.Judgement j = new ChaosScenario.Judgement(pre, dec, judge, t, detect);
        scenario.judge(j);
        Map<String, Long> leakMap = new LinkedHashMap<>();
        leakMap.put("rooms", (long) leaks.rooms());
        leakMap.put("pages", (long) leaks.pages());
        leakMap.put("threads", (long) leaks.threads());
        leakMap.put("sockets", (long) leaks.sockets());
        leakMap.put("native_bytes", leaks.nativeBytes());
        return new Result(scenario.name(), n, n - failedIdx.size(), failedIdx.size(), hung, corrupted, leaked, leakMap, detect,
                j.recovered, j.detected, 1, failures.size() > 5 ? failures.subList(0, 5) : failures);
    }

    /** Milliseconds from {@code since} to the first failure a side saw at or after it, or null when it saw none. */
    static Long firstFailureAfter(List<RoleReport> reports, long since) {
        long first = 0;
        for (RoleReport r : reports) {
            for (long at : r.failureTimesMillis()) {
                if (at >= since && (first == 0 || at < first)) first = at;
            }
        }
        return first == 0 ? null : first - since;
    }
}
