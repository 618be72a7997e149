package io.kvferry.transport;

import io.kvferry.api.FailureKind;

/**
 * An incoming write that may not land (or that landed wrong); {@code fatal} means the peer broke the
 * protocol and its connection must close. {@code kind} is how the room fails:
 * {@link FailureKind#WRITE_REJECTED}, or {@link FailureKind#INTEGRITY} for a checksum mismatch.
 */
public final class WriteRejectedException extends Exception {
    private final boolean fatal;
    private final FailureKind kind;

    public WriteRejectedException(String message, boolean fatal) {
        this(message, fatal, FailureKind.WRITE_REJECTED);
    }

    public WriteRejectedException(String message, boolean fatal, FailureKind kind) {
        super(message);
        this.fatal = fatal;
        this.kind = kind;
    }

    public boolean fatal() {
        return fatal;
    }

    public FailureKind kind() {
        return kind;
    }
}
