package io.kvferry.protocol;

/**
 * @param authToken  the cluster token ("" when none)
 * @param sessionId  unique id of the decode manager (the per-room key on prefill)
 * @param dataPath   the decode's backend: "tcp", "inproc", or a transport it offers ("shm", "ucx", "auto")
 * @param flags      {@link #FLAG_ALL_CP_RANKS}; unknown bits are rejected
 * @param offers     data paths besides TCP, in the decode's order of preference
 */
public record Hello(String authToken, String sessionId, String dataPath, int engineRank, int attnTpSize,
                    int ppRank, int pageSize, String kvCacheDtype, MemoryDescriptor memory, int flags,
                    java.util.List<TransportOffer> offers)
        implements ControlMessage {
    public Hello {
        offers = offers == null ? java.util.List.of() : java.util.List.copyOf(offers);
    }

    /** Without offers (TCP only, or inproc). */
    public Hello(String authToken, String sessionId, String dataPath, int engineRank, int attnTpSize, int ppRank,
                 int pageSize, String kvCacheDtype, MemoryDescriptor memory, int flags) {
        this(authToken, sessionId, dataPath, engineRank, attnTpSize, ppRank, pageSize, kvCacheDtype, memory, flags,
                java.util.List.of());
    }

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
