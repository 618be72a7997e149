package io.kvferry.session;

import io.kvferry.api.KVPoll;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** The JMH benchmark's state is what it claims (nothing is timed here). */
class RoomFeedBenchSetupTest {
    @Test
    void aSweepReadsEveryRoomAndAFeedStepOnlyTheOnesThatMoved() {
        RoomFeedBench b = new RoomFeedBench();
        b.inFlight = 100;
        b.moved = 16;
        b.setUp();
        int transferring = KVPoll.Transferring.value();
        assertEquals(100 * transferring, b.sweep());
        assertEquals(16 * transferring, b.feed(), "each of the 16 signalled rooms is handed out once and polled");
        assertEquals(16 * transferring, b.feed(), "the next 16, wrapping round the rooms");
        assertEquals(0, b.roomFeed.queued());
    }
}
