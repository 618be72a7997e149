package io.kvferry.transport;

import io.kvferry.protocol.Region;

import java.lang.foreign.MemorySegment;

/**
 * The decode side's gate for incoming writes: resolves a write to the exact destination slice,
 * after checking it lies inside registered memory and inside the pages/rows/slots the room owns.
 */
public interface WriteSink {
    /**
     * @return the destination slice of exactly {@code length} bytes
     * @throws WriteRejectedException naming why the write may not land (the room is failed by the caller)
     */
    MemorySegment resolve(long room, Region region, int component, int buffer, long offset, long length)
            throws WriteRejectedException;

    /** Accounts bytes that landed for a room (progress and metrics). */
    void landed(long room, long bytes);
}
