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
 * <p>Immutable after construction; safe to share.
 */
public final class KvPattern {
    static final int STRIDE = 512;
    private final MemorySegment template;

    public KvPattern(long maxItemBytes, long seed) {
        template = MemorySegment.ofArray(new byte[(int) maxItemBytes]);
        SplittableRandom rnd = new SplittableRandom(seed);
        for (long i = 0; i + 8 <= maxItemBytes; i += 8) template.set(ValueLayout.JAVA_LONG_UNALIGNED, i, rnd.nextLong());
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
        fill(dst, key, false);
    }

    /**
     * As {@link #fill(MemorySegment, long)}; with {@code templateInPlace} the caller guarantees
     * {@code dst} already holds this pattern's template between the stamps (a source page it filled
     * before and nobody else writes), so only the stamps are rewritten.
     */
    public void fill(MemorySegment dst, long key, boolean templateInPlace) {
        long n = dst.byteSize();
        if (!templateInPlace) MemorySegment.copy(template, 0, dst, 0, n);
        for (long off = 0; off + 8 <= n; off += STRIDE) dst.set(ValueLayout.JAVA_LONG_UNALIGNED, off, key + off);
    }

    /**
     * True when {@code actual} holds exactly the item for {@code key}: each stamp is checked, and
     * the bytes between stamps are compared with the template directly (no expected copy is built).
     */
    public boolean matches(MemorySegment actual, long key) {
        long n = actual.byteSize();
        for (long off = 0; off < n; off += STRIDE) {
            long end = Math.min(n, off + STRIDE);
            long body = off + 8;
            if (body <= n) {
                if (actual.get(ValueLayout.JAVA_LONG_UNALIGNED, off) != key + off) return false;
            } else {
                body = off; // a tail shorter than a stamp is plain template
            }
            if (body < end && MemorySegment.mismatch(actual, body, end, template, body, end) >= 0) return false;
        }
        return true;
    }
}
