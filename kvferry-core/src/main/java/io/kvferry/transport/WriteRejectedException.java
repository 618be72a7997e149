package io.kvferry.transport;

/** An incoming write that may not land; {@code fatal} means the peer broke the protocol and its connection must close. */
public final class WriteRejectedException extends Exception {
    private final boolean fatal;

    public WriteRejectedException(String message, boolean fatal) {
        super(message);
        this.fatal = fatal;
    }

    public boolean fatal() {
        return fatal;
    }
}
