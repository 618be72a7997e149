package io.kvferry.transport;

import io.kvferry.memory.RegisteredMemory;
import io.kvferry.plan.CopyPlan;
import io.kvferry.protocol.Region;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.util.function.BooleanSupplier;

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

    /**
     * Moves every op of a plan from {@code source} to the peer, in order; stops with an
     * IOException when {@code cancelled} turns true (checked at least every few ops).
     */
    default void write(long room, CopyPlan plan, RegisteredMemory source, BooleanSupplier cancelled) throws IOException {
        for (int op = 0; op < plan.size(); op++) {
            if (cancelled.getAsBoolean()) throw new IOException("room " + room + " failed during the transfer");
            write(room, plan.region(op), plan.component(op), plan.buffer(op), plan.dstOffset(op),
                    source.slice(plan.region(op), plan.component(op), plan.buffer(op), plan.srcOffset(op), plan.length(op)));
        }
    }
}
