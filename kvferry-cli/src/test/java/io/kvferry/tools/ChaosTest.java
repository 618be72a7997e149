package io.kvferry.tools;

import io.kvferry.chaos.ChaosRunner;
import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.ModelShape;
import io.kvferry.testkit.Workload;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.OutputStream;
import java.io.PrintStream;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Short forms of the kvferry chaos scenarios, with the pass condition asserted. */
class ChaosTest {
    @ParameterizedTest
    @ValueSource(strings = {"kill-prefill", "kill-decode", "bad-frames", "abort-storm", "slow-decode", "failure-injection",
            "restart-prefill", "restart-decode", "partition"})
    @Timeout(240)
    void scenarioPasses(String scenario) throws Exception {
        // partition spends ~8 requests on the blackhole and the reset and must still see requests succeed after each.
        Workload w = scenario.equals("partition") ? new Workload(32, 256, 16, 128, 4, 0, 3L) : new Workload(16, 512, 16, 128, 4, 0, 3L);
        BenchConfig c = new BenchConfig(ModelShape.preset("llama-3.1-8b"), w, "tcp", 1, "chaos-token")
                .withFaultTimeouts(2000, 90_000);
        ChaosRunner.Result r = new ChaosRunner(c, new PrintStream(OutputStream.nullOutputStream()), 100).run(scenario);
        assertTrue(r.passed(), () -> r.toString());
        assertEquals(0, r.hung());
        assertEquals(0, r.corrupted());
        assertEquals(0, r.leaked());
        assertEquals(Map.of("rooms", 0L, "pages", 0L, "threads", 0L, "sockets", 0L, "native_bytes", 0L), r.leaks(), r::toString);
        if (scenario.equals("bad-frames") || scenario.equals("slow-decode")) {
            assertEquals(16, r.succeeded(), () -> "these faults must not fail real requests: " + r);
        } else if (scenario.startsWith("restart-")) {
            assertEquals(Boolean.TRUE, r.recovered(), () -> "no request succeeded through the restarted process: " + r);
        } else if (scenario.startsWith("kill-")) {
            String survivor = scenario.equals("kill-prefill") ? "decode" : "prefill";
            Long detect = r.detectMs().get(survivor);
            if (r.failed() > 0) {
                assertTrue(detect != null && detect < 3000, () -> survivor + " detected the death after " + detect + " ms: " + r);
            }
        } else if (scenario.equals("partition")) {
            // Both sides failed the blackholed rooms by heartbeat (1 s here), before the link came back ...
            assertEquals(Boolean.TRUE, r.detected(), () -> "a blackholed link was not detected on both sides: " + r);
            Long p = r.detectMs().get("prefill"), d = r.detectMs().get("decode");
            assertNotNull(p, r::toString);
            assertNotNull(d, r::toString);
            assertTrue(p < ChaosRunner.BLACKHOLE_MS && d < ChaosRunner.BLACKHOLE_MS, r::toString);
            // ... and requests succeeded again through the restored link and after the reset, nothing restarted.
            assertEquals(Boolean.TRUE, r.recovered(), () -> "no request succeeded after the partition healed: " + r);
            assertTrue(r.failed() > 0, () -> "the partition hit no request: " + r);
        }
    }

    /** The verdict must be able to fail: any hung, corrupted or leaked request, or a missing recovery or detection. */
    @Test
    void verdictFailsOnAnyViolation() {
        assertTrue(result(0, 0, 0, null, null).passed());
        assertTrue(result(0, 0, 0, true, true).passed());
        assertFalse(result(1, 0, 0, null, null).passed());
        assertFalse(result(0, 1, 0, null, null).passed());
        assertFalse(result(0, 0, 1, null, null).passed());
        assertFalse(result(0, 0, 0, false, true).passed());
        assertFalse(result(0, 0, 0, true, false).passed());
        ChaosRunner.Result soak = ChaosRunner.aggregate(List.of(result(0, 0, 0, true, true), result(0, 0, 1, false, true)));
        assertEquals(2, soak.cycles());
        assertEquals(1, soak.leaked());
        assertEquals(Boolean.FALSE, soak.recovered());
        assertFalse(soak.passed());
    }

    private static ChaosRunner.Result result(int hung, int corrupted, int leaked, Boolean recovered, Boolean detected) {
        return new ChaosRunner.Result("partition", 10, 10 - hung, hung, hung, corrupted, leaked, Map.of("threads", (long) leaked),
                Map.of(), recovered, detected, 1, List.of());
    }
}
