package io.kvferry.transport;

import java.time.Duration;

/**
 * One prefill rank's permission to write a decode's memory through one transport. Owned by the
 * decode's link to that rank. One-sided offers (shm, ucx: bytes land without the decode seeing
 * them) extend {@link RevocableOffer}; a two-sided one (inproc) lands through the decode's write gate.
 */
public interface LinkOffer extends AutoCloseable {
    /** Whether writes through this offer bypass the decode's write gate (then clear() needs ABORT_ACK or revoke). */
    default boolean oneSided() {
        return true;
    }

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
