package io.kvferry.protocol;

/**
 * A decoded control message. Records are immutable; arrays inside them are owned by the message. A
 * {@link WriteHeader} or {@link WriteList} read from a connection is that reader's reused view (see its class comment).
 */
public sealed interface ControlMessage
        permits Hello, HelloAck, Challenge, TransferInfo, Abort, WriteHeader, WriteList, Status, AbortAck, Heartbeat {
    MessageType type();
}
