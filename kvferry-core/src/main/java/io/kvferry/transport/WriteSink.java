package io.kvferry.transport;

import io.kvferry.protocol.Region;

import java.lang.foreign.MemorySegment;

/**
 * The decode side's gate for incoming writes. {@link #begin} checks a write lies inside
 * registered memory and inside the pages/rows/slots the room owns, and registers it as in flight;
 * {@link #end} retires it. A room that is cleared waits for its in-flight writes, so no byte of a
 * room lands after its receiver's {@code clear()} returned.
 */
public interface WriteSink {
    /** A write that passed the gate: where its bytes go. */
    interface Landing {
        MemorySegment target();
    }

    /**
     * @param span    destination bytes the write touches, from its first to its last byte
     * @param payload bytes actually written (less than {@code span} for a strided write)
     * @return the landing whose target is exactly {@code span} bytes at {@code offset}
     * @throws WriteRejectedException naming why the write may not land
     */
    Landing begin(long room, Region region, int component, int buffer, long offset, long span, long payload)
            throws WriteRejectedException;

    /** Retires a landing; {@code landed} says whether all its bytes were written. */
    void end(Landing landing, boolean landed);
}
