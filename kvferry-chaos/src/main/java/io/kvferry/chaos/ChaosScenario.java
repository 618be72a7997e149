package io.kvferry.chaos;

import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.RoleOptions;
import io.kvferry.testkit.RoleReport;

import java.io.IOException;
import java.io.PrintStream;
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

    /** The fault, struck once the pair concluded its first requests. */
    void strike(Strike strike) throws Exception;

    /** False when the decode is killed for good: its requests are then judged by the prefill's reports. */
    default boolean decodeSurvives() {
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

    /** What a scenario may prepare before the roles start. */
    final class Setup {
        public final BenchConfig config;
        /** Proxies the scenario created; the harness points each at its rank and closes them. */
        public final List<FaultProxy> proxies;

        Setup(BenchConfig config, List<FaultProxy> proxies) {
            this.config = config;
            this.proxies = proxies;
        }
    }

    /** What happened around the fault, for the verdict. */
    final class Timeline {
        public long faultAt;
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
        public Boolean recovered;
        public Boolean detected;

        Judgement(List<RoleReport> prefill, List<RoleReport> decode, List<RoleReport> judged, Timeline timeline,
                  Map<String, Long> detectMs) {
            this.prefill = prefill;
            this.decode = decode;
            this.judged = judged;
            this.timeline = timeline;
            this.detectMs = detectMs;
        }
    }
}
