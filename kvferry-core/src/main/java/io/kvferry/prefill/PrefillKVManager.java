package io.kvferry.prefill;

import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVArgs;
import io.kvferry.api.Knobs;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVManagerStats;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.api.KVManagerInspection;
import io.kvferry.api.KVPoll;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.metrics.LogSafe;
import io.kvferry.metrics.RankIdentity;
import io.kvferry.metrics.RankTelemetry;
import io.kvferry.metrics.RoomCensus;
import io.kvferry.plan.RankMapping;
import io.kvferry.protocol.Fingerprint;
import io.kvferry.session.Authentication;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.PrefillRankRegistration;
import io.kvferry.session.OwnedTaskThread;
import io.kvferry.session.RoomStatusTable;
import io.kvferry.session.DeadlineClock;
import io.kvferry.session.RoomFeed;
import io.kvferry.session.SessionTimer;
import io.kvferry.transport.Backend;
import io.kvferry.transport.DataPath;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Consumer;

/**
 * The prefill side of one rank: a façade over its parts. {@link DecodeSessions} accepts and reads
 * decode connections (validated by {@link HandshakeValidator}, data path chosen by
 * {@link OfferNegotiator}); {@link PrefillRooms} holds the rooms, their statuses and tombstones;
 * {@link TransferWorkers} run each room's chunks through {@link ChunkExecutor}, in order, on the
 * room's strand.
 *
 * <p>Threads, all owned here and ended by {@link #teardown}: one acceptor and one reader per decode
 * connection (in {@link DecodeSessions}), the transfer workers ({@code transferWorkers} per decode link), one timer (heartbeats,
 * handshake deadlines, stalled-write watchdog), one unmapper (closes lost links' one-sided paths) and,
 * with attention-DP under a balancer other than follow_bootstrap_room, one DP publisher (posts each
 * room's group to the registry, off the scheduler thread).
 */
public final class PrefillKVManager implements KVManager {
    private static final Logger log = LoggerFactory.getLogger(PrefillKVManager.class);

    private final KVManagerConfig config;
    private final RegisteredMemory memory;
    private final int ppRank;
    private final int pageSize;
    private final String kvCacheDtype;
    private final Backend backend;
    private final ServerSocketChannel listener;
    private final SessionTimer timer;
    /** What senders' polls check their bootstrap deadline against (a cached reading for the system ticker). */
    private final DeadlineClock deadlineClock;
    private final OwnedTaskThread unmapper;
    /**
     * Attention-DP without follow_bootstrap_room: posts the rooms' group ({@code /register_dp_rank}) in
     * order, through one client whose connections are kept alive, every room waiting at the time in one
     * POST (kvferry's batch form; room by room to a registry without it); null otherwise. Before, the
     * scheduler thread made a new HTTP client and a blocking POST for every room in {@code createSender}.
     */
    private final OwnedTaskThread dpPublisher;
    /** The publisher's client, made by its first task; only that thread touches it until teardown joined it. */
    private BootstrapClient dpClient;
    /** Rooms whose group is not posted yet, oldest first: added by createSender, drained by the publisher. */
    private final ConcurrentLinkedQueue<PendingDpRoom> dpPending = new ConcurrentLinkedQueue<>();
    /** Whether a drain task is queued or running on the publisher (so rooms added meanwhile ride with it). */
    private final AtomicBoolean dpDrainQueued = new AtomicBoolean();

    /** A room waiting for its group to be posted. */
    private record PendingDpRoom(PrefillRoom room, long bootstrapRoom) {}
    private final TransferWorkers workers;
    final PrefillRooms rooms;
    final ChunkExecutor chunks;
    private final OfferNegotiator negotiator;
    final DecodeSessions sessions;
    private final RankTelemetry telemetry;
    private final Fingerprint fingerprint;
    private volatile boolean closed;

    public PrefillKVManager(KVArgs args, KVManagerConfig config, Backend backend) {
        this.config = config;
        this.memory = RegisteredMemory.from(args).requireAccessFromAnyThread();
        this.ppRank = args.ppRank;
        this.pageSize = args.pageSize;
        this.kvCacheDtype = args.kvCacheDtypeStr;
        this.backend = backend;
        if (config.ppSize() > 1 && args.kvLayerIds.isEmpty()) {
            // Without ids a stage's buffers would pair with the decode's first layers: wrong bytes, no error.
            throw new IllegalArgumentException("a pipeline-parallel prefill stage must set KVArgs.kvLayerIds (global layer id per KV buffer)");
        }
        backend.requireAvailable(config.settings());
        Authentication.requireTokenOrLoopback(config, config.listenHost(), "prefill rank listening on");
        boolean hasConvShardGroups = args.stateConvShardGroups.stream().anyMatch(l -> l != null && l.stream().anyMatch(g -> g != null));
        int uniqueRank = RankMapping.prefillUniqueRank(config.attnTpRank(), ppRank, config.ppSize(),
                config.attnCpRank(), config.attnCpSize());
        try {
            listener = ServerSocketChannel.open();
            listener.bind(new InetSocketAddress(config.listenHost(), 0));
        } catch (IOException e) {
            throw new IllegalStateException("cannot listen on " + config.listenHost() + ": " + e.getMessage(), e);
        }
        int rank = args.engineRank;
        unmapper = new OwnedTaskThread("kvferry-prefill-unmap-" + rank);
        dpPublisher = config.dpSize() > 1 && !PrefillRankRegistration.followsBootstrapRoom(config.loadBalanceMethod()) ? new OwnedTaskThread("kvferry-prefill-dp-publish-" + rank) : null;
        timer = new SessionTimer("kvferry-prefill-timer-" + rank);
        deadlineClock = new DeadlineClock(config.ticker(), timer);
        workers = new TransferWorkers(config.transferWorkers(), "kvferry-prefill-worker-" + rank + "-");
        telemetry = new RankTelemetry(config.meterRegistry(),
                new RankIdentity("prefill", config.attnTpRank(), ppRank, config.dpRank(), config.attnCpRank()), new RoomCensus() {
                    @Override
                    public int rooms(KVPoll state) {
                        return rooms == null ? 0 : rooms.statuses.count(state);
                    }

                    @Override
                    public int peers() {
                        return sessions == null ? 0 : sessions.registered().size();
                    }
                });
        rooms = new PrefillRooms(workers, uniqueRank, config.ticker(), this::onRoomChanged, this::onRoomSucceeded);
        chunks = new ChunkExecutor(memory, config, pageSize, uniqueRank, rooms, workers);
        // Transports read their knobs from the settings; the stall bound is the config's resolved value (one knob for tcp and ucx).
        negotiator = new OfferNegotiator(backend, memory, rank,
                config.settings().with(Knobs.WRITE_STALL_TIMEOUT_MS, Long.toString(config.writeStallTimeout().toMillis())));
        fingerprint = Fingerprint.of(config.modelIdentity(), kvCacheDtype, pageSize, config.isMla(), args.totalKvHeadNum);
        HandshakeValidator validator = new HandshakeValidator(memory, config, fingerprint, hasConvShardGroups);
        sessions = new DecodeSessions(config, memory, backend, rank, uniqueRank, validator, negotiator, rooms, workers, timer,
                unmapper, listener, telemetry);
    }

    @Override
    public DisaggregationMode mode() {
        return DisaggregationMode.PREFILL;
    }

    @Override
    public String backend() {
        return backend.name();
    }

    /** The control endpoint decode ranks connect to. */
    public InetSocketAddress endpoint() {
        try {
            return (InetSocketAddress) listener.getLocalAddress();
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    @Override
    public Optional<InetSocketAddress> controlEndpoint() {
        return Optional.of(endpoint());
    }

    @Override
    public void registerToBootstrap() {
        // Its endpoint is closed: nothing to register (it failed with a bare "ClosedChannelException").
        if (closed) throw new IllegalStateException("the prefill KV manager was torn down: it has no endpoint to register");
        // A wildcard bind address (0.0.0.0, ::) published as is sends every decode to its own host: refuse it here,
        // where it would be published, rather than let each room fail at connect after its timeout.
        if (isWildcard(advertisedHost())) {
            throw new IllegalStateException("prefill rank tp=" + config.attnTpRank() + " pp=" + ppRank + " listens on the wildcard address "
                    + advertisedHost() + ", which a decode on another host cannot connect to: set advertise(host, port) "
                    + "(KVManagerConfig.Builder) to the address decodes reach this rank at, or listen on that address");
        }
        PrefillRankRegistration reg = new PrefillRankRegistration(
                config.attnTpSize(), config.attnTpRank(), config.attnCpSize(), config.attnCpRank(),
                config.dpSize(), config.dpRank(), config.ppSize(), ppRank, 1, 0,
                advertisedHost(), advertisedPort(), pageSize, kvCacheDtype, config.loadBalanceMethod(), false,
                config.prefillHttpPort(), config.statusUrl());
        try (BootstrapClient client = new BootstrapClient(config.bootstrapAddr(), config.authToken())) {
            client.registerRank(reg);
        }
        log.info("prefill rank tp={} pp={} registered {}:{} with bootstrap {} (fingerprint {}: kvferry {}, model '{}', {} page {})",
                config.attnTpRank(), ppRank, advertisedHost(), advertisedPort(), config.bootstrapAddr(), fingerprint.hash(),
                fingerprint.kvferryVersion(), fingerprint.model(), fingerprint.kvCacheDtype(), fingerprint.pageSize());
    }

    /** What a decode must agree with to be served (exposed for operators; its hash is logged at registration). */
    public Fingerprint fingerprint() {
        return fingerprint;
    }

    /** Whether {@code host} is an IP literal that means every local address (0.0.0.0, ::); a host name is not (no lookup). */
    static boolean isWildcard(String host) {
        String h = host.startsWith("[") && host.endsWith("]") ? host.substring(1, host.length() - 1) : host;
        try {
            return InetAddress.ofLiteral(h).isAnyLocalAddress();
        } catch (IllegalArgumentException notALiteral) {
            return false;
        }
    }

    private String advertisedHost() {
        return config.advertiseHost() == null ? config.listenHost() : config.advertiseHost();
    }

    private int advertisedPort() {
        return config.advertisePort() == 0 ? endpoint().getPort() : config.advertisePort();
    }

    @Override
    public boolean enableDeferredDecodeKvRelease() {
        return false;
    }

    @Override
    public KVSender createSender(String bootstrapAddr, long bootstrapRoom, List<Integer> destTpRanks, int ppRank,
                                 boolean reqHasDisaggPrefillDpRank) {
        if (closed) throw new IllegalStateException("the prefill KV manager was torn down");
        PrefillRoom room = rooms.room(bootstrapRoom);
        while (!room.claim()) room = rooms.room(bootstrapRoom); // dropped unclaimed meanwhile: its tombstone is in place
        // Read once the record is claimed: a drop of this id's unclaimed record has left its tombstone by then.
        PrefillRooms.Tombstone dropped = rooms.droppedBeforeStart(bootstrapRoom);
        // A non-zero CP rank holds no KV to send (only CP rank 0 transfers): it concludes on its own.
        boolean dummyCp = config.attnCpRank() != 0 && !config.allCpRanksTransfer();
        PrefillKVSender sender = new PrefillKVSender(this, room, bootstrapAddr, dummyCp);
        // Its decode left (or gave up) before this rank started the request: the sender sees that failure at once.
        if (dropped != null) room.slot.fail(dropped.kind(), dropped.reason());
        if (config.dpSize() > 1 && !reqHasDisaggPrefillDpRank) publishDpRank(room, bootstrapRoom);
        return sender;
    }

    /**
     * Attention-DP (SGLang §2.4): with follow_bootstrap_room the room decides the DP group and a
     * mismatch is a routing error; otherwise this rank tells the registry which group holds the room,
     * on the DP publisher's thread (the decode looks the room up until it is there).
     */
    private void publishDpRank(PrefillRoom room, long bootstrapRoom) {
        if (PrefillRankRegistration.followsBootstrapRoom(config.loadBalanceMethod())) {
            int implied = (int) Math.floorMod(bootstrapRoom, (long) config.dpSize());
            if (implied != config.dpRank()) {
                rooms.fail(room, FailureKind.ROUTING, "follow_bootstrap_room conflict: dispatched to dp_rank " + config.dpRank()
                        + " but bootstrap_room " + bootstrapRoom + " implies dp_rank " + implied);
            }
            return;
        }
        if (bootstrapRoom < 0) { // the registry refuses it; alone, before it could take a whole batch down with it
            rooms.fail(room, FailureKind.ROUTING, "bootstrap_room " + bootstrapRoom + " is negative: its dp_rank cannot be registered");
            return;
        }
        dpPending.add(new PendingDpRoom(room, bootstrapRoom));
        // Refused only once teardown began, which fails every room anyway.
        if (dpDrainQueued.compareAndSet(false, true)) dpPublisher.submit(this::publishPendingDpRooms);
    }

    /** On the DP publisher: posts every waiting room, up to {@link BootstrapClient#MAX_ROOMS_PER_REGISTRATION} per POST, until none waits. */
    private void publishPendingDpRooms() {
        List<PendingDpRoom> batch = new ArrayList<>();
        while (true) {
            batch.clear();
            for (PendingDpRoom p; batch.size() < BootstrapClient.MAX_ROOMS_PER_REGISTRATION && (p = dpPending.poll()) != null; ) {
                batch.add(p);
            }
            if (batch.isEmpty()) {
                dpDrainQueued.set(false);
                // A room added after the poll above and before the flag cleared found it set and queued nothing: take it now.
                if (dpPending.isEmpty() || !dpDrainQueued.compareAndSet(false, true)) return;
                continue;
            }
            Map<Long, RuntimeException> failed = Map.of();
            RuntimeException all = null; // a failure before any registration (the client could not be made)
            try {
                if (dpClient == null) dpClient = new BootstrapClient(config.bootstrapAddr(), config.authToken());
                failed = dpClient.registerDpRanks(batch.stream().map(PendingDpRoom::bootstrapRoom).toList(), config.dpRank());
            } catch (RuntimeException e) {
                all = e;
            }
            if (failed.isEmpty() && all == null) continue;
            if (closed) return; // cut off by teardown, which fails the unfinished rooms itself (shutdown)
            for (PendingDpRoom p : batch) {
                RuntimeException e = all != null ? all : failed.get(p.bootstrapRoom());
                // Only a room still waiting: one that succeeded meanwhile (its decode found the group) stays so.
                if (e != null) {
                    rooms.failIfUnfinished(p.room(), FailureKind.ROUTING, "could not register dp_rank " + config.dpRank()
                            + " for room " + p.bootstrapRoom() + ": " + e.getMessage());
                }
            }
        }
    }

    @Override
    public KVReceiver createReceiver(String bootstrapAddr, long bootstrapRoom) {
        throw new UnsupportedOperationException("a prefill manager creates senders, not receivers");
    }

    RegisteredMemory memory() {
        return memory;
    }

    KVManagerConfig config() {
        return config;
    }

    DeadlineClock deadlineClock() {
        return deadlineClock;
    }

    RankTelemetry telemetry() {
        return telemetry;
    }

    /** The scheduler thread's change feed of KVSenders, off until enabled. */
    private final RoomFeed.Switch<KVSender> feed = new RoomFeed.Switch<>("prefill");

    /** Null while the feed is off. */
    RoomFeed<KVSender> feed() {
        return feed.feed();
    }

    @Override
    public boolean enableChangeFeed() {
        feed.enable();
        return true;
    }

    @Override
    public int drainChangedSenders(Consumer<? super KVSender> sink) {
        // Checked before the feed pops anything: a null sink lost the entry it had already taken.
        if (sink == null) throw new IllegalArgumentException("drainChangedSenders: the sink is null");
        return feed.drain(deadlineClock.now(), sink);
    }

    /** Queues one chunk of a room on the room's strand. */
    void enqueue(PrefillRoom room, ChunkExecutor.Chunk chunk) {
        workers.enqueue(room, () -> chunks.execute(room, chunk));
    }

    @Override
    public KVManagerStats stats() {
        return new KVManagerStats(rooms.size(), sessions.count(), workers.bytes(), workers.busyNanos(), workers.ops(),
                workers.activeNanos(), workers.writesInDataPath());
    }

    /**
     * The one place this rank's room changes are observed (the status table calls it after each):
     * bootstrap time, conclusion figures, and failures with the peers they involved.
     */
    private void onRoomChanged(RoomStatusTable.Slot slot, KVPoll from, RoomStatusTable.Entry to) {
        switch (to.status()) {
            case WaitingForInput -> telemetry.bootstrapped(to.sinceNanos() - to.createdNanos());
            case Failed -> {
                // The room's own record (its slot names it): the scheduler may have cleared the room, and a retry
                // taken its id, by now.
                PrefillRoom r = slot.owner() instanceof PrefillRoom own ? own : null;
                telemetry.failed(slot.room(), from, to.kind(), to.reason(), r == null ? null : peersOf(r));
            }
            default -> {
                // Bootstrapping and Transferring carry no figure of their own; Success is recorded with its room in hand
            }
        }
    }

    /** A room moved to Success on its worker ({@link PrefillRooms#succeed}): its latency, bytes and data path. */
    private void onRoomSucceeded(PrefillRoom r) {
        long first = r.firstSendNanos, done = r.doneNanos;
        telemetry.concluded(transportOf(r), first != 0 && done != 0 ? done - first : -1, r.bytesSent);
    }

    private static String transportOf(PrefillRoom r) {
        TreeSet<String> paths = new TreeSet<>();
        for (PrefillRoom.Destination d : r.destinations()) {
            if (!d.info().dummy() && d.link().dataPath != null) paths.add(d.link().dataPath.name());
        }
        return paths.isEmpty() ? null : String.join("+", paths);
    }

    private static String peersOf(PrefillRoom r) {
        StringBuilder b = new StringBuilder();
        for (PrefillRoom.Destination d : r.destinations()) {
            if (!b.isEmpty()) b.append(", ");
            b.append(d.link());
        }
        return b.toString();
    }

    @Override
    public KVManagerInspection inspect() {
        RoomStatusTable.Census census = rooms.statuses.census(KVManagerInspection.MAX_ROOMS,
                slot -> slot.owner() instanceof PrefillRoom r ? peersOf(r) : "");
        List<KVManagerInspection.Peer> peers = new ArrayList<>();
        for (DecodeLink l : sessions.registered()) {
            DataPath path = l.dataPath;
            peers.add(new KVManagerInspection.Peer(l.label(), l.connection.peer(),
                    path == null ? "" : path.name(), LogSafe.text(l.dataPathNote), l.rooms.size(), l.stripes.size(), l.connection.silentNanos() / 1_000_000L));
        }
        return new KVManagerInspection("prefill", config.attnTpRank(), ppRank, config.dpRank(), config.attnCpRank(), backend.name(),
                (advertisedHost().indexOf(':') >= 0 && !advertisedHost().startsWith("[") ? "[" + advertisedHost() + "]" : advertisedHost())
                        + ":" + advertisedPort(), census.byState(), census.oldest(), telemetry.recentFailures(), telemetry.failuresByKind(),
                peers, workers.bytes(), telemetry.roomsConcluded(), stats());
    }

    @Override
    public void teardown() {
        if (closed) return;
        closed = true;
        telemetry.close();
        timer.close();
        try {
            sessions.close(2000);
            workers.close(2000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (!unmapper.close(config.abortAckTimeout().plusSeconds(1))) {
            log.warn("teardown: {} did not end within {}", unmapper.name(), config.abortAckTimeout().plusSeconds(1));
        }
        if (dpPublisher != null) {
            if (dpPublisher.close(Duration.ofSeconds(2))) {
                if (dpClient != null) dpClient.close();
            } else {
                log.warn("teardown: {} did not end within 2 s", dpPublisher.name());
            }
        }
        sessions.closeDataPaths();
        negotiator.close();
        // The links and workers are gone, so nothing moves these rooms any more: each ends Failed, as the
        // decode's teardown does, instead of waiting forever (its decode saw the link close: peer_lost).
        rooms.shutDown("the prefill KV manager was torn down");
    }
}
