package io.kvferry.plan;

import java.util.Arrays;

/**
 * Parallel source/destination page lists cut into runs that are contiguous on both sides, so that
 * each run of each buffer moves as one copy. Struct-of-arrays so planning a chunk allocates per
 * run, never per page. Those made by {@link #group} never change; a {@linkplain #reusable() reusable}
 * one belongs to one thread (a transfer worker) and is regrouped for every chunk, allocating nothing
 * once its arrays have grown.
 */
public final class PageRuns {
    private int[] srcStart;
    private int[] dstStart;
    private int[] length;
    private int count;
    /** Reusable instances only: sort keys and the arrays runs are permuted through. */
    private long[] keys;
    private int[] spareSrc, spareDst, spareLength;

    private PageRuns(int[] srcStart, int[] dstStart, int[] length, int count) {
        this.srcStart = srcStart;
        this.dstStart = dstStart;
        this.length = length;
        this.count = count;
    }

    public static final PageRuns EMPTY = new PageRuns(new int[0], new int[0], new int[0], 0);

    /**
     * Splits at every position where the next source page is not the previous + 1 or the next
     * destination page is not the previous + 1. Either list empty gives no runs.
     *
     * @throws IllegalArgumentException when both lists are non-empty and of different lengths
     */
    public static PageRuns group(int[] src, int[] dst) {
        if (src.length == 0 || dst.length == 0) return EMPTY;
        if (src.length != dst.length) {
            throw new IllegalArgumentException("source and destination page lists differ in length: "
                    + src.length + " vs " + dst.length);
        }
        int runs = 1;
        for (int i = 1; i < src.length; i++) {
            if (src[i] != src[i - 1] + 1 || dst[i] != dst[i - 1] + 1) runs++;
        }
        int[] s = new int[runs], d = new int[runs], n = new int[runs];
        int r = 0;
        s[0] = src[0];
        d[0] = dst[0];
        for (int i = 1; i < src.length; i++) {
            if (src[i] != src[i - 1] + 1 || dst[i] != dst[i - 1] + 1) {
                n[r] = src[i - 1] - s[r] + 1;
                r++;
                s[r] = src[i];
                d[r] = dst[i];
            }
        }
        n[r] = src[src.length - 1] - s[r] + 1;
        return new PageRuns(s, d, n, runs);
    }

    /** Runs to be regrouped over and over by one thread ({@link #regroup}). */
    public static PageRuns reusable() {
        return new PageRuns(new int[16], new int[16], new int[16], 0);
    }

    /**
     * As {@link #group}, into this reusable instance, from {@code src[srcFrom, srcFrom + n)} and
     * {@code dst[dstFrom, dstFrom + n)} (a chunk's slice of the room's page lists, without copying them).
     */
    public PageRuns regroup(int[] src, int srcFrom, int[] dst, int dstFrom, int n) {
        if (this == EMPTY) throw new IllegalStateException("PageRuns.EMPTY is shared: regroup a reusable() instance");
        count = 0;
        if (n == 0) return this;
        if (srcStart.length < n || dstStart.length < n || length.length < n) {
            int cap = Math.max(n, 2 * srcStart.length);
            srcStart = new int[cap];
            dstStart = new int[cap];
            length = new int[cap];
        }
        int r = 0;
        srcStart[0] = src[srcFrom];
        dstStart[0] = dst[dstFrom];
        for (int i = 1; i < n; i++) {
            if (src[srcFrom + i] != src[srcFrom + i - 1] + 1 || dst[dstFrom + i] != dst[dstFrom + i - 1] + 1) {
                length[r] = src[srcFrom + i - 1] - srcStart[r] + 1;
                r++;
                srcStart[r] = src[srcFrom + i];
                dstStart[r] = dst[dstFrom + i];
            }
        }
        length[r] = src[srcFrom + n - 1] - srcStart[r] + 1;
        count = r + 1;
        return this;
    }

    /**
     * Reorders this reusable instance's runs by destination start, so each buffer's ops ascend at
     * the destination: what lets tcp pack a fragmented chunk into few piece lists (which must
     * ascend). Allocation-free once grown.
     */
    public PageRuns sortByDestination() {
        if (count < 2) return this;
        boolean sorted = true;
        for (int i = 1; i < count && sorted; i++) sorted = dstStart[i] > dstStart[i - 1];
        if (sorted) return this;
        if (keys == null || keys.length < count || spareSrc.length < count || spareDst.length < count || spareLength.length < count) {
            int cap = Math.max(count, srcStart.length);
            keys = new long[cap];
            spareSrc = new int[cap];
            spareDst = new int[cap];
            spareLength = new int[cap];
        }
        for (int i = 0; i < count; i++) keys[i] = ((long) dstStart[i] << 32) | i; // page ids are non-negative ints
        Arrays.sort(keys, 0, count);
        for (int i = 0; i < count; i++) {
            int from = (int) keys[i];
            spareSrc[i] = srcStart[from];
            spareDst[i] = dstStart[from];
            spareLength[i] = length[from];
        }
        int[] t = srcStart;
        srcStart = spareSrc;
        spareSrc = t;
        t = dstStart;
        dstStart = spareDst;
        spareDst = t;
        t = length;
        length = spareLength;
        spareLength = t;
        return this;
    }

    public int count() {
        return count;
    }

    public int srcStart(int run) {
        return srcStart[run];
    }

    public int dstStart(int run) {
        return dstStart[run];
    }

    public int length(int run) {
        return length[run];
    }

    public long totalPages() {
        long t = 0;
        for (int i = 0; i < count; i++) t += length[i];
        return t;
    }
}
