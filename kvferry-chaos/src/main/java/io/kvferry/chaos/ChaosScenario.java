package io.kvferry.chaos;

import io.kvferry.api.FailureKind;
import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.RoleOptions;
import io.kvferry.testkit.RoleReport;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * One chaos scenario: how it sets the prefill/decode pair up, the fault it strikes once the pair is
 * under way, and what its verdict must hold beyond the harness's common one (nothing hung, nothing
 * corrupted, nothing leaked). {@link ChaosRunner} runs any of them; {@link ChaosScenarios#ALL}
 * lists this build's.
 */
public interface ChaosScenario {
    /** The {@code --scenario} name. */
    String name();

    /** Faults the drivers or the library inject all along (none for the process-level scenarios). */
    default BenchConfig.Faults faults() {
        return BenchConfig.Faults.NONE;
    }

    /** The faults for this run's configuration (a scenario may choose by transport); {@link #faults()} by default. */
    default BenchConfig.Faults faults(BenchConfig config) {
        return faults();
    }

    /**
     * Null when the scenario can run with its roles in network namespaces ({@code --netns}), else why
     * not (the harness would have to reach into the prefill's namespace itself).
     */
    default String netnsUnsupported() {
        return null;
    }

    /** Requests the workload needs for this scenario to be judged (0 = any). */
    default int minRequests(BenchConfig config) {
        return 0;
    }

    /** The prefill role's options; a scenario may put fault proxies in front of its ranks here. */
    default RoleOptions prefillOptions(Setup setup) throws IOException {
        return RoleOptions.NONE;
    }

    default RoleOptions decodeOptions(Setup setup) {
        return RoleOptions.NONE;
    }

    /**
     * No peer dies for good: the prefill's rooms must outlive a slow or restarted decode instead of
     * failing at chaos's short bootstrap timeout.
     */
    default boolean patientPrefill() {
        return false;
    }

    /**
     * True when the faults are injected from the first request on (by the drivers, the library or a proxy) rather
     * than struck once at a moment: then no request can have concluded before them, and the verdict does not ask
     * whether the strike met requests in flight. False (the default): a strike after the run's last request
     * concluded tested nothing and fails the run.
     */
    default boolean injectsAllAlong() {
        return false;
    }

    /** The fault, struck once the pair concluded its first requests. */
    void strike(Strike strike) throws Exception;

    /** False when the decode is killed for good: its requests are then judged by the prefill's reports. */
    default boolean decodeSurvives() {
        return true;
    }

    /**
     * False when the prefill is killed for good: it then reports nothing. A prefill the scenario does not
     * kill (or restarts) must report every rank, else its leak check never ran and the run cannot pass.
     */
    default boolean prefillSurvives() {
        return true;
    }

    /** Whether the verdict reports each side's detection time (from the fault to its first Failed). */
    default boolean detectsOnPrefill() {
        return false;
    }

    default boolean detectsOnDecode() {
        return false;
    }

    /** Scenario-specific verdict: recovery, detection within a window, extra detection figures. */
    default void judge(Judgement judgement) {
    }

    /** The registry's request timeout for this scenario; null = the library default (10 s). */
    default Duration registryRequestTimeout() {
        return null;
    }

    /** Whether the prefill's standard error is written to a file the strike and verdict can read (else inherited). */
    default boolean keepsPrefillLog() {
        return false;
    }

    /** What a scenario may prepare before the roles start; per run, so it also carries the run's own state. */
    final class Setup {
        public final BenchConfig config;
        /** Proxies the scenario created; the harness points each at its rank and closes them. */
        public final List<FaultProxy> proxies;
        /** Loopback, or the network namespaces and link of {@code --netns}. */
        final ChaosNetwork network;
        /** corrupt: the rooms the proxies damage (null when none do). */
        WriteCorruption corruption;
        /** hostile-peer: what the strike recorded (the verdict adds the legitimate requests and the bounds). */
        ChaosRunner.Hostile hostile;

        Setup(BenchConfig config, List<FaultProxy> proxies, ChaosNetwork network) {
            this.config = config;
            this.proxies = proxies;
            this.network = network;
        }

        /** A fault proxy on the decode's side of the prefill's link, registered for the harness to point and close. */
        FaultProxy proxy(String name, long bytesPerSecond, WriteCorruption c) throws IOException {
            FaultProxy x = network.proxy(name, bytesPerSecond, c);
            proxies.add(x);
            return x;
        }
    }

    /** What happened around the fault, for the verdict. */
    final class Timeline {
        public long faultAt;
        /** Requests the decode had reported concluded just before the strike (a lower bound: reports lag). */
        public int concludedBeforeFault;
        public long restoreAt;
        public long resetAt;
        public Boolean recovered;
    }

    /** The running pair a scenario strikes at. */
    interface Strike {
        BenchConfig config();

        /** The bootstrap registry, host:port. */
        String registry();

        Process prefill();

        Process decode();

        /** Requests the decode concluded / verified so far (live). */
        AtomicInteger concluded();

        AtomicInteger succeeded();

        List<FaultProxy> proxies();

        Timeline timeline();

        PrintStream log();

        /** Where the roles live (loopback, or network namespaces). */
        ChaosNetwork network();

        /** The run's setup (what the scenario prepared). */
        Setup setup();

        /** The prefill process's standard error, when the scenario asked for it to be kept ({@link #keepsPrefillLog()}); else null. */
        Path prefillLog();

        /** Kills one side and starts a fresh process behind the same registry; the verdict then reads its reports. */
        void restart(boolean prefillSide) throws Exception;
    }

    /** The reports of both sides and what the scenario adds to the verdict. */
    final class Judgement {
        public final List<RoleReport> prefill;
        public final List<RoleReport> decode;
        /** The reports the requests are judged by (the decode's, or the prefill's when the decode was killed). */
        public final List<RoleReport> judged;
        public final Timeline timeline;
        public final Map<String, Long> detectMs;
        /** The run's setup; null in unit tests of a verdict. */
        final Setup setup;
        /** Failures of kind integrity among the judged reports. */
        public final int integrityFailures;
        /** Requests that reported Success with wrong bytes (the judged reports). */
        public final int corrupted;
        public Boolean recovered;
        public Boolean detected;
        /** corrupt: what was damaged and whether the checksum mode's promise held. */
        public ChaosRunner.Corruption corruption;
        /** hostile-peer: the attacks and the prefill's resources. */
        public ChaosRunner.Hostile hostile;

        Judgement(List<RoleReport> prefill, List<RoleReport> decode, List<RoleReport> judged, Timeline timeline,
                  Map<String, Long> detectMs) {
            this(prefill, decode, judged, timeline, detectMs, null);
        }

        Judgement(List<RoleReport> prefill, List<RoleReport> decode, List<RoleReport> judged, Timeline timeline,
                  Map<String, Long> detectMs, Setup setup) {
            this.prefill = prefill;
            this.decode = decode;
            this.judged = judged;
            this.timeline = timeline;
            this.detectMs = detectMs;
            this.setup = setup;
            int integrity = 0, bad = 0;
            for (RoleReport r : judged) {
                integrity += r.failedWith(FailureKind.INTEGRITY.label());
                bad += r.corrupted();
            }
            this.integrityFailures = integrity;
            this.corrupted = bad;
        }
    }
}
