package io.kvferry.transport;

import io.kvferry.memory.RegisteredMemory;
import io.kvferry.plan.CopyPlan;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.protocol.Region;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.util.Arrays;

/**
 * The decode buffers a one-sided offer (shm, ucx) makes reachable, checked against the shape the
 * decode declared in HELLO, and the bounds checks every one-sided write goes through. Shared by
 * every one-sided transport so a hostile offer or plan meets the same rules whatever moves the bytes:
 * each declared buffer is offered exactly once with exactly its declared length, nothing else is
 * offered, and an op's source and destination ranges lie inside their buffers before a byte moves.
 * Immutable once built; the transport keeps its own handles (mapped windows, remote keys) by
 * {@linkplain #entry entry index}, the order in which the offer listed the buffers.
 */
public final class RemoteBuffers {
    private final String peer;
    private final int[] kv, aux;
    private final int[][] state;
    private final long[] lengths;

    private RemoteBuffers(String peer, int[] kv, int[] aux, int[][] state, long[] lengths) {
        this.peer = peer;
        this.kv = kv;
        this.aux = aux;
        this.state = state;
        this.lengths = lengths;
    }

    /** Collects an offer's buffers in the order it lists them. */
    public static Builder builder(MemoryDescriptor declared, String peer) {
        return new Builder(declared, peer);
    }

    /** The entry index of a buffer, or -1 when the decode offered no such buffer. */
    public int entry(Region r, int component, int buffer) {
        if (buffer < 0 || component < 0) return -1;
        return switch (r) {
            case KV -> component == 0 && buffer < kv.length ? kv[buffer] : -1;
            case AUX -> component == 0 && buffer < aux.length ? aux[buffer] : -1;
            case STATE -> component < state.length && buffer < state[component].length ? state[component][buffer] : -1;
        };
    }

    /** How many buffers the offer listed. */
    public int size() {
        return lengths.length;
    }

    public long length(int entry) {
        return lengths[entry];
    }

    /**
     * Checks op {@code op} of a plan against the decode's buffers: its destination buffer exists and
     * the bytes it touches lie inside it.
     *
     * @return the destination's entry index
     * @throws IOException naming the op, the range and the buffer
     */
    public int checkDestination(long room, CopyPlan plan, int op) throws IOException {
        int e = entry(plan.region(op), plan.component(op), plan.dstBuffer(op));
        if (e < 0) {
            throw new IOException("room " + room + ": decode " + peer + " has no " + plan.region(op) + " buffer "
                    + plan.component(op) + "/" + plan.dstBuffer(op));
        }
        long at = plan.dstOffset(op), span = plan.dstSpan(op), size = lengths[e];
        if (at < 0 || span < 0 || at > size || span > size - at) {
            throw new IOException("room " + room + ": write [" + at + ", +" + span + ") is outside " + plan.region(op) + " buffer "
                    + plan.component(op) + "/" + plan.dstBuffer(op) + " of " + size + " bytes at " + peer);
        }
        return e;
    }

    /**
     * Checks the source side of op {@code op}: the prefill buffer exists and the bytes read lie inside it.
     *
     * @return the whole source buffer (no slice: nothing is allocated per op)
     */
    public static MemorySegment checkSource(long room, CopyPlan plan, int op, RegisteredMemory source) throws IOException {
        MemorySegment src = source.segmentOrNull(plan.region(op), plan.component(op), plan.buffer(op));
        if (src == null) {
            throw new IOException("room " + room + ": no " + plan.region(op) + " buffer " + plan.component(op) + "/" + plan.buffer(op)
                    + " on this prefill");
        }
        long from = plan.srcOffset(op), span = plan.srcSpan(op);
        if (from < 0 || span < 0 || from > src.byteSize() || span > src.byteSize() - from) {
            throw new IOException("room " + room + ": read [" + from + ", +" + span + ") is outside source " + plan.region(op)
                    + " buffer " + plan.component(op) + "/" + plan.buffer(op) + " of " + src.byteSize() + " bytes");
        }
        return src;
    }

    /** An offer that contradicts the decode's HELLO. */
    public static final class OfferMismatch extends IOException {
        public OfferMismatch(String message) {
            super(message);
        }
    }

    /** Not thread-safe; used while one offer is parsed. */
    public static final class Builder {
        private final MemoryDescriptor shape;
        private final String peer;
        private final int[] kv, aux;
        private final int[][] state;
        private long[] lengths = new long[8];
        private int count;

        private Builder(MemoryDescriptor shape, String peer) {
            this.shape = shape;
            this.peer = peer;
            kv = filled(shape.kvLengths().length);
            aux = filled(shape.auxLengths().length);
            state = new int[shape.states().size()][];
            for (int c = 0; c < state.length; c++) state[c] = filled(shape.states().get(c).lengths().length);
        }

        /**
         * Adds the offer's next buffer.
         *
         * @return its entry index
         * @throws OfferMismatch when HELLO does not declare it, declares another length, or it was offered before
         */
        public int add(Region r, int component, int buffer, long length) throws OfferMismatch {
            int[] slots = null;
            long declared = -1;
            if (component >= 0 && buffer >= 0) {
                switch (r) {
                    case KV -> {
                        if (component == 0 && buffer < kv.length) {
                            slots = kv;
                            declared = shape.kvLengths()[buffer];
                        }
                    }
                    case AUX -> {
                        if (component == 0 && buffer < aux.length) {
                            slots = aux;
                            declared = shape.auxLengths()[buffer];
                        }
                    }
                    case STATE -> {
                        if (component < state.length && buffer < state[component].length) {
                            slots = state[component];
                            declared = shape.states().get(component).lengths()[buffer];
                        }
                    }
                }
            }
            String name = r + " buffer " + component + "/" + buffer;
            if (slots == null) throw new OfferMismatch("the offer of " + peer + " names " + name + ", which the decode's HELLO does not declare");
            if (declared != length) {
                throw new OfferMismatch("the offer of " + peer + " gives " + name + " " + length + " bytes but HELLO declares " + declared);
            }
            if (slots[buffer] >= 0) throw new OfferMismatch("the offer of " + peer + " names " + name + " twice");
            if (count == lengths.length) lengths = Arrays.copyOf(lengths, count * 2);
            lengths[count] = length;
            slots[buffer] = count;
            return count++;
        }

        /** @throws OfferMismatch naming the first declared buffer the offer lacks */
        public RemoteBuffers build() throws OfferMismatch {
            for (int b = 0; b < kv.length; b++) if (kv[b] < 0) throw new OfferMismatch("the offer of " + peer + " lacks KV buffer " + b);
            for (int b = 0; b < aux.length; b++) if (aux[b] < 0) throw new OfferMismatch("the offer of " + peer + " lacks AUX buffer " + b);
            for (int c = 0; c < state.length; c++) {
                for (int b = 0; b < state[c].length; b++) {
                    if (state[c][b] < 0) throw new OfferMismatch("the offer of " + peer + " lacks STATE buffer " + c + "/" + b);
                }
            }
            return new RemoteBuffers(peer, kv, aux, state, Arrays.copyOf(lengths, count));
        }

        private static int[] filled(int n) {
            int[] a = new int[n];
            Arrays.fill(a, -1);
            return a;
        }
    }
}
