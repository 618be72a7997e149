package io.kvferry.testkit;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** A role's report survives its JSON line, failure kinds included (the chaos verdict counts integrity failures from them). */
class RoleReportTest {
    @Test
    void failureKindsRoundTripAndSurviveTheWithCopies() throws Exception {
        RoleReport r = new RoleReport("decode", 0, 3, 2, 0, List.of(4, 5), 100, 1.5, latencies(), List.of("x"))
                .withFailureKinds(Map.of("integrity", 2));
        r = r.withLeaks(LeakCheck.Leaks.NONE).withDataPaths(Map.of("tcp", 3L));
        ObjectMapper json = new ObjectMapper();
        RoleReport back = json.readValue(json.writeValueAsString(r), RoleReport.class);
        assertEquals(r, back);
        assertEquals(2, back.failedWith("integrity"));
        assertEquals(0, back.failedWith("peer_lost"));
        assertEquals(Map.of(), new RoleReport("prefill", 0, 1, 0, 0, List.of(), 0, 0, null, List.of()).failureKinds());
    }

    private static MicrosHistogram latencies() {
        MicrosHistogram h = new MicrosHistogram();
        for (long us = 1; us <= 1000; us++) h.record(us);
        h.record(-5); // a clock step: counted as 0
        return h;
    }

    @Test
    void latenciesTravelAsAHistogramWhoseSizeDoesNotGrowWithTheRequests() throws Exception {
        ObjectMapper json = new ObjectMapper();
        MicrosHistogram many = new MicrosHistogram();
        for (int i = 0; i < 1_000_000; i++) many.record(100 + i % 5000);
        RoleFigures f = new RoleFigures(many, latencies(), null, null, null, null);
        String line = json.writeValueAsString(f);
        assertTrue(line.length() < 64 * 1024, "a million values took " + line.length() + " characters");
        RoleFigures back = json.readValue(line, RoleFigures.class);
        assertEquals(f, back);
        assertEquals(1_000_000, back.requestMicros().count());
        assertEquals(1001, back.prepareMicros().count());
        assertEquals(500, back.prepareMicros().valueAtPercentile(50), 1);
        assertEquals(0, back.postMicros().count());
        IllegalArgumentException bad = assertThrows(IllegalArgumentException.class, () -> MicrosHistogram.decode("bm90IGEgaGlzdG9ncmFt"));
        assertTrue(bad.getMessage().contains("not an encoded latency histogram"), bad.getMessage());
    }
}
