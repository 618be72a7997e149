package io.kvferry.protocol;

import io.kvferry.api.FailureKind;

/**
 * @param error    why the HELLO was refused; empty when accepted
 * @param refusal  the kind of refusal ({@link FailureKind#HANDSHAKE_REFUSED} or {@link FailureKind#LAYOUT_REFUSED});
 *                 null when accepted (on the wire 0)
 * @param dataPath the data path the prefill chose for this connection (tcp, inproc, shm, ucx); empty when refused
 * @param fallback why a transport the decode offered was not used (empty when none was refused)
 */
public record HelloAck(boolean accepted, String error, FailureKind refusal, int prefillEngineRank, int prefillUniqueRank,
                       String dataPath, String fallback)
        implements ControlMessage {
    public HelloAck {
        error = error == null ? "" : error;
        dataPath = dataPath == null ? "" : dataPath;
        fallback = fallback == null ? "" : fallback;
        if (accepted) refusal = null;
        else if (refusal == null) refusal = FailureKind.HANDSHAKE_REFUSED;
    }

    /** An acceptance with its data path. */
    public HelloAck(boolean accepted, String error, int prefillEngineRank, int prefillUniqueRank, String dataPath,
                    String fallback) {
        this(accepted, error, null, prefillEngineRank, prefillUniqueRank, dataPath, fallback);
    }

    /** A refusal (of kind handshake), or an acceptance over TCP. */
    public HelloAck(boolean accepted, String error, int prefillEngineRank, int prefillUniqueRank) {
        this(accepted, error, null, prefillEngineRank, prefillUniqueRank, accepted ? "tcp" : "", "");
    }

    /** A refusal of the given kind. */
    public static HelloAck refused(FailureKind kind, String error, int prefillEngineRank, int prefillUniqueRank) {
        return new HelloAck(false, error, kind, prefillEngineRank, prefillUniqueRank, "", "");
    }

    @Override
    public MessageType type() {
        return MessageType.HELLO_ACK;
    }
}
