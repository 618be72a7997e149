package io.kvferry.metrics;

import io.kvferry.api.KVManagerConfig;
import io.micrometer.core.instrument.MeterRegistry;

import java.time.Duration;
import java.util.List;

/**
 * Every meter kvferry records: names (SGLang's with a {@code kvferry_} prefix where SGLang has one),
 * bucket boundaries (SGLang's) and the closed tag set. Prometheus names are these with {@code _total}
 * appended to counters and {@code _bucket}/{@code _count}/{@code _sum}/{@code _max} to histograms.
 *
 * <p>Tags: {@code role} (prefill, decode), {@code tp_rank}, {@code pp_rank}, {@code dp_rank},
 * {@code cp_rank} (CP ranks of one prefill share a process), {@code transport} (the data path: tcp,
 * inproc, shm, ucx, or several joined by '+'), {@code kind} ({@link io.kvferry.api.FailureKind#label()}),
 * {@code stage} and {@code state} (a room's {@link io.kvferry.api.KVPoll} state, lower-case with
 * underscores), {@code reason} ({@link HandshakeRefusal#label()}). Never a room id, a session id or an address.
 */
public final class KVFerryMeters {
    private KVFerryMeters() {}

    /** Transfer latency per room: first byte handed to a data path (prefill) or metadata sent (decode) to Success. */
    public static final String TRANSFER_LATENCY_MS = "kvferry_kv_transfer_latency_ms";
    /** Room bytes ÷ transfer latency. */
    public static final String TRANSFER_SPEED_GB_S = "kvferry_kv_transfer_speed_gb_s";
    /** Room created (sender/receiver or first transfer info) to WaitingForInput (peers found, metadata in). */
    public static final String TRANSFER_BOOTSTRAP_MS = "kvferry_kv_transfer_bootstrap_ms";
    /** Decode: WaitingForInput to send_metadata (the scheduler waiting for KV pages). */
    public static final String TRANSFER_ALLOC_MS = "kvferry_kv_transfer_alloc_ms";
    /** Bytes per room, in MB (10^6 bytes). */
    public static final String TRANSFER_TOTAL_MB = "kvferry_kv_transfer_total_mb";
    /**
     * A room's Success or Failed to the first {@code poll()} that returned it: how far the scheduler's
     * loop lags behind the transfers (a decode holds the pages, a prefill the source, that long for nothing).
     * A timer, in seconds: Micrometer rounds a distribution summary's values up to whole numbers before
     * bucketing them, so sub-millisecond buckets of a {@code _ms} summary would never count.
     */
    public static final String POLL_LAG_SECONDS = "kvferry_kv_poll_lag_seconds";
    /** Rooms that failed while still Bootstrapping, by kind. */
    public static final String BOOTSTRAP_FAILED = "kvferry_num_bootstrap_failed_reqs";
    /** Rooms that failed after bootstrapping (waiting for input, transferring), by kind. */
    public static final String TRANSFER_FAILED = "kvferry_num_transfer_failed_reqs";
    /** Rooms failed by a timeout (bootstrap, waiting, heartbeat), by the stage they were in. */
    public static final String TIMEOUTS = "kvferry_kv_transfer_timeouts";
    /** Rooms aborted (by the scheduler, the peer, or a failure-injection abort). */
    public static final String ABORTS = "kvferry_kv_transfer_aborts";
    /** Heartbeat intervals in which a control connection received nothing. */
    public static final String HEARTBEAT_MISSES = "kvferry_heartbeat_misses";
    /** Control connections declared dead for missing {@code heartbeat misses} heartbeats. */
    public static final String HEARTBEAT_TIMEOUTS = "kvferry_heartbeat_timeouts";
    /** Handshakes (HELLO) refused, by {@link HandshakeRefusal}: by this prefill rank, or (decode) by its peer. */
    public static final String HANDSHAKE_REFUSALS = "kvferry_handshake_refusals";
    /** Bytes moved by data-path writes, by transport (prefill). */
    public static final String DATAPATH_BYTES = "kvferry_datapath_bytes";
    /** Data-path ops (a run of pages of one buffer, an aux row, a state slot), by transport (prefill). */
    public static final String DATAPATH_OPS = "kvferry_datapath_ops";
    /**
     * Data-path ops by size, by transport, cumulative with an {@code le} tag (bytes) like a histogram's buckets
     * (NIXL reports descriptors per transfer; so do we): {@code histogram_quantile} reads it.
     */
    public static final String DATAPATH_OPS_BY_SIZE = "kvferry_datapath_ops_by_size";
    /** Data-path writes (one plan: a chunk's KV, its state or its aux row); ops / writes is descriptors per transfer. */
    public static final String DATAPATH_WRITES = "kvferry_datapath_writes";
    /** Rooms this rank tracks, by state; computed from the status table when scraped. */
    public static final String ROOMS = "kvferry_rooms";
    /** Peer links: decode sessions of a prefill rank, prefill links of a decode rank. */
    public static final String PEERS = "kvferry_peer_links";

    /** SGLang's {@code kv_transfer_latency_ms} buckets. */
    static final double[] LATENCY_MS = {1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000};
    /** SGLang's {@code kv_transfer_speed_gb_s} buckets. */
    static final double[] SPEED_GB_S = {0.1, 0.5, 1, 5, 10, 25, 50, 100, 200, 400};
    /** SGLang's {@code kv_transfer_bootstrap_ms} / {@code kv_transfer_alloc_ms} buckets (1 … 2500 ms). */
    static final double[] BOOTSTRAP_MS = {1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500};
    /** SGLang's {@code kv_transfer_total_mb} buckets. */
    static final double[] TOTAL_MB = {1, 5, 10, 50, 100, 500, 1000, 5000, 10000};
    /** Poll lag: 0.1 ms (a scheduler that keeps up) … 1 s. */
    static final Duration[] POLL_LAG = {Duration.ofNanos(100_000), Duration.ofNanos(250_000), Duration.ofNanos(500_000),
        Duration.ofMillis(1), Duration.ofMillis(2), Duration.ofMillis(5), Duration.ofMillis(10), Duration.ofMillis(25),
        Duration.ofMillis(50), Duration.ofMillis(100), Duration.ofMillis(250), Duration.ofMillis(500), Duration.ofSeconds(1)};
    /** Op sizes, 1 KiB to 64 MiB by powers of four (one op is at most Wire.MAX_STRIDED_WRITE_BYTES). */
    static final double[] OP_BYTES = {1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864};

    /** Every meter name above, for documentation and the dashboard test. */
    public static final List<String> NAMES = List.of(TRANSFER_LATENCY_MS, TRANSFER_SPEED_GB_S, TRANSFER_BOOTSTRAP_MS,
            TRANSFER_ALLOC_MS, TRANSFER_TOTAL_MB, POLL_LAG_SECONDS, BOOTSTRAP_FAILED, TRANSFER_FAILED, TIMEOUTS, ABORTS, HEARTBEAT_MISSES,
            HEARTBEAT_TIMEOUTS, HANDSHAKE_REFUSALS, DATAPATH_BYTES, DATAPATH_OPS, DATAPATH_OPS_BY_SIZE, DATAPATH_WRITES,
            ROOMS, PEERS);

    /**
     * The registry a manager records into when its config names none ({@link KVManagerConfig#NO_METERS}):
     * every meter is denied, so recording is an empty call and nothing is kept (a library user who
     * exports nothing pays nothing).
     */
    public static MeterRegistry noRegistry() {
        return KVManagerConfig.NO_METERS;
    }
}
