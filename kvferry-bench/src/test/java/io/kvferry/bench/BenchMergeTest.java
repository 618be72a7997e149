package io.kvferry.bench;

import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.ModelShape;
import io.kvferry.testkit.RoleReport;
import io.kvferry.testkit.Workload;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The run's figures from the ranks' reports: which requests each count covers. */
class BenchMergeTest {
    private static final int WARMUP = 8, MEASURED = 8;

    @Test
    void aFailedWarmUpRequestIsNotTakenOffTheMeasuredSuccesses() {
        BenchConfig config = new BenchConfig(ModelShape.preset("tiny"), new Workload(MEASURED, 64, 16, 64, 4, 0, 1L, WARMUP),
                "tcp", 1, "t");
        // Warm-up request 0 and measured request 9 failed: 7 of the 8 measured requests succeeded, in 2 s.
        RoleReport decode = new RoleReport("decode", 0, WARMUP + MEASURED - 2, 2, 0, List.of(0, 9), 0, 2.0, null, List.of());
        BenchResult r = new BenchRunner(config, null).merge(List.of(decode), false, 0, -1, null);
        assertEquals(2, r.failed());
        assertEquals(WARMUP + MEASURED - 2, r.succeeded());
        assertEquals(3.5, r.suite().achievedRate(), 1e-9, "7 measured successes / 2 s");
        assertEquals(3.5, r.suite().roomsPerSecond(), 1e-9);
    }

    @Test
    void aCorruptedRequestIsOneOfTheFailedOnes() {
        BenchConfig config = new BenchConfig(ModelShape.preset("tiny"), new Workload(MEASURED, 64, 16, 64, 4, 0, 1L, WARMUP),
                "tcp", 1, "t");
        RoleReport decode = new RoleReport("decode", 0, WARMUP + MEASURED - 1, 0, 1, List.of(10), 0, 2.0, null, List.of());
        BenchResult r = new BenchRunner(config, null).merge(List.of(decode), false, 0, -1, null);
        assertEquals(1, r.corrupted());
        assertEquals(r.requests(), r.succeeded() + r.failed(), "requests = succeeded + failed; corrupted are among the failed");
    }

    /** A prefill process stopped before it reported leaves its figures at 0: the result says so first. */
    @Test
    void missingPrefillReportsAreNamedFirstAmongTheFailures() {
        BenchConfig config = new BenchConfig(ModelShape.preset("tiny"), new Workload(MEASURED, 64, 16, 64, 4, 0, 1L, WARMUP),
                "tcp", 1, "t");
        RoleReport decode = new RoleReport("decode", 0, WARMUP + MEASURED - 1, 1, 0, List.of(10), 0, 2.0, null, List.of("room 10 failed"));
        BenchResult r = new BenchRunner(config, null).merge(List.of(decode), true, 0, -1, null);
        assertTrue(r.firstFailures().getFirst().startsWith("prefill: 1 of 1 rank reports missing"), r.firstFailures().toString());
        assertEquals(2, r.firstFailures().size(), r.firstFailures().toString());
        BenchResult embedded = new BenchRunner(config, null).merge(List.of(decode), false, 0, -1, null);
        assertEquals(List.of("decode[0]: room 10 failed"), embedded.firstFailures());
    }
}
