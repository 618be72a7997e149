package io.kvferry.session;

import io.kvferry.api.Ticker;

import java.time.Duration;

/**
 * The clock a room's poll checks its deadline against. A scheduler polls every room it holds on
 * every step; with ten thousand rooms in flight, one {@code System.nanoTime()} per poll (~28 ns on
 * a kvm-clock VM) took a third of the bench's prefill scheduler samples in a profile (PERFORMANCE.md,
 * "Warm-up, sweeps and the clock"). So for the system ticker the
 * clock is a cached reading, refreshed every {@link #REFRESH} by the manager's timer thread
 * (Aeron's cached nano clock): a deadline fires at most that much late — nothing next to timeouts
 * of seconds. An injected ticker (tests moving time on) is read exactly on every call.
 *
 * <p>Ownership: the timer thread writes the cached reading; any thread reads it.
 */
public final class DeadlineClock {
    /** How stale the cached reading may get (plus the timer's own lateness). */
    public static final Duration REFRESH = Duration.ofMillis(10);

    private final Ticker ticker;
    private final boolean cached;
    private volatile long cachedNanos;

    /** A clock over {@code ticker}; with the system ticker, {@code timer} refreshes its cached reading. */
    public DeadlineClock(Ticker ticker, SessionTimer timer) {
        this.ticker = ticker;
        this.cached = ticker == Ticker.SYSTEM;
        this.cachedNanos = ticker.nanoTime();
        if (cached) timer.every(REFRESH, this::refresh);
    }

    /** Now, for deadline checks: the ticker's reading, at most {@link #REFRESH} (plus timer lateness) old for the system ticker. */
    public long now() {
        return cached ? cachedNanos : ticker.nanoTime();
    }

    /** The ticker read exactly (for what a deadline message reports). */
    public long exactNow() {
        return ticker.nanoTime();
    }

    /** Whether the cached reading is used (the system ticker). */
    public boolean isCached() {
        return cached;
    }

    void refresh() {
        cachedNanos = ticker.nanoTime();
    }
}
