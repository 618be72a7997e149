package io.kvferry.protocol;

/**
 * The fixed part of a WRITE; {@code length} raw bytes follow it on the stream. They land at
 * {@code offset} of the named destination buffer, once the decode side has checked that range
 * belongs to the room. A strided write (head-sliced KV) carries {@code length / pieceLength} pieces
 * back to back; piece i lands at {@code offset + i * dstStride}.
 *
 * <p>Not a record: a connection's reader decodes every WRITE frame into one reused header
 * ({@link FrameCodec#decodeWriteInto}), so landing a page allocates nothing. A header returned by
 * {@code ControlConnection.read()} is valid until that connection's next read; one built with a
 * constructor never changes.
 *
 * <p>Fields: {@code component} the state component index (0 for KV and aux); {@code buffer} the
 * buffer index within the region (within the component for state); {@code pieceLength} the bytes of
 * one piece, equal to {@code length} for a contiguous write; {@code dstStride} the distance between
 * the starts of consecutive pieces at the destination.
 */
public final class WriteHeader implements ControlMessage {
    /**
     * room u64, region u8, flags u8, component u16, buffer u32, offset u64, length u64, piece u64, stride u64,
     * crc u32, pad u32.
     */
    public static final int BODY_BYTES = 56;
    /** Flags bit: {@code crc} holds the CRC32C of the payload (in payload order). */
    public static final int FLAG_CRC = 1;

    private long room;
    private Region region;
    private int component;
    private int buffer;
    private long offset;
    private long length;
    private long pieceLength;
    private long dstStride;
    private boolean hasCrc;
    private int crc;

    public WriteHeader(long room, Region region, int component, int buffer, long offset, long length, long pieceLength,
                       long dstStride) {
        set(room, region, component, buffer, offset, length, pieceLength, dstStride, false, 0);
    }

    /** A header carrying the payload's CRC32C. */
    public WriteHeader(long room, Region region, int component, int buffer, long offset, long length, long pieceLength,
                       long dstStride, int crc) {
        set(room, region, component, buffer, offset, length, pieceLength, dstStride, true, crc);
    }

    /** A contiguous write: one piece of the whole length. */
    public WriteHeader(long room, Region region, int component, int buffer, long offset, long length) {
        this(room, region, component, buffer, offset, length, length, length);
    }

    /** A header for one reader to decode frames into. */
    public static WriteHeader reusable() {
        return new WriteHeader(0, Region.KV, 0, 0, 0, 0, 0, 0);
    }

    void set(long room, Region region, int component, int buffer, long offset, long length, long pieceLength, long dstStride,
             boolean hasCrc, int crc) {
        this.hasCrc = hasCrc;
        this.crc = hasCrc ? crc : 0;
        this.room = room;
        this.region = region;
        this.component = component;
        this.buffer = buffer;
        this.offset = offset;
        this.length = length;
        this.pieceLength = pieceLength;
        this.dstStride = dstStride;
    }

    public long room() {
        return room;
    }

    public Region region() {
        return region;
    }

    public int component() {
        return component;
    }

    public int buffer() {
        return buffer;
    }

    public long offset() {
        return offset;
    }

    public long length() {
        return length;
    }

    public long pieceLength() {
        return pieceLength;
    }

    public long dstStride() {
        return dstStride;
    }

    /** Whether the frame carries the payload's CRC32C ({@link #crc}). */
    public boolean hasCrc() {
        return hasCrc;
    }

    /** The payload's CRC32C, in payload order (0 without {@link #hasCrc}). */
    public int crc() {
        return crc;
    }

    public boolean strided() {
        return pieceLength != length;
    }

    /** Pieces in the payload (1 for a contiguous write). */
    public long pieces() {
        return pieceLength == 0 ? 1 : length / pieceLength;
    }

    /** Destination bytes from the first piece's start to the last piece's end. */
    public long span() {
        return strided() ? (pieces() - 1) * dstStride + pieceLength : length;
    }

    /** An immutable copy (to keep a header past the next read). */
    public WriteHeader copy() {
        WriteHeader c = new WriteHeader(room, region, component, buffer, offset, length, pieceLength, dstStride);
        c.set(room, region, component, buffer, offset, length, pieceLength, dstStride, hasCrc, crc);
        return c;
    }

    @Override
    public MessageType type() {
        return MessageType.WRITE;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof WriteHeader w && w.room == room && w.region == region && w.component == component && w.buffer == buffer
                && w.offset == offset && w.length == length && w.pieceLength == pieceLength && w.dstStride == dstStride
                && w.hasCrc == hasCrc && w.crc == crc;
    }

    @Override
    public int hashCode() {
        long h = room;
        h = h * 31 + region.hashCode();
        h = h * 31 + component;
        h = h * 31 + buffer;
        h = h * 31 + offset;
        h = h * 31 + length;
        h = h * 31 + pieceLength;
        h = h * 31 + dstStride;
        h = h * 31 + crc;
        return Long.hashCode(h);
    }

    @Override
    public String toString() {
        return "WriteHeader[room=" + room + ", region=" + region + ", component=" + component + ", buffer=" + buffer + ", offset="
                + offset + ", length=" + length + ", pieceLength=" + pieceLength + ", dstStride=" + dstStride
                + (hasCrc ? ", crc=" + Integer.toHexString(crc) : "") + "]";
    }
}
