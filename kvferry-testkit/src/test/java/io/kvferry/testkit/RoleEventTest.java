package io.kvferry.testkit;

import org.junit.jupiter.api.Test;

import java.io.IOException;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Role processes report typed JSON lines; the parent parses them with Jackson and names a bad one. */
class RoleEventTest {
    @Test
    void eventsRoundTripAsOneTypedJsonLine() throws IOException {
        RoleEvent.Endpoint ep = new RoleEvent.Endpoint(2, "127.0.0.1", 40123);
        String line = RoleEvent.line(ep);
        assertTrue(line.startsWith(RoleEvent.PREFIX + "\"endpoint\""), line);
        assertTrue(!line.contains("\n"), line);
        assertEquals(ep, RoleEvent.parse(line));
        RoleEvent.Progress p = new RoleEvent.Progress(17, 15);
        assertEquals(p, RoleEvent.parse(RoleEvent.line(p)));
        RoleEvent.Status st = new RoleEvent.Status("http://127.0.0.1:4000");
        assertEquals(st, RoleEvent.parse(RoleEvent.line(st)));
        // A whole scrape (many lines) still travels as one line.
        RoleEvent.Metrics m = new RoleEvent.Metrics("# HELP x\n# TYPE x counter\nx_total{role=\"prefill\"} 1.0\n");
        String ml = RoleEvent.line(m);
        assertTrue(!ml.contains("\n"), ml);
        assertEquals(m, RoleEvent.parse(ml));
    }

    @Test
    void malformedLinesAreNamed() {
        for (String bad : new String[]{"{\"type\":\"endpoint\",\"rank\":\"x\"}", "{\"type\":\"teleport\"}", "{\"type\":", "{\"type\":\"progress\",\"concluded\":1}}"}) {
            IOException e = assertThrows(IOException.class, () -> RoleEvent.parse(bad));
            assertTrue(e.getMessage().contains(bad), e.getMessage());
        }
    }
}
