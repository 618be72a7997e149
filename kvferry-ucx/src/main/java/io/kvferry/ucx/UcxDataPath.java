package io.kvferry.ucx;

import io.kvferry.memory.RegisteredMemory;
import io.kvferry.plan.CopyPlan;
import io.kvferry.transport.DataPath;
import io.kvferry.transport.RemoteBuffers;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import java.util.function.BooleanSupplier;

/**
 * Writes a plan into one decode with one-sided UCX puts, returning once a flush confirmed that
 * every byte is in the decode's memory. Called by the prefill's transfer workers (any number at
 * once); each call validates its whole plan first (source ranges against the registered source
 * buffers, destination ranges against the buffers the offer describes, which were checked against
 * HELLO), so an out-of-bounds op fails the write before any byte moves. The puts themselves run on
 * the {@link UcxEngine} thread.
 */
final class UcxDataPath implements DataPath {
    /** How often a waiting writer checks {@code cancelled} and nudges the engine. */
    private static final long POLL_NANOS = TimeUnit.MILLISECONDS.toNanos(20);

    private final UcxEngine engine;
    private final UcxEngine.Link link;
    private final long drainNanos;

    UcxDataPath(UcxEngine engine, UcxEngine.Link link, long drainTimeoutMs) {
        this.engine = engine;
        this.link = link;
        this.drainNanos = TimeUnit.MILLISECONDS.toNanos(drainTimeoutMs);
    }

    @Override
    public String name() {
        return "ucx";
    }

    @Override
    public boolean oneSided() {
        return true;
    }

    @Override
    public void write(long room, CopyPlan plan, RegisteredMemory source, BooleanSupplier cancelled) throws IOException {
        check(room);
        if (cancelled.getAsBoolean()) throw new IOException("room " + room + " failed during the transfer");
        if (plan.size() == 0) return;
        UcxEngine.Job job = validate(room, plan, source);
        engine.submit(() -> engine.enqueue(job));
        long cancelAt = -1;
        boolean forced = false;
        while (!job.done) {
            LockSupport.parkNanos(this, POLL_NANOS);
            if (job.done) break;
            long now = System.nanoTime();
            if (cancelAt < 0 && cancelled.getAsBoolean()) {
                job.cancel = true; // no further batch; those in flight complete (or the drain timeout closes the link)
                cancelAt = now;
            } else if (cancelAt >= 0 && !forced && now - cancelAt > drainNanos) {
                forced = true;
                String why = "puts of cancelled room " + room + " to " + link.peer + " did not complete within "
                        + drainNanos / 1_000_000 + " ms; endpoint closed";
                engine.submit(() -> engine.close(link, why));
            }
            engine.wake();
        }
        if (job.error != null) throw new IOException("room " + room + ": " + job.error);
        if (job.cancelledByEngine) throw new IOException("room " + room + " failed during the transfer");
    }

    /** What UCX chose for this path's endpoint. */
    UcxEndpointInfo.Lanes lanes() {
        return link.lanes;
    }

    /** How many endpoint closes UCX refused on this path's engine (tests). */
    int closesRefused() {
        return engine.closesRefused();
    }

    /** Why puts over this path are emulated as active messages (over whichever transport), or null. */
    String emulation() {
        return link.lanes.emulation(link.keyMds);
    }

    /**
     * Emulated puts over UCX's tcp transport alone: 4–5.5× slower than kvferry's tcp path here.
     * Emulation over shared-memory lanes (sysv/posix, error mode none) is not: measured faster than
     * tcp (docs/PERFORMANCE.md, "UCX over its tcp transport").
     */
    @Override
    public String slowerThanTcp() {
        String why = emulation();
        return why != null && link.lanes.overTcpOnly() ? why : null;
    }

    @Override
    public String brokenReason() {
        String f = link.failure;
        if (f != null) return f;
        return link.closed && !engine.isStopping() ? "the UCX path to " + link.peer + " was closed" : null;
    }

    private void check(long room) throws IOException {
        String f = link.failure;
        if (f != null) throw new IOException("room " + room + ": " + f);
        if (link.closed || engine.isStopping()) throw new IOException("room " + room + ": the UCX path to " + link.peer + " is closed");
    }

    /** Resolves every op to absolute addresses, checking source and destination bounds; nothing is posted yet. */
    private UcxEngine.Job validate(long room, CopyPlan plan, RegisteredMemory source) throws IOException {
        int n = plan.size();
        UcxEngine.Job job = new UcxEngine.Job(link, room, n);
        for (int op = 0; op < n; op++) {
            long len = plan.length(op), piece = plan.pieceLength(op);
            if (len <= 0 || piece <= 0 || len % piece != 0) {
                throw new IOException("room " + room + ": op " + op + " has length " + len + " and piece " + piece);
            }
            boolean strided = plan.strided(op);
            if (strided && (plan.srcStride(op) < 0 || plan.dstStride(op) < 0)) {
                throw new IOException("room " + room + ": op " + op + " has a negative stride");
            }
            MemorySegment src = RemoteBuffers.checkSource(room, plan, op, source);
            int entry = link.buffers.checkDestination(room, plan, op);
            UcxOffer.Entry e = link.offer.entries().get(entry);
            long at = plan.dstOffset(op);
            job.src[op] = src.address() + plan.srcOffset(op);
            job.dst[op] = e.address() + at;
            job.len[op] = len;
            job.piece[op] = piece;
            job.sStride[op] = strided ? plan.srcStride(op) : len;
            job.dStride[op] = strided ? plan.dstStride(op) : len;
            job.entry[op] = entry;
            if (strided) {
                job.srcBuffer[op] = src;
                job.srcOffset[op] = plan.srcOffset(op);
            }
        }
        return job;
    }

    /** Closes the endpoint (writes in flight fail; later writes fail at once). */
    @Override
    public void close() {
        if (link.closed || engine.stopped()) return; // a stopped engine closed every link on its way out
        engine.submit(() -> engine.close(link, "the UCX path to " + link.peer + " was closed"));
        try {
            link.closedDone.get(5, TimeUnit.SECONDS);
        } catch (Exception e) {
            // engine stopped or slow: the link is marked closed either way once the command runs
        }
    }
}
