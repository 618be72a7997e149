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
        runsAgainAfter(new IllegalStateException("one bad sweep"));
    }

    /** An Error that is not the VM's (a failed assertion, a class that did not load) too. */
    @Test
    void aPeriodicTaskThatFailsWithAnErrorOnceRunsAgain() throws InterruptedException {
        runsAgainAfter(new AssertionError("one bad sweep"));
    }

    private static void runsAgainAfter(Throwable thrown) throws InterruptedException {
        try (SessionTimer timer = new SessionTimer("test-timer")) {
            AtomicInteger runs = new AtomicInteger();
            CountDownLatch ranAfterTheThrow = new CountDownLatch(1);
            timer.every(Duration.ofMillis(5), () -> {
                if (runs.incrementAndGet() == 1) {
                    if (thrown instanceof Error e) throw e;
                    throw (RuntimeException) thrown;
                }
                ranAfterTheThrow.countDown();
            });
            assertTrue(ranAfterTheThrow.await(30, TimeUnit.SECONDS), "the task ran " + runs.get() + " time(s) and then never again");
        }
    }
}
