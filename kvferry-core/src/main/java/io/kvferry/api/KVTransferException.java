package io.kvferry.api;

/**
 * Raised by {@code failureException()} of a failed sender or receiver. The message has SGLang's
 * shape, {@code KVTransferError(bootstrap_room=R): reason}, so logs and client errors read the same.
 */
public final class KVTransferException extends RuntimeException {
    private final long bootstrapRoom;
    private final String reason;
    private final boolean fromAnotherRank;

    public KVTransferException(long bootstrapRoom, String reason, boolean fromAnotherRank) {
        super("KVTransferError(bootstrap_room=" + bootstrapRoom + "): " + reason);
        this.bootstrapRoom = bootstrapRoom;
        this.reason = reason;
        this.fromAnotherRank = fromAnotherRank;
    }

    /**
     * The exception for a failed room: its recorded reason, or — when this rank recorded none —
     * SGLang's "unknown reason from another rank" with {@link #isFromAnotherRank()} set.
     */
    public static KVTransferException forRoom(long bootstrapRoom, String recordedReason) {
        return recordedReason == null
                ? new KVTransferException(bootstrapRoom, "Failed due to an unknown reason from another rank", true)
                : new KVTransferException(bootstrapRoom, recordedReason, false);
    }

    public long bootstrapRoom() {
        return bootstrapRoom;
    }

    public String reason() {
        return reason;
    }

    /** True when this rank recorded no reason of its own: the failure was reported by a peer rank. */
    public boolean isFromAnotherRank() {
        return fromAnotherRank;
    }
}
