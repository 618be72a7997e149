package io.kvferry.testkit;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The benchmark suite's settings: page layouts, Poisson arrivals, the probe's bounds, the sweep's memory check. */
class SuiteSettingsTest {
    static final ModelShape TINY = ModelShape.preset("tiny");

    @Test
    void contiguousPoolsHandOutConsecutivePagesAndTakeThemBack() {
        try (RankPool pool = new RankPool(TINY, 16, 1, 0, 1, 0, 40, 6, 1, false, PageLayout.CONTIGUOUS, 8)) {
            List<int[]> held = new ArrayList<>();
            Set<Integer> seen = new HashSet<>();
            for (int n : new int[]{8, 3, 1, 8, 5}) {
                assertTrue(pool.canAllocate(n));
                int[] p = pool.allocatePages(n);
                assertEquals(n, p.length);
                for (int i = 1; i < n; i++) assertEquals(p[0] + i, p[i], "consecutive: " + Arrays.toString(p));
                for (int x : p) assertTrue(seen.add(x), "page " + x + " handed out twice");
                held.add(p);
                pool.allocateRow();
            }
            // 40 pages / 8 per slot = 5 slots, all taken: a sixth request waits even for one page.
            assertFalse(pool.canAllocate(1));
            assertTrue(pool.canAllocate(0) || pool.outstanding() > 0);
            assertThrows(IllegalStateException.class, () -> pool.allocatePages(9), "more than a slot");
            pool.freePages(held.get(1));
            pool.freeRow(1);
            assertTrue(pool.canAllocate(8));
            assertArrayEquals(new int[]{8, 9}, pool.allocatePages(2), "the freed slot comes back whole");
        }
    }

    @Test
    void fragmentedPoolsScatterARequestsPages() {
        try (RankPool pool = new RankPool(TINY, 16, 1, 0, 1, 0, 256, 4, 3, false, PageLayout.FRAGMENTED, 1)) {
            int[] p = pool.allocatePages(64);
            int breaks = 0;
            for (int i = 1; i < p.length; i++) if (p[i] != p[i - 1] + 1) breaks++;
            assertTrue(breaks > 10, "shuffled blocks of 1..4 pages: " + Arrays.toString(p));
        }
    }

    @Test
    void pageLayoutParsesItsNamesAndRefusesOthers() {
        assertEquals(PageLayout.CONTIGUOUS, PageLayout.parse("contiguous"));
        assertEquals(PageLayout.FRAGMENTED, PageLayout.parse("fragmented"));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> PageLayout.parse("sparse"));
        assertTrue(e.getMessage().contains("--pages") && e.getMessage().contains("sparse") && e.getMessage().contains("contiguous"),
                e.getMessage());
    }

    @Test
    void poissonArrivalsHaveTheOfferedRateAndRepeatWithTheSeed() {
        ArrivalSchedule a = new ArrivalSchedule(20_000, 5_000, 42);
        double seconds = a.spanNanos() / 1e9;
        assertEquals(4.0, seconds, 0.2, "20,000 arrivals at 5,000/s span about 4 s");
        long[] gaps = new long[a.count()];
        for (int i = 1; i < a.count(); i++) {
            assertTrue(a.offsetNanos(i) >= a.offsetNanos(i - 1), "non-decreasing");
            gaps[i] = a.offsetNanos(i) - a.offsetNanos(i - 1);
        }
        // Exponential gaps: the coefficient of variation is 1 (a fixed-interval schedule would give 0).
        double mean = Arrays.stream(gaps).skip(1).average().orElseThrow();
        double var = Arrays.stream(gaps).skip(1).mapToDouble(g -> (g - mean) * (g - mean)).average().orElseThrow();
        assertEquals(1.0, Math.sqrt(var) / mean, 0.05);
        ArrivalSchedule same = new ArrivalSchedule(20_000, 5_000, 42), other = new ArrivalSchedule(20_000, 5_000, 43);
        assertEquals(a.offsetNanos(777), same.offsetNanos(777));
        assertTrue(a.offsetNanos(777) != other.offsetNanos(777));
        assertThrows(IllegalArgumentException.class, () -> new ArrivalSchedule(10, 0, 1));
        assertThrows(IllegalArgumentException.class, () -> new ArrivalSchedule(10, Double.NaN, 1));
    }

    @Test
    void suiteSettingsAreCheckedWhereTheyAreMade() {
        assertThrows(IllegalArgumentException.class, () -> new BenchConfig.Suite(PageLayout.FRAGMENTED, -1, 0));
        assertThrows(IllegalArgumentException.class, () -> new BenchConfig.Suite(PageLayout.FRAGMENTED, Double.POSITIVE_INFINITY, 0));
        BenchConfig c = new BenchConfig(TINY, new Workload(10, 16, 16, 16, 8, 0, 1, 9), "tcp", 1, "t");
        // The probe's rooms are the last warm-up requests, after at least one other, and no more than may be in flight.
        IllegalArgumentException noOther = assertThrows(IllegalArgumentException.class,
                () -> c.withSuite(new BenchConfig.Suite(PageLayout.FRAGMENTED, 0, 9)));
        assertTrue(noOther.getMessage().contains("--warmup"), noOther.getMessage());
        assertThrows(IllegalArgumentException.class, () -> new BenchConfig(TINY, new Workload(10, 16, 16, 16, 4, 0, 1, 9), "tcp", 1, "t")
                .withSuite(new BenchConfig.Suite(PageLayout.FRAGMENTED, 0, 8)));
        BenchConfig ok = c.withSuite(new BenchConfig.Suite(PageLayout.CONTIGUOUS, 100, 8));
        // Every other wither keeps the suite.
        assertEquals(ok.suite(), ok.withTcpStripes(2).withPairedMemcpy(true).withFaults(BenchConfig.Faults.NONE)
                .withFaultTimeouts(1, 2).withTransport("shm").suite());
        assertTrue(RoleRunner.roleArgs(ok, "h:1").containsAll(List.of("--pages", "contiguous", "--rate", "100.0", "--probe-rooms", "8")));
        assertFalse(RoleRunner.roleArgs(c, "h:1").contains("--pages"), "defaults add nothing to a role's command line");
        assertTrue(c.suite().hugePages(), "pools sit on huge pages unless --huge-pages off");
        assertFalse(RoleRunner.roleArgs(c, "h:1").contains("--huge-pages"));
        assertTrue(RoleRunner.roleArgs(ok.withSuite(ok.suite().withHugePages(false)), "h:1").containsAll(List.of("--huge-pages", "off")),
                "role processes get the bench's choice");
    }

    @Test
    void aSweepPointThatDoesNotFitIsRefusedByName() {
        BenchConfig big = new BenchConfig(ModelShape.preset("llama-3.1-8b"), new Workload(10, 4096, 16, 256, 1000, 0, 1), "tcp", 1, "t");
        MemoryBudget.PoolsDoNotFit e = assertThrows(MemoryBudget.PoolsDoNotFit.class,
                () -> MemoryBudget.requireBothRoles(big, 24L << 30, "sweep point bw-tcp-page16-c1000"));
        assertTrue(e.getMessage().startsWith("sweep point bw-tcp-page16-c1000: the prefill and decode pools need"), e.getMessage());
    }
}
