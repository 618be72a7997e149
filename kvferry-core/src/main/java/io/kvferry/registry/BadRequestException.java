package io.kvferry.registry;

/** A request the server refuses with a 4xx and a plain-text reason; never leaves this package. */
final class BadRequestException extends Exception {
    private final int status;

    BadRequestException(int status, String message) {
        super(message, null, false, false);
        this.status = status;
    }

    BadRequestException(String message) {
        this(400, message);
    }

    int status() {
        return status;
    }
}
