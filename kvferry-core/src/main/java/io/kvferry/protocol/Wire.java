package io.kvferry.protocol;

import java.nio.charset.StandardCharsets;

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
    /**
     * The largest WRITE payload of any kind: what one ByteBuffer (a socket read's target, a CRC's input)
     * addresses. The decode lands a contiguous payload through one such view, so a longer one is refused
     * as the peer's protocol error before the lander's arithmetic could overflow; kvferry sends at most
     * one op ({@link #MAX_STRIDED_WRITE_BYTES}) per WRITE.
     */
    public static final long MAX_WRITE_BYTES = Integer.MAX_VALUE;
    /** The longest string field (tokens, reasons, ids), in UTF-8 bytes. */
    public static final int MAX_STRING_BYTES = 4096;

    /**
     * {@code text} cut to at most {@link #MAX_STRING_BYTES} UTF-8 bytes on a code point boundary, with a
     * marker saying how long it was. For human-readable reasons, which often quote what a peer sent (a
     * session id may itself be 4 KiB): a reason must always be sendable, where an id that is too long is
     * an error of its sender.
     */
    public static String clip(String text) {
        if (text == null || text.length() <= MAX_STRING_BYTES / 3) return text; // ≤ 3 UTF-8 bytes per UTF-16 char
        byte[] utf8 = text.getBytes(StandardCharsets.UTF_8);
        if (utf8.length <= MAX_STRING_BYTES) return text;
        String marker = "… (clipped from " + utf8.length + " bytes)";
        int budget = MAX_STRING_BYTES - marker.getBytes(StandardCharsets.UTF_8).length;
        int bytes = 0, end = 0;
        while (end < text.length()) {
            int cp = text.codePointAt(end);
            int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
            if (bytes + n > budget) break;
            bytes += n;
            end += Character.charCount(cp);
        }
        return text.substring(0, end) + marker;
    }
    /** The most buffers of one kind a HELLO may describe. */
    public static final int MAX_BUFFERS = 1 << 16;
}
