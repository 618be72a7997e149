package io.kvferry.engine.serving;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** An engine's scheduler thread: an unexpected error stops it visibly, never leaving a live-looking engine that runs nothing. */
@Timeout(30)
class SchedulerThreadTest {
    /** A scheduler whose step throws once told to. */
    private static final class Faulty extends SchedulerThread {
        volatile boolean fail;
        final CountDownLatch shutDown = new CountDownLatch(1);

        Faulty() {
            super("scheduler-test");
            start();
        }

        @Override
        boolean step() {
            if (fail) throw new NegativeArraySizeException("-134217726");
            return false;
        }

        @Override
        void shutdown() {
            shutDown.countDown();
        }
    }

    @Test
    void anErrorInAStepFailsWhatIsInFlightAndRefusesNewWork() throws Exception {
        try (Faulty s = new Faulty()) {
            CountDownLatch ran = new CountDownLatch(1);
            s.execute(ran::countDown);
            assertTrue(ran.await(5, TimeUnit.SECONDS));
            assertNull(s.failure());
            s.fail = true;
            assertTrue(s.shutDown.await(5, TimeUnit.SECONDS), "the requests in flight were not failed");
            assertTrue(s.failure().contains("NegativeArraySizeException"), s.failure());
            IllegalStateException refused = assertThrows(IllegalStateException.class, () -> s.execute(() -> { }));
            assertTrue(refused.getMessage().contains("NegativeArraySizeException"), refused.getMessage());
        }
    }

    /**
     * A command accepted while the failing step ran (a request's submit, queued behind it) still runs, and
     * before shutdown(), which fails what it queued. Before, the loop ended with it still in the queue: the
     * request's HTTP handler waited for an answer forever.
     */
    @Test
    void aCommandQueuedBeforeTheFailureRunsBeforeShutdown() throws Exception {
        CountDownLatch inStep = new CountDownLatch(1), release = new CountDownLatch(1), shutDown = new CountDownLatch(1);
        List<String> order = new CopyOnWriteArrayList<>();
        SchedulerThread s = new SchedulerThread("scheduler-test") {
            @Override
            boolean step() {
                inStep.countDown();
                try {
                    release.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                throw new IllegalStateException("a defect in the step");
            }

            @Override
            void shutdown() {
                order.add("shutdown");
                shutDown.countDown();
            }
        };
        try (s) {
            s.start();
            assertTrue(inStep.await(10, TimeUnit.SECONDS));
            s.execute(() -> order.add("command"));
            release.countDown();
            assertTrue(shutDown.await(10, TimeUnit.SECONDS));
            assertEquals(List.of("command", "shutdown"), order);
        }
    }

    @Test
    void closeIsNotAFailure() throws Exception {
        Faulty s = new Faulty();
        s.close();
        assertTrue(s.shutDown.await(5, TimeUnit.SECONDS));
        assertNull(s.failure());
        assertThrows(IllegalStateException.class, () -> s.execute(() -> { }));
    }
}
