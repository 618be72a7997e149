package io.kvferry.ucx;

import io.kvferry.memory.RegisteredMemory;
import io.kvferry.protocol.Region;
import io.kvferry.transport.DestinationTransport;
import io.kvferry.transport.LinkOffer;
import io.kvferry.transport.RevocableOffer;
import org.openucx.jucx.ucp.UcpContext;
import org.openucx.jucx.ucp.UcpMemMapParams;
import org.openucx.jucx.ucp.UcpMemory;
import org.openucx.jucx.ucp.UcpParams;
import org.openucx.jucx.ucp.UcpWorker;
import org.openucx.jucx.ucp.UcpWorkerParams;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * A decode rank's registered memory as UCX offers it to remote writers.
 *
 * <p><b>Owners.</b> The {@link UcpContext} and every {@link UcpMemory} registration belong to this
 * object (created in {@link #open}, released in {@link #close} after every link worker is gone);
 * the context is opened with {@code mtWorkersShared} because its workers run on different threads.
 * Each {@link #offer} creates its own {@link UcpWorker} and hands it to a new progress thread
 * ({@code kvferry-ucx-dst-…}), which from then on is the only thread that touches that worker
 * ({@code progress}, {@code waitForEvents}, {@code close}); other threads only call the thread-safe
 * {@code signal()}. The progress thread is needed because UCX's tcp transport (and any active
 * message or wireup traffic) lands only while the target worker progresses; when idle it sleeps in
 * {@code waitForEvents()} (the worker's event fd); after doing work it polls a while first ({@link UcxSettings#dstSpin}),
 * since a transfer brings the next fragment within microseconds.
 *
 * <p><b>What revoke guarantees.</b> The registrations are shared by every link (one rkey per buffer,
 * packed once): UCX cannot withdraw a remote key from one peer without unmapping the memory for
 * all of them, and on the transports where this matters most (tcp, cma) rkeys are not enforced at
 * all. So a link is fenced by its worker instead: {@link LinkOffer#revoke} stops the link's progress
 * thread and destroys the link's worker, which closes its sockets (tcp), queue pairs and DC
 * targets (InfiniBand/RoCE rc/dc): from then on nothing that needs this worker can land — every
 * network transport UCX offers. Transports that write this process's memory without this worker
 * (cma, knem, xpmem on the same host; cuda_ipc/rocm_ipc) cannot be fenced per peer; when
 * {@code UCX_TLS} (read, never changed) leaves any of them possible, revoke cannot confirm and, as
 * the SPI asks, returns false after waiting the whole timeout (time for the prefill, which sees the
 * same link loss and checks cancellation between puts, to stop). With {@code UCX_TLS} limited to
 * network transports (e.g. {@code tcp}, {@code rc,ud}, {@code ^sm}) revoke returns true as soon as
 * the worker is closed (typically well under a millisecond).
 */
final class UcxDestination implements DestinationTransport {
    private static final Logger log = LoggerFactory.getLogger(UcxDestination.class);

    private final UcpContext context;
    private final List<UcpMemory> registrations;
    private final List<UcxOffer.Entry> entries;
    private final int engineRank;
    private final boolean directAccessPossible;
    private final Set<Link> links = ConcurrentHashMap.newKeySet();
    /** Empty progress calls after work before a link sleeps ({@link UcxSettings#dstSpin}), read once at open. */
    private final long dstSpin;
    private boolean closed;

    private UcxDestination(UcpContext context, List<UcpMemory> registrations, List<UcxOffer.Entry> entries, int engineRank,
                           UcxSettings settings) {
        this.context = context;
        this.registrations = registrations;
        this.entries = entries;
        this.engineRank = engineRank;
        this.directAccessPossible = UcxSettings.directAccessPossible(System.getenv("UCX_TLS"));
        this.dstSpin = settings.dstSpin;
    }

    /** Registers every KV, aux and state buffer; null (and {@code why} told) when UCX refuses one. */
    static UcxDestination open(RegisteredMemory memory, int engineRank, UcxSettings settings, Consumer<String> why) throws IOException {
        UcpContext ctx;
        try {
            ctx = new UcpContext(new UcpParams().requestRmaFeature().requestWakeupFeature().setMtWorkersShared(true));
        } catch (RuntimeException e) {
            why.accept("UCX cannot open a context: " + e.getMessage());
            return null;
        }
        List<UcpMemory> regs = new ArrayList<>();
        List<UcxOffer.Entry> entries = new ArrayList<>();
        try {
            for (Region region : Region.values()) {
                int components = region == Region.STATE ? memory.stateComponentCount() : 1;
                for (int c = 0; c < components; c++) {
                    for (int b = 0; ; b++) {
                        MemorySegment seg = memory.segmentOrNull(region, c, b);
                        if (seg == null) break;
                        MemoryType type = MemoryType.HOST; // RegisteredMemory holds native host segments only (for now)
                        UcpMemory reg;
                        try {
                            reg = ctx.memoryMap(new UcpMemMapParams().setAddress(seg.address()).setLength(seg.byteSize())
                                    .setMemoryType(type.ucsOrdinal()));
                        } catch (RuntimeException e) {
                            why.accept("UCX cannot register " + region + " buffer " + c + "/" + b + " (" + seg.byteSize()
                                    + " bytes): " + e.getMessage());
                            release(regs, ctx);
                            return null;
                        }
                        regs.add(reg);
                        entries.add(new UcxOffer.Entry(region, c, b, type, seg.address(), seg.byteSize(), bytes(reg.getRemoteKeyBuffer())));
                    }
                }
            }
        } catch (RuntimeException | Error e) {
            release(regs, ctx);
            throw e;
        }
        log.info("ucx: decode rank {} registered {} buffers with UCX {}", engineRank, regs.size(), UcxRuntime.version());
        return new UcxDestination(ctx, regs, List.copyOf(entries), engineRank, settings);
    }

    @Override
    public String name() {
        return "ucx";
    }

    @Override
    public synchronized LinkOffer offer(String peer) throws IOException {
        if (closed) return null;
        UcpWorker worker;
        try {
            worker = context.newWorker(new UcpWorkerParams().requestWakeupRMA().requestWakeupRX().requestWakeupTX());
        } catch (RuntimeException e) {
            throw new IOException("UCX cannot create a worker for the link to " + peer + ": " + e.getMessage(), e);
        }
        byte[] address = bytes(worker.getAddress());
        byte[] blob = new UcxOffer(UcxRuntime.major(), UcxRuntime.minor(), address, entries).encode();
        Link link = new Link(worker, peer);
        links.add(link);
        link.thread.start();
        return new Offer(link, blob);
    }

    /** Stops every link worker, then unregisters the memory and closes the context. */
    @Override
    public void close() {
        synchronized (this) {
            if (closed) return;
            closed = true;
        }
        boolean allStopped = true;
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        for (Link l : links) allStopped &= l.stop(deadline);
        if (!allStopped) {
            // A worker still in use must not lose its context: leak it rather than crash the process.
            log.error("ucx: a link progress thread of decode rank {} did not stop; its UCX context is left open", engineRank);
            return;
        }
        release(registrations, context);
    }

    private static void release(List<UcpMemory> regs, UcpContext ctx) {
        for (UcpMemory m : regs) {
            try {
                m.deregister();
            } catch (RuntimeException e) {
                log.warn("ucx: unmapping a buffer failed: {}", e.getMessage());
            }
        }
        try {
            ctx.close();
        } catch (RuntimeException e) {
            log.warn("ucx: closing the context failed: {}", e.getMessage());
        }
    }

    static byte[] bytes(ByteBuffer b) {
        ByteBuffer d = b.duplicate();
        byte[] out = new byte[d.remaining()];
        d.get(out);
        return out;
    }

    /** One prefill link's worker and its progress thread (which alone touches the worker). */
    private final class Link implements Runnable {
        private final UcpWorker worker;
        private final String peer;
        private final Thread thread;
        private volatile boolean stopping;

        Link(UcpWorker worker, String peer) {
            this.worker = worker;
            this.peer = peer;
            this.thread = Thread.ofPlatform().daemon().name("kvferry-ucx-dst-r" + engineRank + "-" + peer).unstarted(this);
        }

        @Override
        public void run() {
            long lastError = 0;
            long spin = dstSpin, idle = spin;
            try {
                while (!stopping) {
                    try {
                        if (worker.progress() > 0) idle = 0;
                        else if (++idle > spin && !stopping) worker.waitForEvents();
                    } catch (Exception e) {
                        long now = System.nanoTime();
                        if (now - lastError > 1_000_000_000L) {
                            log.warn("ucx: progress of the link to {} failed: {}", peer, e.toString());
                            lastError = now;
                        }
                    }
                }
            } finally {
                try {
                    worker.close();
                } catch (RuntimeException e) {
                    log.warn("ucx: closing the worker of the link to {} failed: {}", peer, e.getMessage());
                }
                links.remove(this);
            }
        }

        /** Asks the thread to close the worker; true once it has (by {@code deadline}). */
        boolean stop(long deadline) {
            stopping = true;
            try {
                worker.signal();
            } catch (RuntimeException e) {
                // already closed by the progress thread
            }
            try {
                long left = deadline - System.nanoTime();
                if (left > 0) thread.join(Duration.ofNanos(left));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            return !thread.isAlive();
        }
    }

    private final class Offer extends RevocableOffer {
        private final Link link;

        Offer(Link link, byte[] blob) {
            super(blob);
            this.link = link;
        }

        /**
         * Closes this link's worker, then: true at once when no transport that bypasses the worker
         * can be in use (see the class comment); otherwise false after the whole timeout.
         */
        @Override
        protected boolean revokeOnce(Duration timeout) {
            long start = System.nanoTime();
            long deadline = start + Math.max(0, timeout.toNanos());
            boolean workerClosed = link.stop(deadline);
            boolean confirmed = workerClosed && !directAccessPossible;
            if (!confirmed) {
                try {
                    long left = deadline - System.nanoTime();
                    if (left > 0) TimeUnit.NANOSECONDS.sleep(left);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                log.info("ucx: revoked the link to {} (worker {}); not confirmed: UCX_TLS={} allows transports that write"
                                + " without the worker (cma/knem/xpmem/cuda_ipc), waited {} ms", link.peer,
                        workerClosed ? "closed" : "still open", System.getenv("UCX_TLS"), (System.nanoTime() - start) / 1_000_000);
            } else {
                log.debug("ucx: revoked the link to {} in {} us", link.peer, (System.nanoTime() - start) / 1000);
            }
            return confirmed;
        }

        @Override
        public void close() {
            link.stop(System.nanoTime() + TimeUnit.SECONDS.toNanos(5));
        }
    }
}
