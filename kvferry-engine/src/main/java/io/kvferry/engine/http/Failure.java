package io.kvferry.engine.http;

/** An answer for the client that is not a stream: status, OpenAI error type, message. */
final class Failure extends Exception {
    final int status;
    final String type;
    /** The transfer failure's kind label, when the backend said. */
    final String kind;
    /**
     * A backend of the request refused its connection before anything of the request started there (nothing listens:
     * the process is gone, and it is out of rotation now): the request may be run again on other instances.
     */
    final boolean refusedConnection;
    /** A 429's {@code Retry-After} in seconds (1 unless a tenant's rate says more: {@link RateLimits}). */
    long retryAfterSeconds = 1;
    /** The request's field at fault (the error's {@code param}), null for none: a client error an engine named one for. */
    String param;

    Failure(int status, String type, String message) {
        this(status, type, null, message);
    }

    Failure(int status, String type, String kind, String message) {
        this(status, type, kind, message, false);
    }

    private Failure(int status, String type, String kind, String message, boolean refusedConnection) {
        super(message);
        this.status = status;
        this.type = type;
        this.kind = kind;
        this.refusedConnection = refusedConnection;
    }

    /** This failure, answered with {@code Retry-After: seconds}. */
    Failure retryAfter(long seconds) {
        retryAfterSeconds = seconds;
        return this;
    }

    /** This failure, naming {@code param} as the field at fault. */
    Failure param(String param) {
        this.param = param;
        return this;
    }

    /**
     * This failure with another message (a choice's or a batch text's, naming it): its status, type, kind, param and
     * {@link #retryAfterSeconds} kept, so a 503 or 429 of one choice of several says the {@code Retry-After} one choice alone would.
     */
    Failure withMessage(String message) {
        return new Failure(status, type, kind, message).retryAfter(retryAfterSeconds).param(param);
    }

    /** This failure, marked as one a refused connection caused ({@link #refusedConnection}). */
    Failure asRefusedConnection() {
        return new Failure(status, type, kind, getMessage(), true);
    }
}
