package io.kvferry.engine.kv;

import org.junit.jupiter.api.Test;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Deque;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class PrefixCacheTest {
    @Test
    void hitsOnlyAWholeMatchingPrefixAndEvictsOnlyIdlePagesOldestFirst() {
        PrefixCache c = new PrefixCache(4);
        int[] a = {1, 5, 6, 7, 8, 9, 10, 11, 12, 13};
        int[] b = {1, 5, 6, 7, 8, 9, 10, 99, 12, 13};
        long[] ka = c.keys(a, 2), kb = c.keys(b, 2);
        assertEquals(ka[0], kb[0]);
        assertNotEquals(ka[1], kb[1], "page 1 differs in one token");
        assertEquals(0, c.acquire(a, ka).length);
        assertEquals(List.of(), c.insert(a, ka, new int[]{40, 41, 42}, 0));
        assertArrayEquals(new int[]{40}, c.acquire(b, kb), "only the first page of b is a's");
        assertEquals(1, c.evictable(), "page 40 is in use, 41 is idle");
        assertEquals(List.of(), c.insert(b, kb, new int[]{40, 50}, 1), "b's own page 1 joins the cache");
        c.release(kb, 1);
        assertEquals(3, c.evict(3).length, "all three pages idle now");
        assertEquals(0, c.pages());
        assertThrows(IllegalStateException.class, () -> c.release(ka, 1));
    }

    /**
     * cachedPages counts what acquire would return, up to n pages and under the same salt only, and changes nothing: no
     * reference (the pages stay evictable) and no place in the least-recently-used order.
     */
    @Test
    void cachedPagesCountsAHitWithoutTakingIt() {
        PrefixCache c = new PrefixCache(2);
        int[] a = {1, 2, 3, 4, 5, 6, 7}, b = {1, 2, 3, 4, 9, 9, 9}, d = {8, 8, 1, 1};
        long[] ka = c.keys(a, 3), kb = c.keys(b, 3), kd = c.keys(d, 2);
        assertEquals(0, c.cachedPages(a, ka, 3, null, false));
        assertEquals(List.of(), c.insert(a, ka, new int[]{10, 11, 12, 13}, 0));
        assertEquals(List.of(), c.insert(d, kd, new int[]{20, 21}, 0));
        assertEquals(3, c.cachedPages(a, ka, 3, null, false));
        assertEquals(2, c.cachedPages(a, ka, 2, null, false), "no more than n");
        assertEquals(2, c.cachedPages(b, kb, 3, null, false), "b shares a's first two pages");
        assertEquals(0, c.cachedPages(a, c.keys(a, 3, "salt"), 3, "salt", false), "another salt's cache holds nothing");
        assertEquals(5, c.evictable(), "nothing referenced");
        assertArrayEquals(new int[]{12, 11, 10}, c.evict(3), "a's chain is still the least recently used: not touched");
    }

    /**
     * State snapshots: insert keeps one with the page asked (on a page cached already too, if it had none); a hit that
     * needs one ends at the last matching page with one (referencing only those pages), and none without; a snapshot goes
     * with its entry when evicted.
     */
    @Test
    void aHitThatNeedsStateEndsAtAPageWithASnapshot() {
        PrefixCache c = new PrefixCache(2);
        int[] a = {1, 2, 3, 4, 5, 6, 7, 8}, b = {1, 2, 3, 4, 9, 9};
        long[] ka = c.keys(a, 4), kb = c.keys(b, 3);
        assertEquals(List.of(), c.insert(a, ka, new int[]{10, 11, 12, 13}, 0, null, 2, "after page 2"));
        assertEquals(4, c.acquire(a, ka, null, false).length);
        c.release(ka, 4);
        assertArrayEquals(new int[]{10, 11, 12}, c.acquire(a, ka, null, true), "the hit ends at page 2, its snapshot");
        assertEquals("after page 2", c.state(ka, 2));
        assertEquals(1, c.evictable(), "page 3 alone is not referenced");
        c.release(ka, 3);
        assertEquals(0, c.acquire(b, kb, null, true).length, "b shares pages 0 and 1, neither with a snapshot");
        assertEquals(0, c.cachedPages(b, kb, 3, null, true));
        assertEquals(2, c.cachedPages(b, kb, 3, null, false));
        assertEquals(List.of(20, 21), c.insert(b, kb, new int[]{20, 21, 22}, 0, null, 1, "after b's page 1"), "pages 0 and 1 were a's");
        assertEquals(2, c.cachedPages(b, kb, 3, null, true), "a's page 1 keeps b's snapshot now: the same tokens, the same state");
        assertEquals("after b's page 1", c.state(ka, 1));
        assertEquals(3, c.cachedPages(a, ka, 4, null, true), "a's own snapshot is still the last");
        c.evict(5);
        assertEquals(0, c.pages());
        assertEquals(null, c.state(ka, 2), "gone with its entry");
    }

    @Test
    void evictionTakesTheLastPagesOfAChainFirstSoItsPrefixStillHits() {
        PrefixCache c = new PrefixCache(2);
        int[] a = {1, 2, 3, 4, 5, 6, 7, 8};
        long[] ka = c.keys(a, 4);
        assertEquals(List.of(), c.insert(a, ka, new int[]{10, 11, 12, 13}, 0));
        // Before: the oldest entry went first, page 0 of the chain: pages 11..13 stayed cached, unreachable (no hit, no
        // reuse) until evicted in turn, and the next request with this prompt computed all of it again.
        assertArrayEquals(new int[]{13}, c.evict(1), "the chain's last page");
        assertEquals(3, c.pages());
        assertArrayEquals(new int[]{10, 11, 12}, c.acquire(a, ka), "the rest of the prefix still hits");
        c.release(ka, 3);
        // A child cached after its parent went idle (a request that hit page 0 and added its own page 1) goes first too.
        int[] b = {1, 2, 9, 9};
        long[] kb = c.keys(b, 2);
        assertArrayEquals(new int[]{10}, c.acquire(b, kb));
        c.release(kb, 1);
        assertEquals(List.of(), c.insert(b, kb, new int[]{10, 20}, 1));
        assertArrayEquals(new int[]{12, 11, 20}, c.evict(3), "a last page, then its parent it left childless, then the next last page");
        assertArrayEquals(new int[]{10}, c.acquire(a, ka), "the shared first page is the last to go");
        c.release(ka, 1);
        assertEquals(1, c.evictable());
        assertArrayEquals(new int[]{10}, c.evict(5));
        assertEquals(0, c.pages());
        assertEquals(List.of(), c.insert(a, ka, new int[]{30, 31, 32, 33}, 0));
        assertArrayEquals(new int[]{33, 32, 31, 30}, c.evict(9), "a whole chain, last page first");
        assertEquals(0, c.evictable());
    }

    /**
     * Random prompts over a few shared prefixes, held, finished and evicted in random order: a page held by a request is
     * never evicted, no page is handed out twice, and every idle page can be evicted (evictable() is what evict frees).
     */
    @Test
    void randomUseNeverEvictsAHeldPageAndEveryIdlePageCanGo() {
        SplittableRandom r = new SplittableRandom(16);
        PrefixCache c = new PrefixCache(2);
        Deque<Integer> free = new ArrayDeque<>();
        for (int p = 0; p < 400; p++) free.add(p);
        record Held(int[] prompt, long[] keys, int[] pages, int hit) {
        }
        List<Held> held = new ArrayList<>();
        Set<Integer> inCache = new HashSet<>();
        for (int step = 0; step < 3000; step++) {
            int op = r.nextInt(4);
            if (op <= 1 && held.size() < 8) {
                int[] prompt = new int[2 * (1 + r.nextInt(6))];
                for (int i = 0; i < prompt.length; i++) prompt[i] = i < 4 ? r.nextInt(2) : r.nextInt(3);
                long[] keys = c.keys(prompt, prompt.length / 2);
                int[] hit = c.acquire(prompt, keys);
                int[] pages = Arrays.copyOf(hit, keys.length);
                if (free.size() < keys.length - hit.length) {
                    for (int p : c.evict(keys.length - hit.length - free.size())) {
                        assertTrue(inCache.remove(p), "evicted page " + p + " was the cache's");
                        for (Held h : held) for (int i = 0; i < h.hit(); i++) assertTrue(h.pages()[i] != p, "held page " + p + " evicted");
                        free.add(p);
                    }
                }
                if (free.size() < keys.length - hit.length) {
                    c.release(keys, hit.length);
                    continue;
                }
                for (int i = hit.length; i < keys.length; i++) pages[i] = free.poll();
                held.add(new Held(prompt, keys, pages, hit.length));
            } else if (op == 2 && !held.isEmpty()) {
                Held h = held.remove(r.nextInt(held.size()));
                c.release(h.keys(), h.hit());
                List<Integer> back = c.insert(h.prompt(), h.keys(), h.pages(), h.hit());
                for (int i = h.hit(); i < h.pages().length; i++) {
                    if (!back.contains(h.pages()[i])) assertTrue(inCache.add(h.pages()[i]), "page " + h.pages()[i] + " cached twice");
                }
                for (int p : back) {
                    inCache.remove(p); // a replaced idle entry's page, or one of this request's not taken
                    free.add(p);
                }
            } else if (op == 3) {
                int n = r.nextInt(3);
                for (int p : c.evict(n)) {
                    assertTrue(inCache.remove(p));
                    free.add(p);
                }
            }
            assertEquals(inCache.size(), c.pages(), "step " + step);
        }
        for (Held h : held) c.release(h.keys(), h.hit());
        int idle = c.evictable();
        assertEquals(c.pages(), idle, "nothing held");
        assertEquals(idle, c.evict(Integer.MAX_VALUE).length);
        assertEquals(0, c.pages());
    }

    @Test
    void aPageAlreadyCachedIsHandedBackAndOnlyTheNewOnesJoin() {
        PrefixCache c = new PrefixCache(2);
        int[] a = {1, 2, 3, 4};
        long[] ka = c.keys(a, 2);
        assertEquals(List.of(), c.insert(a, ka, new int[]{10, 11}, 0));
        // A second request with the same prompt that missed the cache (it started before the first finished).
        assertEquals(List.of(20, 21), c.insert(a, ka, new int[]{20, 21}, 0), "both pages were cached already");
        assertArrayEquals(new int[]{10, 11}, c.acquire(a, ka));
    }

    /** Page p of every prompt has key p: only the tokens tell prompts apart, as they must under a crafted collision. */
    @Test
    void aKeyCollisionNeverHandsARequestAnotherPromptsPages() {
        PrefixCache c = new PrefixCache(2, (page, chainHash) -> page);
        int[] a = {1, 2, 3, 4};
        int[] b = {7, 8, 3, 4};
        long[] ka = c.keys(a, 2), kb = c.keys(b, 2);
        assertArrayEquals(ka, kb, "the keys collide");
        assertEquals(List.of(), c.insert(a, ka, new int[]{10, 11}, 0));
        assertEquals(0, c.acquire(b, kb).length, "b shares no token page with a");
        assertArrayEquals(new int[]{10, 11}, c.acquire(a, ka));
    }

    /** Page 1 matches token for token, but after a different page 0: the prefix differs, so no hit. */
    @Test
    void aMatchingPageAfterADifferentPrefixIsNoHit() {
        PrefixCache c = new PrefixCache(2, (page, chainHash) -> page);
        int[] a = {1, 2, 3, 4};
        int[] b = {1, 9, 3, 4};
        long[] ka = c.keys(a, 2), kb = c.keys(b, 2);
        c.insert(a, ka, new int[]{10, 11}, 0);
        assertEquals(0, c.acquire(b, kb).length);
    }

    /** An idle entry the new chain cannot reach under its key is replaced, its page handed back to be freed. */
    @Test
    void anIdleCollidingEntryIsReplacedAndItsPageFreed() {
        PrefixCache c = new PrefixCache(2, (page, chainHash) -> page);
        int[] a = {1, 2};
        int[] b = {7, 8};
        long[] ka = c.keys(a, 1), kb = c.keys(b, 1);
        c.insert(a, ka, new int[]{10}, 0);
        assertEquals(List.of(10), c.insert(b, kb, new int[]{20}, 0), "a's idle page 10 is freed, b's page 20 cached");
        assertArrayEquals(new int[]{20}, c.acquire(b, kb));
        assertEquals(0, c.acquire(a, ka).length);
        // In use, b's entry is kept: a third prompt under the same key is not cached.
        int[] d = {5, 6};
        assertEquals(List.of(30), c.insert(d, c.keys(d, 1), new int[]{30}, 0));
        assertEquals(1, c.pages());
    }

    /**
     * The prefill's use: a request may reuse fewer pages than are cached (those before the first position whose logits it
     * needs), so it acquires with its keys cut short, releases that many, and offers all its full pages: the ones cached
     * already (its hit, and the page it computed again) come back to be freed, the new one joins.
     */
    @Test
    void aHitCutShortStillOffersEveryFullPage() {
        PrefixCache c = new PrefixCache(2);
        int[] a = {1, 2, 3, 4, 5, 6};
        long[] ka = c.keys(a, 3);
        assertEquals(List.of(), c.insert(a, Arrays.copyOf(ka, 2), new int[]{10, 11}, 0));
        int[] hit = c.acquire(a, Arrays.copyOf(ka, 1));
        assertArrayEquals(new int[]{10}, hit, "only the first page may be reused, though two are cached");
        assertEquals(1, c.evictable(), "page 10 in use, 11 idle");
        c.release(ka, hit.length);
        assertEquals(List.of(21), c.insert(a, ka, new int[]{10, 21, 22}, 1), "its page 1 was cached already; page 2 joins");
        assertEquals(3, c.pages());
        assertArrayEquals(new int[]{10, 11, 22}, c.acquire(a, ka));
    }

    @Test
    void aKeyRepeatedOnItsOwnChainIsNotCachedTwice() {
        PrefixCache c = new PrefixCache(2, (page, chainHash) -> 0L);
        int[] a = {1, 2, 3, 4};
        long[] ka = c.keys(a, 2);
        assertEquals(List.of(11), c.insert(a, ka, new int[]{10, 11}, 0), "page 1 would replace page 0, its own parent");
        assertArrayEquals(new int[]{10}, c.acquire(a, ka));
    }
    /** A cache_salt splits the cache: the same tokens hit only under the same salt, and unsalted prompts share only with each other. */
    @Test
    void theSameTokensHitOnlyUnderTheSameSalt() {
        PrefixCache c = new PrefixCache(2);
        int[] a = {1, 2, 3, 4, 5};
        long[] ka = c.keys(a, 2, "tenant-a"), kb = c.keys(a, 2, "tenant-b"), none = c.keys(a, 2);
        for (int p = 0; p < 2; p++) {
            assertNotEquals(ka[p], kb[p], "the salt changes every key of the chain");
            assertNotEquals(ka[p], none[p]);
        }
        assertArrayEquals(none, c.keys(a, 2, null), "no salt: the unsalted keys, as before");
        assertNotEquals(c.keys(a, 1, "ab")[0], c.keys(a, 1, "a")[0]);
        assertEquals(List.of(), c.insert(a, ka, new int[]{10, 11}, 0, "tenant-a"));
        assertEquals(0, c.acquire(a, kb, "tenant-b").length, "another salt: no hit");
        assertEquals(0, c.acquire(a, none).length, "unsalted: no hit on a salted prompt");
        assertEquals(0, c.acquire(a, none, null).length);
        assertArrayEquals(new int[]{10, 11}, c.acquire(a, ka, "tenant-a"), "the same salt: a hit");
        c.release(ka, 2);
        // Unsalted prompts share the unsalted cache, and a salted request does not see it.
        assertEquals(List.of(), c.insert(a, none, new int[]{20, 21}, 0));
        assertArrayEquals(new int[]{20, 21}, c.acquire(a, none));
        c.release(none, 2);
        assertEquals(0, c.acquire(a, kb, "tenant-b").length);
        assertEquals(4, c.pages());
    }

    /**
     * Page p of every prompt has key p whatever the salt (a forced 64-bit collision): the salt kept in the entries still
     * tells the tenants apart, so one never gets another's pages (nor learns from cached tokens that it sent the prefix).
     */
    @Test
    void aKeyCollisionAcrossSaltsIsNoHit() {
        PrefixCache c = new PrefixCache(2, (page, chainHash) -> page);
        int[] a = {1, 2, 3, 4};
        long[] ka = c.keys(a, 2, "tenant-a"), kb = c.keys(a, 2, "tenant-b"), none = c.keys(a, 2);
        assertArrayEquals(ka, kb, "the keys collide");
        assertArrayEquals(ka, none);
        assertEquals(List.of(), c.insert(a, ka, new int[]{10, 11}, 0, "tenant-a"));
        assertEquals(0, c.acquire(a, kb, "tenant-b").length, "the same tokens and keys under another salt: no hit");
        assertEquals(0, c.acquire(a, none).length, "nor unsalted");
        assertArrayEquals(new int[]{10, 11}, c.acquire(a, ka, "tenant-a"));
        c.release(ka, 2);
        // Tenant b's own pages replace a's idle ones under the colliding keys; a then misses, b hits.
        assertEquals(List.of(10, 11), c.insert(a, kb, new int[]{20, 21}, 0, "tenant-b"));
        assertArrayEquals(new int[]{20, 21}, c.acquire(a, kb, "tenant-b"));
        assertEquals(0, c.acquire(a, ka, "tenant-a").length);
    }
}
