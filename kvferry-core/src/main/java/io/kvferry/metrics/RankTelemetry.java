package io.kvferry.metrics;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManagerInspection;
import io.kvferry.api.KVPoll;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.noop.NoopTimer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.LongAdder;

/**
 * What one manager (one rank) reports about itself: its meters in the registry its config named,
 * the structured log line of each room failure, and what {@code inspect()} shows (recent failures,
 * failures by kind, rooms concluded, bytes). Created and closed by the manager; fed from the few
 * places where things happen (the room status table's changes, handshakes, heartbeat sweeps, data-path
 * writes). Thread-safe; nothing here runs per page, and per data-path op only a bucket increment.
 */
public final class RankTelemetry implements AutoCloseable {
    /**
     * One line per room failure, {@code key=value}: {@code room=… role=… tp_rank=… pp_rank=… dp_rank=…
     * cp_rank=… stage=… kind=… peer=… reason=…}. Its own logger, so operators can route or silence it.
     */
    static final Logger FAILURES = LoggerFactory.getLogger("io.kvferry.failures");

    private final MeterRegistry registry;
    private final RankIdentity id;
    private final Tags tags;
    private final EnumMap<FailureKind, Counter> bootstrapFailed = new EnumMap<>(FailureKind.class);
    private final EnumMap<FailureKind, Counter> transferFailed = new EnumMap<>(FailureKind.class);
    private final EnumMap<KVPoll, Counter> timeouts = new EnumMap<>(KVPoll.class);
    private final EnumMap<HandshakeRefusal, Counter> refusals = new EnumMap<>(HandshakeRefusal.class);
    private final Counter aborts;
    private final Counter heartbeatMisses;
    private final Counter heartbeatTimeouts;
    private final DistributionSummary bootstrapMs;
    /** Decode only (null on a prefill). */
    private final DistributionSummary allocMs;
    private final Timer pollLag;
    /** False when the registry denied the poll-lag meter: then no clock is read for it. */
    private final boolean pollLagOn;
    private final ConcurrentHashMap<String, RoomMeters> byTransport = new ConcurrentHashMap<>();
    private final ConcurrentHashMap<String, DataPathMeters> dataPaths = new ConcurrentHashMap<>();
    /** Kept here as well as in the counters: the counters of the no-op registry read nothing. */
    private final EnumMap<FailureKind, LongAdder> failuresByKind = new EnumMap<>(FailureKind.class);
    private final LongAdder concluded = new LongAdder();
    private final LongAdder concludedBytes = new LongAdder();
    /** Newest last; guarded by itself. */
    private final ArrayDeque<KVManagerInspection.Failure> recent = new ArrayDeque<>();
    private final Runnable gauges;

    /** The latency, speed and size histograms of rooms that took one transport. */
    private record RoomMeters(DistributionSummary latencyMs, DistributionSummary speedGbs, DistributionSummary totalMb) {}

    /**
     * @param registry where the meters go ({@link KVFerryMeters#noRegistry()} for nowhere)
     * @param census   read by the rooms-by-state and peers gauges when scraped
     */
    public RankTelemetry(MeterRegistry registry, RankIdentity id, RoomCensus census) {
        this.registry = registry;
        this.id = id;
        this.tags = id.tags();
        for (FailureKind k : FailureKind.values()) {
            failuresByKind.put(k, new LongAdder());
            bootstrapFailed.put(k, Counter.builder(KVFerryMeters.BOOTSTRAP_FAILED).description("Rooms failed while bootstrapping")
                    .tags(tags).tag("kind", k.label()).register(registry));
            transferFailed.put(k, Counter.builder(KVFerryMeters.TRANSFER_FAILED).description("Rooms failed after bootstrapping")
                    .tags(tags).tag("kind", k.label()).register(registry));
        }
        for (KVPoll stage : List.of(KVPoll.Bootstrapping, KVPoll.WaitingForInput, KVPoll.Transferring)) {
            timeouts.put(stage, Counter.builder(KVFerryMeters.TIMEOUTS).description("Rooms failed by a timeout, by the stage they were in")
                    .tags(tags).tag("stage", RoomGauges.stateLabel(stage)).register(registry));
        }
        for (HandshakeRefusal r : HandshakeRefusal.values()) {
            refusals.put(r, Counter.builder(KVFerryMeters.HANDSHAKE_REFUSALS).description("Handshakes refused, by reason")
                    .tags(tags).tag("reason", r.label()).register(registry));
        }
        aborts = Counter.builder(KVFerryMeters.ABORTS).description("Rooms aborted").tags(tags).register(registry);
        heartbeatMisses = Counter.builder(KVFerryMeters.HEARTBEAT_MISSES)
                .description("Heartbeat intervals in which a control connection received nothing").tags(tags).register(registry);
        heartbeatTimeouts = Counter.builder(KVFerryMeters.HEARTBEAT_TIMEOUTS)
                .description("Control connections declared dead after missed heartbeats").tags(tags).register(registry);
        bootstrapMs = DistributionSummary.builder(KVFerryMeters.TRANSFER_BOOTSTRAP_MS).description("Room creation to WaitingForInput")
                .serviceLevelObjectives(KVFerryMeters.BOOTSTRAP_MS).tags(tags).register(registry);
        // Only a decode waits for KV pages between bootstrapping and its metadata.
        allocMs = !"decode".equals(id.role()) ? null : DistributionSummary.builder(KVFerryMeters.TRANSFER_ALLOC_MS)
                .description("Decode: WaitingForInput to send_metadata (waiting for KV pages)")
                .serviceLevelObjectives(KVFerryMeters.BOOTSTRAP_MS).tags(tags).register(registry);
        pollLag = Timer.builder(KVFerryMeters.POLL_LAG_SECONDS)
                .description("A room's Success or Failed to the first poll() that returned it (the scheduler's lag)")
                .serviceLevelObjectives(KVFerryMeters.POLL_LAG).tags(tags).register(registry);
        pollLagOn = !(pollLag instanceof NoopTimer);
        gauges = RoomGauges.register(registry, tags, census);
    }

    public RankIdentity identity() {
        return id;
    }

    /** A room reached WaitingForInput {@code nanos} after it was created. */
    public void bootstrapped(long nanos) {
        bootstrapMs.record(nanos / 1e6);
    }

    /** Decode: a room's metadata went out {@code nanos} after it was bootstrapped. */
    public void allocated(long nanos) {
        if (allocMs != null) allocMs.record(nanos / 1e6);
    }

    /**
     * The scheduler's first poll that returned a room's Success or Failed, which the room entered at
     * {@code concludedNanos} ({@link System#nanoTime()}; not positive when unknown, e.g. a cleared room).
     */
    public void polledConcluded(long concludedNanos) {
        if (pollLagOn && concludedNanos > 0) pollLag.record(Math.max(0, System.nanoTime() - concludedNanos), TimeUnit.NANOSECONDS);
    }

    /**
     * A room reached Success.
     *
     * @param transport    the data path(s) its bytes took, or null when unknown
     * @param latencyNanos its transfer latency, or a negative number when unknown
     * @param bytes        its bytes, or a negative number when this rank cannot count them (one-sided, decode)
     */
    public void concluded(String transport, long latencyNanos, long bytes) {
        concluded.increment();
        RoomMeters m = byTransport.computeIfAbsent(transport == null ? "unknown" : transport, this::roomMeters);
        if (latencyNanos >= 0) m.latencyMs.record(latencyNanos / 1e6);
        if (bytes >= 0) {
            concludedBytes.add(bytes);
            m.totalMb.record(bytes / 1e6);
            if (latencyNanos > 0) m.speedGbs.record(bytes / (double) latencyNanos); // bytes per ns = GB/s
        }
    }

    private RoomMeters roomMeters(String transport) {
        Tags t = tags.and("transport", transport);
        return new RoomMeters(
                DistributionSummary.builder(KVFerryMeters.TRANSFER_LATENCY_MS).description("Transfer latency per room")
                        .serviceLevelObjectives(KVFerryMeters.LATENCY_MS).tags(t).register(registry),
                DistributionSummary.builder(KVFerryMeters.TRANSFER_SPEED_GB_S).description("Room bytes / transfer latency")
                        .serviceLevelObjectives(KVFerryMeters.SPEED_GB_S).tags(t).register(registry),
                DistributionSummary.builder(KVFerryMeters.TRANSFER_TOTAL_MB).description("Bytes per room, MB (10^6 bytes)")
                        .serviceLevelObjectives(KVFerryMeters.TOTAL_MB).tags(t).register(registry));
    }

    /**
     * A room failed: counted by kind (and by stage for timeouts), logged as one structured line, and
     * kept in the recent-failures ring. Reason and peer may hold wire text: they are escaped here.
     *
     * @param stage the state the room was in (null: it failed as it was created)
     * @param peer  the peer(s) the room was waiting on, or null
     */
    public void failed(long room, KVPoll stage, FailureKind kind, String reason, String peer) {
        FailureKind k = kind == null ? FailureKind.UNKNOWN : kind;
        KVPoll at = stage == null ? KVPoll.Bootstrapping : stage;
        failuresByKind.get(k).increment();
        (at == KVPoll.Bootstrapping ? bootstrapFailed : transferFailed).get(k).increment();
        if (k == FailureKind.BOOTSTRAP_TIMEOUT || k == FailureKind.WAITING_TIMEOUT || k == FailureKind.HEARTBEAT_TIMEOUT) {
            Counter c = timeouts.get(at);
            if (c != null) c.increment();
        }
        if (k == FailureKind.ABORTED) aborts.increment();
        String stageLabel = RoomGauges.stateLabel(at);
        String safeReason = LogSafe.text(reason == null ? "" : reason);
        String safePeer = LogSafe.text(peer == null ? "" : peer);
        if (k == FailureKind.ABORTED || k == FailureKind.INJECTED || k == FailureKind.SHUTDOWN) {
            if (FAILURES.isInfoEnabled()) FAILURES.info(failureLine(room, stageLabel, k, reason, peer));
        } else if (FAILURES.isWarnEnabled()) {
            FAILURES.warn(failureLine(room, stageLabel, k, reason, peer));
        }
        // Last: once a failure shows in inspect(), its counters and its log line are done.
        synchronized (recent) {
            recent.addLast(new KVManagerInspection.Failure(room, k.label(), stageLabel, safeReason, safePeer, System.currentTimeMillis()));
            while (recent.size() > KVManagerInspection.MAX_FAILURES) recent.removeFirst();
        }
    }

    /** {@code room failed: room=… role=… … stage=… kind=… peer=… reason=…}, every value escaped. */
    String failureLine(long room, String stage, FailureKind kind, String reason, String peer) {
        return "room failed: room=" + room + " " + id.logFields() + " stage=" + stage + " kind=" + kind.label()
                + " peer=" + LogSafe.value(peer == null || peer.isEmpty() ? null : peer) + " reason=" + LogSafe.value(reason);
    }

    /** This rank refused a handshake, or (decode) its peer refused this rank's. */
    public void refused(HandshakeRefusal reason) {
        refusals.get(reason).increment();
    }

    /** {@code n} more heartbeat intervals passed without a byte from a peer. */
    public void heartbeatsMissed(int n) {
        if (n > 0) heartbeatMisses.increment(n);
    }

    /** A control connection was declared dead for missed heartbeats. */
    public void heartbeatTimedOut() {
        heartbeatTimeouts.increment();
    }

    /** The data-path meters of one transport on this rank (resolve once per link, then record per write). */
    public DataPathMeters dataPath(String transport) {
        return dataPaths.computeIfAbsent(transport, t -> new DataPathMeters(registry, tags.and("transport", t)));
    }

    /** The latest failures, newest first. */
    public List<KVManagerInspection.Failure> recentFailures() {
        synchronized (recent) {
            List<KVManagerInspection.Failure> out = new ArrayList<>(recent);
            return out.reversed();
        }
    }

    /** Failures since start by kind label (kinds that never happened left out). */
    public Map<String, Long> failuresByKind() {
        Map<String, Long> out = new LinkedHashMap<>();
        failuresByKind.forEach((k, n) -> {
            long v = n.sum();
            if (v > 0) out.put(k.label(), v);
        });
        return out;
    }

    public long roomsConcluded() {
        return concluded.sum();
    }

    /** Bytes of the rooms that reached Success (those whose bytes this rank could count). */
    public long concludedBytes() {
        return concludedBytes.sum();
    }

    /** {@code WaitingForInput} → {@code waiting_for_input}. */
    public static String stateLabel(KVPoll state) {
        return RoomGauges.stateLabel(state);
    }

    /** Removes this rank's gauges (its counters and histograms stay: they are cumulative). */
    @Override
    public void close() {
        gauges.run();
    }
}
