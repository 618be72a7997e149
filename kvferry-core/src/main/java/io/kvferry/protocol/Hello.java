package io.kvferry.protocol;

import java.util.List;

/**
 * @param authToken  the cluster token ("" when none)
 * @param sessionId  unique id of the decode manager (the per-room key on prefill)
 * @param dataPath   the decode's backend: "tcp", "inproc", or a transport it offers ("shm", "ucx", "auto")
 * @param flags      {@link #FLAG_ALL_CP_RANKS}; unknown bits are rejected
 * @param offers     data paths besides TCP, in the decode's order of preference
 */
public record Hello(String authToken, String sessionId, String dataPath, int engineRank, int attnTpSize,
                    int ppRank, int pageSize, String kvCacheDtype, MemoryDescriptor memory, int flags,
                    List<TransportOffer> offers)
        implements ControlMessage {
    public Hello {
        offers = offers == null ? List.of() : List.copyOf(offers);
    }

    /** Without offers (TCP only, or inproc). */
    public Hello(String authToken, String sessionId, String dataPath, int engineRank, int attnTpSize, int ppRank,
                 int pageSize, String kvCacheDtype, MemoryDescriptor memory, int flags) {
        this(authToken, sessionId, dataPath, engineRank, attnTpSize, ppRank, pageSize, kvCacheDtype, memory, flags,
                List.of());
    }

    /** Flag: the decode expects every prefill CP rank to send its share (all-CP-ranks transfer). */
    public static final int FLAG_ALL_CP_RANKS = 1;
    /**
     * Flag: this connection is an extra data stripe of the decode session already registered under
     * {@code sessionId}; bits 8-15 carry its stripe index (1..).
     */
    public static final int FLAG_STRIPE = 2;
    /** Bits 16-23 of the first HELLO: how many TCP stripes (connections) the session will use (0 = 1). */
    public static final int STRIPES_SHIFT = 16;
    public static final int STRIPE_INDEX_SHIFT = 8;
    /** Every flag bit a HELLO may carry. */
    public static final int KNOWN_FLAGS = FLAG_ALL_CP_RANKS | FLAG_STRIPE | (0xFF << STRIPE_INDEX_SHIFT) | (0xFF << STRIPES_SHIFT);

    public boolean isStripe() {
        return (flags & FLAG_STRIPE) != 0;
    }

    public int stripeIndex() {
        return (flags >>> STRIPE_INDEX_SHIFT) & 0xFF;
    }

    /** TCP connections the session uses for data (at least 1). */
    public int stripes() {
        return Math.max(1, (flags >>> STRIPES_SHIFT) & 0xFF);
    }

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
