package io.kvferry.transport;

import java.time.Duration;

/**
 * One prefill rank's permission to write a decode's memory directly (one-sided). Owned by the
 * decode's link to that rank.
 */
public interface LinkOffer extends AutoCloseable {
    /** What HELLO carries for this transport (opaque to the control protocol). */
    byte[] blob();

    /**
     * Withdraws the permission after the control connection was lost or cut, and returns once no
     * write through it can land any more (true), or after {@code timeout} when that cannot be
     * confirmed (false). Idempotent; later calls return the first answer at once.
     */
    boolean revoke(Duration timeout);

    @Override
    void close();
}
