package io.kvferry.protocol;

/**
 * @param error    why the HELLO was refused; empty when accepted
 * @param dataPath the data path the prefill chose for this connection (tcp, inproc, shm, ucx); empty when refused
 * @param fallback why a transport the decode offered was not used (empty when none was refused)
 */
public record HelloAck(boolean accepted, String error, int prefillEngineRank, int prefillUniqueRank, String dataPath,
                       String fallback)
        implements ControlMessage {
    public HelloAck {
        error = error == null ? "" : error;
        dataPath = dataPath == null ? "" : dataPath;
        fallback = fallback == null ? "" : fallback;
    }

    /** A refusal, or an acceptance over TCP. */
    public HelloAck(boolean accepted, String error, int prefillEngineRank, int prefillUniqueRank) {
        this(accepted, error, prefillEngineRank, prefillUniqueRank, accepted ? "tcp" : "", "");
    }

    @Override
    public MessageType type() {
        return MessageType.HELLO_ACK;
    }
}
