package io.kvferry.plan;

/**
 * Parallel source/destination page lists cut into runs that are contiguous on both sides, so that
 * each run of each buffer moves as one copy. Immutable; struct-of-arrays so planning a chunk
 * allocates per run, never per page.
 */
public final class PageRuns {
    private final int[] srcStart;
    private final int[] dstStart;
    private final int[] length;
    private final int count;

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
