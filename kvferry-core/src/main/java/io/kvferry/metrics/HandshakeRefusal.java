package io.kvferry.metrics;

import io.kvferry.api.FailureKind;

import java.util.Locale;

/** Why a handshake (HELLO) was refused: the {@code reason} tag of {@link KVFerryMeters#HANDSHAKE_REFUSALS}, a closed set. */
public enum HandshakeRefusal {
    /** Wrong or missing cluster token. */
    AUTH,
    /** The two memory layouts cannot be paired (page size, dtype, buffers, TP slicing). */
    LAYOUT,
    /** Anything else about the HELLO: flags, data path name, duplicate, malformed or unexpected frames. */
    PROTOCOL,
    /** A data stripe that names no session, a taken index, or a path that takes none. */
    STRIPE,
    /** No HELLO within the connect timeout. */
    NO_HELLO,
    /** The oldest pending handshake, evicted by a new connection beyond the pending cap. */
    EVICTED,
    /** A connection beyond the rank's connection cap, closed unanswered. */
    CONNECTION_LIMIT;

    /** Lower-case tag value. */
    public String label() {
        return name().toLowerCase(Locale.ROOT);
    }

    /** The refusal a peer's HELLO_ACK reported, from its failure kind (decode side). */
    public static HandshakeRefusal of(FailureKind kind) {
        return kind == FailureKind.LAYOUT_REFUSED ? LAYOUT : PROTOCOL;
    }
}
