package io.kvferry.transport;

import io.kvferry.protocol.Region;

import java.io.IOException;
import java.lang.foreign.MemorySegment;

/**
 * How a prefill rank moves bytes into one decode peer's registered memory (the transport SPI).
 * Called only from the prefill transfer worker that owns the room; writes of one room arrive in
 * call order, and all of them have landed before a later control message on the same peer's
 * connection (the STATUS) is processed.
 */
public interface DataPath {
    /** The backend name (tcp, inproc). */
    String name();

    /** Moves all of {@code source} to {@code dstOffset} of the peer's (region, component, buffer). */
    void write(long room, Region region, int component, int buffer, long dstOffset, MemorySegment source) throws IOException;
}
