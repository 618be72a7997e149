package io.kvferry.engine.kv;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * An engine's prefix cache (the decode's, and the prefill's: see PrefillEngine): full KV pages of earlier prompts, keyed by the hash chain of their
 * tokens (page i's key covers tokens [0, (i+1)·pageSize)). The key only finds an entry: a hit also
 * needs the entry's own tokens to equal the page's and its parent entry to be the one matched for
 * the page before, so a hit means the whole prefix matches token for token. A 64-bit key is not a
 * proof (two prompts can be made to collide), and a collision would hand one request another's KV.
 * A request that starts with cached pages uses them read-only as the first pages of its page table:
 * on the decode it asks the prefill only for the rest ({@code decode_prefix_len}); on the prefill it
 * computes only the rest. Entries are reference counted
 * by the requests using them; unreferenced ones are evicted least recently used when pages run out.
 * <p>A request's {@code cache_salt} (vLLM's) splits the cache between tenants: the salt is mixed into the chain hash
 * before page 0's tokens, so every key of a salted prompt differs from the unsalted and other salts' keys, and the
 * chain's first entry keeps its salt, which a hit must equal (a key alone is not a proof: a 64-bit collision across salts
 * must not hand one tenant another's pages, nor tell it by {@code cached_tokens} or timing that a prefix was sent). The
 * pages after the first are found through their parent's identity, so they inherit its salt. Null: the shared, unsalted
 * cache.
 * <p>For a model whose per-request state is more than its pages (a recurrent layer's state), an entry may keep a snapshot
 * of that state after its page's last token ({@link #insert(int[], long[], int[], int, String, int, Object)}); a hit that
 * needs one ({@code needState}) ends at the last page of the match whose entry holds one (SGLang's MambaRadixCache).
 * Snapshots live and die with their entries, so there are never more than the cache's pages.
 * Owned by its engine's scheduler thread.
 */
public final class PrefixCache {
    private static final class Entry {
        final long key;
        final int page;
        /** This page's own tokens. */
        final int[] tokens;
        /** The entry of the page before (null for page 0): identity, so a replaced parent orphans it. */
        final Entry parent;
        /** The cache salt of the chain (null: unsalted); a hit on page 0 must carry the same, and later pages inherit it through {@link #parent}. */
        final String salt;
        int refs;
        /** Entries whose parent this is, cached now: one with any is evicted after them (its pages are their prefix). */
        int children;
        /** Evicted while {@link #evict} climbed its chain (it leaves {@code idle} when that pass ends). */
        boolean evicted;
        /**
         * A snapshot of the per-request state after this page's last token (the prefill's recurrent state, for a model
         * whose state is more than its pages), or null; it goes when the entry goes.
         */
        Object state;

        Entry(long key, int page, int[] tokens, Entry parent, String salt) {
            this.key = key;
            this.page = page;
            this.tokens = tokens;
            this.parent = parent;
            this.salt = salt;
            if (parent != null) parent.children++;
        }
    }

    private final int pageSize;
    /** The key of page p of a prompt from its chain hash: the hash itself in service; tests make keys collide. */
    private final KeyOfPage keyOfPage;
    private final Map<Long, Entry> byKey = new HashMap<>();
    /** Unreferenced entries, least recently used first. */
    private final LinkedHashMap<Long, Entry> idle = new LinkedHashMap<>();

    /** How a page's key derives from its index and its prefix's chain hash. */
    interface KeyOfPage {
        long key(int page, long chainHash);
    }

    public PrefixCache(int pageSize) {
        this(pageSize, (page, chainHash) -> chainHash);
    }

    PrefixCache(int pageSize, KeyOfPage keyOfPage) {
        this.pageSize = pageSize;
        this.keyOfPage = keyOfPage;
    }

    /** Pages the cache holds (referenced or not). */
    public int pages() {
        return byKey.size();
    }

    /** The most characters of a {@code cache_salt} (vLLM sets none; a 256-bit secret is 43 base64 characters). */
    public static final int MAX_SALT_CHARS = 256;

    /** Keys of the full pages of {@code tokens}[0, n·pageSize), one per page, chained (unsalted). */
    public long[] keys(int[] tokens, int fullPages) {
        return keys(tokens, fullPages, null);
    }

    /**
     * Keys of the full pages of {@code tokens}[0, n·pageSize), one per page, chained, the salt (null: none) mixed in
     * before page 0's tokens, so it changes every key after it (vLLM mixes it into the first block's hash).
     */
    public long[] keys(int[] tokens, int fullPages, String salt) {
        long[] out = new long[fullPages];
        long h = 0xcbf29ce484222325L;
        if (salt != null) {
            h ^= 0x5a17L << 32 | salt.length(); // a tag no unsalted chain starts with, and the length: no salt is another's prefix
            h *= 0x100000001b3L;
            for (int i = 0; i < salt.length(); i++) {
                h ^= salt.charAt(i);
                h *= 0x100000001b3L;
                h ^= h >>> 29;
            }
        }
        for (int p = 0; p < fullPages; p++) {
            for (int t = p * pageSize; t < (p + 1) * pageSize; t++) {
                h ^= tokens[t];
                h *= 0x100000001b3L;
                h ^= h >>> 29;
            }
            out[p] = keyOfPage.key(p, h);
        }
        return out;
    }

    /**
     * How many leading full pages two prompts share, at most {@code limit}: none across cache salts (null: unsalted);
     * else the leading pages whose keys ({@link #keys(int[], int, String)}) are equal, if the tokens of those pages are
     * equal too, and none if they are not (a key collision: nothing shared). Pure: what the engines' schedulers ask of a
     * ready request and one in flight before deciding whether it waits for the other's pages.
     */
    public static int sharedPages(int pageSize, int limit, int[] a, long[] aKeys, String aSalt, int[] b, long[] bKeys,
            String bSalt) {
        if (!Objects.equals(aSalt, bSalt)) return 0;
        int n = Math.min(limit, Math.min(aKeys.length, bKeys.length)), shared = 0;
        while (shared < n && aKeys[shared] == bKeys[shared]) shared++;
        int tokens = shared * pageSize;
        return shared > 0 && Arrays.equals(a, 0, tokens, b, 0, tokens) ? shared : 0;
    }

    /**
     * The cached pages of the longest cached prefix of {@code tokens} (whose page keys are {@code keys}),
     * referenced for the caller.
     */
    public int[] acquire(int[] tokens, long[] keys) {
        return acquire(tokens, keys, null);
    }

    /**
     * The cached pages of the longest cached prefix of {@code tokens} cached under the same salt (null: unsalted), whose
     * page keys are {@code keys} ({@link #keys(int[], int, String)} with that salt), referenced for the caller.
     */
    public int[] acquire(int[] tokens, long[] keys, String salt) {
        return acquire(tokens, keys, salt, false);
    }

    /**
     * As {@link #acquire(int[], long[], String)}; with {@code needState}, the hit ends at the last matching page whose
     * entry holds a state snapshot ({@link #state}), none if no matching page does.
     */
    public int[] acquire(int[] tokens, long[] keys, String salt, boolean needState) {
        List<Entry> chain = chain(tokens, keys, keys.length, salt, needState);
        int[] pages = new int[chain.size()];
        for (int p = 0; p < pages.length; p++) {
            Entry e = chain.get(p);
            if (e.refs++ == 0) idle.remove(e.key);
            pages[p] = e.page;
        }
        return pages;
    }

    /** The matching entries of the first {@code n} pages, cut after the last one with a snapshot when {@code needState}. */
    private List<Entry> chain(int[] tokens, long[] keys, int n, String salt, boolean needState) {
        List<Entry> out = new ArrayList<>();
        Entry parent = null;
        int withState = 0;
        for (int p = 0; p < n; p++) {
            Entry e = matching(tokens, keys, p, parent, salt);
            if (e == null) break;
            out.add(e);
            if (e.state != null) withState = p + 1;
            parent = e;
        }
        return needState ? out.subList(0, withState) : out;
    }

    /** The state snapshot of page {@code page}'s entry, which the caller acquired (null: none). */
    public Object state(long[] keys, int page) {
        Entry e = byKey.get(keys[page]);
        return e == null ? null : e.state;
    }

    /**
     * How many pages {@link #acquire(int[], long[], String)} would return now for the first {@code n} of {@code keys}, without
     * referencing them or touching their place in the least-recently-used order (the prefill's scheduler asks this of a
     * waiting request that shares pages with one being computed, each pass).
     */
    public int cachedPages(int[] tokens, long[] keys, int n, String salt, boolean needState) {
        return chain(tokens, keys, n, salt, needState).size();
    }

    /** Drops the caller's references to the first {@code n} of {@code keys} (acquired before). */
    public void release(long[] keys, int n) {
        for (int i = 0; i < n; i++) {
            Entry e = byKey.get(keys[i]);
            if (e == null) throw new IllegalStateException("prefix page " + i + " released but not cached");
            if (--e.refs == 0) idle.put(e.key, e);
        }
    }

    /**
     * Offers a finished request's own full prompt pages (key i ↔ page i, for i in [from, keys.length);
     * pages before {@code from} came from the cache): those not cached yet become cache entries (their
     * pages now belong to the cache); the pages it did not take, and those of idle entries it replaced,
     * are returned for the caller to free.
     */
    public List<Integer> insert(int[] tokens, long[] keys, int[] pages, int from) {
        return insert(tokens, keys, pages, from, null);
    }

    /** {@link #insert(int[], long[], int[], int)} for a prompt with a cache salt (null: unsalted): its entries keep it. */
    public List<Integer> insert(int[] tokens, long[] keys, int[] pages, int from, String salt) {
        return insert(tokens, keys, pages, from, salt, -1, null);
    }

    /**
     * As {@link #insert(int[], long[], int[], int, String)}, and page {@code statePage}'s entry (its own, or the one cached
     * already for the same tokens, if it has none) keeps {@code state}, the snapshot of the request's state after that
     * page's last token (-1 / null: none); nothing keeps it if the chain is not cached that far.
     */
    public List<Integer> insert(int[] tokens, long[] keys, int[] pages, int from, String salt, int statePage, Object state) {
        List<Integer> freed = new ArrayList<>();
        Entry parent = null;
        int i = 0;
        for (; i < keys.length; i++) {
            Entry same = matching(tokens, keys, i, parent, salt);
            if (same != null) { // cached already (this request's hit, or another request's meanwhile)
                if (i >= from) freed.add(pages[i]);
                if (i == statePage && same.state == null) same.state = state;
                parent = same;
                continue;
            }
            if (i < from) break; // its cached prefix is gone: nothing after it would chain
            Entry other = byKey.get(keys[i]);
            if (other != null) {
                // Another prefix under the same key, in use or on this very chain: cache no further.
                if (other.refs > 0 || onChain(other, parent)) break;
                // An idle entry this chain cannot reach (orphaned by its parent's eviction, or a collision): replaced.
                idle.remove(other.key);
                drop(other);
                freed.add(other.page);
            }
            Entry e = new Entry(keys[i], pages[i], Arrays.copyOfRange(tokens, i * pageSize, (i + 1) * pageSize), parent, salt);
            if (i == statePage) e.state = state;
            byKey.put(e.key, e);
            idle.put(e.key, e);
            parent = e;
        }
        for (int j = Math.max(i, from); j < keys.length; j++) freed.add(pages[j]); // not taken
        return freed;
    }

    private static boolean onChain(Entry e, Entry last) {
        for (Entry c = last; c != null; c = c.parent) {
            if (c == e) return true;
        }
        return false;
    }

    /**
     * The entry under page {@code p}'s key when it holds exactly that page's tokens after {@code parent}, under the same
     * salt; else null.
     */
    private Entry matching(int[] tokens, long[] keys, int p, Entry parent, String salt) {
        Entry e = byKey.get(keys[p]);
        if (e == null || e.parent != parent || !Objects.equals(e.salt, salt)) return null;
        return Arrays.equals(e.tokens, 0, pageSize, tokens, p * pageSize, (p + 1) * pageSize) ? e : null;
    }

    /**
     * Evicts up to {@code n} unreferenced pages, least recently used first among the last pages of their chains (an entry
     * with cached children goes after them: evicting a chain's first page would leave the pages after it cached but
     * unreachable, so one page wanted would have cost the whole prefix); returns their page ids. An evicted page's parent
     * that it leaves without children goes next (it is as old as its child or older), so one pass over the idle entries
     * does: O(idle + n). Every idle entry can go this way: a referenced entry's parent is referenced too.
     */
    public int[] evict(int n) {
        List<Integer> out = new ArrayList<>();
        List<Entry> climbed = new ArrayList<>(); // parents evicted on the way up, still in idle until the pass ends
        for (var it = idle.values().iterator(); out.size() < n && it.hasNext(); ) {
            Entry e = it.next();
            if (e.evicted) {
                it.remove();
                continue;
            }
            if (e.children > 0) continue;
            it.remove();
            drop(e);
            out.add(e.page);
            for (Entry p = e.parent; p != null && out.size() < n && p.refs == 0 && p.children == 0 && byKey.get(p.key) == p; p = p.parent) {
                drop(p);
                p.evicted = true;
                out.add(p.page);
                climbed.add(p);
            }
        }
        for (Entry p : climbed) idle.remove(p.key);
        return out.stream().mapToInt(Integer::intValue).toArray();
    }

    /** Removes an entry (evicted or replaced) from the cache; its parent has one child fewer. */
    private void drop(Entry e) {
        byKey.remove(e.key);
        if (e.parent != null) e.parent.children--;
    }

    /** Unreferenced pages that {@link #evict} could free now. */
    public int evictable() {
        return idle.size();
    }
}
