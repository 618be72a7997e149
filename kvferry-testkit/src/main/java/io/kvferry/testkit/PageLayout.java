package io.kvferry.testkit;

import java.util.Arrays;
import java.util.Locale;

/**
 * How a bench pool hands out pages (both roles use the same layout, each with its own pool).
 *
 * <ul>
 *   <li>{@link #FRAGMENTED}: a free list of blocks of 1..4 consecutive pages in shuffled order, so a
 *       request's pages are scattered and differ between prefill and decode, as in a busy server.
 *       The default (and the bench's behaviour before {@code --pages} existed).</li>
 *   <li>{@link #CONTIGUOUS}: each request gets consecutive pages on both sides (a fixed slot of
 *       {@code maxPagesPerRequest} pages), so a chunk is one run per buffer: the per-op cost left out.</li>
 * </ul>
 */
public enum PageLayout {
    FRAGMENTED, CONTIGUOUS;

    /** The command-line spelling. */
    public String cliName() {
        return name().toLowerCase(Locale.ROOT);
    }

    /** Parses {@code contiguous} or {@code fragmented}; anything else is an error naming the choices. */
    public static PageLayout parse(String s) {
        for (PageLayout p : values()) {
            if (p.cliName().equals(s)) return p;
        }
        throw new IllegalArgumentException("--pages must be one of "
                + Arrays.stream(values()).map(PageLayout::cliName).toList() + ", got '" + s + "'");
    }
}
