package io.kvferry.conn;

import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.plan.CopyPlan;
import io.kvferry.plan.HeadSlice;
import io.kvferry.plan.LayerPairing;
import io.kvferry.plan.PlanException;
import io.kvferry.plan.RankMapping;
import io.kvferry.plan.TransferPlanner;
import io.kvferry.protocol.Abort;
import io.kvferry.protocol.AbortAck;
import io.kvferry.protocol.ControlMessage;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.HelloAck;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.protocol.ProtocolException;
import io.kvferry.protocol.Status;
import io.kvferry.protocol.TransferInfo;
import io.kvferry.protocol.WriteHeader;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.PrefillRankRegistration;
import io.kvferry.transport.ControlConnection;
import io.kvferry.transport.DataPath;
import io.kvferry.transport.InprocDataPath;
import io.kvferry.transport.InprocRegistry;
import io.kvferry.transport.SourceTransport;
import io.kvferry.transport.TcpDataPath;
import io.kvferry.transport.TransportProvider;
import io.kvferry.transport.TransportUnavailableException;
import io.kvferry.transport.Transports;
import io.kvferry.protocol.TransportOffer;
import io.kvferry.transport.WriteSink;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.EOFException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

/**
 * The prefill side of one rank: accepts decode connections, collects their transfer infos, and
 * moves each room's KV, state and aux into the decode's memory on its transfer worker.
 *
 * <p>Threads: one acceptor; one reader per decode connection (owns that {@link PeerSession});
 * {@code transferWorkers} workers, each draining its own FIFO — a room is pinned to one worker
 * so its chunks, its final status and any abort-ack leave in order. Room status lives in the
 * thread-safe {@link RoomStatusTable}.
 */
public final class PrefillKVManager implements KVManager {
    private static final Logger log = LoggerFactory.getLogger(PrefillKVManager.class);
    static final String ABORT_REASON = "Aborted by AbortReq.";

    private final KVManagerConfig config;
    private final RegisteredMemory memory;
    /** Immutable after construction; read by the transfer workers. */
    private final long[] kvItemLens;
    private final long[] auxItemLens;
    private final long[][] stateItemLens;
    private final int engineRank;
    private final int pageSize;
    private final String kvCacheDtype;
    private final int ppRank;
    private final int totalKvHeads;
    private final boolean hasConvShardGroups;
    private final int uniqueRank;
    private final String backend;
    final RoomStatusTable statuses = new RoomStatusTable();
    private final ConcurrentHashMap<Long, PrefillRoom> rooms = new ConcurrentHashMap<>();
    private final Set<PeerSession> sessions = ConcurrentHashMap.newKeySet();
    /**
     * Rooms cleared here, newest last (bounded): a decode's metadata arriving after that (a late
     * info, a restarted decode repeating a request) gets a Failed status instead of re-creating a
     * room nobody will ever send.
     */
    private final java.util.LinkedHashMap<Long, String> tombstones = new java.util.LinkedHashMap<>() {
        @Override
        protected boolean removeEldestEntry(java.util.Map.Entry<Long, String> eldest) {
            return size() > 16_384;
        }
    };
    private final ServerSocketChannel listener;
    private final Thread acceptor;
    private final Worker[] workers;
    private final byte[] authToken;
    /** HELLO deadlines and the stalled-write watchdog. */
    private final ScheduledExecutorService timer;
    private final java.util.concurrent.atomic.LongAdder dataPathBytes = new java.util.concurrent.atomic.LongAdder();
    private final java.util.concurrent.atomic.LongAdder dataPathNanos = new java.util.concurrent.atomic.LongAdder();
    private final java.util.concurrent.atomic.LongAdder dataPathOps = new java.util.concurrent.atomic.LongAdder();
    /** Pluggable transports opened on first use, by name (guarded by itself). */
    private final java.util.Map<String, SourceTransport> sources = new java.util.HashMap<>();
    private volatile boolean closed;
    /** Closes failed sessions' one-sided paths off the reader and timer threads; teardown joins it. */
    private final OwnedTaskThread unmapper;

    public PrefillKVManager(KVArgs args, KVManagerConfig config, String backend) {
        this.config = config;
        this.memory = RegisteredMemory.from(args);
        // Copied once: the transfer worker plans with them on every chunk.
        this.kvItemLens = memory.kvItemLens();
        this.auxItemLens = memory.auxItemLens();
        this.stateItemLens = memory.stateItemLens();
        this.engineRank = args.engineRank;
        this.pageSize = args.pageSize;
        this.kvCacheDtype = args.kvCacheDtypeStr;
        this.ppRank = args.ppRank;
        this.totalKvHeads = args.totalKvHeadNum;
        if (config.ppSize() > 1 && args.kvLayerIds.isEmpty()) {
            // Without ids a stage's buffers would pair with the decode's first layers: wrong bytes, no error.
            throw new IllegalArgumentException("a pipeline-parallel prefill stage must set KVArgs.kvLayerIds (global layer id per KV buffer)");
        }
        this.hasConvShardGroups = args.stateConvShardGroups.stream().anyMatch(l -> l != null && l.stream().anyMatch(g -> g != null));
        this.backend = backend;
        Transports.requireAvailable(backend);
        this.uniqueRank = RankMapping.prefillUniqueRank(config.attnTpRank(), ppRank, config.ppSize(),
                config.attnCpRank(), config.attnCpSize());
        this.authToken = config.authToken() == null ? null : config.authToken().getBytes(StandardCharsets.UTF_8);
        try {
            listener = ServerSocketChannel.open();
            listener.bind(new InetSocketAddress(config.listenHost(), 0));
        } catch (IOException e) {
            throw new IllegalStateException("cannot listen on " + config.listenHost() + ": " + e.getMessage(), e);
        }
        unmapper = new OwnedTaskThread("kvferry-prefill-unmap-" + engineRank);
        timer = Executors.newSingleThreadScheduledExecutor(r -> Thread.ofPlatform().daemon()
                .name("kvferry-prefill-timer-" + args.engineRank).unstarted(r));
        long stall = config.writeStallTimeout().toMillis();
        timer.scheduleWithFixedDelay(() -> {
            // A decode that stops reading would block a worker (and every room pinned to it) forever.
            for (PeerSession s : sessions) {
                if (s.connection.writeStalledFor() > stall) {
                    log.warn("decode session {}: no write progress for {} ms; closing it", s, stall);
                    s.connection.close();
                }
            }
        }, Math.min(1000, stall), Math.min(1000, stall), TimeUnit.MILLISECONDS);
        long beat = config.heartbeatInterval().toNanos(), dead = config.heartbeatTimeout().toNanos();
        timer.scheduleWithFixedDelay(() -> {
            for (PeerSession s : sessions) {
                if (s.hello == null) continue; // not registered yet: the HELLO deadline covers it, and HELLO_ACK must come first
                if (!s.connection.heartbeat(beat, dead)) log.warn("decode session {}: {}", s, s.connection.closeReason());
            }
        }, beat / 2, beat / 2, TimeUnit.NANOSECONDS);
        workers = new Worker[config.transferWorkers()];
        for (int i = 0; i < workers.length; i++) {
            workers[i] = new Worker(i);
            workers[i].thread.start();
        }
        acceptor = Thread.ofPlatform().daemon().name("kvferry-prefill-accept-" + engineRank).start(this::acceptLoop);
    }

    @Override
    public DisaggregationMode mode() {
        return DisaggregationMode.PREFILL;
    }

    @Override
    public String backend() {
        return backend;
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
    public void registerToBootstrap() {
        PrefillRankRegistration reg = new PrefillRankRegistration(
                config.attnTpSize(), config.attnTpRank(), config.attnCpSize(), config.attnCpRank(),
                config.dpSize(), config.dpRank(), config.ppSize(), ppRank, 1, 0,
                advertisedHost(), advertisedPort(), pageSize, kvCacheDtype, config.loadBalanceMethod(), false,
                config.prefillHttpPort());
        try (BootstrapClient client = new BootstrapClient(config.bootstrapAddr(), config.authToken())) {
            client.registerRank(reg);
        }
        log.info("prefill rank tp={} pp={} registered {}:{} with bootstrap {}", config.attnTpRank(), ppRank,
                advertisedHost(), advertisedPort(), config.bootstrapAddr());
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
        requireOpen();
        PrefillRoom room = room(bootstrapRoom);
        // A non-zero CP rank holds no KV to send (only CP rank 0 transfers): it concludes on its own.
        boolean dummyCp = config.attnCpRank() != 0 && !config.allCpRanksTransfer();
        PrefillKVSender sender = new PrefillKVSender(this, room, bootstrapAddr, dummyCp);
        if (config.dpSize() > 1 && !reqHasDisaggPrefillDpRank) publishDpRank(room, bootstrapRoom);
        return sender;
    }

    /**
     * Attention-DP (SGLang §2.4): with follow_bootstrap_room the room decides the DP group and a
     * mismatch is a routing error; otherwise this rank tells the registry which group holds the room.
     */
    private void publishDpRank(PrefillRoom room, long bootstrapRoom) {
        if (followsBootstrapRoom()) {
            int implied = (int) Math.floorMod(bootstrapRoom, (long) config.dpSize());
            if (implied != config.dpRank()) {
                failRoom(room, "follow_bootstrap_room conflict: dispatched to dp_rank " + config.dpRank() + " but bootstrap_room "
                        + bootstrapRoom + " implies dp_rank " + implied);
            }
            return;
        }
        try (BootstrapClient client = new BootstrapClient(config.bootstrapAddr(), config.authToken())) {
            client.registerDpRank(bootstrapRoom, config.dpRank());
        } catch (RuntimeException e) {
            failRoom(room, "could not register dp_rank " + config.dpRank() + " for room " + bootstrapRoom + ": " + e.getMessage());
        }
    }

    private boolean followsBootstrapRoom() {
        return config.loadBalanceMethod() == null || "follow_bootstrap_room".equals(config.loadBalanceMethod());
    }

    @Override
    public KVReceiver createReceiver(String bootstrapAddr, long bootstrapRoom) {
        throw new UnsupportedOperationException("a prefill manager creates senders, not receivers");
    }

    // ------------------------------------------------------------------ sender support (scheduler thread)

    PrefillRoom room(long room) {
        return rooms.computeIfAbsent(room, r -> new PrefillRoom(r, (int) Math.floorMod(r, (long) workers.length)));
    }

    RegisteredMemory memory() {
        return memory;
    }

    KVManagerConfig config() {
        return config;
    }

    void enqueue(PrefillRoom room, Runnable task) {
        workers[room.worker].queue.add(task);
    }

    void forget(long room) {
        if (statuses.contains(room)) {
            KVPoll st = statuses.status(room);
            String reason = st == KVPoll.Failed
                    ? (statuses.reason(room) == null ? "failed on prefill" : statuses.reason(room))
                    : "room " + room + " already concluded (" + st + ") and was cleared on this prefill rank";
            synchronized (tombstones) {
                tombstones.put(room, reason);
            }
        }
        statuses.remove(room);
        PrefillRoom r = rooms.remove(room);
        if (r != null) {
            for (PrefillRoom.Destination d : r.destinations.values()) d.session().rooms.remove(room);
        }
    }

    /** Fails a room locally and, once, tells every real destination (on the room's worker, after in-flight chunks). */
    void failRoom(PrefillRoom room, String reason) {
        statuses.fail(room.room, reason);
        if (room.failureNotified.compareAndSet(false, true)) {
            enqueue(room, () -> notifyFailure(room));
        }
    }

    private void notifyFailure(PrefillRoom room) {
        String reason = statuses.reason(room.room);
        for (PrefillRoom.Destination d : room.orderedDestinations()) {
            if (d.info().dummy()) continue;
            sendQuietly(d.session(), new Status(room.room, KVPoll.Failed, uniqueRank,
                    reason == null ? "Failed on prefill rank " + uniqueRank : reason));
        }
    }

    // ------------------------------------------------------------------ transfer worker

    /** One chunk of one room, executed on the room's worker. */
    void executeChunk(PrefillRoom room, int[] pages, int sliceStart, boolean last, int[][] stateIndices, int auxIndex) {
        executeChunk(room, pages, sliceStart, last, stateIndices, auxIndex, -1);
    }

    /** @param lastPageEnd where this rank's pages end on the last chunk (its CP share); -1 = the decode's page count */
    void executeChunk(PrefillRoom room, int[] pages, int sliceStart, boolean last, int[][] stateIndices, int auxIndex,
                      int lastPageEnd) {
        executeChunk(room, pages, sliceStart, last, stateIndices, auxIndex, lastPageEnd, -1);
    }

    /** @param totalPages pages the whole request sends (every CP share together); -1 = not a CP share */
    void executeChunk(PrefillRoom room, int[] pages, int sliceStart, boolean last, int[][] stateIndices, int auxIndex,
                      int lastPageEnd, int totalPages) {
        KVPoll st = statuses.status(room.room);
        if (st == KVPoll.Failed || !rooms.containsKey(room.room)) return;
        if (room.firstSendNanos == 0) room.firstSendNanos = System.nanoTime();
        PrefillRoom.Destination current = null;
        try {
            long[] itemLens = kvItemLens;
            List<PrefillRoom.Destination> destinations = room.orderedDestinations();
            for (PrefillRoom.Destination d : destinations) {
                if (d.info().dummy()) continue;
                current = d;
                int[] dstAll = d.info().dstKvIndices();
                if (sliceStart + pages.length > dstAll.length) {
                    throw new PlanException("decode session " + d.session().sessionId() + " expects " + dstAll.length
                            + " pages but prefill sends pages [" + sliceStart + ", " + (sliceStart + pages.length) + ")");
                }
                int expectedEnd = lastPageEnd < 0 ? dstAll.length : lastPageEnd;
                if (last && totalPages >= 0 && totalPages != dstAll.length) {
                    throw new PlanException("decode session " + d.session().sessionId() + " expects " + dstAll.length
                            + " pages but the prefill CP ranks send " + totalPages);
                }
                if (last && sliceStart + pages.length != expectedEnd) {
                    throw new PlanException("decode session " + d.session().sessionId() + " expects " + expectedEnd
                            + " pages but prefill's last chunk ends at page " + (sliceStart + pages.length));
                }
                int[] dst = Arrays.copyOfRange(dstAll, sliceStart, sliceStart + pages.length);
                HeadSlice[] slices = d.session().kvSlices;
                int[] bufferMap = d.session().kvBufferMap;
                runPlan(room, d, slices == null
                        ? TransferPlanner.planKv(pages, dst, itemLens, bufferMap)
                        : TransferPlanner.planKvSliced(pages, dst, itemLens, d.session().hello.memory().kvItemLens(),
                                pageSize, slices, bufferMap));
                if (last) {
                    runPlan(room, d, slices == null
                            ? TransferPlanner.planState(memory.stateTypes(), stateIndices, d.info().stateIndices(),
                                    stateItemLens, w -> log.warn("room {}: {}", room.room, w))
                            : planStateSliced(stateIndices, d));
                    runPlan(room, d, TransferPlanner.planAux(auxIndex, d.info().auxIndex(), auxItemLens));
                }
            }
            current = null;
            if (last) {
                if (statuses.status(room.room) == KVPoll.Failed) return;
                for (PrefillRoom.Destination d : destinations) {
                    if (d.info().dummy()) continue;
                    current = d;
                    d.session().statusConnection(room.room).send(new Status(room.room, KVPoll.Success, uniqueRank, ""));
                }
                room.doneNanos = System.nanoTime();
                statuses.update(room.room, KVPoll.Success);
            }
        } catch (IOException | RuntimeException e) {
            String to = current == null ? "" : " to " + current.session();
            String why = e.getMessage() != null ? e.getMessage() : e.getClass().getSimpleName();
            if (e instanceof java.nio.channels.ClosedChannelException || e instanceof java.io.EOFException) {
                why = "Decode instance could be dead: connection closed (" + why + ")";
            }
            String reason = "Failed to send kv chunk of " + room.room + to + ": " + why;
            log.warn(reason);
            failRoom(room, reason);
        }
    }

    private CopyPlan planStateSliced(int[][] stateIndices, PrefillRoom.Destination d) {
        Hello h = d.session().hello;
        int n = memory.stateComponentCount();
        long[][] dstItems = new long[n][];
        int[][] dims = new int[n][], outer = new int[n][];
        for (int c = 0; c < n; c++) {
            dstItems[c] = h.memory().states().get(c).itemLens();
            dims[c] = new int[memory.stateTensorCount(c)];
            outer[c] = new int[memory.stateTensorCount(c)];
            for (int t = 0; t < dims[c].length; t++) {
                dims[c][t] = memory.stateDim(c, t);
                outer[c][t] = memory.stateOuterCount(c, t);
            }
        }
        return TransferPlanner.planStateSliced(memory.stateTypes(), stateIndices, d.info().stateIndices(),
                stateItemLens, dstItems, dims, outer, config.attnTpSize(), config.attnTpRank(), h.attnTpSize(),
                h.engineRank() % h.attnTpSize());
    }

    private void runPlan(PrefillRoom room, PrefillRoom.Destination d, CopyPlan plan) throws IOException {
        long t0 = activeWrites.begin();
        try {
            d.session().dataPath.write(room.room, plan, memory, () -> statuses.status(room.room) == KVPoll.Failed);
        } finally {
            // A failed write's time counts too (the data path was busy), its bytes do not.
            dataPathNanos.add(activeWrites.end() - t0);
        }
        long bytes = plan.totalBytes();
        dataPathBytes.add(bytes);
        dataPathOps.add(plan.size());
        room.bytesSent += bytes;
    }

    /**
     * Bytes the data paths moved and the time the transfer workers spent inside them, summed over
     * workers: bytes / time is the per-worker data-path bandwidth (the bench's {@code datapath_gbps}),
     * comparable with a single-thread memory copy when a write runs on its worker alone (shm copy
     * lanes let one large write use several threads); {@code ops} counts the plans' ops (a run of
     * pages of one buffer, an aux row, a state slot), so bytes / ops is the mean message size.
     * {@code activeNanos} is the wall time during which at least one write was in a data path:
     * bytes / activeNanos is the rank's aggregate bandwidth while it was moving data, all workers together.
     */
    public record DataPathStats(long bytes, long busyNanos, long ops, long activeNanos) {
        /** What moved since {@code earlier} (a snapshot of the same manager). */
        public DataPathStats minus(DataPathStats earlier) {
            return new DataPathStats(bytes - earlier.bytes, busyNanos - earlier.busyNanos, ops - earlier.ops,
                    activeNanos - earlier.activeNanos);
        }
    }

    /** Writes inside a data path right now (a failed room's write may still be stopping). */
    public int writesInDataPath() {
        return activeWrites.active();
    }

    public DataPathStats dataPathStats() {
        return new DataPathStats(dataPathBytes.sum(), dataPathNanos.sum(), dataPathOps.sum(), activeWrites.activeNanos());
    }

    /**
     * Wall time with at least one write inside a data path (the union of the workers' busy
     * intervals). Entered once per plan (a chunk of a room), not per page, so a lock is cheap here.
     */
    private static final class ActiveWrites {
        private int active;
        private long since;
        private long total;

        /** The clock is read under the lock, so no other write's interval can fall between it and the count. */
        synchronized long begin() {
            long now = System.nanoTime();
            if (active++ == 0) since = now;
            return now;
        }

        synchronized long end() {
            long now = System.nanoTime();
            if (--active == 0) total += now - since;
            return now;
        }

        synchronized int active() {
            return active;
        }

        synchronized long activeNanos() {
            return active > 0 ? total + (System.nanoTime() - since) : total;
        }
    }

    private final ActiveWrites activeWrites = new ActiveWrites();

    private final class Worker {
        final BlockingQueue<Runnable> queue = new LinkedBlockingQueue<>();
        final Thread thread;

        Worker(int index) {
            thread = Thread.ofPlatform().daemon().name("kvferry-prefill-worker-" + engineRank + "-" + index).unstarted(this::run);
        }

        private void run() {
            while (!closed) {
                Runnable task;
                try {
                    task = queue.take();
                } catch (InterruptedException e) {
                    return;
                }
                try {
                    task.run();
                } catch (Throwable e) {
                    // Tasks fail their own room; anything escaping must not kill the worker and strand its queue.
                    log.error("transfer task failed unexpectedly", e);
                }
            }
        }
    }

    // ------------------------------------------------------------------ connections

    private void acceptLoop() {
        while (!closed) {
            SocketChannel ch;
            try {
                ch = listener.accept();
            } catch (ClosedChannelException e) {
                return;
            } catch (IOException e) {
                if (!closed) log.warn("accept failed: {}", e.getMessage());
                continue;
            }
            try {
                PeerSession session = new PeerSession(new ControlConnection(ch));
                sessions.add(session);
                if (closed) {
                    session.connection.close();
                    return;
                }
                // A peer that connects but never registers must not hold a thread forever.
                timer.schedule(() -> {
                    if (session.hello == null) session.connection.close();
                }, config.connectTimeout().toMillis(), TimeUnit.MILLISECONDS);
                Thread.ofPlatform().daemon().name("kvferry-prefill-reader-" + engineRank)
                        .start(() -> readLoop(session));
            } catch (IOException e) {
                log.warn("cannot set up connection: {}", e.getMessage());
                try {
                    ch.close();
                } catch (IOException ignored) {
                    // nothing more to do
                }
            }
        }
    }

    private void readLoop(PeerSession session) {
        String why = "closed";
        try {
            while (!closed) {
                ControlMessage m = session.connection.read();
                if (session.hello == null && !(m instanceof Hello)) {
                    throw new ProtocolException("first message must be HELLO, got " + m.type());
                }
                if (session.stripeOf != null && !(m instanceof io.kvferry.protocol.Heartbeat)) {
                    throw new ProtocolException("a data stripe carries only heartbeats from decode, got " + m.type());
                }
                switch (m) {
                    case Hello h -> onHello(session, h);
                    case TransferInfo t -> onTransferInfo(session, t);
                    case Abort a -> onAbort(session, a);
                    case WriteHeader w -> throw new ProtocolException("a prefill rank does not accept WRITE frames");
                    case io.kvferry.protocol.Heartbeat hb -> {
                        // liveness only: the read itself refreshed the connection's clock
                    }
                    default -> throw new ProtocolException("unexpected " + m.type() + " from decode");
                }
            }
        } catch (EOFException e) {
            why = "connection closed by decode";
        } catch (IOException e) {
            why = e.getMessage() != null ? e.getMessage() : e.getClass().getSimpleName();
            if (!closed && !(e instanceof ClosedChannelException)) log.warn("decode session {}: {}", session, why);
        } finally {
            String reason = session.connection.closeReason();
            onSessionLost(session, reason != null ? reason : why);
        }
    }

    private void onHello(PeerSession session, Hello h) throws IOException {
        if (session.hello != null) throw new ProtocolException("duplicate HELLO on one connection");
        if (h.isStripe()) {
            attachStripe(session, h);
            return;
        }
        String error = checkHello(h);
        if (error != null) {
            sendQuietly(session, new HelloAck(false, error, engineRank, uniqueRank));
            throw new ProtocolException("refused decode registration: " + error);
        }
        DataPath path;
        StringBuilder fallback = new StringBuilder();
        if ("inproc".equals(h.dataPath())) {
            WriteSink sink = InprocRegistry.lookup(h.sessionId());
            if (sink == null) {
                String err = "inproc data path needs the decode manager in the same JVM; session " + h.sessionId() + " is not here";
                sendQuietly(session, new HelloAck(false, err, engineRank, uniqueRank));
                throw new ProtocolException(err);
            }
            path = new InprocDataPath(sink);
        } else {
            path = chooseOffer(session, h, fallback);
            if (path == null) path = new TcpDataPath(session.connection, h.stripes());
        }
        session.kvBufferMap = LayerPairing.pair(memory.kvLayerIds(), h.memory().kvLayerIds());
        session.kvSlices = headSlices(h, session.kvBufferMap);
        // A decode restarted with the same session id replaces its old session.
        for (PeerSession old : sessions) {
            if (old != session && old.stripeOf == null && old.hello != null && old.hello.sessionId().equals(h.sessionId())) {
                old.connection.close();
            }
        }
        session.dataPath = path;
        session.hello = h;
        session.connection.send(new HelloAck(true, "", engineRank, uniqueRank, path.name(), fallback.toString()));
        if (fallback.isEmpty()) log.info("decode session {} registered; data path {}", session, path.name());
        else log.info("decode session {} registered; data path {} ({})", session, path.name(), fallback);
    }

    /**
     * The first transport the decode offered that this prefill's backend allows and can use, or
     * null for TCP; {@code fallback} collects why earlier offers were passed over.
     */
    private DataPath chooseOffer(PeerSession session, Hello h, StringBuilder fallback) {
        for (TransportOffer offer : h.offers()) {
            String name = offer.transport();
            TransportProvider provider = Transports.forBackend(backend).stream().filter(p -> p.name().equals(name))
                    .findFirst().orElse(null);
            String why;
            if (provider == null) {
                why = "not enabled on this prefill (backend " + backend + ")";
            } else if (provider.unavailableReason() != null) {
                why = provider.unavailableReason();
            } else {
                try {
                    return source(provider).connect(offer.blob(), h.memory(), h.sessionId() + " (" + session.connection.peer() + ")");
                } catch (TransportUnavailableException e) {
                    why = e.getMessage() != null ? e.getMessage() : e.getClass().getSimpleName();
                } catch (IOException | RuntimeException e) {
                    why = "unusable offer: " + e.getMessage();
                    log.warn("decode session {}: {} offer refused: {}", session, name, e.getMessage());
                }
            }
            if (!fallback.isEmpty()) fallback.append("; ");
            fallback.append(name).append(" not used: ").append(why);
        }
        return null;
    }

    private SourceTransport source(TransportProvider provider) throws IOException {
        synchronized (sources) {
            SourceTransport s = sources.get(provider.name());
            if (s == null) {
                s = provider.openSource(memory, engineRank);
                sources.put(provider.name(), s);
            }
            return s;
        }
    }

    /** An extra TCP data connection of a registered decode session (tcpStripes > 1 on the decode). */
    private void attachStripe(PeerSession stripe, Hello h) throws IOException {
        String error = null;
        if (authToken != null && !MessageDigest.isEqual(authToken, h.authToken().getBytes(StandardCharsets.UTF_8))) {
            error = "Unauthorized: wrong or missing cluster auth token";
        }
        PeerSession main = null;
        for (PeerSession s : sessions) {
            if (s.stripeOf == null && s.hello != null && s.hello.sessionId().equals(h.sessionId())) main = s;
        }
        if (error == null && (main == null || !(main.dataPath instanceof TcpDataPath tcp))) {
            error = "no TCP session " + h.sessionId() + " to add a data stripe to";
        } else if (error == null && !((TcpDataPath) main.dataPath).attach(h.stripeIndex(), stripe.connection)) {
            error = "stripe " + h.stripeIndex() + " of session " + h.sessionId() + " is out of range or already attached";
        }
        if (error != null) {
            sendQuietly(stripe, new HelloAck(false, error, engineRank, uniqueRank));
            throw new ProtocolException("refused data stripe: " + error);
        }
        stripe.stripeOf = main;
        stripe.hello = h;
        main.stripes.add(stripe);
        stripe.connection.send(new HelloAck(true, "", engineRank, uniqueRank, "tcp", ""));
        if (main.connection.isClosed()) stripe.connection.close(); // lost while attaching: go with it
    }

    /** Head slices for an MHA decode with another attention-TP size; null when pages copy whole. */
    private HeadSlice[] headSlices(Hello h, int[] bufferMap) {
        if (config.isMla() || h.attnTpSize() == config.attnTpSize()) return null;
        long[] mine = memory.kvItemLens();
        HeadSlice[] slices = new HeadSlice[mine.length];
        for (int b = 0; b < mine.length; b++) {
            slices[b] = HeadSlice.resolve(totalKvHeads, config.attnTpSize(), config.attnTpRank(), h.attnTpSize(),
                    h.engineRank() % h.attnTpSize(), mine[b], h.memory().kvItemLens()[bufferMap[b]], pageSize);
        }
        return slices;
    }

    /** Returns why a decode's registration cannot be served, or null. */
    private String checkHello(Hello h) {
        if (authToken != null) {
            byte[] given = h.authToken().getBytes(StandardCharsets.UTF_8);
            if (!MessageDigest.isEqual(authToken, given)) return "Unauthorized: wrong or missing cluster auth token";
        }
        if (!h.dataPath().matches("[a-z0-9_-]{1,32}")) {
            return "malformed data path name '" + h.dataPath() + "'";
        }
        boolean decodeAllCp = (h.flags() & Hello.FLAG_ALL_CP_RANKS) != 0;
        if (config.attnCpSize() > 1 && decodeAllCp != config.allCpRanksTransfer()) {
            return "all-CP-ranks transfer differs: prefill " + (config.allCpRanksTransfer() ? "on" : "off") + ", decode "
                    + (decodeAllCp ? "on" : "off") + "; set it the same on both sides";
        }
        if (h.pageSize() != pageSize) {
            return "page_size mismatch: prefill uses " + pageSize + ", decode uses " + h.pageSize()
                    + "; both servers must use the same --page-size value";
        }
        if (!h.kvCacheDtype().equals(kvCacheDtype)) {
            return "kv_cache_dtype mismatch: prefill uses " + kvCacheDtype + ", decode uses " + h.kvCacheDtype();
        }
        MemoryDescriptor d = h.memory();
        long[] mine = memory.kvItemLens();
        int[] map;
        try {
            map = LayerPairing.pair(memory.kvLayerIds(), d.kvLayerIds());
        } catch (RuntimeException e) {
            return "KV buffers do not pair by layer id: " + e.getMessage();
        }
        boolean sliced = !config.isMla() && h.attnTpSize() != config.attnTpSize();
        if (sliced) {
            int big = Math.max(h.attnTpSize(), config.attnTpSize()), small = Math.min(h.attnTpSize(), config.attnTpSize());
            if (big % small != 0) {
                return "attention TP sizes must divide one another: prefill " + config.attnTpSize() + ", decode " + h.attnTpSize();
            }
            try {
                headSlices(h, map);
            } catch (RuntimeException e) {
                return "cannot slice KV heads between prefill TP " + config.attnTpSize() + " and decode TP " + h.attnTpSize()
                        + ": " + e.getMessage();
            }
            if (hasConvShardGroups) {
                return "state with conv shard groups (GDN q/k/v sub-blocks) cannot be resharded between prefill TP "
                        + config.attnTpSize() + " and decode TP " + h.attnTpSize() + " by this version";
            }
            if (d.states().size() != memory.stateComponentCount()) {
                return "state component count mismatch: prefill " + memory.stateComponentCount() + ", decode " + d.states().size();
            }
            for (int c = 0; c < memory.stateComponentCount(); c++) {
                if (d.states().get(c).itemLens().length != memory.stateTensorCount(c)) {
                    return "state component " + c + " tensor count differs: prefill " + memory.stateTensorCount(c) + ", decode "
                            + d.states().get(c).itemLens().length;
                }
                for (int t = 0; t < memory.stateTensorCount(c) && memory.stateDim(c, t) > 0 && memory.stateOuterCount(c, t) > 0; t++) {
                    try {
                        io.kvferry.plan.StateSlice.append(io.kvferry.plan.CopyPlan.probe(), c, t, 0, 0, memory.stateItemLens()[c][t],
                                d.states().get(c).itemLens()[t], memory.stateOuterCount(c, t), memory.stateDim(c, t),
                                config.attnTpSize(), config.attnTpRank(), h.attnTpSize(), h.engineRank() % h.attnTpSize());
                    } catch (RuntimeException e) {
                        return e.getMessage();
                    }
                }
                if (memory.stateTypes().get(c) != io.kvferry.api.StateType.MAMBA) {
                    return "state component " + c + " (" + memory.stateTypes().get(c).wire() + ") cannot be resharded between "
                            + "prefill TP " + config.attnTpSize() + " and decode TP " + h.attnTpSize();
                }
                for (int t = 0; t < memory.stateTensorCount(c); t++) {
                    if (memory.stateDim(c, t) < 1 || memory.stateOuterCount(c, t) < 1) {
                        return "state component " + c + " tensor " + t + " needs state_dim_per_tensor and "
                                + "state_slice_outer_counts to be resharded across attention TP sizes";
                    }
                }
            }
        } else {
            for (int i = 0; i < mine.length; i++) {
                if (d.kvItemLens()[map[i]] != mine[i]) {
                    return "KV buffer " + i + " page size in bytes differs: prefill " + mine[i] + ", decode buffer " + map[i]
                            + " " + d.kvItemLens()[map[i]];
                }
            }
        }
        long[] aux = memory.auxItemLens();
        if (!Arrays.equals(aux, d.auxItemLens())) {
            return "aux buffers differ: prefill item lengths " + Arrays.toString(aux) + ", decode " + Arrays.toString(d.auxItemLens());
        }
        if (d.states().size() != memory.stateComponentCount()) {
            return "state component count mismatch: prefill " + memory.stateComponentCount() + ", decode " + d.states().size();
        }
        long[][] stateItems = memory.stateItemLens();
        for (int c = 0; c < stateItems.length; c++) {
            MemoryDescriptor.StateDescriptor s = d.states().get(c);
            if (!s.type().equals(memory.stateTypes().get(c).wire())) {
                return "state component " + c + " type differs: prefill " + memory.stateTypes().get(c).wire() + ", decode " + s.type();
            }
            if (!sliced && !Arrays.equals(stateItems[c], s.itemLens())) {
                return "state component " + c + " item lengths differ: prefill " + Arrays.toString(stateItems[c])
                        + ", decode " + Arrays.toString(s.itemLens());
            }
        }
        return null;
    }

    private void onTransferInfo(PeerSession session, TransferInfo t) {
        String buried;
        synchronized (tombstones) {
            buried = rooms.containsKey(t.room()) ? null : tombstones.get(t.room());
        }
        if (buried != null) {
            sendQuietly(session, new Status(t.room(), KVPoll.Failed, uniqueRank, buried));
            return;
        }
        PrefillRoom room = room(t.room());
        String error = t.dummy() ? null : checkTransferInfo(session, t);
        PrefillRoom.Destination previous = room.destinations.putIfAbsent(session.sessionId(),
                new PrefillRoom.Destination(session, t));
        if (previous != null) {
            error = "duplicate transfer info for room " + t.room() + " from decode session " + session.sessionId();
        }
        session.rooms.add(t.room());
        statuses.update(t.room(), KVPoll.Bootstrapping);
        if (error != null) {
            log.warn("room {}: {}", t.room(), error);
            statuses.fail(t.room(), error);
            if (previous != null || t.dummy()) {
                sendQuietly(session, new Status(t.room(), KVPoll.Failed, uniqueRank, error));
            } else {
                failRoom(room, error);
            }
            return;
        }
        if (t.decodePrefixLen() > 0 && room.decodePrefixLen == 0) room.decodePrefixLen = t.decodePrefixLen();
        room.requiredDstInfoNum = t.requiredDstInfoNum();
        if (room.destinations.size() >= t.requiredDstInfoNum()) {
            room.freezeDestinations();
            statuses.update(t.room(), KVPoll.WaitingForInput);
        }
    }

    /** Checks a decode's indices against the memory that decode registered; returns the problem or null. */
    private static String checkTransferInfo(PeerSession session, TransferInfo t) {
        MemoryDescriptor d = session.hello.memory();
        long pages = Long.MAX_VALUE;
        for (int i = 0; i < d.kvLengths().length; i++) pages = Math.min(pages, d.kvLengths()[i] / d.kvItemLens()[i]);
        for (int p : t.dstKvIndices()) {
            if (p < 0 || p >= pages) {
                return "destination page id " + p + " is outside the decode KV pool of " + pages + " pages";
            }
        }
        if (t.auxIndex() >= 0) {
            long rows = Long.MAX_VALUE;
            for (int i = 0; i < d.auxLengths().length; i++) rows = Math.min(rows, d.auxLengths()[i] / d.auxItemLens()[i]);
            if (d.auxLengths().length == 0 || t.auxIndex() >= rows) {
                return "destination aux index " + t.auxIndex() + " is outside the decode metadata pool of "
                        + (d.auxLengths().length == 0 ? 0 : rows) + " rows";
            }
        }
        if (t.stateIndices().length > d.states().size()) {
            return "transfer info has " + t.stateIndices().length + " state index lists but decode registered "
                    + d.states().size() + " state components";
        }
        for (int c = 0; c < t.stateIndices().length; c++) {
            MemoryDescriptor.StateDescriptor s = d.states().get(c);
            long n = Long.MAX_VALUE;
            for (int i = 0; i < s.lengths().length; i++) n = Math.min(n, s.lengths()[i] / s.itemLens()[i]);
            for (int idx : t.stateIndices()[c]) {
                if (idx < 0 || idx >= n) return "destination state index " + idx + " of component " + c + " is outside its " + n + " entries";
            }
        }
        return null;
    }

    private void onAbort(PeerSession session, Abort a) {
        PrefillRoom room = rooms.get(a.room());
        if (room == null || statuses.status(a.room()) == KVPoll.Success) {
            // Still through the room's worker: a chunk of a room cleared here a moment ago may be running.
            workers[(int) Math.floorMod(a.room(), (long) workers.length)].queue.add(
                    () -> sendQuietly(session, new AbortAck(a.room(), uniqueRank)));
            return;
        }
        statuses.fail(a.room(), ABORT_REASON);
        room.failureNotified.set(true); // the aborting decode knows; the ack below is its answer
        // The ack goes through the room's worker so it leaves only after any in-flight chunk stopped.
        enqueue(room, () -> sendQuietly(session, new AbortAck(a.room(), uniqueRank)));
    }

    private void onSessionLost(PeerSession session, String why) {
        sessions.remove(session);
        session.connection.close();
        PeerSession owner = session.stripeOf;
        if (owner != null) {
            // A lost data stripe takes its session down: the rooms whose bytes it carried cannot finish.
            owner.connection.close("data stripe " + session.hello.stripeIndex() + " lost: " + why);
            return;
        }
        for (PeerSession stripe : session.stripes) stripe.connection.close();
        DataPath path = session.dataPath;
        if (path != null) {
            // After the rooms below fail, so one-sided writers stop at their next op before unmapping.
            closeAfterFailing(session, path);
        }
        if (closed) return;
        for (Long r : session.rooms) {
            PrefillRoom room = rooms.get(r);
            if (room == null || statuses.status(r).isTerminal()) continue;
            statuses.fail(r, "Decode instance could be dead: lost connection with decode session "
                    + session.sessionId() + " (" + why + ")");
            room.failureNotified.set(true);
            enqueue(room, () -> notifyFailure(room));
        }
    }

    private void closeAfterFailing(PeerSession session, DataPath path) {
        if (!path.oneSided() || closed) return; // teardown closes every path itself
        // Runs once the session's rooms were failed (the caller continues to fail them right after), on
        // its own thread: neither this reader nor the timer (heartbeats!) waits while writers wind down.
        // Refused only once teardown began, which closes every session's path itself.
        unmapper.submit(path::close);
    }

    private void sendQuietly(PeerSession session, ControlMessage m) {
        try {
            session.connection.send(m);
        } catch (IOException e) {
            log.debug("could not send {} to {}: {}", m.type(), session, e.getMessage());
        }
    }

    private void requireOpen() {
        if (closed) throw new IllegalStateException("the prefill KV manager was torn down");
    }

    /** Rooms this manager still tracks (for leak checks). */
    public int trackedRooms() {
        return rooms.size();
    }

    /** Connected decode sessions. */
    public int sessionCount() {
        return sessions.size();
    }

    @Override
    public io.kvferry.api.KVManagerStats stats() {
        DataPathStats d = dataPathStats();
        return new io.kvferry.api.KVManagerStats(rooms.size(), sessions.size(), d.bytes(), d.busyNanos(), d.ops(),
                d.activeNanos(), writesInDataPath());
    }

    @Override
    public java.util.Optional<InetSocketAddress> controlEndpoint() {
        return java.util.Optional.of(endpoint());
    }

    @Override
    public void teardown() {
        if (closed) return;
        closed = true;
        try {
            listener.close();
        } catch (IOException ignored) {
            // closing anyway
        }
        List<PeerSession> open = new ArrayList<>(sessions);
        for (PeerSession s : open) s.connection.close();
        for (Worker w : workers) w.thread.interrupt();
        timer.shutdownNow();
        try {
            acceptor.join(2000);
            for (Worker w : workers) w.thread.join(2000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (!unmapper.close(config.abortAckTimeout().plusSeconds(1))) {
            log.warn("teardown: {} did not end within {}", unmapper.name(), config.abortAckTimeout().plusSeconds(1));
        }
        for (PeerSession s : open) {
            if (s.dataPath != null) s.dataPath.close();
        }
        synchronized (sources) {
            for (SourceTransport s : sources.values()) s.close();
            sources.clear();
        }
    }
}
