package io.kvferry.transport;

import io.kvferry.api.ChecksumMode;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.plan.CopyPlan;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.function.BooleanSupplier;

/**
 * How a prefill rank moves bytes into one decode peer's registered memory (the transport SPI).
 * Called only from the prefill transfer worker that owns the room; writes of one room arrive in
 * call order, and all of them have landed before a later control message on the same peer's
 * connection (the STATUS) is processed.
 */
public interface DataPath {
    /** The transport name (tcp, inproc, shm, ucx). */
    String name();

    /**
     * Moves every op of a plan from {@code source} to the peer's memory with the same (region,
     * component, buffer) coordinates, in order; strided ops move their pieces. Stops with an
     * IOException when {@code cancelled} turns true (checked at least every few ops).
     */
    void write(long room, CopyPlan plan, RegisteredMemory source, BooleanSupplier cancelled) throws IOException;

    /**
     * As {@link #write}, then {@code trailer} — one encoded control frame, the room's STATUS — on the
     * connection that carries the room's status ({@link #connectionFor}), after every byte of the
     * plan. Returns whether this path sent it: tcp does, in the same gathering write as the plan's
     * last frame (no syscall of its own); the default does not, and the caller sends it.
     */
    default boolean write(long room, CopyPlan plan, RegisteredMemory source, BooleanSupplier cancelled, ByteBuffer trailer)
            throws IOException {
        write(room, plan, source, cancelled);
        return false;
    }

    /**
     * Called once when the link is set up, with the checksum mode it uses: true when this path
     * carries per-write checksums itself (tcp puts a CRC32C in WRITE frames and the decode checks each
     * as it lands); false, the default, makes the prefill digest each room's pages for its STATUS.
     */
    default boolean carryChecksums(ChecksumMode mode) {
        return false;
    }

    /**
     * Whether bytes land without the decode's reader seeing them (shm, ucx): the decode then needs an
     * ABORT_ACK (or a revoked offer) before it may reuse an unfinished room's pages.
     */
    default boolean oneSided() {
        return false;
    }

    /**
     * The connection that must carry a room's final STATUS so it arrives after the room's writes
     * (a striped tcp path); null: the link's control connection.
     */
    default ControlConnection connectionFor(long room) {
        return null;
    }

    /** Adds an extra connection the decode opened for this path (tcp stripes); false when this path takes none or that index. */
    default boolean attachStripe(int index, ControlConnection connection) {
        return false;
    }

    /**
     * Why this path is known to move bytes slower than kvferry's tcp path would on the same link, or
     * null: UCX that can only emulate its puts as active messages over its own tcp transport (4–5.5×
     * slower here, docs/PERFORMANCE.md). Backend {@code auto} passes such a path over for the next
     * offer or tcp; an explicit backend keeps it and the prefill logs why.
     */
    default String slowerThanTcp() {
        return null;
    }

    /**
     * Why this path can no longer deliver anything to its peer (its endpoint failed, or was closed
     * after a cancelled write did not drain), or null while it can. The prefill then takes the link
     * down, so its decode fails the link's rooms once, fences the path and sets up a fresh link for the
     * next room, instead of every later room of that decode failing on a dead path behind a healthy
     * control connection.
     */
    default String brokenReason() {
        return null;
    }

    /** Releases what this path holds for its peer (mappings, endpoints); writes after it fail. */
    default void close() {}
}
