package io.kvferry.protocol;

/**
 * The fixed part of a WRITE; {@code length} raw bytes follow it on the stream. They land at
 * {@code offset} of the named destination buffer, once the decode side has checked that range
 * belongs to the room. A strided write (head-sliced KV) carries {@code length / pieceLength} pieces
 * back to back; piece i lands at {@code offset + i * dstStride}.
 *
 * @param component   state component index (0 for KV and aux)
 * @param buffer      buffer index within the region (within the component for state)
 * @param pieceLength bytes of one piece; equal to {@code length} for a contiguous write
 * @param dstStride   distance between the starts of consecutive pieces at the destination
 */
public record WriteHeader(long room, Region region, int component, int buffer, long offset, long length,
                          long pieceLength, long dstStride) implements ControlMessage {
    /** room u64, region u8, pad u8, component u16, buffer u32, offset u64, length u64, piece u64, stride u64. */
    public static final int BODY_BYTES = 48;

    /** A contiguous write. */
    public WriteHeader(long room, Region region, int component, int buffer, long offset, long length) {
        this(room, region, component, buffer, offset, length, length, length);
        // a contiguous write: one piece of the whole length (0 for an empty write)
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

    @Override
    public MessageType type() {
        return MessageType.WRITE;
    }
}
