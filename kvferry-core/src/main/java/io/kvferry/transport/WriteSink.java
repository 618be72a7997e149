package io.kvferry.transport;

import io.kvferry.api.ChecksumMode;
import io.kvferry.protocol.Region;

import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.IdentityHashMap;

/**
 * The decode side's gate for incoming writes. {@link #begin} checks a write lies inside
 * registered memory and inside the pages/rows/slots the room owns, and registers it as in flight;
 * {@link #end} retires it. A room that is cleared waits for its in-flight writes, so no byte of a
 * room lands after its receiver's {@code clear()} returned.
 */
public interface WriteSink {
    /**
     * One writer's landing, reused for every write it lands (one per tcp reader thread or inproc
     * writer call): the gate fills it in {@link #begin}, so admitting a write allocates nothing.
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
        /** ByteBuffer views of the destination buffers this landing has used, made once each. */
        private final IdentityHashMap<MemorySegment, ByteBuffer> views = new IdentityHashMap<>();

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

        /**
         * The write's destination bytes as a ByteBuffer (for a socket read), positioned at
         * {@code offset} with {@code span} bytes remaining: a view of the whole buffer made once and
         * reused; a slice for a buffer beyond ByteBuffer's 2 GiB.
         */
        public ByteBuffer target() {
            if (buffer.byteSize() > Integer.MAX_VALUE) return buffer.asSlice(offset, span).asByteBuffer();
            ByteBuffer view = views.get(buffer);
            if (view == null) {
                view = buffer.asByteBuffer();
                views.put(buffer, view);
            }
            view.limit((int) (offset + span)).position((int) offset);
            return view;
        }
    }

    /**
     * Admits a write into {@code into}: only from a link that is one of the room's sources
     * ({@link Landing#source()}), and only while the room is neither failed nor concluded.
     *
     * @param span    destination bytes the write touches, from its first to its last byte
     * @param payload bytes actually written (less than {@code span} for a strided write)
     * @throws WriteRejectedException naming why the write may not land
     */
    void begin(Landing into, long room, Region region, int component, int buffer, long offset, long span, long payload)
            throws WriteRejectedException;

    /** Retires an admitted landing; {@code landed} says whether all its bytes were written. */
    void end(Landing landing, boolean landed);
}
