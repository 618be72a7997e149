package io.kvferry.protocol;

/** @param error why the HELLO was refused; empty when accepted */
public record HelloAck(boolean accepted, String error, int prefillEngineRank, int prefillUniqueRank)
        implements ControlMessage {
    @Override
    public MessageType type() {
        return MessageType.HELLO_ACK;
    }
}
