package io.kvferry.api;

import java.util.Locale;

/**
 * Why a room failed, as a closed set: metrics count failures by it, schedulers and tests branch on
 * it, and it travels on STATUS and HELLO_ACK frames (its {@link #code()} is the wire value). The
 * human-readable reason (SGLang's text) stays beside it; nothing branches on that text.
 */
public enum FailureKind {
    /** The peer's connection closed or broke (process died, network reset). */
    PEER_LOST(1),
    /** Nothing arrived from the peer for the heartbeat timeout. */
    HEARTBEAT_TIMEOUT(2),
    /** The room stayed Bootstrapping past the bootstrap timeout (SGLang's bootstrap_timeout). */
    BOOTSTRAP_TIMEOUT(3),
    /** The room waited for its KV past the waiting timeout (SGLang's waiting_timeout). */
    WAITING_TIMEOUT(4),
    /** Aborted by the scheduler or by the peer (SGLang's AbortReq). */
    ABORTED(5),
    /** The peer refused the link: auth token, versions, flags. */
    HANDSHAKE_REFUSED(6),
    /** The two sides' memory layouts cannot be paired (page size, dtype, buffers, TP slicing). */
    LAYOUT_REFUSED(7),
    /** The decode refused a write (outside the room's pages, unknown room, room concluded). */
    WRITE_REJECTED(8),
    /** Delivered bytes are wrong or incomplete (metadata gate, checksums, byte accounting). */
    INTEGRITY(9),
    /** The caller passed indices or arguments the registered memory cannot serve. */
    BAD_REQUEST(10),
    /** The room reached the wrong DP group, or the registry could not place it. */
    ROUTING(11),
    /** A data path failed while moving the room's bytes. */
    TRANSFER_ERROR(12),
    /** The failure-injection test hook chose this room. */
    INJECTED(13),
    /** The manager was torn down with the room in flight. */
    SHUTDOWN(14),
    /** The prefill instance could not be found or reached (registry lookups, connect). */
    PREFILL_UNREACHABLE(15),
    /** Reported by a peer that gave no kind (or this rank recorded none). */
    UNKNOWN(16),
    /** A bug or an unexpected exception inside kvferry. */
    INTERNAL(17);

    private final int code;

    FailureKind(int code) {
        this.code = code;
    }

    /** The wire value (1..255; 0 on the wire means "no failure"). */
    public int code() {
        return code;
    }

    /** The kind with that wire value, or null for an unknown one. */
    public static FailureKind fromCode(int code) {
        for (FailureKind k : values()) if (k.code == code) return k;
        return null;
    }

    /** Lower-case name, for metric labels and logs ({@code peer_lost}). */
    public String label() {
        return name().toLowerCase(Locale.ROOT);
    }
}
