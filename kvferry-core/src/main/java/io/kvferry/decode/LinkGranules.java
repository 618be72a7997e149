package io.kvferry.decode;

import io.kvferry.memory.RegisteredMemory;
import io.kvferry.plan.Granules;
import io.kvferry.protocol.Coverage;
import io.kvferry.protocol.Region;

/**
 * What one prefill rank may write of this decode rank's memory, per buffer, in the
 * {@linkplain Granules granules} both sides cut it into: built once per link from the coverage its
 * HELLO_ACK declared (already {@linkplain Coverage#checkAgainst checked} against this memory), and
 * the layout of the room's written-bits for it. A write the gate admits from this link must be one
 * granule, or a run of whole items each one granule, of a buffer this link covers; each granule gets
 * one bit per room, so none can be written twice (docs/PROTOCOL.md, "Success means complete").
 * Immutable.
 */
final class LinkGranules {
    /** The geometry of one covered buffer: bytes {@code [offset, offset + length)} of every {@code unit}-byte unit of each item. */
    record Covered(long item, long unit, long offset, long length, long granule, long perItem) {
        static Covered of(long item, long unit, long offset, long length) {
            long units = item / unit;
            boolean contiguous = length == unit;
            return new Covered(item, unit, offset, length, Granules.granuleBytes(length, units, contiguous),
                    Granules.perItem(length, units, contiguous));
        }

        long itemPayload() {
            return length * (item / unit);
        }

        /** Where a write starting at buffer offset {@code at} starts in its item's payload; -1 when no covered slice starts there. */
        long position(long at) {
            long inItem = at % item;
            if (length == unit) return inItem;
            return inItem % unit == offset ? inItem / unit * length : -1;
        }

        /**
         * How many whole items a write is, when it is a run of whole items each one granule (from
         * an item's start), or 1 when it is exactly one granule of a larger item; -1 when it is
         * neither (a partial granule, other bytes than the covered slices, another piece shape).
         *
         * @param piece  bytes per piece ({@code payload} for a contiguous write)
         * @param stride destination bytes from one piece's start to the next
         */
        long items(long at, long span, long payload, long piece, long stride) {
            long position = position(at);
            boolean shaped = length == unit ? span == payload : piece == length && (payload == piece || stride == unit);
            if (!shaped || position < 0 || position % granule != 0 || payload <= 0) return -1;
            if (perItem == 1) return payload % itemPayload() == 0 ? payload / itemPayload() : -1;
            return payload == Math.min(granule, itemPayload() - position) ? 1 : -1;
        }

        @Override
        public String toString() {
            return length == unit ? "whole " + item + "-byte items" + (perItem > 1 ? " in " + granule + "-byte parts" : "")
                    : "bytes [" + offset + ", +" + length + ") of every " + unit + "-byte unit of its " + item + "-byte items"
                    + (perItem > 1 ? " in " + granule + "-byte parts" : "");
        }
    }

    /** A link that writes nothing (one not yet registered, a data stripe's acknowledgement). */
    static final LinkGranules NONE = new LinkGranules(new Covered[0], new Covered[0], new Covered[0][]);

    private final Covered[] kv;
    private final Covered[] aux;
    private final Covered[][] state;
    /** Bits per room page before KV buffer b's (Σ perItem of covered buffers before it), and in all. */
    private final long[] kvBitsBefore;
    private final long kvBitsPerPage;
    private final long[] auxBitsBefore;
    private final long auxBits;

    private LinkGranules(Covered[] kv, Covered[] aux, Covered[][] state) {
        this.kv = kv;
        this.aux = aux;
        this.state = state;
        kvBitsBefore = new long[kv.length];
        long bits = 0;
        for (int b = 0; b < kv.length; b++) {
            kvBitsBefore[b] = bits;
            if (kv[b] != null) bits += kv[b].perItem();
        }
        kvBitsPerPage = bits;
        auxBitsBefore = new long[aux.length];
        bits = 0;
        for (int b = 0; b < aux.length; b++) {
            auxBitsBefore[b] = bits;
            if (aux[b] != null) bits += aux[b].perItem();
        }
        auxBits = bits;
    }

    /**
     * The granules of {@code coverage} over {@code memory}.
     *
     * @throws io.kvferry.plan.PlanException when a covered slice cannot be cut into ops
     */
    static LinkGranules of(Coverage coverage, RegisteredMemory memory) {
        Covered[] kv = new Covered[memory.kvBufferCount()];
        for (int b = 0; b < kv.length; b++) {
            if (coverage.kvLength()[b] > 0) {
                kv[b] = Covered.of(memory.kvItemLen(b), coverage.kvUnit()[b], coverage.kvOffset()[b], coverage.kvLength()[b]);
            }
        }
        long[] auxItems = memory.auxItemLens();
        Covered[] aux = new Covered[auxItems.length];
        for (int b = 0; b < aux.length; b++) if (coverage.aux()) aux[b] = Covered.of(auxItems[b], auxItems[b], 0, auxItems[b]);
        long[][] stateItems = memory.stateItemLens();
        Covered[][] state = new Covered[stateItems.length][];
        for (int c = 0; c < state.length; c++) {
            state[c] = new Covered[stateItems[c].length];
            for (int t = 0; t < state[c].length; t++) {
                if (coverage.state() && coverage.stateLength()[c][t] > 0) {
                    state[c][t] = Covered.of(stateItems[c][t], coverage.stateUnit()[c][t], coverage.stateOffset()[c][t],
                            coverage.stateLength()[c][t]);
                }
            }
        }
        return new LinkGranules(kv, aux, state);
    }

    /** The covered geometry of a buffer, or null when this link writes none of it. */
    Covered covered(Region region, int component, int buffer) {
        return switch (region) {
            case KV -> buffer < kv.length ? kv[buffer] : null;
            case AUX -> buffer < aux.length ? aux[buffer] : null;
            case STATE -> component < state.length && buffer < state[component].length ? state[component][buffer] : null;
        };
    }

    /** Bits this link needs per room of {@code pages} KV pages (its share), an aux row or not, and these state indices. */
    long bits(int pages, boolean auxRow, int[][] stateIndices) {
        return stateBitsBefore(pages, auxRow, stateIndices, state.length, 0);
    }

    /** The first bit of buffer {@code (region, component, buffer)} within this link's bits of a room. */
    long firstBit(Region region, int component, int buffer, int pages, boolean auxRow, int[][] stateIndices) {
        return switch (region) {
            case KV -> pages * kvBitsBefore[buffer];
            case AUX -> pages * kvBitsPerPage + auxBitsBefore[buffer];
            case STATE -> stateBitsBefore(pages, auxRow, stateIndices, component, buffer);
        };
    }

    /** Bits of the KV pages, the aux row and the state tensors before tensor {@code (component, tensor)}. */
    private long stateBitsBefore(int pages, boolean auxRow, int[][] stateIndices, int component, int tensor) {
        long bits = pages * kvBitsPerPage + (auxRow ? auxBits : 0);
        for (int c = 0; c <= component && c < state.length; c++) {
            int indices = stateIndices != null && c < stateIndices.length ? stateIndices[c].length : 0;
            for (int t = 0; t < (c == component ? tensor : state[c].length); t++) {
                if (state[c][t] != null) bits += indices * state[c][t].perItem();
            }
        }
        return bits;
    }
}
