package io.kvferry.testkit;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** A role's report survives its JSON line, failure kinds included (the chaos verdict counts integrity failures from them). */
class RoleReportTest {
    @Test
    void failureKindsRoundTripAndSurviveTheWithCopies() throws Exception {
        RoleReport r = new RoleReport("decode", 0, 3, 2, 0, List.of(4, 5), 100, 1.5, List.of(), List.of("x"))
                .withFailureKinds(Map.of("integrity", 2));
        r = r.withLeaks(LeakCheck.Leaks.NONE).withDataPaths(Map.of("tcp", 3L));
        ObjectMapper json = new ObjectMapper();
        RoleReport back = json.readValue(json.writeValueAsString(r), RoleReport.class);
        assertEquals(r, back);
        assertEquals(2, back.failedWith("integrity"));
        assertEquals(0, back.failedWith("peer_lost"));
        assertEquals(Map.of(), new RoleReport("prefill", 0, 1, 0, 0, List.of(), 0, 0, List.of(), List.of()).failureKinds());
    }
}
