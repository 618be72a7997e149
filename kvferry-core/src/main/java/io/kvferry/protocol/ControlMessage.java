package io.kvferry.protocol;

/** A decoded control message. Records are immutable; arrays inside them are owned by the message. */
public sealed interface ControlMessage
        permits Hello, HelloAck, TransferInfo, Abort, WriteHeader, Status, AbortAck, Heartbeat {
    MessageType type();
}
