package io.kvferry.testkit;


import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class WorkloadTest {
    @Test
    void streamIsDeterministicWithUniqueNonZeroRoomsAndBothPrefixKinds() {
        Workload w = new Workload(128, 1100, 16, 256, 4, 8, 20261202L);
        List<Workload.Request> a = w.generate(), b = w.generate();
        assertEquals(a, b);
        Set<Long> rooms = new HashSet<>();
        boolean zeroPage = false, partialPrefix = false, partialLastPage = false;
        for (Workload.Request r : a) {
            assertTrue(r.room() > 0);
            assertTrue(rooms.add(r.room()));
            if (r.prefixTokens() > 0 && r.pagesToSend(16) == 0) zeroPage = true;
            if (r.prefixTokens() > 0 && r.pagesToSend(16) > 0) partialPrefix = true;
            if (r.tokens() % 16 != 0) partialLastPage = true;
            assertEquals(0, r.prefixTokens() % 16);
        }
        assertTrue(zeroPage && partialPrefix && partialLastPage);
    }

    @Test
    void aStreamOfTwoBillionRequestsIsReadWithoutBeingBuilt() {
        // Built as a list (with a set of its rooms), this needed ~100 GB; a -Xmx2g test JVM fails at once.
        Workload w = new Workload(Integer.MAX_VALUE - 8, 16, 16, 16, 64, 0, 7, 8);
        List<Workload.Request> all = w.generate();
        assertEquals(Integer.MAX_VALUE, all.size());
        Workload.Request last = all.get(Integer.MAX_VALUE - 1);
        assertEquals(Integer.MAX_VALUE - 1, last.index());
        assertEquals(last, w.request(Integer.MAX_VALUE - 1));
        assertTrue(last.room() > 0);
        assertThrows(IndexOutOfBoundsException.class, () -> all.get(Integer.MAX_VALUE - 1 + 1));
        assertThrows(IndexOutOfBoundsException.class, () -> w.request(-1));
    }

    @Test
    void roomsAreDistinctAcrossAWideRangeOfIndicesAndSeeds() {
        for (long seed : new long[]{0, 1, 20261202L, -1, Long.MIN_VALUE}) {
            Workload w = new Workload(300_000, 16, 16, 16, 1, 0, seed);
            Set<Long> rooms = new HashSet<>();
            for (int i = 0; i < 300_000; i++) {
                long room = w.room(i);
                assertTrue(room > 0, "room " + room + " of request " + i + ", seed " + seed);
                assertTrue(rooms.add(room), "request " + i + " repeats room " + room + ", seed " + seed);
            }
        }
        assertTrue(new Workload(8, 16, 16, 16, 1, 0, 1).room(0) != new Workload(8, 16, 16, 16, 1, 0, 2).room(0),
                "another seed, other rooms");
    }

    @Test
    void dpGroupsSplitTheStreamInOrderAndLoseNothing() {
        Workload w = new Workload(5000, 64, 16, 64, 4, 8, 99, 100);
        List<Workload.Request> all = w.generate();
        int total = 0;
        for (int g = 0; g < 3; g++) {
            List<Workload.Request> mine = w.ofDpGroup(g, 3);
            int prev = -1;
            for (Workload.Request r : mine) {
                assertEquals(g, Math.floorMod(r.room(), 3L));
                assertTrue(r.index() > prev);
                assertEquals(all.get(r.index()), r);
                prev = r.index();
            }
            total += mine.size();
        }
        assertEquals(all.size(), total);
        assertEquals(all, w.ofDpGroup(0, 1));
        Workload rr = w.withDpRoundRobin(true);
        assertEquals(all, rr.generate(), "the same stream, only its groups differ");
        List<Workload.Request> second = rr.ofDpGroup(1, 3);
        assertEquals((all.size() + 1) / 3, second.size());
        for (int k = 0; k < second.size(); k++) assertEquals(all.get(3 * k + 1), second.get(k));
    }

    @Test
    void badOptionsAreRejectedWithTheirName() {
        assertTrue(assertThrows(IllegalArgumentException.class, () -> new Workload(0, 10, 16, 256, 1, 0, 1))
                .getMessage().contains("--requests"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> new Workload(1, 10, 16, 8, 1, 0, 1))
                .getMessage().contains("--chunk-tokens"));
    }

    @Test
    void sizesThatOverflowAnIntAreRefusedNamingTheFlags() {
        // --prompt-tokens near 2^31: the page count per request wrapped negative (the memory budget passed a negative pool);
        // the true count goes to the memory budget, which refuses it naming GiB.
        assertEquals(671_088_640, new Workload(8, Integer.MAX_VALUE, 16, 256, 4, 8, 42, 8).poolPages());
        String huge = assertThrows(IllegalArgumentException.class,
                () -> new Workload(8, Integer.MAX_VALUE, 16, 256, 16, 8, 42, 8)).getMessage();
        assertTrue(huge.contains("--prompt-tokens 2147483647") && huge.contains("lower --concurrency or --prompt-tokens"), huge);
        // 65536 in flight x 65537 pages wraps to 65536: a pool 2^16 times too small, silently.
        String wraps = assertThrows(IllegalArgumentException.class,
                () -> new Workload(8, 65_537 * 16, 16, 65_537 * 16, 65_536, 0, 42, 0)).getMessage();
        assertTrue(wraps.contains("--concurrency 65536") && wraps.contains("5368791040 pages"), wraps);
        String many = assertThrows(IllegalArgumentException.class,
                () -> new Workload(Integer.MAX_VALUE, 16, 16, 16, 1, 0, 42, 8)).getMessage();
        assertTrue(many.contains("--requests 2147483647 plus --warmup 8"), many);
        assertEquals(5 * 64 + 80, new Workload(8, 1024, 16, 256, 5, 8, 42, 0).poolPages());
    }

    @Test
    void patternDetectsWrongKeyAndSingleFlippedByte() {
        KvPattern p = new KvPattern(4096, 1);
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment page = arena.allocate(4096);
            long key = KvPattern.key(5, 0, 0, 3, 7, 0);
            p.fill(page, key);
            assertTrue(p.matches(page, key));
            assertFalse(p.matches(page, KvPattern.key(5, 0, 0, 3, 8, 0)));
            assertFalse(p.matches(page, KvPattern.key(5, 0, 0, 3, 7, 1)));
            page.set(ValueLayout.JAVA_BYTE, 1234, (byte) (page.get(ValueLayout.JAVA_BYTE, 1234) ^ 1));
            assertFalse(p.matches(page, key));
        }
    }
}
