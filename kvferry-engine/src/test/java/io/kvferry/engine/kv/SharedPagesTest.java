package io.kvferry.engine.kv;

import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import org.junit.jupiter.api.Test;

import java.util.Arrays;
import java.util.Objects;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** PrefixCache.sharedPages: the leading full pages two prompts share, by keys, then verified by tokens; same salt only. */
class SharedPagesTest {
    @Test
    void countsTheKeysPrefixVerifiedByTokens() {
        PrefixCache c = new PrefixCache(2);
        int[] a = {1, 2, 3, 4, 5, 6, 7}, b = {1, 2, 3, 4, 9, 9};
        long[] ka = c.keys(a, 3), kb = c.keys(b, 3);
        assertEquals(2, PrefixCache.sharedPages(2, 3, a, ka, null, b, kb, null));
        assertEquals(1, PrefixCache.sharedPages(2, 1, a, ka, null, b, kb, null), "no more than the limit");
        assertEquals(0, PrefixCache.sharedPages(2, 3, a, c.keys(a, 3, "s"), "s", b, c.keys(b, 3, "t"), "t"), "another salt");
        assertEquals(0, PrefixCache.sharedPages(2, 3, a, ka, null, b, kb, "s"), "same keys, another salt");
        long[] collided = Arrays.copyOf(ka, 3);
        int[] d = {1, 2, 8, 8, 5, 6};
        assertEquals(0, PrefixCache.sharedPages(2, 3, a, ka, null, d, collided, null), "keys equal, tokens not: a collision shares nothing");
    }

    /** The result equals a brute-force count over random prompts whose keys collide often (and are made to collide). */
    @Property(seed = "20261207", tries = 500)
    void equalsABruteForceCount(@ForAll @IntRange(min = 0, max = 1_000_000) int seed) {
        SplittableRandom r = new SplittableRandom(seed);
        int pageSize = 1 + r.nextInt(4);
        PrefixCache c = new PrefixCache(pageSize, (page, chainHash) -> chainHash & 3); // four keys: collisions everywhere
        int[] a = prompt(r, 1 + r.nextInt(20)), b;
        if (r.nextBoolean()) { // a's prefix, then tokens of its own (or a's again)
            b = Arrays.copyOf(a, r.nextInt(25));
            for (int i = r.nextInt(b.length + 1); i < b.length; i++) b[i] = r.nextBoolean() && i < a.length ? a[i] : r.nextInt(3);
        } else {
            b = prompt(r, r.nextInt(20));
        }
        String[] salts = {null, "s", "t"};
        String saltA = salts[r.nextInt(3)], saltB = r.nextBoolean() ? saltA : salts[r.nextInt(3)];
        long[] ka = c.keys(a, a.length / pageSize, saltA), kb = c.keys(b, b.length / pageSize, saltB);
        if (r.nextInt(4) == 0) { // a collision injected: b's keys are a's where both have pages, whatever its tokens
            for (int i = 0; i < Math.min(ka.length, kb.length); i++) kb[i] = ka[i];
        }
        int limit = r.nextInt(8);
        assertEquals(bruteForce(pageSize, limit, a, ka, saltA, b, kb, saltB),
                PrefixCache.sharedPages(pageSize, limit, a, ka, saltA, b, kb, saltB));
    }

    private static int[] prompt(SplittableRandom r, int n) {
        int[] p = new int[n];
        for (int i = 0; i < n; i++) p[i] = r.nextInt(3);
        return p;
    }

    /** The most pages k within the limit and both prompts whose keys all match, if their tokens all match; else 0. */
    private static int bruteForce(int pageSize, int limit, int[] a, long[] ka, String saltA, int[] b, long[] kb, String saltB) {
        if (!Objects.equals(saltA, saltB)) return 0;
        int k = 0;
        for (int pages = 1; pages <= limit && pages <= ka.length && pages <= kb.length; pages++) {
            boolean keys = true;
            for (int i = 0; i < pages; i++) keys &= ka[i] == kb[i];
            if (keys) k = pages;
        }
        for (int t = 0; t < k * pageSize; t++) {
            if (a[t] != b[t]) return 0;
        }
        return k;
    }
}
