package io.kvferry.session;

import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.assertTrue;

/** The manager's one timer thread: its periodic tasks (heartbeats, the deadline clock, watchdogs) never stop for good. */
class SessionTimerTest {
    @Test
    void aPeriodicTaskThatThrowsOnceRunsAgain() throws InterruptedException {
        try (SessionTimer timer = new SessionTimer("test-timer")) {
            AtomicInteger runs = new AtomicInteger();
            CountDownLatch ranAfterTheThrow = new CountDownLatch(1);
            timer.every(Duration.ofMillis(5), () -> {
                if (runs.incrementAndGet() == 1) throw new IllegalStateException("one bad sweep");
                ranAfterTheThrow.countDown();
            });
            assertTrue(ranAfterTheThrow.await(30, TimeUnit.SECONDS), "the task ran " + runs.get() + " time(s) and then never again");
        }
    }
}
