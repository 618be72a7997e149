package io.kvferry.testkit;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

class RoleRunnerLeaksTest {
    /** A role whose drivers did not stop left its pools mapped: that must count in the leak total, not only in the details. */
    @Test
    void driverThreadsThatDidNotStopCountAsLeakedThreads() {
        LeakCheck.Leaks leaks = RoleRunner.driversThatDidNotStop(2);
        assertEquals(2, leaks.threads());
        assertEquals(2, leaks.total());
        assertTrue(leaks.details().getFirst().contains("pools not freed"), leaks.details().toString());
        assertSame(LeakCheck.Leaks.NONE, RoleRunner.driversThatDidNotStop(0));
    }
}
