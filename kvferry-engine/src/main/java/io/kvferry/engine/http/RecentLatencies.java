package io.kvferry.engine.http;

import java.util.Arrays;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;

/**
 * The latencies of the last {@link #CAPACITY} requests, for the router's status page ({@link RouterStatus}): its p50 and p99
 * over a recent window. The router's Micrometer timers keep only their buckets since start (the /metrics histograms, whose
 * quantiles Prometheus computes over a range it chooses), so they cannot say "the last minute" by themselves.
 *
 * <p>Lock-free: a request's record is one {@code getAndIncrement} and one atomic write of a packed long (the second it was
 * recorded in, since this was made, and its microseconds); a reader copies the ring and sorts its copy, never blocking a
 * request. A reader racing writers may see a slot's old or new sample, each a whole one.
 */
final class RecentLatencies {
    /** The most samples kept: past this many requests in the window, the window is the last {@code CAPACITY} requests. */
    static final int CAPACITY = 2048;
    private static final long MICROS_MAX = 0xFFFF_FFFFL; // ~71 minutes: longer latencies are counted as that

    private final long startNanos = System.nanoTime();
    private final AtomicLongArray ring = new AtomicLongArray(CAPACITY);
    private final AtomicLong next = new AtomicLong();

    /** The percentiles of the samples within a window: {@code count} samples (0: none, then the figures are 0). */
    record Summary(int count, double p50Ms, double p99Ms, double maxMs) {
    }

    void record(long nanos) {
        long second = TimeUnit.NANOSECONDS.toSeconds(System.nanoTime() - startNanos) + 1; // 0: an empty slot
        long micros = Math.min(Math.max(TimeUnit.NANOSECONDS.toMicros(nanos), 0), MICROS_MAX);
        ring.set((int) (next.getAndIncrement() % CAPACITY), second << 32 | micros);
    }

    /** The samples recorded in the last {@code windowSeconds} seconds (and at most the last {@link #CAPACITY}). */
    Summary summary(int windowSeconds) {
        long now = TimeUnit.NANOSECONDS.toSeconds(System.nanoTime() - startNanos) + 1;
        long[] micros = new long[CAPACITY];
        int n = 0;
        for (int i = 0; i < CAPACITY; i++) {
            long v = ring.get(i);
            long second = v >>> 32;
            if (second == 0 || now - second >= windowSeconds) continue;
            micros[n++] = v & MICROS_MAX;
        }
        if (n == 0) return new Summary(0, 0, 0, 0);
        Arrays.sort(micros, 0, n);
        return new Summary(n, at(micros, n, 0.50), at(micros, n, 0.99), micros[n - 1] / 1e3);
    }

    /** The nearest-rank percentile {@code q} of the first {@code n} sorted samples, in milliseconds. */
    private static double at(long[] sorted, int n, double q) {
        int rank = (int) Math.ceil(q * n);
        return sorted[Math.max(rank, 1) - 1] / 1e3;
    }
}
