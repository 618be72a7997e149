package io.kvferry.protocol;

public record AbortAck(long room, int prefillUniqueRank) implements ControlMessage {
    @Override
    public MessageType type() {
        return MessageType.ABORT_ACK;
    }
}
