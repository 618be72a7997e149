package io.kvferry.engine.serving;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Aborts that overtook their room's request: remembered once, for a while, within a bound. */
class RecentAbortsTest {
    @Test
    void anAbortIsTakenOnceByItsRoomsRequest() {
        RecentAborts a = new RecentAborts();
        a.remember(7, 0);
        assertFalse(a.take(8, 1), "another room");
        assertTrue(a.take(7, 1));
        assertFalse(a.take(7, 2), "a later request with the same id runs");
    }

    @Test
    void anAbortOlderThanItsLifetimeIsForgotten() {
        RecentAborts a = new RecentAborts();
        a.remember(7, 0);
        assertFalse(a.take(7, RecentAborts.TTL_NANOS + 1));
    }

    @Test
    void theOldestAbortsGoFirstPastTheBound() {
        RecentAborts a = new RecentAborts();
        for (int r = 0; r <= RecentAborts.MAX_ROOMS; r++) a.remember(r, r);
        assertFalse(a.take(0, RecentAborts.MAX_ROOMS), "the oldest was dropped");
        assertTrue(a.take(1, RecentAborts.MAX_ROOMS));
        assertTrue(a.take(RecentAborts.MAX_ROOMS, RecentAborts.MAX_ROOMS));
    }
}
