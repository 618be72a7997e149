package io.kvferry.memory;

import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.IdentityHashMap;
import java.util.zip.CRC32C;

/**
 * A CRC32C over ranges of native segments, reused for every range a thread digests: the JDK's
 * intrinsified CRC32C reads a direct ByteBuffer view of each buffer made once, so digesting a page
 * or a token slice allocates nothing. Owned by one thread.
 */
public final class SegmentCrc {
    private final CRC32C crc = new CRC32C();
    private final IdentityHashMap<MemorySegment, ByteBuffer> views = new IdentityHashMap<>();

    public void reset() {
        crc.reset();
    }

    /** Adds {@code length} bytes of {@code segment} from {@code offset}. */
    public void update(MemorySegment segment, long offset, long length) {
        if (length == 0) return;
        if (segment.byteSize() > Integer.MAX_VALUE) {
            // Beyond a ByteBuffer view's reach: a slice of at most one op (4 MiB) per call.
            crc.update(segment.asSlice(offset, length).asByteBuffer());
            return;
        }
        ByteBuffer view = views.get(segment);
        if (view == null) {
            view = segment.asByteBuffer();
            views.put(segment, view);
        }
        view.clear().position((int) offset).limit((int) (offset + length));
        crc.update(view);
    }

    /** Adds the remaining bytes of {@code buffer} (its position is left unchanged). */
    public void update(ByteBuffer buffer) {
        crc.update(buffer.duplicate());
    }

    /** The CRC32C of everything added since the last {@link #reset}. */
    public int value() {
        return (int) crc.getValue();
    }
}
