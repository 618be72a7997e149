package io.kvferry.testkit;


import java.util.concurrent.locks.LockSupport;

/**
 * How long a bench driver's scheduler loop sleeps when an iteration found nothing to do: from
 * {@link #MIN_NANOS}, doubling on each further idle iteration up to {@link #MAX_NANOS}, back to the
 * minimum as soon as something moves. Why: on a 2-core host a fixed 200 µs poll cost each driver
 * 10–16 % of a core during long transfers (measured per thread from /proc during
 * {@code bench --transport ucx --concurrency 1}), taken from the progress threads the transport
 * needs; an engine's scheduler polls its senders once per iteration, milliseconds apart. The cap
 * bounds how late a finished request is noticed. One per driver thread (not thread-safe).
 */
public final class IdleBackoff {
    static final long MIN_NANOS = 200_000;
    static final long MAX_NANOS = 2_000_000;

    private long next = MIN_NANOS;

    /** After an iteration: resets when it moved something, else sleeps and lengthens the next sleep. */
    public void after(boolean moved) {
        if (moved) {
            next = MIN_NANOS;
            return;
        }
        LockSupport.parkNanos(next);
        next = Math.min(MAX_NANOS, next * 2);
    }

    /**
     * As {@link #after(boolean)}, but an idle sleep lasts at most {@code maxSleepNanos} (an open-loop
     * driver wakes for its next arrival); the backoff still lengthens as usual.
     */
    public void after(boolean moved, long maxSleepNanos) {
        if (moved) {
            next = MIN_NANOS;
            return;
        }
        if (maxSleepNanos > 0) LockSupport.parkNanos(Math.min(next, maxSleepNanos));
        next = Math.min(MAX_NANOS, next * 2);
    }

    /**
     * After an iteration that moved something, whose sweep spent {@code pollingNanos} polling (its
     * work on requests left out): rests as long again when that was at least {@link #PACE_FROM_NANOS}
     * (at most {@link #MAX_NANOS}, and at most {@code maxSleepNanos}). Why: an engine's scheduler runs
     * a forward pass between two polls of its queues; a driver sweeping 10,000 in-flight requests back
     * to back re-polled mostly unchanged ones and, on a 2-core host, took that CPU from the transfer
     * threads. Sweeps over tens of requests are never paced (a park is never shorter than the kernel's
     * timer slack, ~50 µs), and neither is the work itself (filling, sending, verifying).
     */
    public void pace(long pollingNanos, long maxSleepNanos) {
        long rest = Math.min(restNanos(pollingNanos), maxSleepNanos);
        if (rest > 0) LockSupport.parkNanos(rest);
    }

    /** How long {@link #pace} rests after a busy sweep that polled for {@code pollingNanos}. */
    static long restNanos(long pollingNanos) {
        return pollingNanos < PACE_FROM_NANOS ? 0 : Math.min(MAX_NANOS, pollingNanos);
    }

    /** Sweeps that polled for less than this are not paced. */
    static final long PACE_FROM_NANOS = 100_000;

    /** The sleep the next idle iteration takes (tests). */
    public long nextNanos() {
        return next;
    }
}
