package io.kvferry.transport;

import io.kvferry.api.FailureKind;

/**
 * An incoming write that may not land (or that landed wrong); {@code fatal} means the peer broke the
 * protocol and its connection must close. {@code kind} is how the room fails:
 * {@link FailureKind#WRITE_REJECTED}, or {@link FailureKind#INTEGRITY} for a checksum mismatch.
 * {@code fromStranger} means the writing link is not one of the room's prefill ranks: the write is
 * dropped and the room left alone (another prefill must not be able to fail a room it has no part in).
 */
public final class WriteRejectedException extends Exception {
    private final boolean fatal;
    private final FailureKind kind;
    private final boolean fromStranger;

    public WriteRejectedException(String message, boolean fatal) {
        this(message, fatal, FailureKind.WRITE_REJECTED);
    }

    public WriteRejectedException(String message, boolean fatal, FailureKind kind) {
        this(message, fatal, kind, false);
    }

    private WriteRejectedException(String message, boolean fatal, FailureKind kind, boolean fromStranger) {
        super(message);
        this.fatal = fatal;
        this.kind = kind;
        this.fromStranger = fromStranger;
    }

    /** A write for a room from a link that is not one of the room's prefill ranks. */
    public static WriteRejectedException fromStranger(String message) {
        return new WriteRejectedException(message, false, FailureKind.WRITE_REJECTED, true);
    }

    public boolean fromStranger() {
        return fromStranger;
    }

    /** Whether the sink looked the room up to judge the write ({@link #judgedAgainst}). */
    private boolean judged;
    /** The sink's record of the room it judged the write against; null for a room it did not know. */
    private Object room;

    /**
     * Names the sink's record of the room this write was judged against (null: the room was unknown), so
     * the room failed is that record, not whatever request holds the room's id by the time the
     * rejection is acted on (a cleared room's id may be taken by a retry meanwhile).
     */
    public WriteRejectedException judgedAgainst(Object record) {
        judged = true;
        room = record;
        return this;
    }

    /** Whether the write was judged against a record of its room (which may be null: no such room). */
    public boolean judged() {
        return judged;
    }

    /** The record {@link #judgedAgainst} named, or null. */
    public Object room() {
        return room;
    }

    public boolean fatal() {
        return fatal;
    }

    public FailureKind kind() {
        return kind;
    }
}
