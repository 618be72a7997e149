package io.kvferry.transport.shm;

import io.kvferry.memory.RegisteredMemory;
import io.kvferry.plan.CopyPlan;
import io.kvferry.transport.DataPath;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.VarHandle;
import java.util.function.BooleanSupplier;

/**
 * Moves a plan with one {@link MemorySegment#copy} per op (per piece for strided ops) from the
 * prefill's memory into the decode's mapped files. Every op passes the fence (see {@link Fence}),
 * so a decode that lost this link can wait until no copy runs and reuse its pages safely.
 * Bounds: each destination is a slice of the mapped buffer window, so a copy outside it throws
 * before a byte moves. Called by the prefill's transfer workers (any number at once); closed by
 * the session's reader thread, after which copies fail with an IOException.
 */
final class ShmDataPath implements DataPath {
    private final Arena arena;
    private final MemorySegment fence;
    private final long slot;
    private final ShmSource.Targets targets;
    private final String peer;
    /** Writes inside {@link #write}; close() waits for them so a copy is never cut off mid-fence. */
    private final java.util.concurrent.atomic.AtomicInteger inflight = new java.util.concurrent.atomic.AtomicInteger();
    private volatile boolean closed;

    ShmDataPath(Arena arena, MemorySegment fence, long slot, ShmSource.Targets targets, String peer) {
        this.arena = arena;
        this.fence = fence;
        this.slot = slot;
        this.targets = targets;
        this.peer = peer;
    }

    @Override
    public String name() {
        return "shm";
    }

    @Override
    public boolean oneSided() {
        return true;
    }

    @Override
    public void write(long room, CopyPlan plan, RegisteredMemory source, BooleanSupplier cancelled) throws IOException {
        inflight.incrementAndGet();
        try {
            for (int op = 0; op < plan.size(); op++) {
                if (cancelled.getAsBoolean()) throw new IOException("room " + room + " failed during the transfer");
                if (closed) throw new IOException("the shared-memory path to " + peer + " was closed");
                // Whole buffers and offsets, no slices: nothing is allocated per op.
                MemorySegment src = source.segmentOrNull(plan.region(op), plan.component(op), plan.buffer(op));
                MemorySegment buffer = targets.get(plan.region(op), plan.component(op), plan.dstBuffer(op));
                if (src == null || buffer == null) {
                    throw new IOException("no " + plan.region(op) + " buffer " + plan.component(op) + "/"
                            + (src == null ? plan.buffer(op) + " on this prefill" : plan.dstBuffer(op) + " at decode " + peer));
                }
                long from = plan.srcOffset(op), at = plan.dstOffset(op), span = plan.dstSpan(op), srcSpan = plan.srcSpan(op);
                if (from < 0 || from > src.byteSize() || srcSpan > src.byteSize() - from) {
                    throw new IOException("read [" + from + ", +" + srcSpan + ") is outside source " + plan.region(op) + " buffer "
                            + plan.buffer(op) + " of " + src.byteSize() + " bytes");
                }
                if (at < 0 || at > buffer.byteSize() || span > buffer.byteSize() - at) {
                    throw new IOException("write [" + at + ", +" + span + ") is outside " + plan.region(op) + " buffer "
                            + plan.dstBuffer(op) + " of " + buffer.byteSize() + " bytes at " + peer);
                }
                if (!Fence.enter(fence, slot)) throw new IOException("decode " + peer + " revoked this link's shared-memory access");
                try {
                    if (!plan.strided(op)) {
                        MemorySegment.copy(src, from, buffer, at, plan.length(op));
                    } else {
                        long piece = plan.pieceLength(op), n = plan.pieces(op);
                        long srcStride = plan.srcStride(op), dstStride = plan.dstStride(op);
                        for (long i = 0; i < n; i++) MemorySegment.copy(src, from + i * srcStride, buffer, at + i * dstStride, piece);
                    }
                } finally {
                    Fence.exit(fence, slot);
                }
            }
        } catch (IllegalStateException e) {
            // the mapping was closed under us (session lost): the copy did not complete
            throw new IOException("shared-memory mapping of " + peer + " was closed: " + e.getMessage());
        } finally {
            inflight.decrementAndGet();
        }
        // Copies are plain stores: publish them before the STATUS leaves on the control connection.
        VarHandle.fullFence();
    }

    @Override
    public void close() {
        closed = true;
        // Writers stop within one op once closed is set (their rooms fail too); don't unmap under them.
        long deadline = System.nanoTime() + 5_000_000_000L;
        while (inflight.get() > 0 && System.nanoTime() < deadline) java.util.concurrent.locks.LockSupport.parkNanos(100_000);
        try {
            arena.close();
        } catch (IllegalStateException e) {
            // already closed
        }
    }
}
