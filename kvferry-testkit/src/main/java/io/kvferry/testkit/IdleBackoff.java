package io.kvferry.testkit;


import java.util.concurrent.locks.LockSupport;
import java.util.function.LongSupplier;

/**
 * When a bench driver's scheduler loop sleeps between iterations. One per driver thread (not thread-safe).
 *
 * <p><b>Idle.</b> An iteration that found nothing to do sleeps from {@link #MIN_NANOS}, doubling on
 * each further idle iteration up to {@link #MAX_NANOS}, back to the minimum as soon as something
 * moves. Why: on a 2-core host a fixed 200 µs poll cost each driver 10–16 % of a core during long
 * transfers (measured per thread from /proc during {@code bench --transport ucx --concurrency 1}),
 * taken from the progress threads the transport needs; an engine's scheduler polls its senders once
 * per iteration, milliseconds apart. The cap bounds how late a finished request is noticed.
 *
 * <p><b>Busy.</b> An iteration that moved something rests as long as its sweep spent polling (the
 * driver's work on requests — fills, sends, verification — left out, see {@link #workDone}) when
 * that was at least {@link #PACE_FROM_NANOS}, at most {@link #MAX_NANOS}. Why: an engine's scheduler
 * runs a forward pass between two polls of its queues; a driver sweeping 10,000 in-flight requests
 * back to back re-polled mostly unchanged ones and, on a 2-core host, took that CPU from the
 * transfer threads. Sweeps over tens of requests are never paced (a park is never shorter than the
 * kernel's timer slack, ~50 µs), and neither is the work itself.
 */
public final class IdleBackoff {
    static final long MIN_NANOS = 200_000;
    static final long MAX_NANOS = 2_000_000;
    /** Sweeps that polled for less than this are not paced. */
    static final long PACE_FROM_NANOS = 100_000;

    private final LongSupplier clock;
    private long next = MIN_NANOS;
    private long sweepStart;
    private long workNanos;
    /** Polling time of the last sweep, consumed by the next {@link #after}. */
    private long pollingNanos;

    public IdleBackoff() {
        this(System::nanoTime);
    }

    /** @param clock nanoseconds, as {@link System#nanoTime()} (tests inject one) */
    IdleBackoff(LongSupplier clock) {
        this.clock = clock;
    }

    /** A sweep over the requests in flight begins. */
    public void sweepStarted() {
        sweepStart = clock.getAsLong();
        workNanos = 0;
    }

    /** The start of some work on a request inside the sweep: pass it to {@link #workDone}. */
    public long workStarted() {
        return clock.getAsLong();
    }

    /** That work ended: its time is not polling. */
    public void workDone(long workStartedAt) {
        workNanos += clock.getAsLong() - workStartedAt;
    }

    /** The sweep ended. */
    public void sweepDone() {
        pollingNanos = Math.max(0, clock.getAsLong() - sweepStart - workNanos);
    }

    /** After an iteration: see the class comment (idle: sleeps and lengthens the next sleep; busy: paces). */
    public void after(boolean moved) {
        after(moved, Long.MAX_VALUE);
    }

    /**
     * As {@link #after(boolean)}, but a sleep lasts at most {@code maxSleepNanos} (an open-loop
     * driver wakes for its next arrival); the idle backoff still lengthens as usual.
     */
    public void after(boolean moved, long maxSleepNanos) {
        long polled = pollingNanos;
        pollingNanos = 0;
        if (moved) {
            next = MIN_NANOS;
            long rest = Math.min(restNanos(polled), maxSleepNanos);
            if (rest > 0) LockSupport.parkNanos(rest);
            return;
        }
        if (maxSleepNanos > 0) LockSupport.parkNanos(Math.min(next, maxSleepNanos));
        next = Math.min(MAX_NANOS, next * 2);
    }

    /** How long a busy iteration rests after a sweep that polled for {@code pollingNanos}. */
    static long restNanos(long pollingNanos) {
        return pollingNanos < PACE_FROM_NANOS ? 0 : Math.min(MAX_NANOS, pollingNanos);
    }

    /** Polling time of the last sweep, until the next {@link #after} (tests). */
    long pollingNanos() {
        return pollingNanos;
    }

    /** The sleep the next idle iteration takes (tests). */
    public long nextNanos() {
        return next;
    }
}
