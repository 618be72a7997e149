package io.kvferry.engine.http;

import org.junit.jupiter.api.Test;

import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** The router status page's recent latencies: nearest-rank p50/p99 of the samples kept, at most the last {@link RecentLatencies#CAPACITY}. */
class RecentLatenciesTest {
    @Test
    void percentilesAreTheNearestRanksOfTheSamplesKept() {
        RecentLatencies r = new RecentLatencies();
        assertEquals(new RecentLatencies.Summary(0, 0, 0, 0), r.summary(60), "none yet");
        for (int ms = 100; ms >= 1; ms--) r.record(TimeUnit.MILLISECONDS.toNanos(ms)); // in any order
        RecentLatencies.Summary s = r.summary(60);
        assertEquals(100, s.count());
        assertEquals(50.0, s.p50Ms());
        assertEquals(99.0, s.p99Ms());
        assertEquals(100.0, s.maxMs());
    }

    @Test
    void onlyTheLastCapacitySamplesAreKept() {
        RecentLatencies r = new RecentLatencies();
        for (int i = 0; i < RecentLatencies.CAPACITY; i++) r.record(TimeUnit.SECONDS.toNanos(10)); // overwritten below
        for (int i = 0; i < RecentLatencies.CAPACITY; i++) r.record(TimeUnit.MICROSECONDS.toNanos(1500));
        RecentLatencies.Summary s = r.summary(60);
        assertEquals(RecentLatencies.CAPACITY, s.count());
        assertEquals(1.5, s.p99Ms());
        assertEquals(1.5, s.maxMs());
    }
}
