package io.kvferry.protocol;

/**
 * @param authToken  the cluster token ("" when none)
 * @param sessionId  unique id of the decode manager (the per-room key on prefill)
 * @param dataPath   how prefill should move bytes to this peer: "tcp" or "inproc"
 * @param flags      {@link #FLAG_ALL_CP_RANKS}; unknown bits are rejected
 */
public record Hello(String authToken, String sessionId, String dataPath, int engineRank, int attnTpSize,
                    int ppRank, int pageSize, String kvCacheDtype, MemoryDescriptor memory, int flags)
        implements ControlMessage {
    /** Flag: the decode expects every prefill CP rank to send its share (all-CP-ranks transfer). */
    public static final int FLAG_ALL_CP_RANKS = 1;

    /** Without flags. */
    public Hello(String authToken, String sessionId, String dataPath, int engineRank, int attnTpSize, int ppRank,
                 int pageSize, String kvCacheDtype, MemoryDescriptor memory) {
        this(authToken, sessionId, dataPath, engineRank, attnTpSize, ppRank, pageSize, kvCacheDtype, memory, 0);
    }

    @Override
    public MessageType type() {
        return MessageType.HELLO;
    }
}
