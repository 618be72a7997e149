package io.kvferry.testkit;

import java.util.Arrays;

/**
 * The order in which a driver fills or verifies a request's pages: buffer by buffer, and within a
 * buffer by ascending page number, i.e. ascending address. A request's pages are scattered (the
 * fragmented layout); walking them in token order over every buffer at once jumps between dozens of
 * far-apart streams per small page, which the cores' prefetchers cannot follow. The transfer itself
 * still sees the pages in token order: only the bench's own work on them is ordered.
 */
final class PageWalk {
    private PageWalk() {
    }

    /** Positions {@code j} of {@code pages}, sorted so that {@code pages[j]} ascends (ties by position). */
    static int[] ascending(int[] pages) {
        long[] keyed = new long[pages.length];
        for (int j = 0; j < pages.length; j++) {
            if (pages[j] < 0) throw new IllegalArgumentException("page " + pages[j] + " at position " + j + " is negative");
            keyed[j] = ((long) pages[j] << 32) | j;
        }
        Arrays.sort(keyed);
        int[] order = new int[pages.length];
        for (int i = 0; i < order.length; i++) order[i] = (int) keyed[i];
        return order;
    }
}
