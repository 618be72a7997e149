package io.kvferry.engine.http;

import io.kvferry.engine.model.CompilerSlot;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.ops.Ops;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The compiler's outcomes and compile time on /metrics (the busy refusals were counted but published nowhere): each
 * outcome a series of {@code kvferry_structured_output_compiles_total}, the compilations that ran on
 * {@code kvferry_structured_output_compile_seconds}, the specs waiting on a gauge; each tagged with its server's {@code role}.
 */
class StructuredOutputMetersTest {
    @Test
    @Timeout(60)
    void theCompilersOutcomesAndTimeAreOnMetrics() throws Exception {
        PrometheusMeterRegistry registry = Ops.newRegistry();
        OutputConstraint.Compiler c = new OutputConstraint.Compiler(Tokenizer.synthetic(300));
        StructuredOutputMeters.bind(registry, c, "decode");
        c.regex("a+");
        c.regex("a+");
        c.regex("a+");
        assertThrows(IllegalArgumentException.class, () -> c.regex("(ab")); // how it is written
        assertThrows(IllegalArgumentException.class, () -> c.regex("(((a|b){0,256}){256}){256}")); // a bound: remembered
        assertThrows(IllegalArgumentException.class, () -> c.regex("(((a|b){0,256}){256}){256}")); // refused from memory
        try (CompilerSlot held = CompilerSlot.hold(c, 0)) { // no wait: busy at once
            assertThrows(OutputConstraint.Busy.class, () -> c.regex("b+"));
        }
        String text = registry.scrape();
        assertTrue(text.contains("kvferry_structured_output_compiles_total{outcome=\"compiled\",role=\"decode\"} 1.0"), text);
        assertTrue(text.contains("kvferry_structured_output_compiles_total{outcome=\"cached\",role=\"decode\"} 2.0"), text);
        assertTrue(text.contains("kvferry_structured_output_compiles_total{outcome=\"refused\",role=\"decode\"} 3.0"), text);
        assertTrue(text.contains("kvferry_structured_output_compiles_total{outcome=\"deadline\",role=\"decode\"} 0.0"), text);
        assertTrue(text.contains("kvferry_structured_output_compiles_total{outcome=\"busy\",role=\"decode\"} 1.0"), text);
        assertTrue(text.contains("kvferry_structured_output_compile_seconds_count{role=\"decode\"} 3"), text); // a+, (ab, the bound's: they ran
        assertTrue(text.contains("kvferry_structured_output_compile_seconds_sum{role=\"decode\"} "), text);
        assertTrue(text.contains("kvferry_structured_output_compiles_waiting{role=\"decode\"} 0.0"), text);
        assertEquals(1, c.busyRefusals());
        // A status document reads its own role's compiler from the registry; another role's (none here) is not there.
        assertEquals(2, StructuredOutputMeters.status(registry, "decode").path("outcomes").path("cached").asLong());
        assertEquals(3, StructuredOutputMeters.status(registry, "decode").path("compiles").asLong());
        assertNull(StructuredOutputMeters.status(registry, "prefill"));
    }
}
