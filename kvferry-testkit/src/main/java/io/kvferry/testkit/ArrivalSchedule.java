package io.kvferry.testkit;

import java.util.SplittableRandom;

/**
 * Open-loop arrivals: the times at which measured requests arrive at the decode scheduler, a
 * Poisson process of {@code ratePerSecond} (exponential gaps), seeded so every run of the same
 * options offers the same load. A request's latency is counted from its arrival, so time spent
 * waiting for a free slot when the pools are exhausted is part of it (a closed loop would hide it).
 */
public final class ArrivalSchedule {
    private final long[] offsetsNanos;

    /**
     * @param count         arrivals
     * @param ratePerSecond mean arrivals per second (&gt; 0)
     * @param seed          randomness of the gaps
     */
    public ArrivalSchedule(int count, double ratePerSecond, long seed) {
        if (!(ratePerSecond > 0) || Double.isInfinite(ratePerSecond)) {
            throw new IllegalArgumentException("arrival rate must be > 0 requests/s, got " + ratePerSecond);
        }
        if (count < 0) throw new IllegalArgumentException("arrival count must be >= 0, got " + count);
        SplittableRandom rnd = new SplittableRandom(seed ^ 0x5DEECE66DL);
        offsetsNanos = new long[count];
        double t = 0;
        for (int i = 0; i < count; i++) {
            // Inverse transform of U in (0, 1]: never log(0).
            t += -Math.log(1.0 - rnd.nextDouble()) / ratePerSecond;
            offsetsNanos[i] = (long) (t * 1e9);
        }
    }

    /** Nanoseconds after the schedule's origin at which arrival {@code i} happens (non-decreasing). */
    public long offsetNanos(int i) {
        return offsetsNanos[i];
    }

    public int count() {
        return offsetsNanos.length;
    }

    /** When the last request arrives, in nanoseconds after the origin (0 for none). */
    public long spanNanos() {
        return offsetsNanos.length == 0 ? 0 : offsetsNanos[offsetsNanos.length - 1];
    }
}
