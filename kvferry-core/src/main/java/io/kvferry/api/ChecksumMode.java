package io.kvferry.api;

import java.util.Locale;

/**
 * How much of a transfer the decode verifies against a digest the prefill computed from its source
 * bytes (SGLang's {@code --disaggregation-enable-kv-checksum}, with a cheaper middle setting).
 * CRC32C (intrinsified by the JDK) per WRITE on tcp; per page, combined into one digest per room and
 * link in STATUS, on the other data paths. A mismatch fails the room with {@link FailureKind#INTEGRITY}.
 */
public enum ChecksumMode {
    /** No digest: byte accounting (every owed byte landed) still holds. */
    OFF(0),
    /** About one page (tcp: one WRITE) in eight, chosen per room, plus every aux row. */
    SAMPLED(1),
    /** Every byte. */
    FULL(2);

    private final int code;

    ChecksumMode(int code) {
        this.code = code;
    }

    /** The wire value. */
    public int code() {
        return code;
    }

    /** The mode with that wire value, or null. */
    public static ChecksumMode fromCode(int code) {
        for (ChecksumMode m : values()) if (m.code == code) return m;
        return null;
    }

    /** {@code off}, {@code sampled} or {@code full} (case-insensitive); anything else fails naming the choices. */
    public static ChecksumMode parse(String text) {
        String t = text == null ? "" : text.trim().toLowerCase(Locale.ROOT);
        for (ChecksumMode m : values()) if (m.label().equals(t)) return m;
        throw new IllegalArgumentException("checksum must be off, sampled or full, not '" + text + "'");
    }

    /** The stronger of the two (a link verifies what either side asked for). */
    public ChecksumMode max(ChecksumMode other) {
        return other == null || other.code <= code ? this : other;
    }

    public String label() {
        return name().toLowerCase(Locale.ROOT);
    }
}
