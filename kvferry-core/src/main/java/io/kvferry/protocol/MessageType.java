package io.kvferry.protocol;

/** Control message kinds and the largest body each may declare (checked before any allocation). */
public enum MessageType {
    /** decode → prefill, once per connection: identity, a MAC proving the cluster token (never the token) and the destination buffer layout. */
    HELLO(1, 2 << 20),
    /** prefill → decode: the answer to HELLO (with the coverage of every decode buffer). */
    HELLO_ACK(2, 2 << 20),
    /** decode → prefill, once per request per target rank: where the request's KV goes. */
    TRANSFER_INFO(3, Wire.MAX_BODY_BYTES),
    /** decode → prefill: the request was aborted on decode. */
    ABORT(4, 64),
    /** prefill → decode: a fixed header, then {@code length} raw bytes for the destination. */
    WRITE(5, WriteHeader.BODY_BYTES),
    /** prefill → decode: a room's outcome on one prefill rank. */
    STATUS(6, 8 << 10),
    /** prefill → decode: no write for the aborted room is in flight any more. */
    ABORT_ACK(7, 64),
    /** either direction, on an idle connection: liveness (the peer declares the link dead after missing several). */
    HEARTBEAT(8, 0),
    /** prefill → decode, first on every accepted connection: the nonce HELLO must answer. */
    CHALLENGE(9, Handshake.BYTES),
    /** prefill → decode: many small contiguous writes of one room (a piece list), then their payload back to back. */
    WRITE_LIST(10, WriteList.MAX_BODY_BYTES);

    private final int code;
    private final int maxBodyBytes;
    /** values() clones its array on every call; reading a frame header must not allocate. */
    private static final MessageType[] VALUES = values();

    MessageType(int code, int maxBodyBytes) {
        this.code = code;
        this.maxBodyBytes = maxBodyBytes;
    }

    public int code() {
        return code;
    }

    public int maxBodyBytes() {
        return maxBodyBytes;
    }

    public static MessageType fromCode(int code) throws ProtocolException {
        for (MessageType t : VALUES) {
            if (t.code == code) return t;
        }
        throw new ProtocolException("unknown message type " + code);
    }
}
