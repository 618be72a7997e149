package io.kvferry.protocol;

public record Abort(long room) implements ControlMessage {
    @Override
    public MessageType type() {
        return MessageType.ABORT;
    }
}
