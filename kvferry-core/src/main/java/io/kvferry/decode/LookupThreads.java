package io.kvferry.decode;

import java.time.Duration;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The threads a decode manager runs its registry lookups and link set-ups on, off the scheduler
 * thread ({@link RouteResolver}, {@link DpRankResolver}): started one per piece of work, interrupted
 * and joined at teardown. Platform threads, not virtual: a platform thread is created by the caller's
 * OS thread and inherits its network namespace, where a virtual thread's connects run on whichever
 * shared carrier it is mounted on (a carrier created inside another namespace connects from there:
 * every lookup to 127.0.0.1 was refused after a test harness did that).
 */
final class LookupThreads {
    private final String name;
    /** Those still running. */
    private final Set<Thread> running = ConcurrentHashMap.newKeySet();
    private volatile boolean closed;

    /** @param name the threads' name */
    LookupThreads(String name) {
        this.name = name;
    }

    boolean closed() {
        return closed;
    }

    /** Runs {@code work} on a new thread; false, and nothing runs, once {@link #stop} was called. */
    boolean start(Runnable work) {
        Thread t = Thread.ofPlatform().daemon().name(name).unstarted(() -> {
            try {
                work.run();
            } finally {
                running.remove(Thread.currentThread());
            }
        });
        running.add(t);
        if (closed) { // torn down meanwhile: close() may have looked at the threads already
            running.remove(t);
            return false;
        }
        t.start();
        return true;
    }

    /** Starts no more threads and interrupts those running (a connect or a read gives up at once). */
    void stop() {
        closed = true;
        for (Thread t : running) t.interrupt();
    }

    /** Waits for the threads still running until {@code deadlineNanos} ({@link System#nanoTime()}); call {@link #stop} first. */
    void join(long deadlineNanos) {
        for (Thread t : running) {
            try {
                long left = deadlineNanos - System.nanoTime();
                if (left > 0) t.join(Duration.ofNanos(left));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }
}
