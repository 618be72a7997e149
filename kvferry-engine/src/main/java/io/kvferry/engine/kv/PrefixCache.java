package io.kvferry.engine.kv;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The decode's prefix cache: full KV pages of earlier prompts, keyed by the hash chain of their
 * tokens (page i's key covers tokens [0, (i+1)·pageSize), so a hit means the whole prefix matches).
 * A request that starts with cached pages uses them read-only as the first pages of its page table
 * and asks the prefill only for the rest ({@code decode_prefix_len}). Entries are reference counted
 * by the requests using them; unreferenced ones are evicted least recently used when pages run out.
 * Owned by the decode's scheduler thread.
 */
public final class PrefixCache {
    private static final class Entry {
        final long key;
        final int page;
        int refs;

        Entry(long key, int page) {
            this.key = key;
            this.page = page;
        }
    }

    private final int pageSize;
    private final Map<Long, Entry> byKey = new HashMap<>();
    /** Unreferenced entries, least recently used first. */
    private final LinkedHashMap<Long, Entry> idle = new LinkedHashMap<>();

    public PrefixCache(int pageSize) {
        this.pageSize = pageSize;
    }

    /** Pages the cache holds (referenced or not). */
    public int pages() {
        return byKey.size();
    }

    /** Keys of the full pages of {@code tokens}[0, n·pageSize), one per page, chained. */
    public long[] keys(int[] tokens, int fullPages) {
        long[] out = new long[fullPages];
        long h = 0xcbf29ce484222325L;
        for (int p = 0; p < fullPages; p++) {
            for (int t = p * pageSize; t < (p + 1) * pageSize; t++) {
                h ^= tokens[t];
                h *= 0x100000001b3L;
                h ^= h >>> 29;
            }
            out[p] = h;
        }
        return out;
    }

    /** The cached pages of the longest cached prefix of {@code keys}, referenced for the caller. */
    public int[] acquire(long[] keys) {
        List<Integer> pages = new ArrayList<>();
        for (long k : keys) {
            Entry e = byKey.get(k);
            if (e == null) break;
            if (e.refs++ == 0) idle.remove(k);
            pages.add(e.page);
        }
        return pages.stream().mapToInt(Integer::intValue).toArray();
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
     * Offers a finished request's own full prompt pages (key i ↔ page i, for i in [from, keys.length)):
     * those not cached yet become cache entries (their pages now belong to the cache); the pages it
     * did not take are returned for the caller to free.
     */
    public List<Integer> insert(long[] keys, int[] pages, int from) {
        List<Integer> rejected = new ArrayList<>();
        for (int i = from; i < keys.length; i++) {
            if (byKey.containsKey(keys[i])) {
                rejected.add(pages[i]);
                continue;
            }
            Entry e = new Entry(keys[i], pages[i]);
            byKey.put(keys[i], e);
            idle.put(keys[i], e);
        }
        return rejected;
    }

    /** Evicts up to {@code n} unreferenced pages, least recently used first; returns their page ids. */
    public int[] evict(int n) {
        List<Integer> out = new ArrayList<>();
        var it = idle.entrySet().iterator();
        while (out.size() < n && it.hasNext()) {
            Entry e = it.next().getValue();
            it.remove();
            byKey.remove(e.key);
            out.add(e.page);
        }
        return out.stream().mapToInt(Integer::intValue).toArray();
    }

    /** Unreferenced pages that {@link #evict} could free now. */
    public int evictable() {
        return idle.size();
    }
}
