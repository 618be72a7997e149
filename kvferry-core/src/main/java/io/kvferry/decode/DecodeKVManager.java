package io.kvferry.decode;

import io.kvferry.api.BackendUnavailableException;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVFerrySettings;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVManagerStats;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.api.KVManagerInspection;
import io.kvferry.api.KVTransferMetric;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.metrics.RankIdentity;
import io.kvferry.metrics.RankTelemetry;
import io.kvferry.metrics.RoomCensus;
import io.kvferry.protocol.Coverage;
import io.kvferry.protocol.Fingerprint;
import io.kvferry.session.OwnedTaskThread;
import io.kvferry.session.RoomStatusTable;
import io.kvferry.session.DeadlineClock;
import io.kvferry.session.RoomFeed;
import io.kvferry.session.SessionTimer;
import io.kvferry.transport.Backend;
import io.kvferry.transport.ControlConnection;
import io.kvferry.transport.DestinationTransport;
import io.kvferry.transport.TransportProvider;
import io.kvferry.transport.Transports;
import io.kvferry.transport.WriteSink;
import io.kvferry.transport.tcp.TcpDestination;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.UUID;
import java.util.function.Consumer;

/**
 * The decode side of one rank: a façade over its parts. {@link LinkDirectory} resolves prefill
 * ranks through their bootstrap registry and keeps one registered {@link PrefillLink} per rank;
 * {@link LinkReader} threads land writes through the {@link WriteGate} and conclude rooms;
 * {@link RoomRelease} makes sure no write lands in a room's pages after it is released.
 *
 * <p>Threads, all owned here and ended by {@link #teardown}: the scheduler thread drives receivers;
 * one reader per link connection; one timer (heartbeats, handshake deadlines); one revoker
 * (revokes lost links' one-sided permissions off the readers).
 */
public final class DecodeKVManager implements KVManager {
    private static final Logger log = LoggerFactory.getLogger(DecodeKVManager.class);
    private static final long TEARDOWN_REVOKE_NANOS = 1_000_000_000L;

    private final KVManagerConfig config;
    private final RegisteredMemory memory;
    private final int engineRank;
    private final int pageSize;
    private final String kvCacheDtype;
    private final int ppRank;
    private final Backend backend;
    private final String sessionId = UUID.randomUUID().toString();
    final RankTelemetry telemetry;
    final DecodeRooms rooms;
    private final WriteGate gate;
    final RoomRelease release;
    final LinkDirectory directory;
    /** Works out rooms' routes off the scheduler thread. */
    final RouteResolver resolver;
    /** Works out rooms' prefill DP groups off the scheduler thread. */
    final DpRankResolver dpRanks;
    LinkReader reader; // package-private: tests count its warnings
    private final SessionTimer timer;
    /** What receivers' polls check their waiting deadline against (a cached reading for the system ticker). */
    private final DeadlineClock deadlineClock;
    private final OwnedTaskThread revoker;
    /** The transports this rank offers besides tcp, in preference order (empty for tcp). */
    private final List<DestinationTransport> destinations;
    private volatile boolean closed;

    public DecodeKVManager(KVArgs args, KVManagerConfig config, Backend backend) {
        if (config.attnCpSize() != 1) {
            throw new IllegalArgumentException("decode attn_cp_size must be 1, got " + config.attnCpSize());
        }
        // The decode's engine rank picks its prefill ranks and the KV heads they send it (SGLang: tp_rank % attn_tp_size):
        // one left at 0 on attention TP rank 1 received rank 0's shard, with no error.
        if (args.engineRank < 0 || args.engineRank % config.attnTpSize() != config.attnTpRank()) {
            throw new IllegalArgumentException("KVArgs.engineRank " + args.engineRank + " does not match attn_tp_rank "
                    + config.attnTpRank() + " of attn_tp_size " + config.attnTpSize()
                    + ": a decode rank's engine_rank % attn_tp_size must be its attention TP rank");
        }
        this.config = config;
        this.memory = RegisteredMemory.from(args).requireAccessFromAnyThread();
        this.engineRank = args.engineRank;
        this.pageSize = args.pageSize;
        this.kvCacheDtype = args.kvCacheDtypeStr;
        this.ppRank = args.ppRank;
        this.backend = backend;
        if (config.ppSize() > 1 && args.kvLayerIds.isEmpty()) {
            throw new IllegalArgumentException("a pipeline-parallel decode stage must set KVArgs.kvLayerIds (global layer id per KV buffer)");
        }
        this.telemetry = new RankTelemetry(config.meterRegistry(),
                new RankIdentity("decode", config.attnTpRank(), ppRank, config.dpRank(), 0), new RoomCensus() {
                    @Override
                    public int rooms(KVPoll state) {
                        return rooms == null ? 0 : rooms.statuses.count(state);
                    }

                    @Override
                    public int peers() {
                        return directory == null ? 0 : directory.size();
                    }
                });
        this.rooms = new DecodeRooms(this::onRoomChanged, this::onRoomSucceeded);
        this.gate = new WriteGate(memory, rooms);
        this.release = new RoomRelease(rooms, config.abortAckTimeout());
        this.timer = new SessionTimer("kvferry-decode-timer-" + engineRank);
        this.deadlineClock = new DeadlineClock(config.ticker(), timer);
        this.revoker = new OwnedTaskThread("kvferry-decode-revoke-" + engineRank);
        TcpDestination tcp = Transports.fallback().openDestination(memory, engineRank, config.settings(), gate, why -> { });
        this.destinations = openDestinations(backend, memory, engineRank, config.settings(), gate);
        Fingerprint fingerprint = Fingerprint.of(config.modelIdentity(), kvCacheDtype, pageSize, config.isMla(), args.totalKvHeadNum);
        this.directory = new LinkDirectory(config, memory, backend, sessionId, engineRank, ppRank, fingerprint,
                destinations, timer, dir -> reader = new LinkReader(rooms, tcp, memory, dir, revoker, config.abortAckTimeout(), engineRank,
                        config.ticker()));
        this.resolver = new RouteResolver(directory, config, engineRank, ppRank, pageSize, kvCacheDtype);
        this.dpRanks = new DpRankResolver(directory, engineRank, config.prefillInfoTimeout());
        Duration stall = config.writeStallTimeout();
        timer.every(stall.compareTo(Duration.ofSeconds(1)) < 0 ? stall : Duration.ofSeconds(1), () -> {
            // A prefill that stops reading (hostile, or its reader stuck while its timer still sends heartbeats, so the
            // silence check never fires) would hold the scheduler thread, blocked in a TRANSFER_INFO or ABORT once the
            // socket buffers are full, and with it every room of every prefill.
            for (PrefillLink l : directory.links()) {
                cutIfStalled(l, l.connection, stall);
                for (ControlConnection c : l.stripes) cutIfStalled(l, c, stall);
            }
        });
        long beat = config.heartbeatInterval().toNanos(), dead = config.heartbeatTimeout().toNanos();
        timer.every(Duration.ofNanos(beat / 2), () -> {
            for (PrefillLink l : directory.links()) {
                telemetry.heartbeatsMissed(l.connection.newlyMissedHeartbeats(beat));
                if (!l.connection.heartbeat(beat, dead)) {
                    telemetry.heartbeatTimedOut();
                    log.warn("connection to {}: {}", l, l.connection.closeReason());
                }
                for (ControlConnection c : l.stripes) {
                    if (!c.heartbeat(beat, dead)) {
                        telemetry.heartbeatTimedOut();
                        log.warn("data stripe to {}: {}", l, c.closeReason());
                    }
                }
            }
        });
    }

    private static void cutIfStalled(PrefillLink link, ControlConnection c, Duration stall) {
        if (c.writeStalledFor() > stall.toMillis()) {
            log.warn("connection to {}: no write progress for {} ms; closing it", link, stall.toMillis());
            c.close(FailureKind.PEER_LOST, "no write progress for " + stall.toMillis() + " ms (the prefill does not read)");
        }
    }

    private static List<DestinationTransport> openDestinations(Backend backend, RegisteredMemory memory, int engineRank,
                                                                 KVFerrySettings settings, WriteSink gate) {
        List<DestinationTransport> out = new ArrayList<>();
        backend.requireAvailable(settings);
        for (TransportProvider p : backend.offeredTransports()) {
            String unavailable = p.unavailableReason(settings);
            if (unavailable != null) {
                log.info("auto: {} not offered: {}", p.name(), unavailable);
                continue;
            }
            try {
                DestinationTransport d = p.openDestination(memory, engineRank, settings, gate,
                        why -> log.info("{}: not offered, links use TCP: {}", p.name(), why));
                if (d != null) out.add(d);
            } catch (IOException | RuntimeException e) {
                if (!backend.isAuto()) throw new BackendUnavailableException("transfer backend " + p.name() + " could not start: " + e.getMessage(), e);
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
        return backend.name();
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
        if (rooms.isTracked(bootstrapRoom)) {
            throw new IllegalArgumentException("bootstrap_room " + bootstrapRoom + " is already in flight on this decode rank");
        }
        DecodeRoom room = rooms.create(bootstrapRoom, bootstrapAddr);
        if (room == null) {
            throw new IllegalArgumentException("bootstrap_room " + bootstrapRoom + " is already in flight on this decode rank");
        }
        return new DecodeKVReceiver(this, room);
    }

    /**
     * The prefill DP group holding a room (SGLang's {@code _resolve_prefill_dp_rank}): the router's
     * hint; 0 without attention-DP; {@code room % dp_size} when the prefill follows the bootstrap
     * room; else the registry's {@code /query_dp_ranks}. Returns -1 while it is not known yet (the
     * prefill's topology is being fetched, or the prefill has not registered the room; ask again
     * later) — then call {@code init} with the answer. Never blocks on the registry ({@link DpRankResolver}).
     */
    @Override
    public int resolvePrefillDpRank(String bootstrapAddr, long room, Integer hint) {
        return dpRanks.resolve(bootstrapAddr, room, hint);
    }

    /** The landing gate two-sided transports write through (exposed for tests of hostile writes). */
    public WriteSink writeGate() {
        return gate;
    }

    KVManagerConfig config() {
        return config;
    }

    DeadlineClock deadlineClock() {
        return deadlineClock;
    }

    /** The scheduler thread's change feed of KVReceivers, off until enabled. */
    private final RoomFeed.Switch<KVReceiver> feed = new RoomFeed.Switch<>("decode");

    /** Null while the feed is off. */
    RoomFeed<KVReceiver> feed() {
        return feed.feed();
    }

    @Override
    public boolean enableChangeFeed() {
        feed.enable();
        return true;
    }

    @Override
    public int drainChangedReceivers(Consumer<? super KVReceiver> sink) {
        // Checked before the feed pops anything: a null sink lost the entry it had already taken.
        if (sink == null) throw new IllegalArgumentException("drainChangedReceivers: the sink is null");
        return feed.drain(deadlineClock.now(), sink);
    }

    /** Verdicts of {@link Completeness#uncovered} by the rooms' writer coverages (few distinct sets: one per prefill topology). */
    private final ConcurrentHashMap<CoverageKey, Optional<String>> coverageVerdicts = new ConcurrentHashMap<>();

    private record CoverageKey(List<Coverage> writers, boolean aux, List<Boolean> state) {}

    /** Whether coverages {@code writers} together fill a room (cached: the same prefill ranks cover every room alike). */
    String coverageVerdict(List<Coverage> writers, boolean needsAux, boolean[] stateNeeded) {
        List<Boolean> state = new ArrayList<>(stateNeeded.length);
        for (boolean b : stateNeeded) state.add(b);
        CoverageKey key = new CoverageKey(writers, needsAux, state);
        Optional<String> v = coverageVerdicts.get(key);
        if (v == null) {
            v = Optional.ofNullable(Completeness.uncovered(writers, memory, needsAux, stateNeeded));
            if (coverageVerdicts.size() > 4096) coverageVerdicts.clear(); // bounded: links come and go
            coverageVerdicts.put(key, v);
        }
        return v.orElse(null);
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

    @Override
    public KVManagerStats stats() {
        return new KVManagerStats(rooms.size(), directory.size(), 0, 0, 0, 0, 0);
    }

    /**
     * The one place this rank's room changes are observed (the status table calls it after each):
     * bootstrap time, conclusion figures, and failures with the prefill ranks they involved.
     */
    void onRoomChanged(RoomStatusTable.Slot slot, KVPoll from, RoomStatusTable.Entry to) {
        switch (to.status()) {
            case WaitingForInput -> telemetry.bootstrapped(to.sinceNanos() - to.createdNanos());
            case Failed -> {
                // The room's own record: the scheduler may have cleared it, and a retry taken its id, by now.
                DecodeRoom r = slot.owner() instanceof DecodeRoom own ? own : null;
                telemetry.failed(slot.room(), from, to.kind(), to.reason(), r == null ? null : peersOf(r));
            }
            default -> {
                // Bootstrapping and Transferring carry no figure of their own; Success is recorded with its room in hand
            }
        }
    }

    /** Every prefill rank of a room reported Success ({@link DecodeRooms#succeed}): its latency, bytes and data path. */
    private void onRoomSucceeded(DecodeRoom r) {
        KVTransferMetric m = DecodeKVReceiver.metricOf(r, KVPoll.Success);
        long sent = r.metadataSentNanos, done = r.successNanos;
        telemetry.concluded(m.transport(), sent != 0 && done != 0 ? done - sent : -1,
                m.transferTotalBytes() == null ? -1 : m.transferTotalBytes());
    }

    private static String peersOf(DecodeRoom r) {
        StringBuilder b = new StringBuilder();
        for (DecodeRoom.Target t : r.targets) {
            if (t.dummy()) continue;
            if (!b.isEmpty()) b.append(", ");
            b.append(t.link());
        }
        return b.isEmpty() ? "bootstrap " + r.bootstrapAddr : b.toString();
    }

    @Override
    public KVManagerInspection inspect() {
        RoomStatusTable.Census census = rooms.statuses.census(KVManagerInspection.MAX_ROOMS,
                slot -> slot.owner() instanceof DecodeRoom r ? peersOf(r) : "");
        List<KVManagerInspection.Peer> peers = new ArrayList<>();
        for (PrefillLink l : directory.links()) {
            peers.add(new KVManagerInspection.Peer("prefill rank " + l.prefillUniqueRank, l.endpoint, l.dataPath, l.dataPathNote, l.rooms.size(),
                    l.stripes.size(), l.connection.silentNanos() / 1_000_000L));
        }
        return new KVManagerInspection("decode", config.attnTpRank(), ppRank, config.dpRank(), 0, backend.name(), null, census.byState(),
                census.oldest(), telemetry.recentFailures(), telemetry.failuresByKind(), peers, telemetry.concludedBytes(),
                telemetry.roomsConcluded(), stats());
    }

    @Override
    public void teardown() {
        if (closed) return;
        closed = true;
        telemetry.close();
        gate.close();
        reader.close();
        resolver.stop(); // both kinds of lookup thread interrupted first, then joined against one deadline
        dpRanks.stop();
        long lookupsDeadline = System.nanoTime() + 2_000_000_000L;
        resolver.resolvers.join(lookupsDeadline);
        dpRanks.lookups.join(lookupsDeadline);
        directory.close();
        rooms.shutDown("the decode KV manager was torn down", r -> r.closeAndDrain(RoomRelease.LANDING_DRAIN_MILLIS));
        List<PrefillLink> all = new ArrayList<>(directory.links());
        for (PrefillLink l : all) l.closeAll(FailureKind.SHUTDOWN, "the decode KV manager was torn down");
        for (PrefillLink l : all) {
            for (Thread t : l.readers()) {
                try {
                    t.join(2000);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
        }
        timer.close();
        if (!revoker.close(config.abortAckTimeout().plusSeconds(1))) { // a transport may finish its fence first
            log.warn("teardown: {} did not end within {}", revoker.name(), config.abortAckTimeout().plusSeconds(1));
        }
        // Bounded: every link gets what is left of one second (the transports also deregister below).
        long revokeDeadline = System.nanoTime() + TEARDOWN_REVOKE_NANOS;
        for (PrefillLink l : all) {
            Duration left = Duration.ofNanos(Math.max(0, revokeDeadline - System.nanoTime()));
            if (l.oneSided() != null && !l.oneSided().revoke(left)) {
                log.warn("teardown: could not confirm that {} stopped writing", l);
            }
            l.closeTwoSidedOffer();
        }
        for (DestinationTransport d : destinations) d.close();
    }
}
