package io.kvferry.decode;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The JMH benchmark admits real owned pages, in turn (nothing is timed here). */
class WriteGateBenchSetupTest {
    @Test
    void everyVisitedPageIsAdmittedAndEnded() throws Exception {
        WriteGateBench b = new WriteGateBench();
        b.roomPages = 16;
        b.setUp();
        try {
            for (int i = 0; i < 32; i++) assertEquals(b.offsets[i % 16], b.admitAndEndOnePage());
            DecodeRoom r = b.rooms.get(WriteGateBench.ROOM);
            assertEquals(32 * WriteGateBench.PAGE, r.bytesLanded.get());
            assertTrue(r.closeAndDrain(0), "every landing ended");
        } finally {
            b.tearDown();
        }
    }
}
