package io.kvferry.session;

import io.kvferry.api.Ticker;
import org.junit.jupiter.api.Test;

import java.util.concurrent.atomic.AtomicLong;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

class DeadlineClockTest {
    @Test
    void anInjectedTickerIsReadExactlyOnEveryCall() {
        AtomicLong t = new AtomicLong(5);
        try (SessionTimer timer = new SessionTimer("test-timer")) {
            DeadlineClock clock = new DeadlineClock(t::get, timer);
            assertFalse(clock.isCached());
            assertEquals(5, clock.now());
            t.set(300_000_000_000L);
            assertEquals(300_000_000_000L, clock.now(), "a test moving time on sees it at once");
        }
    }

    @Test
    void theSystemTickersCachedReadingFollowsTimeThroughTheTimer() throws InterruptedException {
        try (SessionTimer timer = new SessionTimer("test-timer")) {
            DeadlineClock clock = new DeadlineClock(Ticker.SYSTEM, timer);
            assertTrue(clock.isCached());
            long cachedReading = clock.now();
            long start = System.nanoTime();
            assertTrue(cachedReading - start <= 0, "the cached reading is never ahead of the real clock");
            long target = start + 20_000_000L; // 20 ms on
            long giveUp = start + 10_000_000_000L;
            while (clock.now() - target < 0 && System.nanoTime() - giveUp < 0) Thread.sleep(1);
            assertTrue(clock.now() - target >= 0, "the timer refreshed the cached reading");
            assertTrue(clock.now() - System.nanoTime() <= 0);
        }
    }

    @Test
    void aRefreshMovesTheCachedReadingOnButNeverAheadOfTheTicker() {
        SessionTimer timer = new SessionTimer("test-timer");
        DeadlineClock clock = new DeadlineClock(Ticker.SYSTEM, timer);
        timer.close();
        long first = clock.now();
        clock.refresh();
        assertTrue(clock.now() - first >= 0);
        assertTrue(clock.exactNow() - clock.now() >= 0);
    }
}
