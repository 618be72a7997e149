package io.kvferry.session;

import io.kvferry.api.KVPoll;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** The JMH benchmark's state is what it claims (nothing is timed here). */
class RoomStatusTableBenchSetupTest {
    @Test
    void theTableHoldsTheInFlightRoomsAndALifecycleLeavesNothingBehind() {
        RoomStatusTableBench b = new RoomStatusTableBench();
        b.inFlight = 100;
        b.setUp();
        assertEquals(KVPoll.Transferring, b.poll());
        assertEquals(KVPoll.Transferring, b.updateUnchanged());
        assertEquals(100, b.roomLifecycle(), "the new room came and went");
        assertEquals(100, b.roomLifecycle());
    }
}
