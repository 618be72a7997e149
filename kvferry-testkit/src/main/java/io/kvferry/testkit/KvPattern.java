package io.kvferry.testkit;


import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.SplittableRandom;

/**
 * Deterministic content for every byte a request moves — a logical KV oracle — so the decode side
 * can verify each destination byte without seeing the source, whatever the TP layouts. The unit is
 * one head of one token ({@code unitBytes}); for aux rows and state slots, {@value #STRIDE} bytes.
 * A unit is a random template stamped at its start with a key of (room, region, buffer, logical
 * position, global head): a byte from the wrong page, token, head, buffer or request, or a torn
 * copy, shows up as a mismatch.
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

    public static long key(long room, int region, int component, int buffer, long index, int head) {
        long h = room * 0x9E3779B97F4A7C15L;
        h ^= (region * 31L + component) * 0xC2B2AE3D27D4EB4FL;
        h ^= (buffer + 1L) * 0x165667B19E3779F9L;
        h ^= (index + 1L) * 0xD6E8FEB86659FD93L;
        h ^= (head + 1L) * 0xFF51AFD7ED558CCDL;
        return h ^ (h >>> 29);
    }

    /** Writes the item for {@code key} into {@code dst} (its whole size), stamped every {@value #STRIDE} bytes. */
    public void fill(MemorySegment dst, long key) {
        fill(dst, key, false);
    }

    /**
     * As {@link #fill(MemorySegment, long)}; with {@code templateInPlace} the caller guarantees
     * {@code dst} already holds this pattern's template between the stamps, so only stamps change.
     */
    public void fill(MemorySegment dst, long key, boolean templateInPlace) {
        long n = dst.byteSize();
        if (!templateInPlace) MemorySegment.copy(template, 0, dst, 0, n);
        for (long off = 0; off + 8 <= n; off += STRIDE) dst.set(ValueLayout.JAVA_LONG_UNALIGNED, off, key + off);
    }

    /** True when {@code actual} holds exactly the item {@link #fill(MemorySegment, long)} writes for {@code key}. */
    public boolean matches(MemorySegment actual, long key) {
        return matches(actual, key, false);
    }

    /**
     * As {@link #matches(MemorySegment, long)}; with {@code skipFirstStamp} the first 8 bytes are not
     * checked (they hold something else, e.g. the bootstrap_room column of a metadata row).
     */
    public boolean matches(MemorySegment actual, long key, boolean skipFirstStamp) {
        long n = actual.byteSize();
        for (long off = 0; off < n; off += STRIDE) {
            long end = Math.min(n, off + STRIDE);
            long body = off + 8;
            if (body <= n) {
                boolean skip = skipFirstStamp && off == 0;
                if (!skip && actual.get(ValueLayout.JAVA_LONG_UNALIGNED, off) != key + off) return false;
            } else {
                body = off;
            }
            if (body < end && MemorySegment.mismatch(actual, body, end, template, body, end) >= 0) return false;
        }
        return true;
    }

    /**
     * Fills one KV page laid out as [token][local head][unitBytes]: each (token, head) unit is the
     * template stamped with the key of (room, buffer, logical token, global head).
     *
     * @param globalHeads global head id of each local head slot
     */
    public void fillPage(MemorySegment page, long room, int buffer, long firstToken, int tokens, int[] globalHeads,
                         long unitBytes, boolean templateInPlace) {
        if (!templateInPlace) {
            for (long u = 0, n = (long) tokens * globalHeads.length; u < n; u++) {
                MemorySegment.copy(template, 0, page, u * unitBytes, unitBytes);
            }
        }
        long base = key(room, 0, 0, buffer, 0, 0), off = 0;
        for (int t = 0; t < tokens; t++) {
            long tokenKey = base + (firstToken + t) * UNIT_KEY_TOKEN_STEP;
            for (int gh : globalHeads) {
                page.set(ValueLayout.JAVA_LONG_UNALIGNED, off, tokenKey + gh);
                off += unitBytes;
            }
        }
    }

    /** Unit keys are the (room, buffer) hash plus token × this plus head: distinct for < 2^16 heads. */
    private static final long UNIT_KEY_TOKEN_STEP = 1L << 16;

    /** True when {@code page} holds exactly what {@link #fillPage} writes for these arguments. */
    public boolean pageMatches(MemorySegment page, long room, int buffer, long firstToken, int tokens, int[] globalHeads,
                               long unitBytes) {
        long base = key(room, 0, 0, buffer, 0, 0), off = 0;
        for (int t = 0; t < tokens; t++) {
            long tokenKey = base + (firstToken + t) * UNIT_KEY_TOKEN_STEP;
            for (int gh : globalHeads) {
                if (page.get(ValueLayout.JAVA_LONG_UNALIGNED, off) != tokenKey + gh) return false;
                if (MemorySegment.mismatch(page, off + 8, off + unitBytes, template, 8, unitBytes) >= 0) return false;
                off += unitBytes;
            }
        }
        return true;
    }
}
