package io.kvferry.protocol;

/** Either direction, on an otherwise idle connection: "still here". Carries nothing. */
public record Heartbeat() implements ControlMessage {
    @Override
    public MessageType type() {
        return MessageType.HEARTBEAT;
    }
}
