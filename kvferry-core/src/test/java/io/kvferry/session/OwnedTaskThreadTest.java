package io.kvferry.session;

import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

class OwnedTaskThreadTest {

    private static boolean threadNamed(String name) {
        return Thread.getAllStackTraces().keySet().stream().anyMatch(t -> t.getName().equals(name) && t.isAlive());
    }

    @Test
    void runsSubmittedTasksAndEndsOnClose() throws Exception {
        OwnedTaskThread tasks = new OwnedTaskThread("test-owned-tasks-1");
        CountDownLatch ran = new CountDownLatch(2);
        assertTrue(tasks.submit(ran::countDown));
        assertTrue(tasks.submit(ran::countDown));
        assertTrue(ran.await(5, TimeUnit.SECONDS));
        assertTrue(tasks.close(Duration.ofSeconds(5)));
        assertFalse(threadNamed("test-owned-tasks-1"), "the owned thread must be dead once close returned true");
    }

    @Test
    void closeInterruptsARunningTaskAndJoinsIt() throws Exception {
        OwnedTaskThread tasks = new OwnedTaskThread("test-owned-tasks-2");
        CountDownLatch started = new CountDownLatch(1);
        AtomicBoolean interrupted = new AtomicBoolean();
        tasks.submit(() -> {
            started.countDown();
            try {
                Thread.sleep(60_000); // stands for a revoke waiting on a dead peer
            } catch (InterruptedException e) {
                interrupted.set(true);
            }
        });
        assertTrue(started.await(5, TimeUnit.SECONDS));
        assertTrue(tasks.close(Duration.ofSeconds(5)));
        assertTrue(interrupted.get());
        assertFalse(threadNamed("test-owned-tasks-2"));
    }

    @Test
    void aTaskSubmittedAfterCloseIsRefusedAndNeverRuns() throws Exception {
        OwnedTaskThread tasks = new OwnedTaskThread("test-owned-tasks-3");
        assertTrue(tasks.close(Duration.ofSeconds(5)));
        AtomicBoolean ran = new AtomicBoolean();
        assertFalse(tasks.submit(() -> ran.set(true)), "the race behind the leaked revoke thread: late events must be refused");
        assertFalse(ran.get());
        assertFalse(threadNamed("test-owned-tasks-3"));
    }
}
