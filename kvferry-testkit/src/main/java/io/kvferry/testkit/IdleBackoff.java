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

    /** The sleep the next idle iteration takes (tests). */
    public long nextNanos() {
        return next;
    }
}
