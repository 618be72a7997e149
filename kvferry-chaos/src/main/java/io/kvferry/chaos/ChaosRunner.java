package io.kvferry.chaos;

import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.LeakCheck;
import io.kvferry.testkit.RoleOptions;
import io.kvferry.testkit.RoleEvent;
import io.kvferry.testkit.RoleReport;
import io.kvferry.testkit.RoleRunner;

import com.fasterxml.jackson.annotation.JsonInclude;
import com.fasterxml.jackson.annotation.JsonProperty;
import io.kvferry.api.ChecksumMode;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.chaos.net.LinkImpairment;
import io.kvferry.chaos.net.NetnsLink;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
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
 * was left behind; restart and partition scenarios also require recovery, partition also detection; and a
 * fault struck at a moment must have met requests in flight (one struck after the last tested nothing).
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
     *                   ({@code kvferry-*} alive after teardown), sockets, native_bytes (above the baseline),
     *                   unreported_ranks (ranks of a side not killed on purpose whose report never came: unchecked)
     * @param detectMs   from the fault to the first Failed on each side; partition also reports
     *                   {@code prefill_reset} / {@code decode_reset} for its RST phase
     * @param recovered  restart and partition: requests succeeded after the fault was over (null = not judged)
     * @param detected   partition: both sides failed the affected rooms while the link was still blackholed
     * @param cycles     fault cycles run (more than one with {@code --duration})
     * @param checksum   the checksum mode both roles ran with (off, sampled, full)
     * @param integrityFailures requests the decode failed with kind {@code integrity} (a checksum or byte-count mismatch)
     * @param corruption corrupt: how bytes were damaged and whether the checksum mode's promise held (else null)
     * @param hostile    hostile-peer: each attack's outcome and the prefill's memory and threads (else null)
     * @param link       {@code --netns}: the link between the namespaces (else null)
     * @param inFlightAtFault requests the decode had not reported concluded when the fault struck: at most that many
     *                   met it (the decode's reports lag), and 0 means none can have; null for the scenarios whose
     *                   faults are injected all along (abort-storm, slow-decode, failure-injection, corrupt)
     * @param untested   why the fault tested nothing: it struck after every request of the run had concluded (null
     *                   when requests were still in flight, or the faults were injected all along); such a run fails
     */
    public record Result(String scenario, int requests, int succeeded, int failed, int hung, int corrupted, int leaked,
                         Map<String, Long> leaks,
                         @JsonProperty("detect_ms") Map<String, Long> detectMs,
                         @JsonProperty("recovered") Boolean recovered,
                         @JsonProperty("detected") Boolean detected,
                         int cycles,
                         @JsonProperty("first_failures") List<String> firstFailures,
                         String checksum,
                         @JsonProperty("integrity_failures") int integrityFailures,
                         @JsonInclude(JsonInclude.Include.NON_NULL) Corruption corruption,
                         @JsonInclude(JsonInclude.Include.NON_NULL) Hostile hostile,
                         @JsonInclude(JsonInclude.Include.NON_NULL) NetnsLink.Info link,
                         @JsonProperty("in_flight_at_fault") Integer inFlightAtFault,
                         @JsonProperty("untested") String untested) {
        public Result(String scenario, int requests, int succeeded, int failed, int hung, int corrupted, int leaked,
                      Map<String, Long> leaks, Map<String, Long> detectMs, Boolean recovered, Boolean detected, int cycles,
                      List<String> firstFailures) {
            this(scenario, requests, succeeded, failed, hung, corrupted, leaked, leaks, detectMs, recovered, detected, cycles,
                    firstFailures, ChecksumMode.OFF.label(), 0, null, null, null);
        }

        public Result(String scenario, int requests, int succeeded, int failed, int hung, int corrupted, int leaked,
                      Map<String, Long> leaks, Map<String, Long> detectMs, Boolean recovered, Boolean detected, int cycles,
                      List<String> firstFailures, String checksum, int integrityFailures, Corruption corruption, Hostile hostile,
                      NetnsLink.Info link) {
            this(scenario, requests, succeeded, failed, hung, corrupted, leaked, leaks, detectMs, recovered, detected, cycles,
                    firstFailures, checksum, integrityFailures, corruption, hostile, link, null, null);
        }

        /**
         * hung and leaked are 0; corrupted is 0 (corrupt: as its checksum mode promises, see {@link Corruption});
         * recovery, detection and the hostile-peer bounds hold where they are judged; and the fault met requests
         * in flight ({@code untested} is null): a fault struck after the run's last request proves nothing.
         */
        public boolean passed() {
            boolean bytesOk = corruption == null ? corrupted == 0 : corruption.holds();
            return hung == 0 && leaked == 0 && bytesOk && !Boolean.FALSE.equals(recovered) && !Boolean.FALSE.equals(detected)
                    && (hostile == null || hostile.holds()) && untested == null;
        }
    }

    /**
     * What {@code corrupt} damaged and what the checksum mode promised.
     *
     * @param via      {@code proxy}: a byte flipped in a tcp WRITE payload between the links' ends;
     *                 {@code hook}: the prefill's test hook flipped a source byte after its digest was taken (one-sided links)
     * @param injected rooms damaged on purpose (known for the proxy; null for the hook)
     * @param expect   {@code caught} (full: no damaged room succeeds, each fails with kind integrity),
     *                 {@code shown} (off: damaged rooms succeed with wrong bytes, corrupted > 0),
     *                 {@code sampled} (each damaged room is caught or, when its damage missed the sample, shows as corrupted)
     * @param holds    whether the run kept that promise
     */
    public record Corruption(String via, Integer injected, String expect, boolean holds) {
        Corruption plus(Corruption o) {
            Integer n = injected == null || o.injected == null ? null : injected + o.injected;
            return new Corruption(via, n, expect, holds && o.holds);
        }
    }

    /**
     * What {@code hostile-peer} did to the live prefill and what it cost it.
     *
     * @param rssMb   the prefill process's resident memory (MiB): before the attacks, the peak during them, after
     * @param threads its thread count, likewise
     * @param attacks each attack, what happened, and whether that is the refusal the issue asks for
     * @param holds   every attack was refused as it should be and memory and threads stayed within bounds
     */
    public record Hostile(@JsonProperty("rss_mb") Usage rssMb, Usage threads, List<Attack> attacks, boolean holds) {
        /** Before the first attack, the highest sample while they ran, and after they ended. */
        public record Usage(long before, long peak, long after) {}

        /** One attack: its name, what the prefill or registry did, and whether that is right. */
        public record Attack(String name, String outcome, boolean ok) {}
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
    /** --netns: the link's impairment and kind; null = everything on loopback. */
    private LinkImpairment netem;
    private NetnsLink.Kind netnsKind;

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

    /**
     * Runs the roles in two network namespaces joined by a link impaired as {@code impairment} says
     * (registry and prefill in one, decode in the other); partition then takes the link down.
     */
    public ChaosRunner withNetns(LinkImpairment impairment, NetnsLink.Kind kind) {
        this.netem = impairment;
        this.netnsKind = kind;
        return this;
    }

    public Result run(String name) throws Exception {
        ChaosScenario scenario = ChaosScenarios.byName(name);
        if (scenario == null) {
            throw new IllegalArgumentException("unknown scenario '" + name + "'; this build runs " + SCENARIOS);
        }
        if (netnsKind != null && scenario.netnsUnsupported() != null) {
            throw new IllegalArgumentException(name + " does not run with --netns: " + scenario.netnsUnsupported());
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
        int integrity = 0;
        Corruption corruption = null;
        Hostile hostile = null;
        Integer inFlight = null;
        String untested = null;
        for (Result r : cycles) {
            integrity += r.integrityFailures();
            // the cycle whose fault met the fewest requests; the first cycle that tested nothing fails the soak
            if (r.inFlightAtFault() != null && (inFlight == null || r.inFlightAtFault() < inFlight)) inFlight = r.inFlightAtFault();
            if (untested == null && r.untested() != null) untested = "cycle " + (n + 1) + ": " + r.untested();
            if (r.corruption() != null) corruption = corruption == null ? r.corruption() : corruption.plus(r.corruption());
            if (r.hostile() != null) {
                // the worst cycle's figures; every cycle's attacks must have been refused
                boolean holds = (hostile == null || hostile.holds()) && r.hostile().holds();
                Hostile worst = hostile == null || r.hostile().rssMb().peak() >= hostile.rssMb().peak() ? r.hostile() : hostile;
                hostile = new Hostile(worst.rssMb(), worst.threads(), worst.attacks(), holds);
            }
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
        Result first = cycles.get(0);
        return new Result(first.scenario(), requests, ok, failed, hung, corrupted, leaked, leaks, detect, recovered,
                detected, n, failures, first.checksum(), integrity, corruption, hostile, first.link(), inFlight, untested);
    }

    /** One load/fault cycle with fresh processes; cycle N > 0 runs the workload with seed + N (other rooms and faults). */
    private Result runOnce(ChaosScenario scenario, int cycle) throws Exception {
        BenchConfig config = this.config.faults().equals(BenchConfig.Faults.NONE)
                ? this.config.withFaults(scenario.faults(this.config)) : this.config;
        PrintStream quiet = progress != null ? progress : new PrintStream(OutputStream.nullOutputStream());
        List<FaultProxy> proxies = new ArrayList<>();
        Path prefillLog = scenario.keepsPrefillLog() ? Files.createTempFile("kvferry-chaos-prefill-", ".log") : null;
        try (ChaosNetwork network = netnsKind == null ? ChaosNetwork.loopback() : ChaosNetwork.netns(netem, netnsKind)) {
            if (network.isNetns()) quiet.println("[chaos] network namespaces: " + network.info());
            try (KVBootstrapServer registry = network.startRegistry(config.authToken(), scenario.registryRequestTimeout())) {
                return runOnce(scenario, cycle, config, quiet, proxies, network, registry, prefillLog);
            } finally {
                for (FaultProxy x : proxies) x.close();
            }
        } finally {
            if (prefillLog != null) Files.deleteIfExists(prefillLog);
        }
    }

    private Result runOnce(ChaosScenario scenario, int cycle, BenchConfig config, PrintStream quiet, List<FaultProxy> proxies,
                           ChaosNetwork network, KVBootstrapServer registry, Path prefillLog) throws Exception {
        String addr = network.prefillHost() + ":" + registry.port();
        ChaosScenario.Setup setup = new ChaosScenario.Setup(config, proxies, network);
        RoleOptions prefillOpts = scenario.prefillOptions(setup), decodeOpts = scenario.decodeOptions(setup);
        List<String> seed = cycle == 0 ? List.of() : List.of("--seed", Long.toString(config.workload().seed() + cycle));
        List<String> prefillArgs = concat(seed, prefillOpts.args());
        List<String> decodeArgs = concat(seed, decodeOpts.args());
        if (network.isNetns()) prefillArgs = concat(prefillArgs, List.of("--host", network.prefillHost()));
        if (scenario.patientPrefill()) {
            // No peer dies for good here, so no request may be lost to the short chaos bootstrap timeout: a slow decode
            // must only slow its prefill down, and a restarted decode repeats the stream, so the prefill's waiting rooms
            // must outlive its start-up (seconds on a loaded machine) instead of timing out 4 every 2 s.
            prefillArgs = concat(prefillArgs, List.of("--bootstrap-timeout-ms",
                    Long.toString(Math.max(config.bootstrapTimeoutMillis(), PATIENT_BOOTSTRAP_TIMEOUT_MS))));
        }
        ProcessBuilder.Redirect prefillErr = prefillLog == null ? ProcessBuilder.Redirect.INHERIT
                : ProcessBuilder.Redirect.appendTo(prefillLog.toFile());
        Process prefill = RoleRunner.spawn("prefill", config, addr, ROLE_JVM_FLAGS, prefillArgs, network.launcher(true), prefillErr);
        Process decode;
        try {
            decode = RoleRunner.spawn("decode", config, addr, ROLE_JVM_FLAGS, decodeArgs, network.launcher(false),
                    ProcessBuilder.Redirect.INHERIT);
        } catch (IOException | RuntimeException e) { // the prefill is running already: it must not outlive the run
            prefill.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            throw e;
        }
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
                public ChaosNetwork network() { return network; }
                public ChaosScenario.Setup setup() { return setup; }
                public Path prefillLog() { return prefillLog; }

                public void restart(boolean prefillSide) throws Exception {
                    // Kill one side and start a fresh process behind the same registry; its peer keeps running.
                    (prefillSide ? prefill : decode).destroyForcibly().waitFor(10, TimeUnit.SECONDS);
                    Process fresh = RoleRunner.spawn(prefillSide ? "prefill" : "decode", config, addr, ROLE_JVM_FLAGS,
                            prefillSide ? prefillArgsFinal : decodeArgs, network.launcher(prefillSide),
                            prefillSide ? prefillErr : ProcessBuilder.Redirect.INHERIT);
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
            return verdict(config, scenario, setup, pre, dec, t);
        } finally {
            exec.shutdownNow();
            for (Process p : started) p.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
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

    /**
     * The run's verdict from both sides' reports. A side the scenario did not kill for good that reported
     * fewer ranks than it has (its process ended without them: a crash, the OOM killer) was never checked
     * for leaks and, if its reports judge the requests, leaves them unjudged: each missing rank counts in
     * {@code leaked} ({@code leaks.unreported_ranks}), and unjudged requests as hung.
     */
    static Result verdict(BenchConfig config, ChaosScenario scenario, ChaosScenario.Setup setup, List<RoleReport> pre,
                          List<RoleReport> dec, ChaosScenario.Timeline t) {
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
        boolean unjudged = judge.isEmpty();
        int unreported = 0;
        int prefillRanks = config.rankCount(DisaggregationMode.PREFILL), decodeRanks = config.rankCount(DisaggregationMode.DECODE);
        if (scenario.prefillSurvives() && pre.size() < prefillRanks) {
            unreported += prefillRanks - pre.size();
            failures.add(0, "prefill: " + pre.size() + " of " + prefillRanks + " rank reports (the process ended without the rest): "
                    + "its rooms, pages, threads, sockets and memory were not checked");
            if (judge == pre) unjudged = true;
        }
        if (scenario.decodeSurvives() && dec.size() < decodeRanks) {
            unreported += decodeRanks - dec.size();
            failures.add(0, "decode: " + dec.size() + " of " + decodeRanks + " rank reports (the process ended without the rest): "
                    + "its rooms, pages, threads, sockets and memory were not checked");
            if (judge == dec) unjudged = true;
        }
        // Requests nobody reported on count as hung, none as succeeded (a report must say so).
        if (unjudged) hung = n;
        int succeeded = unjudged ? 0 : n - failedIdx.size();
        leaked += unreported;
        // Detection time is what a peer's death or a partition measures; the other scenarios inject faults all along.
        Map<String, Long> detect = new LinkedHashMap<>();
        detect.put("prefill", scenario.detectsOnPrefill() ? firstFailureAfter(pre, t.faultAt) : null);
        detect.put("decode", scenario.detectsOnDecode() ? firstFailureAfter(dec, t.faultAt) : null);
        ChaosScenario.Judgement j = new ChaosScenario.Judgement(pre, dec, judge, t, detect, setup);
        scenario.judge(j);
        // A fault struck once every request had concluded met nothing: no detection, recovery or cleanup was tested.
        Integer inFlight = scenario.injectsAllAlong() ? null : Math.max(0, n - t.concludedBeforeFault);
        String untested = inFlight == null || inFlight > 0 ? null : untested(n);
        Map<String, Long> leakMap = new LinkedHashMap<>();
        leakMap.put("rooms", (long) leaks.rooms());
        leakMap.put("pages", (long) leaks.pages());
        leakMap.put("threads", (long) leaks.threads());
        leakMap.put("sockets", (long) leaks.sockets());
        leakMap.put("native_bytes", leaks.nativeBytes());
        leakMap.put("unreported_ranks", (long) unreported);
        return new Result(scenario.name(), n, succeeded, failedIdx.size(), hung, corrupted, leaked, leakMap, detect,
                j.recovered, j.detected, 1, failures.size() > 5 ? failures.subList(0, 5) : failures, config.checksum().label(),
                j.integrityFailures, j.corruption, j.hostile, setup.network.info(), inFlight, untested);
    }

    /** Why a run whose fault struck after its last request concluded cannot pass. */
    static String untested(int requests) {
        return "the fault struck after all " + requests + " requests had concluded: it tested nothing; give more --requests "
                + "or a longer prompt (--prompt-tokens), or a shorter --fault-after-ms";
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
