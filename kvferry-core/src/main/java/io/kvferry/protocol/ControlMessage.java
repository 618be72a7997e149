package io.kvferry.protocol;

/**
 * A decoded control message. Records are immutable; arrays inside them are owned by the message. A
 * {@link WriteHeader} read from a connection is that reader's reused view (see its class comment).
 */
public sealed interface ControlMessage
        permits Hello, HelloAck, Challenge, TransferInfo, Abort, WriteHeader, Status, AbortAck, Heartbeat {
    MessageType type();
}
