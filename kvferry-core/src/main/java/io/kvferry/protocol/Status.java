package io.kvferry.protocol;

import io.kvferry.api.KVPoll;

/** @param reason why the room failed; empty on success */
public record Status(long room, KVPoll status, int prefillUniqueRank, String reason) implements ControlMessage {
    @Override
    public MessageType type() {
        return MessageType.STATUS;
    }
}
