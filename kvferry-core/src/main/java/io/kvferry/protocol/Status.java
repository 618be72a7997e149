package io.kvferry.protocol;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVPoll;

/**
 * @param kind   what kind of failure, for a Failed status (null otherwise; on the wire 0)
 * @param reason why the room failed; empty on success
 */
public record Status(long room, KVPoll status, FailureKind kind, int prefillUniqueRank, String reason) implements ControlMessage {
    public Status {
        if (status == KVPoll.Failed && kind == null) kind = FailureKind.UNKNOWN;
        if (status != KVPoll.Failed) kind = null;
    }

    /** A status without a kind (Success, or a Failed of unknown kind). */
    public Status(long room, KVPoll status, int prefillUniqueRank, String reason) {
        this(room, status, null, prefillUniqueRank, reason);
    }

    @Override
    public MessageType type() {
        return MessageType.STATUS;
    }
}
