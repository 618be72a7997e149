package io.kvferry.api;

/**
 * Raised by {@code failureException()} of a failed sender or receiver. The message has SGLang's
 * shape, {@code KVTransferError(bootstrap_room=R): reason}, so logs and client errors read the same;
 * {@link #kind()} says what kind of failure it was, for code that must act on it.
 */
public final class KVTransferException extends RuntimeException {
    private final long bootstrapRoom;
    private final String reason;
    private final FailureKind kind;
    private final boolean fromAnotherRank;

    public KVTransferException(long bootstrapRoom, FailureKind kind, String reason, boolean fromAnotherRank) {
        super("KVTransferError(bootstrap_room=" + bootstrapRoom + "): " + reason);
        this.bootstrapRoom = bootstrapRoom;
        this.reason = reason;
        this.kind = kind == null ? FailureKind.UNKNOWN : kind;
        this.fromAnotherRank = fromAnotherRank;
    }

    /**
     * The exception for a failed room: its recorded kind and reason, or — when this rank recorded
     * none — SGLang's "unknown reason from another rank" with {@link #isFromAnotherRank()} set.
     */
    public static KVTransferException forRoom(long bootstrapRoom, FailureKind kind, String recordedReason) {
        return recordedReason == null
                ? new KVTransferException(bootstrapRoom, FailureKind.UNKNOWN, "Failed due to an unknown reason from another rank", true)
                : new KVTransferException(bootstrapRoom, kind, recordedReason, false);
    }

    public long bootstrapRoom() {
        return bootstrapRoom;
    }

    public String reason() {
        return reason;
    }

    /** What kind of failure this was; {@link FailureKind#UNKNOWN} when no rank said. */
    public FailureKind kind() {
        return kind;
    }

    /** True when this rank recorded no reason of its own: the failure was reported by a peer rank. */
    public boolean isFromAnotherRank() {
        return fromAnotherRank;
    }
}
