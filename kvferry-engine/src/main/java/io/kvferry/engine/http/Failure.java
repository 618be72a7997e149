package io.kvferry.engine.http;

/** An answer for the client that is not a stream: status, OpenAI error type, message. */
final class Failure extends Exception {
    final int status;
    final String type;
    /** The transfer failure's kind label, when the backend said. */
    final String kind;

    Failure(int status, String type, String message) {
        this(status, type, null, message);
    }

    Failure(int status, String type, String kind, String message) {
        super(message);
        this.status = status;
        this.type = type;
        this.kind = kind;
    }
}
