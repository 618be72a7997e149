package io.kvferry.protocol;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVPoll;

/**
 * A room's outcome on one prefill rank, for one decode rank.
 *
 * @param kind      what kind of failure, for a Failed status (null otherwise; on the wire 0)
 * @param reason    why the room failed; empty on success
 * @param bytes     Success: every byte this prefill rank wrote for the room to that decode rank (the
 *                  decode compares it with what its metadata says the rank owes, and on tcp with
 *                  what landed); 0 otherwise
 * @param digest    Success on a link whose checksums travel in STATUS: the room's combined page digest; else 0
 * @param hasDigest whether {@code digest} is present
 */
public record Status(long room, KVPoll status, FailureKind kind, int prefillUniqueRank, String reason, long bytes,
                     long digest, boolean hasDigest) implements ControlMessage {
    public Status {
        if (status == KVPoll.Failed && kind == null) kind = FailureKind.UNKNOWN;
        if (status != KVPoll.Failed) kind = null;
        reason = reason == null ? "" : Wire.clip(reason); // reasons quote peers' text: always sendable
        if (!hasDigest) digest = 0;
    }

    /** A status without byte count or digest (a failure, or a test's bare success). */
    public Status(long room, KVPoll status, FailureKind kind, int prefillUniqueRank, String reason) {
        this(room, status, kind, prefillUniqueRank, reason, 0, 0, false);
    }

    /** A status without a kind (Success, or a Failed of unknown kind). */
    public Status(long room, KVPoll status, int prefillUniqueRank, String reason) {
        this(room, status, null, prefillUniqueRank, reason);
    }

    /** A Success carrying what the prefill rank wrote. */
    public static Status success(long room, int prefillUniqueRank, long bytes, long digest, boolean hasDigest) {
        return new Status(room, KVPoll.Success, null, prefillUniqueRank, "", bytes, digest, hasDigest);
    }

    @Override
    public MessageType type() {
        return MessageType.STATUS;
    }
}
