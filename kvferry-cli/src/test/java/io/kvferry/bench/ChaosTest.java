package io.kvferry.bench;

import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.OutputStream;
import java.io.PrintStream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Short forms of the kvferry chaos scenarios, with the pass condition asserted. */
class ChaosTest {
    @ParameterizedTest
    @ValueSource(strings = {"kill-prefill", "kill-decode", "bad-frames", "abort-storm", "slow-decode", "failure-injection",
            "restart-prefill", "restart-decode"})
    @Timeout(240)
    void scenarioPasses(String scenario) throws Exception {
        Workload w = new Workload(16, 512, 16, 128, 4, 0, 3L);
        BenchConfig c = new BenchConfig(ModelShape.preset("llama-3.1-8b"), w, "tcp", 1, "chaos-token")
                .withFaultTimeouts(2000, 90_000);
        ChaosRunner.Result r = new ChaosRunner(c, new PrintStream(OutputStream.nullOutputStream()), 100).run(scenario);
        assertTrue(r.passed(), () -> r.toString());
        assertEquals(0, r.hung());
        assertEquals(0, r.corrupted());
        assertEquals(0, r.leaked());
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
        }
    }
}
