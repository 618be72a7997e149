package io.kvferry.bench;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.SplittableRandom;

/**
 * Deterministic content for every byte a request moves, so the decode side can verify each
 * destination byte without seeing the source. The content of an item (one page of one buffer, an
 * aux row, a state slot) is a random template stamped every {@value #STRIDE} bytes with a key of
 * (room, region, component, buffer, logical index, rank): a byte from the wrong page, buffer,
 * request or rank, or a torn copy, shows up as a mismatch.
 *
 * <p>Not thread-safe because of the scratch item: one instance per driver thread.
 */
public final class KvPattern {
    static final int STRIDE = 512;
    private final MemorySegment template;
    private final MemorySegment scratch;

    public KvPattern(long maxItemBytes, long seed) {
        template = MemorySegment.ofArray(new byte[(int) maxItemBytes]);
        SplittableRandom rnd = new SplittableRandom(seed);
        for (long i = 0; i + 8 <= maxItemBytes; i += 8) template.set(ValueLayout.JAVA_LONG_UNALIGNED, i, rnd.nextLong());
        scratch = java.lang.foreign.Arena.ofAuto().allocate(maxItemBytes, 64);
    }

    public static long key(long room, int region, int component, int buffer, long index, int rank) {
        long h = room * 0x9E3779B97F4A7C15L;
        h ^= (region * 31L + component) * 0xC2B2AE3D27D4EB4FL;
        h ^= (buffer + 1L) * 0x165667B19E3779F9L;
        h ^= (index + 1L) * 0xD6E8FEB86659FD93L;
        h ^= (rank + 1L) * 0xFF51AFD7ED558CCDL;
        return h ^ (h >>> 29);
    }

    /** Writes the item for {@code key} into {@code dst} (its whole size). */
    public void fill(MemorySegment dst, long key) {
        long n = dst.byteSize();
        MemorySegment.copy(template, 0, dst, 0, n);
        for (long off = 0; off + 8 <= n; off += STRIDE) dst.set(ValueLayout.JAVA_LONG_UNALIGNED, off, key + off);
    }

    /** True when {@code actual} holds exactly the item for {@code key}. */
    public boolean matches(MemorySegment actual, long key) {
        long n = actual.byteSize();
        MemorySegment expected = scratch.asSlice(0, n);
        fill(expected, key);
        return actual.mismatch(expected) < 0;
    }
}
