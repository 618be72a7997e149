package io.kvferry.testkit;


import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/**
 * The memcpy baseline paired with each transfer: the prefill driver copies a request's source
 * pages (every KV buffer, one {@link MemorySegment#copy} per run of consecutive pages, as the
 * planner groups them) into a private, pre-faulted scratch region just before handing the same
 * pages to the transfer. Both copies read the same bytes within milliseconds of each other, so
 * the ratio between them is not at the mercy of this shared VM's memory bandwidth drifting
 * between a baseline measured once and the transfers. Owned by one prefill driver thread.
 */
public final class PairedMemcpy implements AutoCloseable {
    private final Arena arena = Arena.ofConfined();
    private final MemorySegment scratch;
    private final long pageBytes;
    private final int pagesPerBuffer;
    private long bytes;
    private long nanos;

    public PairedMemcpy(RankPool pool, int maxPagesPerRequest) {
        this.pageBytes = pool.pageBytes;
        this.pagesPerBuffer = maxPagesPerRequest;
        this.scratch = arena.allocate(pageBytes * maxPagesPerRequest * pool.kv.length, 4096);
        scratch.fill((byte) 0); // fault it in now, not inside a timed copy
    }

    /** Copies the pages of every KV buffer into scratch and adds the bytes and time to the totals. */
    public void copy(RankPool pool, int[] pages) {
        if (pages.length > pagesPerBuffer) throw new IllegalArgumentException(pages.length + " pages > " + pagesPerBuffer);
        long t0 = System.nanoTime();
        long moved = 0;
        for (int b = 0; b < pool.kv.length; b++) {
            MemorySegment src = pool.kv[b];
            long base = (long) b * pagesPerBuffer * pageBytes;
            int i = 0;
            while (i < pages.length) {
                int j = i + 1;
                while (j < pages.length && pages[j] == pages[j - 1] + 1) j++;
                long len = (j - i) * pageBytes;
                MemorySegment.copy(src, pages[i] * pageBytes, scratch, base + i * pageBytes, len);
                moved += len;
                i = j;
            }
        }
        nanos += System.nanoTime() - t0;
        bytes += moved;
    }

    /** Where the copies land (tests check them). */
    public MemorySegment scratch() {
        return scratch;
    }

    public long bytes() {
        return bytes;
    }

    public long nanos() {
        return nanos;
    }

    @Override
    public void close() {
        arena.close();
    }
}
