package io.kvferry.ucx;

import io.kvferry.memory.RegisteredMemory;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.transport.DataPath;
import io.kvferry.transport.PeerLink;
import io.kvferry.transport.RemoteBuffers;
import io.kvferry.transport.SourceTransport;
import io.kvferry.transport.TransportUnavailableException;
import org.openucx.jucx.ucp.UcpContext;
import org.openucx.jucx.ucp.UcpMemMapParams;
import org.openucx.jucx.ucp.UcpMemory;
import org.openucx.jucx.ucp.UcpParams;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * A prefill rank's side of ucx: a UCP context with its source memory registered, and one
 * {@link UcxEngine} (worker + progress thread) shared by every decode link and transfer worker.
 *
 * <p><b>Owners.</b> The context and the source registrations belong to this object (made in
 * {@link #open} on the caller's thread before the engine thread starts, released in {@link #close}
 * after it stopped). Everything made from the worker belongs to the engine thread.
 */
final class UcxSource implements SourceTransport {
    private static final Logger log = LoggerFactory.getLogger(UcxSource.class);

    private final UcpContext context;
    private final List<UcpMemory> registrations;
    private final UcxEngine engine;
    private boolean closed;

    private final UcxSettings settings;
    /** Checks peers' worker addresses and keys; null when this UCX cannot be checked (then {@link #uncheckable} says why). */
    private final UcxAddressCheck check;
    private final String uncheckable;

    /** @param ownKey a remote key this context packed (the template for peers' keys), or null when nothing is registered */
    private UcxSource(UcpContext context, List<UcpMemory> registrations, UcxEngine engine, UcxSettings settings, byte[] ownKey) {
        this.settings = settings;
        UcxAddressCheck c = null;
        String why = null;
        if (!UcxAddressCheck.knownRelease(UcxRuntime.major(), UcxRuntime.minor())) {
            why = "kvferry-ucx checks worker addresses in the packed format of UCX 1.13 and 1.14; this is UCX " + UcxRuntime.version();
        } else {
            try {
                c = new UcxAddressCheck(engine.ownAddress(), ownKey);
            } catch (UcxAddressCheck.Refused | RuntimeException e) {
                why = e.getMessage();
            }
        }
        if (why != null) log.warn("ucx: this prefill declines every ucx offer (links use tcp): {}", why);
        this.check = c;
        this.uncheckable = why;
        this.context = context;
        this.registrations = registrations;
        this.engine = engine;
    }

    /** Registers every source buffer (so UCX's zero-copy sends find it registered) and starts the engine. */
    static UcxSource open(RegisteredMemory memory, int engineRank, UcxSettings settings) throws IOException {
        UcpContext ctx;
        try {
            ctx = new UcpContext(new UcpParams().requestRmaFeature().requestWakeupFeature());
        } catch (RuntimeException e) {
            log.warn("ucx: UCX cannot open a context: {}", e.getMessage());
            throw new IOException("UCX cannot open a context; details in the prefill's log", e);
        }
        List<UcpMemory> regs = new ArrayList<>();
        try {
            memory.forEachBuffer((region, c, b, seg) -> {
                try {
                    regs.add(ctx.memoryMap(new UcpMemMapParams().setAddress(seg.address()).setLength(seg.byteSize())
                            .setMemoryType(MemoryType.HOST.ucsOrdinal())));
                } catch (RuntimeException e) {
                    log.warn("ucx: UCX cannot register source {} buffer {}/{} ({} bytes): {}", region, c, b, seg.byteSize(), e.getMessage());
                    throw new IOException("UCX cannot register source " + region + " buffer " + c + "/" + b + " ("
                            + seg.byteSize() + " bytes); details in the prefill's log", e);
                }
            });
            // Packed before the engine thread starts, like the registrations: no UCX call here races with it.
            byte[] ownKey = regs.isEmpty() ? null : UcxDestination.bytes(regs.get(0).getRemoteKeyBuffer());
            UcxEngine engine = new UcxEngine(ctx, engineRank, settings);
            UcxEndpointInfo.warm();
            log.info("ucx: prefill rank {} registered {} source buffers (UCX {}, error mode {})", engineRank, regs.size(),
                    UcxRuntime.version(), engine.errMode().name().toLowerCase(Locale.ROOT));
            return new UcxSource(ctx, regs, engine, settings, ownKey);
        } catch (IOException | RuntimeException e) {
            for (UcpMemory m : regs) m.deregister();
            ctx.close();
            if (e instanceof IOException io) throw io;
            log.warn("ucx: UCX source setup failed: {}", e.toString());
            throw new IOException("UCX source setup failed; details in the prefill's log", e);
        }
    }

    @Override
    public String name() {
        return "ucx";
    }

    /**
     * Checks the offer (format; every buffer declared in HELLO present with the declared length;
     * memory types this UCX can reach; the worker address and every remote key structurally, see
     * {@link UcxAddressCheck}), connects an endpoint to the link's worker and waits for its wireup
     * (a first flush) within {@link UcxSettings#connectTimeoutMs()}.
     *
     * <p>Exception messages go back to the decode (HELLO_ACK's fallback reason), so they never carry
     * this side's UCX version, configuration or library messages: those are logged here.
     *
     * @throws IOException a malformed offer, or one that contradicts HELLO or fails the structural check
     * @throws TransportUnavailableException a newer offer version, another UCX release, unsupported memory, an unreachable decode
     */
    @Override
    public DataPath connect(byte[] blob, MemoryDescriptor destination, PeerLink to) throws TransportUnavailableException, IOException {
        String peer = to.peer();
        synchronized (this) {
            if (closed) throw new TransportUnavailableException("the UCX source is closed");
        }
        UcxOffer offer;
        RemoteBuffers buffers;
        try {
            offer = UcxOffer.decode(blob);
            buffers = UcxOffer.buffers(offer, destination, peer);
        } catch (UcxOffer.Malformed | RemoteBuffers.OfferMismatch e) {
            throw new IOException("malformed ucx offer from " + peer + ": " + e.getMessage());
        } catch (UcxOffer.Unsupported e) {
            throw new TransportUnavailableException(e.getMessage());
        }
        if (check == null) {
            throw new TransportUnavailableException("this prefill cannot check UCX worker addresses with its UCX installation"
                    + " (the reason is in its log)");
        }
        if (offer.ucxMajor() != UcxRuntime.major() || offer.ucxMinor() != UcxRuntime.minor()) {
            // UCX's worker address format differs between releases and libucp aborts on one it cannot parse.
            log.warn("ucx: decode {} runs UCX {}.{}, this prefill UCX {}; the link uses tcp", peer, offer.ucxMajor(), offer.ucxMinor(),
                    UcxRuntime.version());
            throw new TransportUnavailableException("decode " + peer + " runs another UCX release than this prefill;"
                    + " kvferry-ucx needs the same UCX release on both sides");
        }
        // The decode's memory domains every one of its remote keys covers: a put lane into another cannot reach all its buffers.
        long keyMds = -1L;
        try {
            UcxAddressCheck.Layout address = check.checkAddress(offer.workerAddress());
            for (UcxOffer.Entry e : offer.entries()) {
                try {
                    keyMds &= check.checkKey(e.rkey(), e.memoryType().ucsOrdinal(), address).mdMap();
                } catch (UcxAddressCheck.Refused r) {
                    throw new UcxAddressCheck.Refused(e.region() + " buffer " + e.component() + "/" + e.buffer() + ": " + r.getMessage());
                }
            }
        } catch (UcxAddressCheck.Refused e) {
            log.warn("ucx: the offer of decode {} fails the structural check of its UCX worker address and keys: {}", peer, e.getMessage());
            throw new IOException("ucx offer from " + peer + " refused: its UCX worker address or remote keys do not have the structure"
                    + " this prefill's UCX produces (details in the prefill's log)");
        }
        long supported = context.getMemoryTypesMask();
        for (UcxOffer.Entry e : offer.entries()) {
            if (e.memoryType() != MemoryType.HOST && (supported & (1L << e.memoryType().ucsOrdinal())) == 0) {
                throw new TransportUnavailableException("decode " + peer + " offers " + e.memoryType() + " memory ("
                        + e.region() + " buffer " + e.component() + "/" + e.buffer() + "), which this prefill cannot reach");
            }
        }
        UcxEngine.Link link = new UcxEngine.Link(peer, offer, buffers, keyMds);
        CompletableFuture<UcxEngine.Link> done = new CompletableFuture<>();
        engine.submit(() -> engine.connect(link, done));
        long timeout = settings.connectTimeoutMs;
        try {
            done.get(timeout, TimeUnit.MILLISECONDS);
        } catch (ExecutionException e) {
            engine.submit(() -> engine.close(link, "connect failed"));
            log.warn("ucx: UCX cannot reach decode {}: {}{}", peer, e.getCause().getMessage(), hint());
            throw new TransportUnavailableException("UCX cannot reach decode " + peer + " (details in the prefill's log)");
        } catch (TimeoutException e) {
            engine.submit(() -> engine.close(link, "connect timed out"));
            log.warn("ucx: UCX did not connect to decode {} within {} ms{}", peer, timeout, hint());
            throw new TransportUnavailableException("UCX did not connect to decode " + peer + " within " + timeout + " ms");
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            engine.submit(() -> engine.close(link, "connect interrupted"));
            throw new IOException("interrupted while connecting to " + peer);
        }
        String emulated = link.lanes.emulation(link.keyMds);
        if (emulated != null) log.info("ucx: decode {}: {} (lanes {})", peer, emulated, link.lanes.lanes());
        return new UcxDataPath(engine, link, settings.drainTimeoutMs);
    }

    /** Local diagnostics for a failed connect (this side's UCX settings): logged, never sent to the peer. */
    private String hint() {
        String tls = System.getenv("UCX_TLS");
        return " (UCX " + UcxRuntime.version() + ", UCX_TLS=" + (tls == null ? "<unset>" : tls) + ", KVFERRY_UCX_ERR_MODE="
                + engine.errMode().name().toLowerCase(Locale.ROOT)
                + (engine.errMode() == UcxSettings.ErrMode.PEER ? "; peer error mode needs a transport with peer-failure"
                + " support for active messages, e.g. tcp or rc: UCX 1.13 leaves out posix/sysv" : "") + ")";
    }

    /** Stops the engine (closing every endpoint), then unregisters the source memory and closes the context. */
    @Override
    public void close() {
        synchronized (this) {
            if (closed) return;
            closed = true;
        }
        engine.shutdown(TimeUnit.SECONDS.toNanos(10));
        if (!engine.stopped()) {
            log.error("ucx: the source engine is still running; its UCX context is left open");
            return;
        }
        for (UcpMemory m : registrations) {
            try {
                m.deregister();
            } catch (RuntimeException e) {
                log.warn("ucx: unmapping a source buffer failed: {}", e.getMessage());
            }
        }
        context.close();
    }
}
