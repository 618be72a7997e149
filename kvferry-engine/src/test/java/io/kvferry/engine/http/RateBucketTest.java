package io.kvferry.engine.http;

import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.constraints.Size;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A tenant's per-minute bucket ({@link RateBucket}) on a clock of the test's own: it starts full, is emptied by takes, says
 * how long until a refused take fits, refills continuously at its limit per minute, takes back a refund (never beyond full),
 * keeps the fraction in use across a new limit, and never lets concurrent takers past its capacity.
 */
class RateBucketTest {
    private static final long SECOND = TimeUnit.SECONDS.toNanos(1);

    @Test
    void aFullBucketIsEmptiedThenSaysWhenTheNextTakeFitsAndRefills() {
        AtomicLong clock = new AtomicLong(123_456_789L);
        RateBucket b = new RateBucket(6, clock::get); // one every 10 s
        assertEquals(6, b.remaining());
        for (int i = 0; i < 6; i++) assertEquals(0, b.take(1), "take " + i);
        assertEquals(0, b.remaining());
        long wait = b.take(1);
        assertEquals(10 * SECOND, wait, "one request refills in 60 s / 6");
        assertEquals(10, RateBucket.retryAfterSeconds(wait));
        clock.addAndGet(4 * SECOND);
        assertEquals(6 * SECOND, b.take(1), "refused takes take nothing: the wait only shrinks with time");
        assertEquals(6, RateBucket.retryAfterSeconds(6 * SECOND - 1), "rounded up");
        assertEquals(1, RateBucket.retryAfterSeconds(1), "at least 1");
        clock.addAndGet(6 * SECOND);
        assertEquals(1, b.remaining());
        assertEquals(0, b.take(1));
        assertTrue(b.take(1) > 0);
        clock.addAndGet(60 * SECOND);
        assertEquals(6, b.remaining(), "full again after a minute");
        clock.addAndGet(600 * SECOND);
        assertEquals(6, b.remaining(), "never more than full");
    }

    @Test
    void untilFullIsTheRefillStillOwedInOpenAisDurationForm() {
        AtomicLong clock = new AtomicLong(5 * SECOND);
        RateBucket b = new RateBucket(2, clock::get); // one every 30 s
        assertEquals(0, b.untilFull());
        assertEquals("0s", RateBucket.resetForm(b.untilFull()), "full: nothing to wait for");
        b.take(1);
        assertEquals("30s", RateBucket.resetForm(b.untilFull()));
        b.take(1);
        assertEquals("1m0s", RateBucket.resetForm(b.untilFull()), "OpenAI's 6m0s form: minutes, then seconds");
        clock.addAndGet(59 * SECOND + 750_000_000L);
        assertEquals("250ms", RateBucket.resetForm(b.untilFull()), "under a second: milliseconds");
        clock.addAndGet(SECOND);
        assertEquals(0, b.untilFull(), "full again, never below 0");
        assertEquals("1ms", RateBucket.resetForm(1), "rounded up to whole milliseconds");
        assertEquals("1.5s", RateBucket.resetForm(1_500_000_000L));
        assertEquals("4m12.172s", RateBucket.resetForm(252_172_000_000L));
        assertEquals("1.001s", RateBucket.resetForm(1_000_000_001L));
        assertEquals("1h0m0s", RateBucket.resetForm(TimeUnit.HOURS.toNanos(1)));
        assertEquals("0s", RateBucket.resetForm(-3));
    }

    /**
     * System.nanoTime's origin is arbitrary (its readings may be negative, or near Long.MAX_VALUE and wrap): the bucket
     * compares readings by their difference, so a bucket whose full time lies past the wrap is as empty as any other.
     */
    @Test
    void aClockThatWrapsAroundLongMaxValue() {
        AtomicLong clock = new AtomicLong(Long.MAX_VALUE - 10 * SECOND);
        RateBucket b = new RateBucket(2, clock::get); // one every 30 s
        assertEquals(0, b.take(1));
        assertEquals(0, b.take(1), "its full time wrapped past Long.MAX_VALUE");
        assertEquals(0, b.remaining());
        assertEquals("1m0s", RateBucket.resetForm(b.untilFull()));
        assertEquals(30 * SECOND, b.take(1), "empty: the next fits in 30 s, as on any clock");
        clock.addAndGet(20 * SECOND); // the clock itself wraps now
        assertEquals(10 * SECOND, b.take(1));
        b.give(1, 2);
        assertEquals(1, b.remaining(), "a refund across the wrap");
        assertEquals("10s", RateBucket.resetForm(b.untilFull()));
        clock.addAndGet(10 * SECOND);
        assertEquals(2, b.remaining(), "full again");
        b.give(1, 2);
        assertEquals(0, b.take(2), "a full bucket stays full: a refund gives nothing beyond it");
        assertTrue(b.take(1) > 0);
    }

    @Test
    void severalUnitsAtOnceAndTheirRefund() {
        AtomicLong clock = new AtomicLong();
        RateBucket b = new RateBucket(1000, clock::get);
        assertEquals(0, b.take(700));
        assertEquals(300, b.remaining());
        long wait = b.take(500);
        assertEquals(12 * SECOND, wait, "200 more tokens at 1000 a minute: 12 s");
        b.give(400); // the unused budget of the first take
        assertEquals(700, b.remaining());
        assertEquals(0, b.take(500));
        assertEquals(200, b.remaining());
        b.give(10_000);
        assertEquals(1000, b.remaining(), "a refund never fills beyond the capacity");
        b.give(5);
        assertEquals(1000, b.remaining());
        assertTrue(b.take(1001) > 0, "more than the capacity never fits");
        assertEquals(1000, b.remaining());
    }

    @Test
    void aNewLimitKeepsTheFractionInUse() {
        AtomicLong clock = new AtomicLong(-5 * SECOND); // nanoTime may be negative
        RateBucket b = new RateBucket(100, clock::get);
        assertEquals(0, b.take(50));
        b.limit(1000);
        assertEquals(500, b.remaining(), "half empty stays half empty");
        b.limit(10);
        assertEquals(5, b.remaining());
        assertEquals(0, b.take(5));
        assertEquals(0, b.remaining());
    }

    /**
     * A limit that does not divide a minute's nanoseconds (7, 9, 7000 a minute): a full bucket still takes its whole capacity
     * one unit at a time (each unit's rounding made the last one over by a few nanoseconds: 6 of 7 requests, then a 429 with
     * Retry-After 1), and a take undone leaves it as full as before.
     */
    @Test
    void aLimitThatDoesNotDivideAMinuteStillHoldsItsWholeCapacity() {
        for (int limit : new int[]{7, 9, 13, 7000, 99_999_989}) {
            AtomicLong clock = new AtomicLong(42);
            RateBucket b = new RateBucket(limit, clock::get);
            assertEquals(0, b.take(1));
            b.give(1); // a request refused for tokens gives its request back
            assertEquals(limit, b.remaining(), limit + ": a take undone takes nothing");
            int burst = Math.min(limit, 10_000);
            for (int i = 0; i < burst; i++) assertEquals(0, b.take(1), limit + ": take " + i + " of a full bucket");
            if (burst == limit) {
                assertEquals(0, b.remaining(), limit + "");
                assertTrue(b.take(1) > 0, limit + ": none beyond the capacity");
            } else {
                assertEquals(0, b.take(limit - burst), limit + ": the rest at once");
                assertTrue(b.take(1) > 0, limit + ": none beyond the capacity");
            }
        }
    }

    /**
     * A refund is priced at the limit its take was ({@code give(units, perMinute)}): after a lower limit it gives back the time
     * the take cost, not more; a refund of more units than a minute's (however many) fills the bucket, never overflows into
     * a debt.
     */
    @Test
    void aRefundIsPricedAtTheLimitItWasTakenAtAndNeverOverflows() {
        AtomicLong clock = new AtomicLong();
        RateBucket b = new RateBucket(1000, clock::get);
        assertEquals(0, b.take(600, 1000));
        b.limit(100);
        assertEquals(40, b.remaining());
        b.give(500, 1000);
        assertEquals(90, b.remaining(), "500 of 1000 a minute back: 100 of the 600 still held, a tenth of the bucket");
        b.give(200_000_000, 1000);
        assertEquals(100, b.remaining());
        assertEquals(0, b.take(100));
        b.give(200_000_000); // units * WINDOW_NANOS would overflow a long
        assertEquals(100, b.remaining(), "a refund fills the bucket, never empties it");
    }

    /** Threads taking at once from a bucket whose clock stands still: exactly its capacity is taken, none beyond. */
    @Test
    @Timeout(60)
    void concurrentTakersNeverExceedTheCapacity() throws Exception {
        for (int round = 0; round < 20; round++) {
            AtomicLong clock = new AtomicLong(round);
            RateBucket b = new RateBucket(1000, clock::get);
            AtomicInteger taken = new AtomicInteger();
            int threads = 8;
            CountDownLatch go = new CountDownLatch(1);
            List<Thread> ts = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                ts.add(Thread.ofPlatform().start(() -> {
                    try {
                        go.await();
                    } catch (InterruptedException e) {
                        return;
                    }
                    for (int i = 0; i < 500; i++) {
                        if (b.take(1) == 0) taken.incrementAndGet();
                        if (i % 7 == 0) b.give(0); // a no-op give interleaved
                    }
                }));
            }
            go.countDown();
            for (Thread t : ts) t.join();
            assertEquals(1000, taken.get(), "8 x 500 takes of a bucket of 1000");
            assertEquals(0, b.remaining());
        }
    }

    /**
     * Over any sequence of takes, refunds of what was taken and clock steps: what is held (taken less given back) never passes
     * the capacity plus the refill since the start.
     */
    @Property(seed = "20261207", tries = 300)
    void whatIsHeldNeverPassesTheCapacityPlusTheRefill(@ForAll @IntRange(min = 1, max = 500) int limit,
                                                       @ForAll @Size(max = 60) List<@IntRange(min = 0, max = 600) Integer> takes,
                                                       @ForAll @Size(max = 60) List<@IntRange(min = 0, max = 20_000) Integer> stepsMillis) {
        AtomicLong clock = new AtomicLong(1_000);
        RateBucket b = new RateBucket(limit, clock::get);
        long held = 0;
        for (int i = 0; i < takes.size(); i++) {
            int units = takes.get(i);
            long wait = b.take(units);
            if (wait == 0) {
                held += units;
                if (i % 3 == 0 && units > 1) {
                    b.give(units / 2);
                    held -= units / 2;
                }
            } else {
                assertTrue(wait > 0);
                assertTrue(units > b.remaining(), "refused only when short: " + units + " > " + b.remaining());
            }
            if (i < stepsMillis.size()) clock.addAndGet(TimeUnit.MILLISECONDS.toNanos(stepsMillis.get(i)));
            long elapsed = clock.get() - 1_000;
            long most = limit + Math.ceilDiv(elapsed * limit, RateBucket.WINDOW_NANOS) + 1; // +1: a refund's rounding
            assertTrue(held <= most, "held " + held + " > " + most);
        }
    }
}
