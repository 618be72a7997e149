package io.kvferry.protocol;

/**
 * The fixed part of a WRITE_LIST: many small contiguous writes of one room in one frame (a piece
 * list), followed on the stream by one payload, the pieces' bytes back to back in list order. The
 * decode admits the whole list through its write gate once (each piece checked against the room)
 * and lands the payload with one scattering read into the pieces' destinations.
 *
 * <p>Pieces are strictly ascending by (region, component, buffer, offset) and never overlap, so a
 * list cannot count one destination byte twice (checked when the frame is decoded, in one pass).
 *
 * <p>Not a record: a connection's reader decodes every WRITE_LIST into one reused list
 * ({@link FrameCodec#decodeWriteListInto}), valid until that connection's next read; landing a list
 * allocates nothing. Struct-of-arrays with room for {@link #MAX_PIECES} pieces.
 */
public final class WriteList implements ControlMessage {
    /** room u64, flags u8, pad u8, reserved u16, piece count u32, payload length u64, crc u32, pad u32. */
    public static final int FIXED_BYTES = 32;
    /** Per piece: region u8, pad u8, component u16, buffer u32, offset u64, length u64. */
    public static final int PIECE_BYTES = 24;
    /**
     * Pieces per list: a frame's body (12 KiB) is decoded in place from the reader's 16 KiB read-ahead,
     * and with its frame a list is at most 512 buffers of one gathering write (IOV_MAX is 1024).
     */
    public static final int MAX_PIECES = 511;
    /** The largest list payload (the largest single op); bigger ops travel in lists of their own. */
    public static final long MAX_PAYLOAD_BYTES = Wire.MAX_STRIDED_WRITE_BYTES;
    /** The largest WRITE_LIST body. */
    public static final int MAX_BODY_BYTES = FIXED_BYTES + PIECE_BYTES * MAX_PIECES;
    /** Flags bit: {@code crc} holds the CRC32C of the whole payload (pieces in list order). */
    public static final int FLAG_CRC = 1;

    private long room;
    private boolean hasCrc;
    private int crc;
    private int count;
    private long payloadLength;
    private final Region[] region;
    private final int[] component;
    private final int[] buffer;
    private final long[] offset;
    private final long[] length;

    private WriteList(int capacity) {
        region = new Region[capacity];
        component = new int[capacity];
        buffer = new int[capacity];
        offset = new long[capacity];
        length = new long[capacity];
    }

    /** A list for one reader to decode frames into (room for {@link #MAX_PIECES} pieces). */
    public static WriteList reusable() {
        return new WriteList(MAX_PIECES);
    }

    /** A list built piece by piece (tests, tools); {@link #add} up to {@code capacity} pieces. */
    public static WriteList builder(long room, int capacity) {
        WriteList l = new WriteList(Math.min(Math.max(1, capacity), MAX_PIECES));
        l.room = room;
        return l;
    }

    /** Appends a piece (builder use; the frame's order and overlap rules are checked when it is decoded). */
    public WriteList add(Region r, int comp, int buf, long off, long len) {
        region[count] = r;
        component[count] = comp;
        buffer[count] = buf;
        offset[count] = off;
        length[count] = len;
        count++;
        payloadLength += len;
        return this;
    }

    /** Sets the payload's CRC32C (builder use). */
    public WriteList withCrc(int value) {
        hasCrc = true;
        crc = value;
        return this;
    }

    void begin(long room, boolean hasCrc, int crc, int count, long payloadLength) {
        this.room = room;
        this.hasCrc = hasCrc;
        this.crc = hasCrc ? crc : 0;
        this.count = count;
        this.payloadLength = payloadLength;
    }

    void set(int i, Region r, int comp, int buf, long off, long len) {
        region[i] = r;
        component[i] = comp;
        buffer[i] = buf;
        offset[i] = off;
        length[i] = len;
    }

    int capacity() {
        return region.length;
    }

    public long room() {
        return room;
    }

    /** Pieces in the list. */
    public int count() {
        return count;
    }

    /** Payload bytes: the sum of the pieces' lengths. */
    public long payloadLength() {
        return payloadLength;
    }

    public boolean hasCrc() {
        return hasCrc;
    }

    /** The payload's CRC32C (0 without {@link #hasCrc}). */
    public int crc() {
        return crc;
    }

    public Region region(int piece) {
        return region[piece];
    }

    public int component(int piece) {
        return component[piece];
    }

    public int buffer(int piece) {
        return buffer[piece];
    }

    public long offset(int piece) {
        return offset[piece];
    }

    public long length(int piece) {
        return length[piece];
    }

    /** Body bytes of a list of {@code pieces} pieces. */
    public static int bodyBytes(int pieces) {
        return FIXED_BYTES + PIECE_BYTES * pieces;
    }

    /** An immutable copy (to keep a list past the next read). */
    public WriteList copy() {
        WriteList c = new WriteList(Math.max(1, count));
        c.begin(room, hasCrc, crc, count, payloadLength);
        for (int i = 0; i < count; i++) c.set(i, region[i], component[i], buffer[i], offset[i], length[i]);
        return c;
    }

    @Override
    public MessageType type() {
        return MessageType.WRITE_LIST;
    }

    @Override
    public boolean equals(Object o) {
        if (!(o instanceof WriteList w) || w.room != room || w.hasCrc != hasCrc || w.crc != crc || w.count != count
                || w.payloadLength != payloadLength) {
            return false;
        }
        for (int i = 0; i < count; i++) {
            if (w.region[i] != region[i] || w.component[i] != component[i] || w.buffer[i] != buffer[i]
                    || w.offset[i] != offset[i] || w.length[i] != length[i]) {
                return false;
            }
        }
        return true;
    }

    @Override
    public int hashCode() {
        long h = room * 31 + count;
        for (int i = 0; i < count; i++) h = h * 31 + offset[i] * 7 + length[i] + buffer[i];
        return Long.hashCode(h);
    }

    @Override
    public String toString() {
        StringBuilder sb = new StringBuilder("WriteList[room=").append(room).append(", pieces=").append(count)
                .append(", payload=").append(payloadLength);
        if (hasCrc) sb.append(", crc=").append(Integer.toHexString(crc));
        for (int i = 0; i < Math.min(count, 8); i++) {
            sb.append(i == 0 ? ": " : ", ").append(region[i]).append(':').append(component[i]).append('/').append(buffer[i])
                    .append('@').append(offset[i]).append('+').append(length[i]);
        }
        if (count > 8) sb.append(", …");
        return sb.append(']').toString();
    }
}
