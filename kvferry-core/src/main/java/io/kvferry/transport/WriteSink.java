package io.kvferry.transport;

import io.kvferry.api.ChecksumMode;
import io.kvferry.protocol.Region;
import io.kvferry.protocol.WriteList;

import java.lang.foreign.MemorySegment;

/**
 * The decode side's gate for incoming writes. {@link #begin} checks a write lies inside
 * registered memory and inside the pages/rows/slots the room owns, and registers it as in flight;
 * {@link #end} retires it. A room that is cleared waits for its in-flight writes, so no byte of a
 * room lands after its receiver's {@code clear()} returned.
 */
public interface WriteSink {
    /**
     * One writer's landing, reused for every write it lands (one per tcp reader thread or inproc
     * writer call): the gate fills it in {@link #begin} or {@link #beginList}, so admitting a write
     * allocates nothing.
     * Owned by one thread at a time.
     */
    final class Landing {
        /** Which link the writes come from (the decode's endpoint key of the prefill rank); set once by its owner. */
        private final String source;
        /** What this link verifies (tcp: WRITEs carry CRCs); set once by its owner. */
        private final ChecksumMode checksum;
        /** The gate's token for the write in flight (the room it counts against) and its slot among the room's sources. */
        private Object token;
        private int slot;
        private MemorySegment buffer;
        private long offset, span, payload;
        /** A list's destination buffer per piece (made on the first list). */
        private MemorySegment[] pieceBuffers;

        /** A landing for the writes of one link. */
        public Landing(String source, ChecksumMode checksum) {
            this.source = source;
            this.checksum = checksum == null ? ChecksumMode.OFF : checksum;
        }

        public String source() {
            return source;
        }

        public ChecksumMode checksum() {
            return checksum;
        }

        /** Called by a gate that admitted a write. */
        public void admit(Object token, int slot, MemorySegment buffer, long offset, long span, long payload) {
            this.token = token;
            this.slot = slot;
            this.buffer = buffer;
            this.offset = offset;
            this.span = span;
            this.payload = payload;
        }

        /** Called by a gate that admitted a piece list: {@code payload} bytes in all, piece buffers set through {@link #pieceBuffers()}. */
        public void admitList(Object token, int slot, long payload) {
            admit(token, slot, null, 0, 0, payload);
        }

        /** Where a gate puts each admitted piece's destination buffer (room for {@link WriteList#MAX_PIECES}). */
        public MemorySegment[] pieceBuffers() {
            MemorySegment[] p = pieceBuffers;
            return p != null ? p : (pieceBuffers = new MemorySegment[WriteList.MAX_PIECES]);
        }

        /** The whole destination buffer of piece {@code i} of the admitted list. */
        public MemorySegment pieceBuffer(int i) {
            return pieceBuffers[i];
        }

        public Object token() {
            return token;
        }

        /** The gate's index of this landing's source among the room's sources. */
        public int slot() {
            return slot;
        }

        /** The whole destination buffer; the write covers {@code [offset, offset + span)} of it. */
        public MemorySegment buffer() {
            return buffer;
        }

        public long offset() {
            return offset;
        }

        public long span() {
            return span;
        }

        public long payload() {
            return payload;
        }
    }

    /**
     * Admits a write into {@code into}: only from a link that is one of the room's sources
     * ({@link Landing#source()}), and only while the room is neither failed nor concluded.
     *
     * @param span    destination bytes the write touches, from its first to its last byte
     * @param payload bytes actually written (less than {@code span} for a strided write)
     * @param piece   bytes per piece of a strided write ({@code payload} for a contiguous one)
     * @param stride  destination bytes from one piece's start to the next (not read for a contiguous write)
     * @throws WriteRejectedException naming why the write may not land
     */
    void begin(Landing into, long room, Region region, int component, int buffer, long offset, long span, long payload, long piece,
               long stride) throws WriteRejectedException;

    /**
     * Admits a whole piece list of one room into {@code into} with one room check: every piece must
     * lie inside a registered buffer and inside what the room owns, from a link that is one of the
     * room's sources, while the room is neither failed nor concluded. Counted in flight once; the
     * landing then holds each piece's destination buffer ({@link Landing#pieceBuffer}).
     *
     * @throws WriteRejectedException naming the first piece (or room condition) that may not land
     */
    void beginList(Landing into, WriteList list) throws WriteRejectedException;

    /** Retires an admitted landing; {@code landed} says whether all its bytes were written. */
    void end(Landing landing, boolean landed);
}
