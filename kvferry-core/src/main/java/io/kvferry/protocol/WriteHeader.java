package io.kvferry.protocol;

/**
 * The fixed part of a WRITE; {@code length} raw bytes follow it on the stream and land at
 * {@code offset} of the named destination buffer, once the decode side has checked that range
 * belongs to the room.
 *
 * @param component state component index (0 for KV and aux)
 * @param buffer    buffer index within the region (within the component for state)
 */
public record WriteHeader(long room, Region region, int component, int buffer, long offset, long length)
        implements ControlMessage {
    /** room u64, region u8, pad u8, component u16, buffer u32, offset u64, length u64. */
    public static final int BODY_BYTES = 32;

    @Override
    public MessageType type() {
        return MessageType.WRITE;
    }
}
