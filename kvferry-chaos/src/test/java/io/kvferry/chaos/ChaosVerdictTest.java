package io.kvferry.chaos;

import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.ModelShape;
import io.kvferry.testkit.RoleReport;
import io.kvferry.testkit.Workload;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The harness's verdict from the role reports: a side that vanished without reporting cannot pass as clean. */
class ChaosVerdictTest {
    private static final int REQUESTS = 16;

    @Test
    void aPrefillThatDiedWithoutItsReportFailsTheRunInsteadOfPassingWithNothingLeaked() {
        BenchConfig config = config();
        // slow-decode kills nobody: the prefill crashed on its own (OOM killer, a bug), the decode failed what was left.
        List<RoleReport> decode = List.of(decode(List.of(12, 13, 14, 15)));
        ChaosRunner.Result r = verdict("slow-decode", config, List.of(), decode);
        assertEquals(0, r.hung(), "the decode concluded every request");
        assertEquals(1, r.leaked(), "the prefill's leak check never ran: " + r.leaks());
        assertEquals(1L, r.leaks().get("unreported_ranks"));
        assertTrue(r.firstFailures().get(0).startsWith("prefill: 0 of 1 rank reports"), r.firstFailures().toString());
        assertFalse(r.passed());
    }

    @Test
    void aDecodeThatDiedWithoutItsReportLeavesItsRequestsUnjudged() {
        ChaosRunner.Result r = verdict("abort-storm", config(), List.of(prefill()), List.of());
        assertEquals(REQUESTS, r.hung());
        assertEquals(0, r.succeeded(), "no report said any request succeeded");
        assertEquals(1L, r.leaks().get("unreported_ranks"));
        assertFalse(r.passed());
    }

    @Test
    void sidesKilledOnPurposeAreNotMissed() {
        BenchConfig config = config();
        ChaosRunner.Result killedPrefill = verdict("kill-prefill", config, List.of(), List.of(decode(List.of(3, 4))));
        assertEquals(0, killedPrefill.leaked(), killedPrefill.leaks().toString());
        assertTrue(killedPrefill.passed());
        ChaosRunner.Result killedDecode = verdict("kill-decode", config, List.of(prefill()), List.of());
        assertEquals(0, killedDecode.leaked(), killedDecode.leaks().toString());
        assertEquals(0, killedDecode.hung());
        assertTrue(killedDecode.passed());
        ChaosRunner.Result both = verdict("slow-decode", config, List.of(prefill()), List.of(decode(List.of())));
        assertEquals(0L, both.leaks().get("unreported_ranks"));
        assertTrue(both.passed());
    }

    private static ChaosRunner.Result verdict(String scenario, BenchConfig config, List<RoleReport> pre, List<RoleReport> dec) {
        ChaosScenario s = ChaosScenarios.byName(scenario);
        ChaosScenario.Setup setup = new ChaosScenario.Setup(config, new ArrayList<>(), ChaosNetwork.loopback());
        return ChaosRunner.verdict(config, s, setup, pre, dec, new ChaosScenario.Timeline());
    }

    private static RoleReport decode(List<Integer> failed) {
        return new RoleReport("decode", 0, REQUESTS - failed.size(), failed.size(), 0, failed, 0, 1, null, List.of());
    }

    private static RoleReport prefill() {
        return new RoleReport("prefill", 0, REQUESTS, 0, 0, List.of(), 0, 1, null, List.of());
    }

    private static BenchConfig config() {
        return new BenchConfig(ModelShape.preset("tiny"), new Workload(REQUESTS, 256, 16, 64, 4, 0, 1L), "tcp", 1, "t");
    }
}
