package io.kvferry.testkit;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

class BenchConfigTest {
    @Test
    void aBenchConfigNeverPrintsItsToken() {
        String token = "bench-token-never-shown";
        BenchConfig c = new BenchConfig(ModelShape.preset("llama-3.1-8b"), new Workload(100, 128, 16, 256, 300, 0, 1), "tcp", 1, token);
        String shown = c.toString();
        assertFalse(shown.contains(token), shown);
        assertTrue(shown.contains("authToken=<set>") && shown.contains("transport=tcp"), shown);
    }
}
