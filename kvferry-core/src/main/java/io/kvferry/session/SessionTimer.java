package io.kvferry.session;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.time.Duration;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

/**
 * The one timer thread of a manager: heartbeat sweeps, handshake deadlines and the write-stall
 * watchdog all run here, so none of them needs a thread of its own. Owned by the manager and shut
 * down by its teardown; tasks must be short (they close connections, they never wait on them).
 */
public final class SessionTimer implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(SessionTimer.class);
    private final ScheduledExecutorService executor;
    private final String name;

    public SessionTimer(String threadName) {
        name = threadName;
        executor = Executors.newSingleThreadScheduledExecutor(r -> Thread.ofPlatform().daemon().name(threadName).unstarted(r));
    }

    /**
     * Runs {@code task} every {@code period}, first after one period. A run that throws is logged and the
     * next one still comes: a scheduled executor silently drops every later run of a task that threw once,
     * and these tasks are a manager's heartbeats, its deadline clock and its watchdogs.
     */
    public void every(Duration period, Runnable task) {
        long nanos = Math.max(1, period.toNanos());
        executor.scheduleWithFixedDelay(() -> {
            try {
                task.run();
            } catch (VirtualMachineError e) {
                throw e; // out of memory, stack overflow: nothing sensible runs after it
            } catch (Throwable e) { // an Error from a task (an assertion, a missing class) too: logged, run again
                log.error("{}: a periodic task failed; it runs again in {} ms", name, nanos / 1_000_000L, e);
            }
        }, nanos, nanos, TimeUnit.NANOSECONDS);
    }

    /** Runs {@code task} once after {@code delay}; cancel the returned future when the deadline no longer matters. */
    public ScheduledFuture<?> after(Duration delay, Runnable task) {
        return executor.schedule(task, delay.toNanos(), TimeUnit.NANOSECONDS);
    }

    @Override
    public void close() {
        executor.shutdownNow();
    }
}
