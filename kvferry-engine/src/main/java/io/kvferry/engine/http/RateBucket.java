package io.kvferry.engine.http;

import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongSupplier;

/**
 * One tenant's per-minute limit ({@code requests_per_minute} or {@code tokens_per_minute}, {@link Tenants}): a token bucket of
 * capacity {@link #limit} units refilling continuously at {@code limit} per minute. It starts full.
 *
 * <p>State: one {@link AtomicLong}, the bucket's "theoretical arrival time" (GCRA): the clock reading at which it will be full
 * again (readings compared by their difference, as {@link System#nanoTime}'s must be). Its debt is {@code max(tat - now, 0)} nanoseconds of refill, at most {@link #window} (empty: a minute, less the
 * rounding of {@link #unitNanos}, the whole nanoseconds every unit is priced at, taken or given back). A take or a
 * give is one compare-and-set of that one long, retried on a race: no lock, no lost update, no allocation, and no take is
 * admitted beyond the capacity however many threads take at once (each CAS re-checks the debt it commits to).
 *
 * <p>The debt is measured in time, not in units: a new limit (a reload) keeps {@code tat} as it is, so the fraction of the
 * bucket in use carries over (half empty at 100 a minute is half empty at 1000), and a reload never refills it.
 */
final class RateBucket {
    /** The refill window: a full bucket refills in one minute. */
    static final long WINDOW_NANOS = TimeUnit.MINUTES.toNanos(1);
    /**
     * The largest per-minute limit: a unit is then still 600 whole nanoseconds ({@link #unitNanos}), so the rounding of a
     * unit's price is a small part of it, and a take of at most the limit costs at most a minute.
     */
    static final int MAX_PER_MINUTE = 100_000_000;

    private final LongSupplier nanos;
    private final AtomicLong tat;
    /** The capacity and refill per minute; a reload may change it (read once per take). */
    private volatile int limit;

    RateBucket(int limit, LongSupplier nanos) {
        this.nanos = nanos;
        this.tat = new AtomicLong(nanos.getAsLong()); // full
        limit(limit);
    }

    void limit(int perMinute) {
        if (perMinute < 1 || perMinute > MAX_PER_MINUTE) throw new IllegalArgumentException("a per-minute limit in [1, " + MAX_PER_MINUTE + "], got " + perMinute);
        this.limit = perMinute;
    }

    int limit() {
        return limit;
    }

    /**
     * Takes {@code units} if the bucket holds them now: 0 when taken, else the nanoseconds until it will (more than 0;
     * nothing taken). More than {@link #limit} (a reload lowered it since the caller looked) is never taken.
     */
    long take(long units) {
        return take(units, limit);
    }

    /**
     * As {@link #take(long)}, priced at {@code l} per minute: the limit the caller read ({@link #limit()}) and will give back
     * at ({@link #give(long, int)}), so a reload between the two neither shrinks nor inflates what comes back.
     */
    long take(long units, int l) {
        if (units < 0) throw new IllegalArgumentException("take " + units);
        if (units > l) return WINDOW_NANOS * 2; // never fits; refused as over, until the caller sees the new limit
        long cost = units * unitNanos(l), window = window(l);
        long now = nanos.getAsLong();
        for (;;) {
            long t = tat.get();
            long next = later(t, now) + cost;
            long over = next - now - window;
            if (over > 0) return over;
            if (tat.compareAndSet(t, next)) return 0;
        }
    }

    /** Gives back {@code units} taken before at the limit this bucket has now; a full bucket stays full. */
    void give(long units) {
        give(units, limit);
    }

    /**
     * Gives back {@code units} taken before at {@code perMinute} (a request's unused budget, or a take undone: the limit its
     * take was priced at): the time they took, whatever limit a reload has set since (at a lowered one, a refund in units
     * of the new limit was worth more than its charge, and refilled the bucket). A full bucket stays full.
     */
    void give(long units, int perMinute) {
        if (units <= 0) return;
        long back = Math.min(units, perMinute) * unitNanos(perMinute); // exactly what the take cost
        long now = nanos.getAsLong();
        for (;;) {
            long t = tat.get();
            if (t - now <= 0) return; // full already
            if (tat.compareAndSet(t, later(t - back, now))) return;
        }
    }

    /**
     * The later of two clock readings: by their difference, as {@link System#nanoTime}'s must be compared (its origin is
     * arbitrary; a reading near {@link Long#MAX_VALUE} plus a minute wraps, and {@link Math#max} would take the wrapped
     * one for the earlier, forgetting the bucket's debt).
     */
    private static long later(long a, long b) {
        return a - b > 0 ? a : b;
    }

    /** The units the bucket holds now (rounded down). */
    long remaining() {
        int l = limit;
        long debt = Math.max(tat.get() - nanos.getAsLong(), 0);
        return Math.max(window(l) - debt, 0) / unitNanos(l);
    }

    /**
     * The nanoseconds until the bucket is full again if nothing more is taken (0 when full): OpenAI's {@code
     * x-ratelimit-reset-*} ({@link #resetForm}).
     */
    long untilFull() {
        return Math.max(tat.get() - nanos.getAsLong(), 0);
    }

    /**
     * A duration in OpenAI's {@code x-ratelimit-reset-*} form, Go's {@code time.Duration} text as its API sends it
     * ({@code 1s}, {@code 6m0s}, {@code 120ms}, {@code 4m12.172s}), rounded up to whole milliseconds (a client waiting that
     * long finds the bucket full): {@code 0s} for nothing; under a second, whole milliseconds ({@code 250ms}); from a second
     * on, hours and minutes where there are any, then the seconds with up to three decimals, trailing zeros dropped.
     */
    static String resetForm(long nanos) {
        long ms = Math.ceilDiv(Math.max(nanos, 0), TimeUnit.MILLISECONDS.toNanos(1));
        if (ms == 0) return "0s";
        if (ms < 1000) return ms + "ms";
        StringBuilder b = new StringBuilder();
        long h = ms / 3_600_000, m = ms / 60_000 % 60, s = ms / 1000 % 60, frac = ms % 1000;
        if (h > 0) b.append(h).append('h');
        if (h > 0 || m > 0) b.append(m).append('m');
        b.append(s);
        if (frac > 0) b.append('.').append(Long.toString(1000 + frac).substring(1).replaceFirst("0+$", ""));
        return b.append('s').toString();
    }

    /**
     * The refill time of one unit at {@code perMinute}: a minute's nanoseconds divided by it, rounded down (at least 600), so
     * that every take and refund of a unit is the same whole number of nanoseconds: rounded up per take, a limit that does not
     * divide a minute (7, 9, 7000) lost its last unit of a full bucket, and a take undone left one missing.
     */
    static long unitNanos(int perMinute) {
        return WINDOW_NANOS / perMinute;
    }

    /**
     * The bucket's capacity in time at {@code perMinute}: {@code perMinute} units' refill, a minute less the rounding of
     * {@link #unitNanos} (under {@code perMinute} nanoseconds: at most 0.1 s of a minute, at the largest limits).
     */
    static long window(int perMinute) {
        return unitNanos(perMinute) * perMinute;
    }

    /** A wait in nanoseconds ({@link #take}'s) as a {@code Retry-After}: whole seconds, rounded up, at least 1. */
    static long retryAfterSeconds(long waitNanos) {
        return Math.max(1, Math.ceilDiv(waitNanos, TimeUnit.SECONDS.toNanos(1)));
    }
}
