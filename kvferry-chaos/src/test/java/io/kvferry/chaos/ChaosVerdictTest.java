package io.kvferry.chaos;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.ModelShape;
import io.kvferry.testkit.RoleReport;
import io.kvferry.testkit.Workload;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
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

    /**
     * kill-prefill where every request had concluded before the kill (tiny model, 64-token prompts, 16 requests: the
     * reviewer's run): nothing failed, nothing was detected, and it passed. The fault tested nothing: it must fail, saying why.
     */
    @Test
    void aFaultStruckAfterEveryRequestConcludedTestedNothingAndFailsTheRun() throws Exception {
        BenchConfig config = config();
        for (String scenario : List.of("kill-prefill", "kill-decode", "restart-decode", "bad-frames", "partition")) {
            List<RoleReport> pre = scenario.equals("kill-prefill") ? List.of() : List.of(prefill());
            List<RoleReport> dec = scenario.equals("kill-decode") ? List.of() : List.of(decode(List.of()));
            ChaosRunner.Result r = verdict(scenario, config, pre, dec, timeline(REQUESTS));
            assertEquals(0, r.inFlightAtFault(), scenario);
            assertEquals("the fault struck after all 16 requests had concluded: it tested nothing; give more --requests or a "
                    + "longer prompt (--prompt-tokens), or a shorter --fault-after-ms", r.untested(), scenario);
            assertFalse(r.passed(), scenario + " passed although its fault met no request: " + r);
        }
        ChaosRunner.Result r = verdict("kill-prefill", config, List.of(), List.of(decode(List.of())), timeline(REQUESTS));
        String json = new ObjectMapper().writeValueAsString(r);
        assertTrue(json.contains("\"in_flight_at_fault\":0,\"untested\":\"the fault struck after all 16 requests"), json);
        // a soak fails when any cycle's fault tested nothing
        ChaosRunner.Result ok = verdict("kill-prefill", config, List.of(), List.of(decode(List.of(3, 4))), timeline(2));
        ChaosRunner.Result soak = ChaosRunner.aggregate(List.of(ok, r));
        assertEquals(0, soak.inFlightAtFault());
        assertEquals("cycle 2: " + r.untested(), soak.untested());
        assertFalse(soak.passed());
    }

    /** The same runs with requests still in flight at the strike, and faults injected all along, are judged as before. */
    @Test
    void aFaultThatMetRequestsInFlightOrIsInjectedAllAlongIsUnaffected() {
        BenchConfig config = config();
        ChaosRunner.Result killed = verdict("kill-prefill", config, List.of(), List.of(decode(List.of(3, 4))), timeline(REQUESTS - 1));
        assertEquals(1, killed.inFlightAtFault());
        assertNull(killed.untested());
        assertTrue(killed.passed(), killed.toString());
        for (String scenario : List.of("abort-storm", "slow-decode", "failure-injection")) {
            // injected from the first request on: no moment to strike too late
            ChaosRunner.Result r = verdict(scenario, config, List.of(prefill()), List.of(decode(List.of())), timeline(REQUESTS));
            assertNull(r.inFlightAtFault(), scenario);
            assertNull(r.untested(), scenario);
            assertTrue(r.passed(), r.toString());
        }
    }

    private static ChaosScenario.Timeline timeline(int concludedBeforeFault) {
        ChaosScenario.Timeline t = new ChaosScenario.Timeline();
        t.faultAt = 1;
        t.concludedBeforeFault = concludedBeforeFault;
        t.recovered = true;
        return t;
    }

    private static ChaosRunner.Result verdict(String scenario, BenchConfig config, List<RoleReport> pre, List<RoleReport> dec) {
        return verdict(scenario, config, pre, dec, new ChaosScenario.Timeline());
    }

    private static ChaosRunner.Result verdict(String scenario, BenchConfig config, List<RoleReport> pre, List<RoleReport> dec,
                                              ChaosScenario.Timeline t) {
        ChaosScenario s = ChaosScenarios.byName(scenario);
        ChaosScenario.Setup setup = new ChaosScenario.Setup(config, new ArrayList<>(), ChaosNetwork.loopback());
        return ChaosRunner.verdict(config, s, setup, pre, dec, t);
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
