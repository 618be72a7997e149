package io.kvferry.testkit;


import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;

class IdleBackoffTest {
    @Test
    void idleSleepsDoubleUpToTheCapAndResetWhenSomethingMoves() {
        IdleBackoff b = new IdleBackoff();
        assertEquals(IdleBackoff.MIN_NANOS, b.nextNanos());
        b.after(false);
        assertEquals(2 * IdleBackoff.MIN_NANOS, b.nextNanos());
        for (int i = 0; i < 10; i++) b.after(false);
        assertEquals(IdleBackoff.MAX_NANOS, b.nextNanos(), "capped: a finished request is noticed within MAX_NANOS");
        b.after(true);
        assertEquals(IdleBackoff.MIN_NANOS, b.nextNanos(), "a busy iteration polls quickly again");
    }

    @Test
    void longBusyIterationsRestAsLongAgainShortOnesDoNot() {
        assertEquals(0, IdleBackoff.restNanos(5_000), "a sweep over tens of requests polls again at once");
        assertEquals(0, IdleBackoff.restNanos(IdleBackoff.PACE_FROM_NANOS - 1));
        assertEquals(IdleBackoff.PACE_FROM_NANOS, IdleBackoff.restNanos(IdleBackoff.PACE_FROM_NANOS));
        assertEquals(700_000, IdleBackoff.restNanos(700_000), "the driver uses at most half its core on sweeps");
        assertEquals(IdleBackoff.MAX_NANOS, IdleBackoff.restNanos(50_000_000), "capped like an idle sleep");
    }

    @Test
    void aSweepsPollingTimeLeavesItsWorkOut() {
        long[] now = {0};
        IdleBackoff b = new IdleBackoff(() -> now[0]);
        b.sweepStarted();
        now[0] = 30_000;                  // polled 30 µs
        long work = b.workStarted();
        now[0] += 5_000_000;              // filled and sent for 5 ms: work, not polling
        b.workDone(work);
        now[0] += 40_000;                 // polled 40 µs more
        b.sweepDone();
        assertEquals(70_000, b.pollingNanos());
        assertEquals(0, IdleBackoff.restNanos(b.pollingNanos()), "a sweep busy with work is not paced");
        b.after(true);
        assertEquals(0, b.pollingNanos(), "consumed by the iteration's end");
    }
}
