package io.kvferry.plan;

/** The two sides' buffers or indices cannot be paired; the message says which and why. */
public final class PlanException extends RuntimeException {
    public PlanException(String message) {
        super(message);
    }
}
