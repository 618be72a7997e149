package io.kvferry.transport.shm;

import io.kvferry.memory.RegisteredMemory;
import io.kvferry.memory.SharedMemory;
import io.kvferry.plan.CopyPlan;
import io.kvferry.transport.DataPath;
import io.kvferry.transport.RemoteBuffers;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.VarHandle;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;
import java.util.function.BooleanSupplier;

/**
 * Moves a plan with one {@link MemorySegment#copy} per op (per piece for strided ops) from the
 * prefill's memory into the decode's mapped files; a large plan is split over several threads
 * ({@link CopyLanes}). Every op passes the fence (see {@link Fence}),
 * so a decode that lost this link can wait until no copy runs and reuse its pages safely.
 * Bounds: each destination is a slice of the mapped buffer window, so a copy outside it throws
 * before a byte moves. Called by the prefill's transfer workers (any number at once); closed by
 * the session's reader thread, after which copies fail with an IOException.
 */
final class ShmDataPath implements DataPath {
    private final Arena arena;
    private final MemorySegment fence;
    private final long slot;
    private final RemoteBuffers buffers;
    /** The mapped window of each offered buffer, by {@link RemoteBuffers#entry entry index}. */
    private final MemorySegment[] windows;
    private final String peer;
    private final CopyLanes lanes;
    /** Writes inside {@link #write}; close() waits for them so a copy is never cut off mid-fence. */
    private final AtomicInteger inflight = new AtomicInteger();
    private volatile boolean closed;

    ShmDataPath(Arena arena, MemorySegment fence, long slot, RemoteBuffers buffers, MemorySegment[] windows, String peer,
                CopyLanes lanes) {
        this.lanes = lanes;
        this.arena = arena;
        this.fence = fence;
        this.slot = slot;
        this.buffers = buffers;
        this.windows = windows;
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
            int n = plan.size() < 2 ? 1 : Math.min(plan.size(), lanes.lanesFor(plan.totalBytes()));
            if (n == 1) {
                copy(room, plan, 0, plan.size(), source, cancelled, null);
            } else {
                copyInLanes(room, plan, n, source, cancelled);
            }
        } finally {
            inflight.decrementAndGet();
        }
        // Copies are plain stores: publish them before the STATUS leaves on the control connection.
        VarHandle.fullFence();
    }

    /**
     * Splits the ops into {@code n} ranges of about equal bytes and copies them on the writer and
     * the helpers ({@link CopyLanes}); returns once every lane is done, with the first failure.
     * The ops of a plan name distinct destination bytes (a decode rejects repeated pages and slots),
     * so their order across lanes does not matter; a hostile peer that repeats pages gets undefined
     * contents in them, never a byte outside its buffers. Every op still passes bounds and fence.
     */
    private void copyInLanes(long room, CopyPlan plan, int n, RegisteredMemory source, BooleanSupplier cancelled) throws IOException {
        long share = plan.totalBytes() / n, acc = 0;
        int[] cut = new int[n + 1];
        int lane = 1;
        for (int op = 0; op < plan.size() && lane < n; op++) {
            acc += plan.length(op);
            if (acc >= share * lane) cut[lane++] = op + 1;
        }
        while (lane <= n) cut[lane++] = plan.size();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        Lane[] all = new Lane[n];
        for (int i = 0; i < n; i++) all[i] = new Lane(room, plan, cut[i], cut[i + 1], source, cancelled, failure);
        try {
            for (int i = 1; i < n; i++) lanes.offer(all[i]);
        } finally {
            // Even when handing a lane over threw (a helper thread that could not start), no lane may
            // still run once write() returns: the decode would reuse pages a helper is writing.
            for (Lane l : all) l.run(); // lane 0, then any lane no helper has started
            for (Lane l : all) l.awaitDone();
        }
        Throwable t = failure.get();
        if (t instanceof IOException e) throw e;
        if (t instanceof RuntimeException e) throw e;
        if (t instanceof Error e) throw e;
    }

    /** One range of ops, run by whichever thread claims it first. */
    private final class Lane implements Runnable {
        private final long room;
        private final CopyPlan plan;
        private final int from, to;
        private final RegisteredMemory source;
        private final BooleanSupplier cancelled;
        private final AtomicReference<Throwable> failure;
        private final AtomicBoolean claimed = new AtomicBoolean();
        private final CountDownLatch done = new CountDownLatch(1);

        Lane(long room, CopyPlan plan, int from, int to, RegisteredMemory source, BooleanSupplier cancelled,
             AtomicReference<Throwable> failure) {
            this.room = room;
            this.plan = plan;
            this.from = from;
            this.to = to;
            this.source = source;
            this.cancelled = cancelled;
            this.failure = failure;
        }

        @Override
        public void run() {
            if (!claimed.compareAndSet(false, true)) return;
            try {
                copy(room, plan, from, to, source, cancelled, failure);
            } catch (Throwable t) {
                failure.compareAndSet(null, t);
            } finally {
                done.countDown();
            }
        }

        /** Waits for the lane even when interrupted: the write may not return while a copy runs. */
        void awaitDone() {
            boolean interrupted = false;
            while (true) {
                try {
                    done.await();
                    break;
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
            if (interrupted) Thread.currentThread().interrupt();
        }
    }

    /** Copies ops [from, to); stops early when the room is cancelled, the path closed or another lane failed. */
    private void copy(long room, CopyPlan plan, int from, int to, RegisteredMemory source, BooleanSupplier cancelled,
                      AtomicReference<Throwable> otherLane) throws IOException {
        try {
            for (int op = from; op < to; op++) {
                if (cancelled.getAsBoolean()) throw new IOException("room " + room + " failed during the transfer");
                if (closed) throw new IOException("the shared-memory path to " + peer + " was closed");
                if (otherLane != null && otherLane.get() != null) return; // the write fails with that lane's reason
                // Whole buffers and offsets, no slices: nothing is allocated per op.
                MemorySegment src = RemoteBuffers.checkSource(room, plan, op, source);
                MemorySegment buffer = windows[buffers.checkDestination(room, plan, op)];
                long from0 = plan.srcOffset(op), at = plan.dstOffset(op);
                if (!Fence.enter(fence, slot)) throw new IOException("decode " + peer + " revoked this link's shared-memory access");
                try {
                    if (!plan.strided(op)) {
                        MemorySegment.copy(src, from0, buffer, at, plan.length(op));
                    } else {
                        long piece = plan.pieceLength(op), n = plan.pieces(op);
                        long srcStride = plan.srcStride(op), dstStride = plan.dstStride(op);
                        for (long i = 0; i < n; i++) MemorySegment.copy(src, from0 + i * srcStride, buffer, at + i * dstStride, piece);
                    }
                } finally {
                    Fence.exit(fence, slot);
                }
            }
        } catch (IllegalStateException e) {
            // the mapping was closed under us (session lost): the copy did not complete
            throw new IOException("shared-memory mapping of " + peer + " was closed: " + e.getMessage());
        }
    }

    @Override
    public void close() {
        closed = true;
        // Writers stop within one op once closed is set (their rooms fail too); don't unmap under them.
        long deadline = System.nanoTime() + 5_000_000_000L;
        while (inflight.get() > 0 && System.nanoTime() < deadline) LockSupport.parkNanos(100_000);
        try {
            arena.close();
        } catch (IllegalStateException e) {
            // already closed
        }
        // A lost link often means a SIGKILLed decode, whose pool files nobody else would delete until
        // some kvferry process allocates again: they hold the decode's whole KV pool in tmpfs (memory).
        SharedMemory.sweepStale();
    }
}
