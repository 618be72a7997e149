package io.kvferry.conn;

import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.protocol.AbortAck;
import io.kvferry.protocol.ControlMessage;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.HelloAck;
import io.kvferry.protocol.ProtocolException;
import io.kvferry.protocol.Region;
import io.kvferry.protocol.Status;
import io.kvferry.protocol.WriteHeader;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.PrefillServerInfo;
import io.kvferry.registry.RankEndpoint;
import io.kvferry.registry.RetryPolicy;
import io.kvferry.transport.ControlConnection;
import io.kvferry.transport.DestinationTransport;
import io.kvferry.transport.InprocRegistry;
import io.kvferry.transport.LinkOffer;
import io.kvferry.transport.TransportProvider;
import io.kvferry.transport.Transports;
import io.kvferry.protocol.TransportOffer;
import io.kvferry.transport.WriteRejectedException;
import io.kvferry.transport.WriteSink;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.EOFException;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

/**
 * The decode side of one rank: resolves prefill ranks through their bootstrap registry, keeps one
 * registered connection per prefill rank, and lands incoming writes — after checking each one
 * against registered memory and the pages the room owns — straight into the destination buffers.
 *
 * <p>Threads: the scheduler thread drives receivers; one reader thread per {@link PrefillLink}
 * lands writes and statuses for the rooms on it. Room status lives in {@link RoomStatusTable}.
 */
public final class DecodeKVManager implements KVManager, WriteSink {
    private static final Logger log = LoggerFactory.getLogger(DecodeKVManager.class);
    /** How long clear() waits for a landing write before cutting the link it comes on. */
    static final long LANDING_DRAIN_MILLIS = 2000;
    private static final long TEARDOWN_REVOKE_NANOS = 1_000_000_000L;
    /** How long a stripe that saw the prefill close waits for the link's other stripes to drain. */
    private static final long STRIPE_DRAIN_MILLIS = 500;
    static final String DEFAULT_PREFILL_FAILURE = "Failed to get kvcache from prefill instance, it might be dead";

    private final KVManagerConfig config;
    private final RegisteredMemory memory;
    private final int engineRank;
    private final int pageSize;
    private final String kvCacheDtype;
    private final int ppRank;
    private final String backend;
    private final String sessionId = UUID.randomUUID().toString();
    final RoomStatusTable statuses = new RoomStatusTable();
    private final ConcurrentHashMap<Long, DecodeRoom> rooms = new ConcurrentHashMap<>();
    private final ConcurrentHashMap<String, PrefillServerInfo> topologies = new ConcurrentHashMap<>();
    private final ConcurrentHashMap<String, RankEndpoint> endpoints = new ConcurrentHashMap<>();
    private final ConcurrentHashMap<String, PrefillLink> links = new ConcurrentHashMap<>();
    private final ConcurrentHashMap<String, BootstrapClient> clients = new ConcurrentHashMap<>();
    /** bootstrap address → "nanoTime|reason" of its last failed topology lookup. */
    private final ConcurrentHashMap<String, String> recentFailures = new ConcurrentHashMap<>();
    private static final long TOPOLOGY_RETRY_NANOS = 1_000_000_000L;
    private final ScheduledExecutorService timer;
    private final Object linkSetup = new Object();
    /** Revokes lost links' offers off the reader threads (a revoke that cannot confirm waits its timeout); teardown joins it. */
    private final OwnedTaskThread revoker;
    /** One-sided transports this rank offers, in preference order (empty for tcp and inproc). */
    private final List<DestinationTransport> destinations;
    private volatile boolean closed;

    public DecodeKVManager(KVArgs args, KVManagerConfig config, String backend) {
        if (config.attnCpSize() != 1) {
            throw new IllegalArgumentException("decode attn_cp_size must be 1, got " + config.attnCpSize());
        }
        this.config = config;
        this.memory = RegisteredMemory.from(args);
        this.engineRank = args.engineRank;
        this.pageSize = args.pageSize;
        this.kvCacheDtype = args.kvCacheDtypeStr;
        this.ppRank = args.ppRank;
        this.backend = backend;
        if (config.ppSize() > 1 && args.kvLayerIds.isEmpty()) {
            throw new IllegalArgumentException("a pipeline-parallel decode stage must set KVArgs.kvLayerIds (global layer id per KV buffer)");
        }
        this.timer = Executors.newSingleThreadScheduledExecutor(r -> Thread.ofPlatform().daemon()
                .name("kvferry-decode-timer-" + engineRank).unstarted(r));
        this.revoker = new OwnedTaskThread("kvferry-decode-revoke-" + engineRank);
        if ("inproc".equals(backend)) InprocRegistry.register(sessionId, this);
        this.destinations = openDestinations(backend, memory, engineRank);
        long beat = config.heartbeatInterval().toNanos(), dead = config.heartbeatTimeout().toNanos();
        timer.scheduleWithFixedDelay(() -> {
            for (PrefillLink l : links.values()) {
                if (!l.connection.heartbeat(beat, dead)) log.warn("connection to {}: {}", l, l.connection.closeReason());
                for (ControlConnection c : l.stripes) {
                    if (!c.heartbeat(beat, dead)) log.warn("data stripe to {}: {}", l, c.closeReason());
                }
            }
        }, beat / 2, beat / 2, TimeUnit.NANOSECONDS);
    }

    private static List<DestinationTransport> openDestinations(String backend, RegisteredMemory memory, int engineRank) {
        List<DestinationTransport> out = new ArrayList<>();
        boolean explicit = !"auto".equals(backend);
        Transports.requireAvailable(backend);
        for (TransportProvider p : Transports.forBackend(backend)) {
            String unavailable = p.unavailableReason();
            if (unavailable != null) {
                log.info("auto: {} not offered: {}", p.name(), unavailable);
                continue;
            }
            try {
                DestinationTransport d = p.openDestination(memory, engineRank,
                        why -> log.info("{}: not offered, links use TCP: {}", p.name(), why));
                if (d != null) out.add(d);
            } catch (IOException | RuntimeException e) {
                if (explicit) throw new IllegalStateException("transfer backend " + p.name() + " could not start: " + e.getMessage(), e);
                log.warn("auto: {} not offered: {}", p.name(), e.getMessage());
            }
        }
        return List.copyOf(out);
    }

    @Override
    public DisaggregationMode mode() {
        return DisaggregationMode.DECODE;
    }

    @Override
    public String backend() {
        return backend;
    }

    @Override
    public void registerToBootstrap() {
        // Only prefill ranks register; decode ranks look them up.
    }

    @Override
    public boolean enableDeferredDecodeKvRelease() {
        return false;
    }

    @Override
    public KVSender createSender(String bootstrapAddr, long bootstrapRoom, List<Integer> destTpRanks, int ppRank,
                                 boolean reqHasDisaggPrefillDpRank) {
        throw new UnsupportedOperationException("a decode manager creates receivers, not senders");
    }

    @Override
    public KVReceiver createReceiver(String bootstrapAddr, long bootstrapRoom) {
        if (closed) throw new IllegalStateException("the decode KV manager was torn down");
        DecodeRoom room = new DecodeRoom(bootstrapRoom, bootstrapAddr);
        DecodeRoom previous = rooms.putIfAbsent(bootstrapRoom, room);
        if (previous != null) {
            throw new IllegalArgumentException("bootstrap_room " + bootstrapRoom + " is already in flight on this decode rank");
        }
        statuses.update(bootstrapRoom, KVPoll.Bootstrapping);
        return new DecodeKVReceiver(this, room);
    }

    KVManagerConfig config() {
        return config;
    }

    RegisteredMemory memory() {
        return memory;
    }

    int engineRank() {
        return engineRank;
    }

    int pageSize() {
        return pageSize;
    }

    String kvCacheDtype() {
        return kvCacheDtype;
    }

    int ppRank() {
        return ppRank;
    }

    /**
     * Drops a room. Returns only when no write of the room can land any more: writes in flight are
     * waited for, and a link stuck mid-write (a stalled peer) is closed, which stops its reader.
     */
    void forget(DecodeRoom room) {
        if (statuses.status(room.room) != KVPoll.Success) quiesceOneSided(room);
        if (!room.closeAndDrain(LANDING_DRAIN_MILLIS)) {
            log.warn("room {}: a write is still landing after {} ms; closing its links", room.room, LANDING_DRAIN_MILLIS);
            for (DecodeRoom.Target t : room.targets) t.link().closeAll("a write of room " + room.room + " is stuck");
            room.closeAndDrain(Long.MAX_VALUE / 2_000_000L);
        }
        statuses.remove(room.room);
        rooms.remove(room.room, room);
        for (DecodeRoom.Target t : room.targets) t.link().rooms.remove(room.room);
    }

    /**
     * Before an unfinished room's pages are reused: writes through one-sided transports (shm, ucx)
     * bypass the landing gate, so every such prefill rank must confirm with ABORT_ACK that none of
     * the room's writes is in flight; a rank that does not within abortAckTimeout has its link cut,
     * and a lost link's permission is revoked (which waits for copies in progress).
     */
    private void quiesceOneSided(DecodeRoom room) {
        List<PrefillLink> oneSided = new ArrayList<>();
        for (DecodeRoom.Target t : room.targets) {
            if (!t.dummy() && t.link().oneSided != null && !oneSided.contains(t.link())) oneSided.add(t.link());
        }
        if (oneSided.isEmpty()) return;
        notifyAbort(room);
        long timeout = config.abortAckTimeout().toMillis();
        for (PrefillLink silent : room.awaitAbortAcks(oneSided, timeout)) {
            log.warn("room {}: {} sent no ABORT_ACK within {} ms; cutting the link before the pages are reused", room.room,
                    silent, timeout);
            silent.connection.close("no ABORT_ACK for room " + room.room + " within " + timeout + " ms");
        }
        for (PrefillLink l : oneSided) {
            if (l.connection.isClosed() && !l.oneSided.revoke(config.abortAckTimeout())) {
                log.error("room {}: could not confirm that {} stopped writing ({} ms); releasing the room anyway", room.room, l, timeout);
            }
        }
    }

    /** Sends ABORT for a room to each of its prefill ranks, once (a dead link fails or revokes the room anyway). */
    void notifyAbort(DecodeRoom room) {
        if (!room.abortSent.compareAndSet(false, true)) return;
        for (DecodeRoom.Target t : room.targets) {
            try {
                t.link().connection.send(new io.kvferry.protocol.Abort(room.room));
            } catch (IOException e) {
                // best effort
            }
        }
    }

    // ------------------------------------------------------------------ bootstrap lookups (scheduler thread)

    private BootstrapClient client(String addr) {
        if (closed) throw new IllegalStateException("the decode KV manager was torn down");
        // One try per call: init()/poll() run on the scheduler thread; the receiver retries a second later.
        return clients.computeIfAbsent(addr, a -> new BootstrapClient(a, config.authToken(),
                new RetryPolicy(1, Duration.ofMillis(100), Duration.ofMillis(100), Duration.ofSeconds(3))));
    }

    PrefillServerInfo topology(String addr) {
        PrefillServerInfo info = topologies.get(addr);
        if (info != null) return info;
        // A recent failure answers at once, so a burst of requests for a dead address fails fast.
        String recent = recentFailures.get(addr);
        if (recent != null) {
            String[] parts = recent.split("\\|", 2);
            if (System.nanoTime() - Long.parseLong(parts[0]) < TOPOLOGY_RETRY_NANOS) throw new IllegalStateException(parts[1]);
            recentFailures.remove(addr, recent);
        }
        try {
            info = client(addr).fetchTopology();
        } catch (RuntimeException e) {
            recentFailures.put(addr, System.nanoTime() + "|" + e.getMessage());
            throw e;
        }
        recentFailures.remove(addr);
        topologies.put(addr, info);
        return info;
    }

    RankEndpoint endpoint(String addr, int dp, int cp, int tp, int pp) {
        String key = addr + "/" + dp + "/" + cp + "/" + tp + "/" + pp;
        RankEndpoint ep = endpoints.get(key);
        if (ep != null) return ep;
        ep = client(addr).fetchRankEndpoint(dp, cp, tp, pp);
        endpoints.put(key, ep);
        return ep;
    }

    /**
     * The prefill DP group holding a room (SGLang's {@code _resolve_prefill_dp_rank}): the router's
     * hint; 0 without attention-DP; {@code room % dp_size} when the prefill follows the bootstrap
     * room; else the registry's {@code /query_dp_ranks}. Returns -1 while it is not known yet (the
     * prefill has not registered the room; ask again later) — then call {@code init} with the answer.
     *
     * @param hint the request's {@code disagg_prefill_dp_rank}, or null
     */
    @Override
    public int resolvePrefillDpRank(String bootstrapAddr, long room, Integer hint) {
        if (hint != null) return hint;
        PrefillServerInfo info = topology(bootstrapAddr);
        if (info.dpSize() <= 1) return 0;
        if (info.followBootstrapRoom()) return (int) Math.floorMod(room, (long) info.dpSize());
        Integer dp = client(bootstrapAddr).queryDpRanks(List.of(room)).get(room);
        return dp == null ? -1 : dp;
    }

    /** The registered connection to a prefill rank, opened and registered (HELLO) on first use. */
    PrefillLink link(String addr, RankEndpoint ep) throws IOException {
        String key = ep.rankIp() + ":" + ep.rankPort();
        PrefillLink link = links.get(key);
        if (link != null && !link.connection.isClosed()) return link;
        synchronized (linkSetup) {
            link = links.get(key);
            if (link != null && !link.connection.isClosed()) return link;
            link = openLink(addr, ep, key);
            links.put(key, link);
            return link;
        }
    }

    private PrefillLink openLink(String addr, RankEndpoint ep, String key) throws IOException {
        Duration timeout = config.connectTimeout();
        ControlConnection conn = ControlConnection.connect(new InetSocketAddress(ep.rankIp(), ep.rankPort()), timeout);
        // A peer that accepts but never answers must not hang init: close the socket at the deadline.
        ScheduledFuture<?> deadline = timer.schedule((Runnable) conn::close, timeout.toMillis(), TimeUnit.MILLISECONDS);
        java.util.Map<String, LinkOffer> made = new java.util.LinkedHashMap<>();
        List<ControlConnection> stripesOpened = new ArrayList<>();
        try {
            List<TransportOffer> offers = new ArrayList<>();
            for (DestinationTransport d : destinations) {
                LinkOffer o = d.offer(key);
                if (o == null) continue;
                made.put(d.name(), o);
                offers.add(new TransportOffer(d.name(), o.blob()));
            }
            conn.send(new Hello(config.authToken() == null ? "" : config.authToken(), sessionId, backend, engineRank,
                    config.attnTpSize(), ppRank, pageSize, kvCacheDtype, memory.describe(),
                    (config.allCpRanksTransfer() ? Hello.FLAG_ALL_CP_RANKS : 0) | (config.tcpStripes() << Hello.STRIPES_SHIFT), offers));
            ControlMessage reply = readSkippingHeartbeats(conn);
            if (!(reply instanceof HelloAck ack)) throw new ProtocolException("expected HELLO_ACK, got " + reply.type());
            if (!ack.accepted()) throw new IOException("prefill rank at " + key + " refused registration: " + ack.error());
            PrefillLink link = new PrefillLink(addr, key, conn, ack.prefillUniqueRank());
            link.dataPath = ack.dataPath().isEmpty() ? "tcp" : ack.dataPath();
            link.oneSided = made.remove(link.dataPath);
            if (!ack.fallback().isEmpty()) {
                if ("auto".equals(backend)) log.info("link to {} uses {}: {}", key, link.dataPath, ack.fallback());
                else log.warn("link to {} falls back to {}: {}", key, link.dataPath, ack.fallback());
            } else {
                log.info("link to {} uses {}", key, link.dataPath);
            }
            if ("tcp".equals(link.dataPath) && config.tcpStripes() > 1) openStripes(link, ep, timeout, stripesOpened);
            link.reader = Thread.ofPlatform().daemon().name("kvferry-decode-reader-" + engineRank + "-" + key)
                    .start(() -> readLoop(link, link.connection));
            for (ControlConnection stripe : link.stripes) {
                link.stripeReaders.add(Thread.ofPlatform().daemon().name("kvferry-decode-stripe-" + engineRank + "-" + key)
                        .start(() -> readLoop(link, stripe)));
            }
            return link;
        } catch (IOException | RuntimeException e) {
            conn.close();
            for (LinkOffer o : made.values()) o.close();
            for (ControlConnection c : stripesOpened) c.close();
            made.clear();
            if (conn.isClosed() && deadline.isDone() && !(e.getMessage() != null && e.getMessage().contains("refused"))) {
                throw new IOException("prefill rank at " + key + " did not complete the handshake within " + timeout.toMillis() + " ms", e);
            }
            throw e;
        } finally {
            deadline.cancel(false);
            for (LinkOffer o : made.values()) o.close(); // offers the prefill did not take
        }
    }

    /**
     * Opens the extra data connections of a TCP link (registered as stripes of this session) before
     * the link carries any request; {@code opened} collects them so a failed set-up closes them.
     */
    private void openStripes(PrefillLink link, RankEndpoint ep, Duration timeout, List<ControlConnection> opened)
            throws IOException {
        for (int k = 1; k < config.tcpStripes(); k++) {
            ControlConnection c = ControlConnection.connect(new InetSocketAddress(ep.rankIp(), ep.rankPort()), timeout);
            opened.add(c);
            ScheduledFuture<?> deadline = timer.schedule((Runnable) c::close, timeout.toMillis(), TimeUnit.MILLISECONDS);
            try {
                c.send(new Hello(config.authToken() == null ? "" : config.authToken(), sessionId, backend, engineRank,
                        config.attnTpSize(), ppRank, pageSize, kvCacheDtype, memory.describe(),
                        Hello.FLAG_STRIPE | (k << Hello.STRIPE_INDEX_SHIFT)));
                ControlMessage reply = readSkippingHeartbeats(c);
                if (!(reply instanceof HelloAck ack)) throw new ProtocolException("expected HELLO_ACK, got " + reply.type());
                if (!ack.accepted()) throw new IOException("prefill rank at " + link.endpoint + " refused data stripe " + k + ": " + ack.error());
            } finally {
                deadline.cancel(false);
            }
            link.stripes.add(c);
        }
    }

    private static ControlMessage readSkippingHeartbeats(ControlConnection c) throws IOException {
        ControlMessage m;
        do {
            m = c.read();
        } while (m instanceof io.kvferry.protocol.Heartbeat);
        return m;
    }

    // ------------------------------------------------------------------ reader thread

    private void readLoop(PrefillLink link, ControlConnection conn) {
        String why = "connection closed";
        try {
            while (!closed) {
                ControlMessage m = conn.read();
                switch (m) {
                    case WriteHeader w -> onWrite(link, conn, w);
                    case Status s -> onStatus(link, s);
                    case io.kvferry.protocol.Heartbeat hb -> {
                        // liveness only
                    }
                    case AbortAck a -> {
                        DecodeRoom r = rooms.get(a.room());
                        if (r != null) r.abortAcked(link);
                    }
                    default -> throw new ProtocolException("unexpected " + m.type() + " from prefill");
                }
            }
        } catch (EOFException e) {
            why = "connection closed by prefill";
        } catch (IOException e) {
            why = e.getMessage() != null ? e.getMessage() : e.getClass().getSimpleName();
            if (!closed) log.warn("connection to {}: {}", link, why);
        } finally {
            String reason = conn.closeReason();
            onLinkLost(link, reason != null ? reason : why);
        }
    }

    private void onWrite(PrefillLink link, ControlConnection conn, WriteHeader w) throws IOException {
        DecodeRoom.Landing landing;
        try {
            landing = begin(w.room(), w.region(), w.component(), w.buffer(), w.offset(), w.span(), w.length());
        } catch (WriteRejectedException e) {
            if (e.fatal()) throw new ProtocolException("write from " + link + " rejected: " + e.getMessage());
            conn.skipPayload(w.length());
            rejectWrite(w.room(), link.toString(), e.getMessage());
            return;
        }
        boolean landed = false;
        try {
            if (w.strided()) conn.readStridedPayload(w, landing.target());
            else conn.readPayload(landing.target());
            landed = true;
        } finally {
            end(landing, landed);
        }
    }

    private void rejectWrite(long room, String from, String why) {
        KVPoll st = statuses.status(room);
        if (st == KVPoll.Failed || !rooms.containsKey(room)) {
            log.debug("dropped a write for inactive room {} from {}: {}", room, from, why);
            return;
        }
        String reason = "Rejected a write from " + from + ": " + why;
        log.warn("room {}: {}", room, reason);
        statuses.fail(room, reason);
    }

    private void onStatus(PrefillLink link, Status s) {
        DecodeRoom room = rooms.get(s.room());
        if (room == null) return; // cleared: never resurrect
        boolean target = false;
        for (DecodeRoom.Target t : room.targets) target |= t.link() == link;
        if (!target) {
            log.warn("ignored a status for room {} from {}, which is not one of its prefill ranks", s.room(), link);
            return;
        }
        if (s.status() == KVPoll.Success) {
            room.responded.add(link.prefillUniqueRank);
            if (room.responded.size() >= room.requiredResponses) {
                String corrupt = checkMetadataRoom(room);
                if (corrupt != null) {
                    statuses.fail(s.room(), corrupt);
                    return;
                }
                if (statuses.status(s.room()) != KVPoll.Failed) room.successNanos = System.nanoTime();
                statuses.update(s.room(), KVPoll.Success);
            }
        } else if (s.status() == KVPoll.Failed) {
            statuses.fail(s.room(), s.reason().isEmpty() ? DEFAULT_PREFILL_FAILURE : s.reason());
        }
    }

    /**
     * SGLang's metadata gate: the aux row's bootstrap_room column must hold this room once every
     * prefill rank reported Success. Writes precede their STATUS on the connection, so a column
     * still 0 here will not be filled later. Returns the failure reason, or null.
     */
    private String checkMetadataRoom(DecodeRoom room) {
        int buffer = memory.auxRoomBuffer();
        DecodeRoom.Allowance a = room.allowance;
        if (buffer < 0 || a == null || a.auxIndex() < 0) return null;
        long found = memory.slice(Region.AUX, 0, buffer, a.auxIndex() * memory.auxItemLen(buffer), 8)
                .get(java.lang.foreign.ValueLayout.JAVA_LONG_UNALIGNED, 0);
        if (found == room.room) return null;
        if (found == 0) {
            return "Metadata not written: the bootstrap_room column of aux row " + a.auxIndex()
                    + " is still 0 after every prefill rank reported Success";
        }
        return "Metadata corruption detected - bootstrap_room mismatch (expected " + room.room + ", found " + found + ")";
    }

    /** Drops every cached lookup for a prefill instance (its rank endpoints may have moved). */
    void forgetPrefill(String addr) {
        topologies.remove(addr);
        endpoints.keySet().removeIf(k -> k.startsWith(addr + "/"));
    }

    private void onLinkLost(PrefillLink link, String why) {
        if (why.startsWith("connection closed by prefill") && !link.stripes.isEmpty()) {
            // A clean close can overtake a room's last frames still queued on another stripe (its STATUS):
            // let the other readers reach their own end of stream before anything is failed.
            List<Thread> readers = new ArrayList<>(link.stripeReaders);
            readers.add(link.reader);
            for (Thread r : readers) {
                if (r == null || r == Thread.currentThread()) continue;
                try {
                    r.join(STRIPE_DRAIN_MILLIS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
        }
        link.closeAll(why);
        links.remove(link.endpoint, link);
        if (closed) return;
        // Cached lookups may point at a dead or replaced instance: look them up again next time.
        forgetPrefill(link.bootstrapAddr);
        int affected = 0;
        for (Long r : link.rooms) {
            if (statuses.status(r).isTerminal()) continue;
            // This rank already delivered everything for the room (its Success follows its bytes); the room
            // waits only on other ranks (e.g. other PP stages, whose process may just be exiting too).
            DecodeRoom room = rooms.get(r);
            if (room != null && room.responded.contains(link.prefillUniqueRank)) continue;
            if (statuses.fail(r, "Lost connection with prefill instance (bootstrap_addr: " + link.bootstrapAddr + ")")) affected++;
        }
        if (affected > 0) log.warn("Lost connection with {} ({}): {} requests affected", link, why, affected);
        LinkOffer offer = link.oneSided;
        if (offer != null) {
            // Revoked at once, off this reader thread; a clear() of the link's rooms waits for it (revoke is idempotent).
            boolean queued = revoker.submit(() -> {
                if (!offer.revoke(config.abortAckTimeout())) {
                    log.warn("could not confirm that {} stopped writing after the connection was lost", link);
                }
            });
            // Refused only once teardown began: it deregisters every destination's memory itself.
            if (!queued) log.debug("revoke of {} left to teardown", link);
        }
    }

    // ------------------------------------------------------------------ WriteSink

    @Override
    public DecodeRoom.Landing begin(long room, Region region, int component, int buffer, long offset, long length,
                                    long payload) throws WriteRejectedException {
        if (closed) throw new WriteRejectedException("this decode rank was torn down", false);
        MemorySegment seg = memory.segmentOrNull(region, component, buffer);
        if (seg == null) throw new WriteRejectedException("no registered " + region + " buffer " + component + "/" + buffer, true);
        if (length > seg.byteSize()) {
            throw new WriteRejectedException("write of " + length + " bytes is larger than " + region + " buffer "
                    + component + "/" + buffer + " (" + seg.byteSize() + " bytes)", true);
        }
        if (offset > seg.byteSize() - length) {
            throw new WriteRejectedException("write [" + offset + ", +" + length + ") is outside " + region + " buffer "
                    + component + "/" + buffer + " of " + seg.byteSize() + " bytes", false);
        }
        DecodeRoom r = rooms.get(room);
        if (r == null) throw new WriteRejectedException("room " + room + " is unknown on this decode rank", false);
        if (statuses.status(room) == KVPoll.Failed) throw new WriteRejectedException("room " + room + " has failed", false);
        DecodeRoom.Allowance a = r.allowance;
        if (a == null) throw new WriteRejectedException("room " + room + " has not sent its metadata", false);
        if (length == 0) return admit(r, seg.asSlice(offset, 0), 0);
        if (payload > length) throw new WriteRejectedException("write payload " + payload + " exceeds its span " + length, true);
        long item = memory.itemLen(region, component, buffer);
        switch (region) {
            case KV -> requireOwned(a.sortedPages(), offset, length, item, "KV buffer " + buffer + " page", room);
            case AUX -> {
                long start = a.auxIndex() * item;
                if (a.auxIndex() < 0 || offset < start || offset + length > start + item) {
                    throw new WriteRejectedException("aux write [" + offset + ", +" + length + ") is not inside row "
                            + a.auxIndex() + " of room " + room, false);
                }
            }
            case STATE -> {
                if (component >= a.sortedState().length) {
                    throw new WriteRejectedException("room " + room + " sent no indices for state component " + component, false);
                }
                requireOwned(a.sortedState()[component], offset, length, item, "state component " + component + " index", room);
            }
        }
        if (!r.transferring) {
            r.transferring = true;
            statuses.update(room, KVPoll.Transferring);
        }
        return admit(r, seg.asSlice(offset, length), payload);
    }

    private static DecodeRoom.Landing admit(DecodeRoom r, MemorySegment target, long length) throws WriteRejectedException {
        // Counted in flight under the room's lock, so clear() either refuses this write or waits for it.
        if (!r.beginLanding()) throw new WriteRejectedException("room " + r.room + " was cleared", false);
        return new DecodeRoom.Landing(r, target, length);
    }

    private static void requireOwned(int[] sorted, long offset, long length, long item, String what, long room)
            throws WriteRejectedException {
        long first = offset / item;
        long last = (offset + length - 1) / item;
        int idx = first > Integer.MAX_VALUE ? -1 : Arrays.binarySearch(sorted, (int) first);
        boolean ok = idx >= 0 && idx + (last - first) < sorted.length;
        for (long k = 1; ok && k <= last - first; k++) ok = sorted[(int) (idx + k)] == first + k;
        if (!ok) {
            throw new WriteRejectedException("write to " + what + "s [" + first + ", " + last + "] touches memory room "
                    + room + " does not own", false);
        }
    }

    @Override
    public void end(WriteSink.Landing landing, boolean landed) {
        DecodeRoom.Landing l = (DecodeRoom.Landing) landing;
        if (landed) l.room().bytesLanded.addAndGet(l.length());
        l.room().endLanding();
    }

    // ------------------------------------------------------------------ lifecycle

    /** Rooms this manager still tracks (for leak checks). */
    public int trackedRooms() {
        return rooms.size();
    }

    /** Open prefill connections. */
    public int linkCount() {
        return links.size();
    }

    @Override
    public io.kvferry.api.KVManagerStats stats() {
        return new io.kvferry.api.KVManagerStats(rooms.size(), links.size(), 0, 0, 0, 0, 0);
    }

    @Override
    public void teardown() {
        if (closed) return;
        closed = true;
        InprocRegistry.unregister(sessionId);
        for (DecodeRoom r : rooms.values()) {
            statuses.fail(r.room, "the decode KV manager was torn down");
            r.closeAndDrain(LANDING_DRAIN_MILLIS);
        }
        List<PrefillLink> all = new ArrayList<>(links.values());
        for (PrefillLink l : all) l.closeAll("the decode KV manager was torn down");
        for (PrefillLink l : all) {
            for (Thread s : l.stripeReaders) {
                try {
                    s.join(2000);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            Thread t = l.reader;
            if (t != null) {
                try {
                    t.join(2000);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
        }
        timer.shutdownNow();
        if (!revoker.close(config.abortAckTimeout().plusSeconds(1))) { // a transport may finish its fence first
            log.warn("teardown: {} did not end within {}", revoker.name(), config.abortAckTimeout().plusSeconds(1));
        }
        // Bounded: every link gets what is left of one second (the transports also deregister below).
        long revokeDeadline = System.nanoTime() + TEARDOWN_REVOKE_NANOS;
        for (PrefillLink l : all) {
            Duration left = Duration.ofNanos(Math.max(0, revokeDeadline - System.nanoTime()));
            if (l.oneSided != null && !l.oneSided.revoke(left)) {
                log.warn("teardown: could not confirm that {} stopped writing", l);
            }
        }
        for (DestinationTransport d : destinations) d.close();
        for (BootstrapClient c : clients.values()) c.close();
    }
}
