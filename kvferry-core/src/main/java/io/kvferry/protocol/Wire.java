package io.kvferry.protocol;

/** Constants of kvferry's control framing (docs/PROTOCOL.md). All integers are little-endian. */
public final class Wire {
    private Wire() {}

    /** "KVFY" read as a little-endian u32. */
    public static final int MAGIC = 0x5946564B;
    /**
     * 2: WRITE carries piece length and stride (strided writes); HELLO carries flags.
     * 3: HELLO carries transport offers, HELLO_ACK the chosen data path; HEARTBEAT.
     * 4: STATUS and HELLO_ACK carry a failure kind byte ({@link io.kvferry.api.FailureKind}).
     * 5: authenticated handshake (CHALLENGE, HMACs instead of the token, session keys), fingerprint,
     *    decode instance, checksum mode and coverage in HELLO/HELLO_ACK, bytes and digest in STATUS,
     *    CRC32C in WRITE.
     */
    public static final int VERSION = 5;
    /** magic u32, version u8, type u8, flags u16, body length u32. */
    public static final int HEADER_BYTES = 12;
    /** The largest control body any message may declare (a TRANSFER_INFO with ~4M page ids). */
    public static final int MAX_BODY_BYTES = 16 << 20;
    /** The largest strided WRITE payload (staged whole on the decode); the planner splits ops to at most this. */
    public static final long MAX_STRIDED_WRITE_BYTES = 4L << 20;
    /** The longest string field (tokens, reasons, ids), in UTF-8 bytes. */
    public static final int MAX_STRING_BYTES = 4096;
    /** The most buffers of one kind a HELLO may describe. */
    public static final int MAX_BUFFERS = 1 << 16;
}
