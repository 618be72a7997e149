package io.kvferry.decode;

import io.kvferry.api.FailureKind;

import java.io.IOException;

/** A prefill rank answered HELLO with a refusal; {@link #kind()} says whether the handshake or the layout was refused. */
final class LinkRefusedException extends IOException {
    private final FailureKind kind;

    LinkRefusedException(FailureKind kind, String message) {
        super(message);
        this.kind = kind;
    }

    FailureKind kind() {
        return kind;
    }
}
