package io.kvferry.api;

/**
 * Kinds of per-request state that hybrid models carry besides the paged KV cache
 * (SGLang's {@code StateType}); {@link #wire()} is the exact string SGLang uses.
 */
public enum StateType {
    MAMBA("mamba", false),
    QSA_PENDING("qsa_pending", false),
    QSA_COMPRESSED("qsa_compressed", false),
    SWA("swa", true),
    DSA("dsa", true),
    DSA_TAIL("dsa_tail", false),
    MINIMAX_INDEX_K("minimax_index_k", true),
    SWA_RING("swa_ring", false),
    DSV4_REQUEST_STATE("c128_state", false),
    BLOCK_SCALE("block_scale", true),
    BLOCK_SCALE_SWA("block_scale_swa", true);

    private final String wire;
    private final boolean paged;

    StateType(String wire, boolean paged) {
        this.wire = wire;
        this.paged = paged;
    }

    /** The string value SGLang puts on the wire and in configs. */
    public String wire() {
        return wire;
    }

    /**
     * Whether the indices of this state are page ids (a length mismatch between the two sides is
     * truncated with a warning) rather than positional slots/rows (a mismatch is an error).
     */
    public boolean isPaged() {
        return paged;
    }

    public static StateType fromWire(String wire) {
        for (StateType t : values()) {
            if (t.wire.equals(wire)) return t;
        }
        throw new IllegalArgumentException("unknown state type '" + wire + "'");
    }
}
