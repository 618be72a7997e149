package io.kvferry.engine.kv;

import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

class PrefixCacheTest {
    @Test
    void hitsOnlyAWholeMatchingPrefixAndEvictsOnlyIdlePagesOldestFirst() {
        PrefixCache c = new PrefixCache(4);
        int[] a = {1, 5, 6, 7, 8, 9, 10, 11, 12, 13};
        int[] b = {1, 5, 6, 7, 8, 9, 10, 99, 12, 13};
        long[] ka = c.keys(a, 2), kb = c.keys(b, 2);
        assertEquals(ka[0], kb[0]);
        assertNotEquals(ka[1], kb[1], "page 1 differs in one token");
        assertEquals(0, c.acquire(ka).length);
        assertEquals(List.of(), c.insert(ka, new int[]{40, 41, 42}, 0));
        assertArrayEquals(new int[]{40}, c.acquire(kb), "only the first page of b is a's");
        assertEquals(1, c.evictable(), "page 40 is in use, 41 is idle");
        assertEquals(List.of(40), c.insert(kb, new int[]{40, 50}, 0).subList(0, 1), "an already cached key is refused");
        c.release(kb, 1);
        assertArrayEquals(new int[]{41, 50, 40}, sorted(c.evict(3), new int[]{41, 50, 40}), "least recently idle first");
        assertEquals(0, c.pages());
        assertThrows(IllegalStateException.class, () -> c.release(ka, 1));
    }

    private static int[] sorted(int[] got, int[] expectedSet) {
        assertEquals(expectedSet.length, got.length);
        return got;
    }
}
