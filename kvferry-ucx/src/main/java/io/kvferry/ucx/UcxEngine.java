package io.kvferry.ucx;

import io.kvferry.plan.CopyPlan;
import io.kvferry.transport.RemoteBuffers;
import org.openucx.jucx.UcxCallback;
import org.openucx.jucx.ucp.UcpContext;
import org.openucx.jucx.ucp.UcpEndpoint;
import org.openucx.jucx.ucp.UcpEndpointParams;
import org.openucx.jucx.ucp.UcpMemMapParams;
import org.openucx.jucx.ucp.UcpMemory;
import org.openucx.jucx.ucp.UcpRemoteKey;
import org.openucx.jucx.ucp.UcpRequest;
import org.openucx.jucx.ucp.UcpWorker;
import org.openucx.jucx.ucp.UcpWorkerParams;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

/**
 * The prefill side's UCX worker and the one thread that drives it ({@code kvferry-ucx-src-…}).
 *
 * <p><b>Owners.</b> This thread is the only one that calls the {@link UcpWorker}, creates, uses and
 * closes {@link UcpEndpoint}s and {@link UcpRemoteKey}s, and registers and unregisters staging
 * buffers. Transfer workers (any number, several per decode) never touch UCX: they validate their
 * plan into a {@link Job}, {@link #submit} it and park until the engine completes it; the only UCX
 * call they make is the thread-safe {@code worker.signal()}. UCX workers are not thread-safe
 * (without {@code requestThreadSafety}, which would put a lock around every put), and one worker
 * per transfer thread would open one connection per (thread, decode) and leave idle workers
 * unprogressed; handing whole writes to one thread costs one hand-off per write, not per op.
 *
 * <p><b>Pipeline.</b> Jobs run FIFO. A job's ops are posted in batches of about
 * {@link UcxSettings#batchBytes()} with {@code putNonBlockingImplicit}, each batch closed by an
 * endpoint flush; up to {@link UcxSettings#window()} batches per link are in flight, so the link stays
 * busy while each flush confirms remote completion. The window is per link, not shared: a decode
 * that stops confirming holds only its own link's window, and the other links' jobs post past it
 * (each pass posts at most one batch per link, from that link's oldest job, so a link's jobs stay
 * FIFO and links share the engine round-robin). A job completes when its last flush has: every byte
 * is then in the decode's memory. Strided ops whose destination is contiguous are gathered into a
 * registered staging buffer (engine-owned, reused after its batch's flush) and put once; strided
 * destinations get one put per piece.
 *
 * <p><b>Idle.</b> With nothing queued or in flight the thread sleeps in {@code waitForEvents()}
 * (the worker's event fd) and is woken by {@code signal()}; with puts in flight it progresses
 * busily for a while, then sleeps on the event fd too (completions wake it; writers also signal
 * every few tens of milliseconds while they wait, so a missed wakeup cannot stall a write).
 *
 * <p><b>Stalls.</b> A link with batches in flight none of which UCX confirmed for
 * {@link UcxSettings#stallTimeoutMs} (the prefill's write-stall timeout) is closed: its writes fail
 * naming the stall and its path reports itself broken, so the prefill takes the link down and the
 * decode sets up a fresh one. Over transports that need the decode's worker (tcp, active messages) a
 * decode whose progress stopped behind a healthy control connection would otherwise hold the room's
 * writer until the room's own timeouts, as a tcp decode that stops reading would without the
 * write-stall watchdog.
 */
final class UcxEngine implements Runnable {
    private static final Logger log = LoggerFactory.getLogger(UcxEngine.class);
    /** Puts per batch at most (per-piece strided writes). */
    static final int MAX_PUTS_PER_BATCH = 1024;

    private final UcpContext context;
    private final UcpWorker worker;
    private final UcxSettings.ErrMode errMode;
    private final long batchBytes;
    private final int window;
    private final long spin;
    private final long stallNanos;
    private final long stallCheckNanos;
    private final Thread thread;
    /** This worker's packed address, read before the engine thread starts (the template peers' addresses are checked against). */
    private final byte[] ownAddress;
    private final ConcurrentLinkedQueue<Runnable> commands = new ConcurrentLinkedQueue<>();
    private volatile boolean stopping;

    // ---- engine-thread state ----
    /** Queued jobs, oldest first (few: one per writer waiting on this engine). */
    private final List<Job> jobs = new ArrayList<>();
    private final List<Link> links = new ArrayList<>();
    private final List<Closing> closing = new ArrayList<>();
    private final ArrayDeque<Staging> freeStaging = new ArrayDeque<>();
    private final List<Staging> allStaging = new ArrayList<>();
    private final Arena stagingArena = Arena.ofShared();
    private int inFlight;
    private boolean failedLinks;
    /** Counts post() passes; a link remembers the pass in which its oldest job was seen. */
    private int postPass;
    private long lastStallCheck = System.nanoTime();
    /** Endpoint closes UCX refused (the endpoint then stays open until the worker closes); read by tests. */
    private volatile int closesRefused;

    UcxEngine(UcpContext context, int engineRank, UcxSettings settings) {
        this.context = context;
        this.errMode = settings.errMode;
        this.batchBytes = settings.batchBytes;
        this.window = settings.window;
        this.spin = settings.spin;
        this.stallNanos = TimeUnit.MILLISECONDS.toNanos(settings.stallTimeoutMs);
        this.stallCheckNanos = Math.max(1_000_000L, Math.min(stallNanos / 4, 250_000_000L));
        this.worker = context.newWorker(new UcpWorkerParams().requestWakeupRMA().requestWakeupRX().requestWakeupTX());
        this.ownAddress = UcxDestination.bytes(worker.getAddress());
        this.thread = Thread.ofPlatform().daemon().name("kvferry-ucx-src-r" + engineRank).unstarted(this);
        thread.start();
    }

    UcxSettings.ErrMode errMode() {
        return errMode;
    }

    /** This engine's worker address. */
    byte[] ownAddress() {
        return ownAddress.clone();
    }

    /** Runs {@code command} on the engine thread. */
    void submit(Runnable command) {
        commands.add(command);
        wake();
    }

    /** Thread-safe wakeup of the engine thread. */
    void wake() {
        try {
            worker.signal();
        } catch (RuntimeException e) {
            // worker closed: the engine has stopped
        }
    }

    /** How many endpoint closes UCX refused so far. */
    int closesRefused() {
        return closesRefused;
    }

    boolean isStopping() {
        return stopping;
    }

    // ------------------------------------------------------------------ connect / close (engine thread)

    /** Creates the endpoint and unpacks the rkeys; completes {@code result} after a first flush (wireup done). */
    void connect(Link link, CompletableFuture<Link> result) {
        if (stopping) {
            result.completeExceptionally(new IllegalStateException("the UCX source is closed"));
            return;
        }
        try {
            ByteBuffer address = direct(link.offer.workerAddress());
            UcpEndpointParams params = new UcpEndpointParams().setUcpAddress(address);
            if (errMode == UcxSettings.ErrMode.PEER) {
                params.setPeerErrorHandlingMode().setErrorHandler((ep, status, message) -> {
                    link.fail("UCX endpoint to decode " + link.peer + " failed: " + message + " (status " + status + ")");
                    failedLinks = true; // closed (FORCE, as UCX requires after an error) by the loop
                });
            }
            link.ep = worker.newEndpoint(params);
            links.add(link);
            link.rkeys = new UcpRemoteKey[link.offer.entries().size()];
            for (int i = 0; i < link.rkeys.length; i++) {
                link.rkeys[i] = link.ep.unpackRemoteKey(direct(link.offer.entries().get(i).rkey()));
            }
        } catch (RuntimeException e) {
            close(link, "connect failed: " + e.getMessage());
            result.completeExceptionally(e);
            return;
        }
        try {
            link.ep.flushNonBlocking(new UcxCallback() {
                @Override
                public void onSuccess(UcpRequest request) {
                    // The lanes are fixed once wireup completed; read them as a command, outside this progress callback.
                    commands.add(() -> {
                        if (link.closed) {
                            result.completeExceptionally(new IllegalStateException(link.failure != null ? link.failure : "closed"));
                            return;
                        }
                        link.lanes = UcxEndpointInfo.parse(UcxEndpointInfo.read(link.ep));
                        log.debug("ucx: endpoint to decode {}: {}", link.peer, link.lanes);
                        result.complete(link);
                    });
                }

                @Override
                public void onError(int status, String message) {
                    result.completeExceptionally(new IllegalStateException(message + " (status " + status + ")"));
                }
            });
        } catch (RuntimeException e) {
            result.completeExceptionally(e);
        }
    }

    /**
     * Closes the link: later and queued writes fail with {@code reason}; puts in flight are
     * cancelled (peer error mode: FORCE) or completed first (mode none: FLUSH); rkeys are destroyed
     * once the endpoint is closed.
     */
    void close(Link link, String reason) {
        if (link.closed) return;
        link.closed = true;
        if (link.failure == null) link.failure = reason;
        links.remove(link);
        UcpRequest req = null;
        if (link.ep != null) {
            try {
                // UCX accepts FORCE only on endpoints with peer error handling (UCX 1.13 answers
                // UCS_ERR_INVALID_PARAM otherwise and leaves the endpoint open), so mode none closes with FLUSH.
                req = errMode == UcxSettings.ErrMode.PEER ? link.ep.closeNonBlockingForce() : link.ep.closeNonBlockingFlush();
            } catch (RuntimeException e) {
                closesRefused++;
                log.warn("ucx: UCX refused to close the endpoint to {}: {}", link.peer, e.getMessage());
            }
        }
        closing.add(new Closing(link, req, System.nanoTime()));
        // Batches the closed endpoint will never confirm (UCX cancels them in peer mode; with error
        // handling off it may drop them silently): their jobs fail now instead of waiting forever.
        for (Batch b : new ArrayList<>(link.batches)) batchDone(b, "the endpoint was closed", true);
        reapClosing();
    }

    private void reapClosing() {
        for (Iterator<Closing> it = closing.iterator(); it.hasNext(); ) {
            Closing c = it.next();
            boolean completed = c.request == null || c.request.isCompleted();
            if (completed || System.nanoTime() - c.since > 5_000_000_000L) {
                if (!completed) {
                    // UCX may still hold requests that use these rkeys: leak them rather than free under it.
                    log.warn("ucx: closing the endpoint to {} did not complete within 5 s", c.link.peer);
                } else if (c.link.rkeys != null) {
                    for (UcpRemoteKey k : c.link.rkeys) {
                        if (k != null) {
                            try {
                                k.close();
                            } catch (RuntimeException e) {
                                // ignore
                            }
                        }
                    }
                    c.link.rkeys = null;
                }
                c.link.closedDone.complete(null);
                it.remove();
            }
        }
    }

    // ------------------------------------------------------------------ the loop

    @Override
    public void run() {
        int idle = 0;
        long lastError = 0;
        try {
            while (true) {
                Runnable c;
                while ((c = commands.poll()) != null) {
                    try {
                        c.run();
                    } catch (RuntimeException e) {
                        log.warn("ucx: engine command failed", e);
                    }
                }
                if (stopping) break;
                post();
                int n;
                try {
                    n = worker.progress();
                } catch (Exception e) {
                    n = 0;
                    long now = System.nanoTime();
                    if (now - lastError > 1_000_000_000L) {
                        log.warn("ucx: worker progress failed: {}", e.toString());
                        lastError = now;
                    }
                }
                if (failedLinks) {
                    failedLinks = false;
                    // Queued jobs of the link fail in post() (they check the failure before any put).
                    for (Link l : new ArrayList<>(links)) if (l.failure != null) close(l, l.failure);
                }
                if (!closing.isEmpty()) reapClosing();
                if (inFlight > 0) closeStalledLinks();
                if (n > 0) {
                    idle = 0;
                } else if (commands.isEmpty() && !canPost()) {
                    boolean busy = inFlight > 0 || !closing.isEmpty();
                    // With puts in flight, spin a while (completions come fast), then sleep on the event fd.
                    if (!busy || ++idle > spin) {
                        idle = 0;
                        try {
                            worker.waitForEvents();
                        } catch (RuntimeException e) {
                            LockSupport.parkNanos(100_000);
                        }
                    }
                }
            }
        } finally {
            teardown();
        }
    }

    /** Whether {@link #post} would post a batch, or retire a job, now. */
    private boolean canPost() {
        for (int i = 0; i < jobs.size(); i++) {
            Job j = jobs.get(i);
            if (j.link.inFlight < window || stopReason(j) != null || j.op >= j.ops) return true;
        }
        return false;
    }

    private static String stopReason(Job j) {
        return j.link.failure != null ? j.link.failure
                : j.error != null ? j.error
                : j.cancel ? "cancelled" : null;
    }

    /**
     * Posts batches while some link has window room: each pass retires the jobs that are stopped or
     * fully posted and posts one batch from the oldest job of every link below its window.
     */
    private void post() {
        boolean posted = true;
        while (posted) {
            posted = false;
            int pass = ++postPass;
            for (int i = 0; i < jobs.size(); ) {
                Job j = jobs.get(i);
                String stop = stopReason(j);
                if (stop != null || j.op >= j.ops) {
                    jobs.remove(i);
                    j.queued = false;
                    if (stop != null && j.error == null) {
                        if (j.cancel) j.cancelledByEngine = true;
                        else j.error = stop;
                    }
                    if (j.inFlight == 0) complete(j);
                    continue;
                }
                i++;
                Link link = j.link;
                if (link.postPass == pass) continue; // an older job of this link goes first
                link.postPass = pass;
                if (link.inFlight < window) {
                    postBatch(j);
                    posted = true;
                }
            }
        }
    }

    /** Closes every link whose batches in flight have gone unconfirmed for the stall timeout. */
    private void closeStalledLinks() {
        long now = System.nanoTime();
        if (now - lastStallCheck < stallCheckNanos) return;
        lastStallCheck = now;
        for (int i = links.size() - 1; i >= 0; i--) {
            Link l = links.get(i);
            if (l.inFlight > 0 && now - l.lastConfirmed > stallNanos) {
                String why = "no UCX put to decode " + l.peer + " was confirmed for " + stallNanos / 1_000_000
                        + " ms (the decode's worker is not progressing?); endpoint closed";
                log.warn("ucx: {}", why);
                close(l, why);
            }
        }
    }

    private void postBatch(Job j) {
        Link link = j.link;
        UcpEndpoint ep = link.ep;
        long bytes = 0;
        int puts = 0;
        Staging staged = null;
        try {
            while (j.op < j.ops && bytes < batchBytes && puts < MAX_PUTS_PER_BATCH) {
                int o = j.op;
                UcpRemoteKey rkey = link.rkeys[j.entry[o]];
                long len = j.len[o], piece = j.piece[o];
                if (piece == len) {
                    ep.putNonBlockingImplicit(j.src[o], len, j.dst[o], rkey);
                    bytes += len;
                    puts++;
                    j.op++;
                } else if (j.dStride[o] == piece && len <= Staging.SIZE) {
                    if (staged != null) break; // one staging buffer per batch
                    staged = takeStaging();
                    long pieces = len / piece, stride = j.sStride[o];
                    MemorySegment src = j.srcBuffer[o];
                    long from = j.srcOffset[o];
                    for (long i = 0; i < pieces; i++) MemorySegment.copy(src, from + i * stride, staged.segment, i * piece, piece);
                    ep.putNonBlockingImplicit(staged.segment.address(), len, j.dst[o], rkey);
                    bytes += len;
                    puts++;
                    j.op++;
                } else {
                    long pieces = len / piece;
                    while (j.piece_i < pieces && puts < MAX_PUTS_PER_BATCH && bytes < batchBytes) {
                        long i = j.piece_i++;
                        ep.putNonBlockingImplicit(j.src[o] + i * j.sStride[o], piece, j.dst[o] + i * j.dStride[o], rkey);
                        bytes += piece;
                        puts++;
                    }
                    if (j.piece_i == pieces) {
                        j.piece_i = 0;
                        j.op++;
                    }
                }
            }
        } catch (RuntimeException e) {
            // UcxException: the endpoint failed under us (peer gone). Puts already posted are flushed below.
            String why = "UCX put to decode " + link.peer + " failed: " + e.getMessage();
            link.fail(why);
            failedLinks = true;
            if (j.error == null) j.error = why;
        }
        Batch b = new Batch(j, staged);
        if (link.inFlight == 0) link.lastConfirmed = System.nanoTime(); // the stall clock starts when the link gets busy
        link.inFlight++;
        j.inFlight++;
        inFlight++;
        link.batches.add(b);
        try {
            ep.flushNonBlocking(new UcxCallback() {
                @Override
                public void onSuccess(UcpRequest request) {
                    batchDone(b, null);
                }

                @Override
                public void onError(int status, String message) {
                    batchDone(b, message + " (status " + status + ")");
                }
            });
        } catch (RuntimeException e) {
            batchDone(b, e.getMessage());
        }
    }

    private void batchDone(Batch b, String error) {
        batchDone(b, error, false);
    }

    /** @param abandoned UCX never confirmed the batch (its endpoint was closed under it): its staging buffer is not reused */
    private void batchDone(Batch b, String error, boolean abandoned) {
        if (b.done) return;
        b.done = true;
        Job j = b.job;
        j.inFlight--;
        inFlight--;
        j.link.inFlight--;
        if (error == null && !abandoned) j.link.lastConfirmed = System.nanoTime();
        j.link.batches.remove(b);
        if (b.staging != null && !abandoned) freeStaging.push(b.staging);
        if (error != null && j.error == null) {
            j.error = "flushing the puts to decode " + j.link.peer + " failed: " + error
                    + (j.link.failure != null && !error.equals(j.link.failure) ? " (" + j.link.failure + ")" : "");
        }
        if (j.inFlight == 0 && !j.queued) complete(j);
    }

    private void complete(Job j) {
        if (j.done) return;
        j.done = true; // volatile: publishes error / cancelledByEngine
        LockSupport.unpark(j.waiter);
    }

    private Staging takeStaging() {
        Staging s = freeStaging.poll();
        if (s != null) return s;
        MemorySegment seg = stagingArena.allocate(Staging.SIZE, 4096);
        UcpMemory reg = null;
        try {
            reg = context.memoryMap(new UcpMemMapParams().setAddress(seg.address()).setLength(seg.byteSize()));
        } catch (RuntimeException e) {
            log.debug("ucx: staging buffer not registered ({}); UCX registers it per put", e.getMessage());
        }
        s = new Staging(seg, reg);
        allStaging.add(s);
        return s;
    }

    /** Adds a validated job (engine thread). */
    void enqueue(Job j) {
        if (stopping || j.link.closed) {
            if (j.error == null) j.error = j.link.failure != null ? j.link.failure : "the UCX source is closed";
            complete(j);
            return;
        }
        j.queued = true;
        jobs.add(j);
    }

    // ------------------------------------------------------------------ shutdown

    /** Stops the thread: queued writes fail, endpoints close, then the worker closes. */
    void shutdown(long timeoutNanos) {
        stopping = true;
        wake();
        try {
            thread.join(Duration.ofNanos(timeoutNanos));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (thread.isAlive()) log.error("ucx: the source engine thread did not stop");
    }

    boolean stopped() {
        return !thread.isAlive();
    }

    private void teardown() {
        for (Job j : jobs) {
            j.queued = false;
            if (j.error == null) j.error = "the UCX source was closed";
        }
        for (Link l : new ArrayList<>(links)) close(l, "the UCX source was closed");
        long deadline = System.nanoTime() + 2_000_000_000L;
        while ((!closing.isEmpty() || inFlight > 0) && System.nanoTime() < deadline) {
            try {
                worker.progress();
            } catch (Exception e) {
                break;
            }
            reapClosing();
        }
        for (Job j : jobs) complete(j);
        jobs.clear();
        Runnable c;
        while ((c = commands.poll()) != null) {
            try {
                c.run(); // connect/enqueue see 'stopping' and fail fast
            } catch (RuntimeException e) {
                // ignore
            }
        }
        for (Staging s : allStaging) {
            if (s.registration != null) {
                try {
                    s.registration.deregister();
                } catch (RuntimeException e) {
                    // ignore
                }
            }
        }
        try {
            worker.close();
        } catch (RuntimeException e) {
            log.warn("ucx: closing the source worker failed: {}", e.getMessage());
        }
        stagingArena.close();
    }

    static ByteBuffer direct(byte[] bytes) {
        ByteBuffer b = ByteBuffer.allocateDirect(bytes.length);
        b.put(bytes).flip();
        return b;
    }

    // ------------------------------------------------------------------ state records

    /** A connection to one decode's offer. Fields other than the volatile ones are engine-thread-only. */
    static final class Link {
        final String peer;
        final UcxOffer offer;
        final RemoteBuffers buffers;
        /** The decode's memory domains every one of its remote keys covers (a bit each): where a put lane can land. */
        final long keyMds;
        UcpEndpoint ep;
        UcpRemoteKey[] rkeys;
        /** Batches posted and not yet confirmed (engine thread). */
        final List<Batch> batches = new ArrayList<>();
        /** How many of them: this link's share of the window (engine thread). */
        int inFlight;
        /** When a batch of this link was last confirmed, or the link last got busy (engine thread; the stall clock). */
        long lastConfirmed;
        /** The post() pass in which this link's oldest job was last seen (engine thread). */
        int postPass;
        /** What UCX chose for the endpoint, read once its wireup completed (before connect returns the path). */
        volatile UcxEndpointInfo.Lanes lanes = UcxEndpointInfo.parse(null);
        /** First failure (endpoint error, failed put); writes fail with it. */
        volatile String failure;
        volatile boolean closed;
        final CompletableFuture<Void> closedDone = new CompletableFuture<>();

        /** @param keyMds the decode's memory domains all its remote keys cover (a bit each) */
        Link(String peer, UcxOffer offer, RemoteBuffers buffers, long keyMds) {
            this.peer = peer;
            this.offer = offer;
            this.buffers = buffers;
            this.keyMds = keyMds;
        }

        void fail(String why) {
            if (failure == null) failure = why;
        }
    }

    /** One write: validated absolute addresses per op. Cursor and counters are engine-thread-only. */
    static final class Job {
        final Link link;
        final long room;
        final int ops;
        final long[] src, dst, len, piece, sStride, dStride;
        final int[] entry;
        /** The whole source buffer and the op's offset in it, of each strided op (gathered into staging on the engine thread). */
        final MemorySegment[] srcBuffer;
        final long[] srcOffset;
        final Thread waiter = Thread.currentThread();
        int op;
        long piece_i;
        int inFlight;
        boolean queued;
        /** Set by the writer when its room was cancelled: no further batch is posted. */
        volatile boolean cancel;
        boolean cancelledByEngine;
        String error;
        volatile boolean done;

        Job(Link link, long room, int ops) {
            this.link = link;
            this.room = room;
            this.ops = ops;
            src = new long[ops];
            dst = new long[ops];
            len = new long[ops];
            piece = new long[ops];
            sStride = new long[ops];
            dStride = new long[ops];
            entry = new int[ops];
            srcBuffer = new MemorySegment[ops];
            srcOffset = new long[ops];
        }
    }

    static final class Batch {
        final Job job;
        final Staging staging;
        boolean done;

        Batch(Job job, Staging staging) {
            this.job = job;
            this.staging = staging;
        }
    }

    private record Closing(Link link, UcpRequest request, long since) {}

    private static final class Staging {
        /** A strided op carries at most CopyPlan.MAX_OP_BYTES of payload. */
        static final long SIZE = CopyPlan.MAX_OP_BYTES;
        final MemorySegment segment;
        final UcpMemory registration;

        Staging(MemorySegment segment, UcpMemory registration) {
            this.segment = segment;
            this.registration = registration;
        }
    }
}
