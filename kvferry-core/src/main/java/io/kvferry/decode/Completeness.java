package io.kvferry.decode;

import io.kvferry.api.ChecksumMode;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.memory.SegmentCrc;
import io.kvferry.protocol.Coverage;
import io.kvferry.protocol.Region;
import io.kvferry.transport.PageDigest;

import java.lang.foreign.MemorySegment;
import java.util.Arrays;
import java.util.List;

/**
 * "Success means complete" on the decode side, from its own metadata alone: which bytes each prefill
 * rank owes a room (the coverage it declared in HELLO_ACK × the room's pages, aux row and state
 * slots), whether the room's prefill ranks together cover every byte of what it asked for, and the
 * page digest a rank's STATUS must match. Pure apart from reading the decode's own memory for the
 * digest; unit-tested without sockets.
 */
final class Completeness {
    private Completeness() {}

    /**
     * Null when the coverages of a room's writing prefill ranks together fill every byte of every KV
     * page, of the aux row (when {@code needsAux}) and of every state slot of the components in
     * {@code stateNeeded}; else which bytes no rank writes.
     */
    static String uncovered(List<Coverage> writers, RegisteredMemory mine, boolean needsAux, boolean[] stateNeeded) {
        long[] kvItems = mine.kvItemLens();
        for (int b = 0; b < kvItems.length; b++) {
            int n = 0;
            long[][] ranges = new long[writers.size()][];
            for (Coverage c : writers) {
                if (c.kvLength()[b] > 0) ranges[n++] = new long[] {c.kvUnit()[b], c.kvOffset()[b], c.kvLength()[b]};
            }
            String gap = gap(Arrays.copyOf(ranges, n));
            if (gap != null) return "KV buffer " + b + ": " + gap;
        }
        if (needsAux && writers.stream().noneMatch(Coverage::aux)) return "no prefill rank of the room writes its aux row";
        for (int c = 0; c < stateNeeded.length; c++) {
            if (!stateNeeded[c]) continue;
            for (int t = 0; t < mine.stateTensorCount(c); t++) {
                int n = 0;
                long[][] ranges = new long[writers.size()][];
                for (Coverage w : writers) {
                    if (w.state() && w.stateLength()[c][t] > 0) {
                        ranges[n++] = new long[] {w.stateUnit()[c][t], w.stateOffset()[c][t], w.stateLength()[c][t]};
                    }
                }
                String gap = gap(Arrays.copyOf(ranges, n));
                if (gap != null) return "state component " + c + " tensor " + t + ": " + gap;
            }
        }
        return null;
    }

    /** Whether ranges {unit, offset, length} of one unit size fill the whole unit; else the first gap. */
    private static String gap(long[][] ranges) {
        if (ranges.length == 0) return "no prefill rank of the room writes it";
        long unit = ranges[0][0];
        for (long[] r : ranges) {
            if (r[0] != unit) return "prefill ranks split it into different units (" + unit + " and " + r[0] + " bytes)";
        }
        Arrays.sort(ranges, (x, y) -> Long.compare(x[1], y[1]));
        long covered = 0;
        for (long[] r : ranges) {
            if (r[1] > covered) return "bytes [" + covered + ", " + r[1] + ") of every " + unit + "-byte unit are written by no prefill rank";
            covered = Math.max(covered, r[1] + r[2]);
        }
        return covered < unit ? "bytes [" + covered + ", " + unit + ") of every " + unit + "-byte unit are written by no prefill rank"
                : null;
    }

    /** The bytes a rank with coverage {@code c} owes a room: {@code pages} KV pages, the aux row, the state slots. */
    static long owed(Coverage c, RegisteredMemory mine, int pages, int auxIndex, int[][] state) {
        long bytes = 0;
        long[] kvItems = mine.kvItemLens();
        for (int b = 0; b < kvItems.length; b++) bytes += c.kvBytesPerPage(b, kvItems[b]) * pages;
        if (c.aux() && auxIndex >= 0) {
            for (long item : mine.auxItemLens()) bytes += item;
        }
        if (c.state()) {
            long[][] items = mine.stateItemLens();
            for (int k = 0; k < state.length && k < items.length; k++) {
                long perSlot = 0;
                for (int t = 0; t < items[k].length; t++) perSlot += c.stateBytesPerItem(k, t, items[k][t]);
                bytes += perSlot * state[k].length;
            }
        }
        return bytes;
    }

    /**
     * The first KV page (index into the room's pages in token order) and how many a CP rank sends
     * under all-CP-ranks transfer: its contiguous share, the first {@code total % cp} ranks one more.
     */
    static int[] cpShare(int total, int cpSize, int cpRank) {
        int base = total / cpSize, extra = total % cpSize;
        int start = cpRank * base + Math.min(cpRank, extra);
        return new int[] {start, base + (cpRank < extra ? 1 : 0)};
    }

    /**
     * The page digest a link's STATUS must carry for a room ({@link PageDigest}), recomputed from
     * what landed in this rank's memory.
     *
     * @param pages the room's KV pages this link wrote (its CP share of them, in token order)
     */
    static long digest(Coverage c, RegisteredMemory mine, int[] pages, int auxIndex, int[][] state, long room,
                       ChecksumMode mode, SegmentCrc crc) {
        long digest = 0;
        long[] kvItems = mine.kvItemLens();
        for (int b = 0; b < kvItems.length; b++) {
            if (c.kvLength()[b] == 0) continue;
            MemorySegment seg = mine.segmentOrNull(Region.KV, 0, b);
            for (int p : pages) {
                digest += PageDigest.ofItem(seg, Region.KV, 0, b, p, kvItems[b], c.kvUnit()[b], c.kvOffset()[b], c.kvLength()[b],
                        room, mode, crc);
            }
        }
        if (c.aux() && auxIndex >= 0) {
            long[] items = mine.auxItemLens();
            for (int b = 0; b < items.length; b++) {
                digest += PageDigest.ofItem(mine.segmentOrNull(Region.AUX, 0, b), Region.AUX, 0, b, auxIndex, items[b], items[b], 0,
                        items[b], room, mode, crc);
            }
        }
        if (c.state()) {
            long[][] items = mine.stateItemLens();
            for (int k = 0; k < state.length && k < items.length; k++) {
                for (int t = 0; t < items[k].length; t++) {
                    if (c.stateLength()[k][t] == 0) continue;
                    MemorySegment seg = mine.segmentOrNull(Region.STATE, k, t);
                    for (int slot : state[k]) {
                        digest += PageDigest.ofItem(seg, Region.STATE, k, t, slot, items[k][t], c.stateUnit()[k][t],
                                c.stateOffset()[k][t], c.stateLength()[k][t], room, mode, crc);
                    }
                }
            }
        }
        return digest;
    }
}
