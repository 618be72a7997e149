package io.kvferry.api;

import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.config.MeterFilter;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;

import java.time.Duration;
import java.util.Set;
import java.util.UUID;

/**
 * The server settings a manager needs besides {@link KVArgs} (the part of SGLang's
 * {@code ServerArgs} the transfer layer reads). Immutable; build with {@link #builder()}.
 *
 * @param attnTpSize          attention-TP size of this instance
 * @param attnTpRank          this rank's attention-TP rank
 * @param attnCpSize          context-parallel size (prefill); decode must be 1
 * @param attnCpRank          this rank's CP rank
 * @param dpSize              attention-DP size
 * @param dpRank              this rank's DP group
 * @param ppSize              pipeline stages
 * @param isMla               MLA model (KV replicated across TP ranks, copied whole)
 * @param bootstrapHost       prefill: host of this instance's bootstrap registry
 * @param bootstrapPort       prefill: its port
 * @param listenHost          address the control/data endpoint binds to and advertises
 * @param authToken           cluster token for registry writes and control connections; null disables control auth
 * @param transferWorkers     prefill: transfer workers admitted to one decode link at once (a room's tasks run in order)
 * @param bootstrapTimeout    prefill: a sender still Bootstrapping after this fails
 * @param waitingTimeout      decode: a receiver still waiting for KV this long after send_metadata fails
 * @param connectTimeout      decode: TCP connect + handshake timeout per prefill rank
 * @param loadBalanceMethod   "follow_bootstrap_room" (DP rank = room % dp) or another router policy
 * @param prefillHttpPort     published in the registration, for routers
 * @param writeStallTimeout   prefill: a connection whose write makes no progress this long is closed
 *                            (its rooms fail) so one stuck decode cannot block a transfer worker;
 *                            decode: likewise, so a prefill that stops reading cannot block the
 *                            scheduler thread in a TRANSFER_INFO or ABORT
 * @param prefillInfoTimeout  decode: how long a receiver keeps retrying (once a second) to fetch an
 *                            unavailable prefill's topology before failing (SGLang: 15 tries, 1 s apart);
 *                            also how long {@code resolvePrefillDpRank} answers -1 for a prefill still
 *                            registering its ranks before it throws that, and for a room whose DP group
 *                            the prefill has not published (four times that while it publishes others)
 * @param allCpRanksTransfer  every prefill CP rank sends its contiguous share of the pages (set on both
 *                            sides); otherwise only CP rank 0 sends and the others are dummies
 * @param failureInjectionProbability test hook (SGLang's SGLANG_TEST_DISAGG_FAILURE_PROB): the fraction of
 *                            rooms that fail on this rank once under way, with "Injected failure"; 0 = off. The
 *                            rooms are picked by a hash of the room, the prefill's and the decode's apart
 *                            ({@code RoomChoice}), not by a draw: a run injects into the same rooms every time
 * @param advertiseHost       prefill: host published in the registry instead of listenHost (null = listenHost),
 *                            e.g. a NAT or proxy address
 * @param advertisePort       prefill: port published instead of the bound one (0 = the bound port)
 * @param heartbeatInterval   both sides: a HEARTBEAT is sent on an idle control connection this often
 * @param heartbeatMisses     both sides: a connection that receives no byte for heartbeatInterval × this
 *                            is declared dead (its rooms fail); catches peers that hang or partitions
 *                            where TCP keepalive is answered by a middlebox
 * @param abortAckTimeout     decode: how long clear() of an unfinished room waits for every prefill
 *                            rank writing with a one-sided transport (shm, ucx) to confirm (ABORT_ACK)
 *                            that no write of the room is in flight, before it cuts the link
 * @param tcpStripes          decode: TCP connections per prefill rank for data (1 = the control
 *                            connection carries data too); chunks are spread over them by room
 * @param checksum            both sides: how much of each transfer is verified against the prefill's digests
 *                            (a link uses the stronger of its two sides' settings)
 * @param insecure            allow running without an auth token on a non-loopback address (control
 *                            connections are then unauthenticated); without a token and without this, a
 *                            prefill listens only on loopback and a decode connects only to loopback ranks
 * @param instanceId          decode: the instance this rank belongs to, shared by every rank of one decode
 *                            server (a room's destinations must all be one instance's); default: one id per process
 * @param modelIdentity       the model as "name@revision" (or any stable identity); both sides must declare the
 *                            same (empty = not declared)
 * @param corruptionInjectionProbability test hook: the chance that one byte of a room's KV is flipped on its way
 *                            (the chaos {@code corrupt} scenario); 0 = off
 * @param settings            the configuration context this config was built from; transports read their
 *                            own knobs from it (docs/CONFIGURATION.md)
 * @param ticker              the clock deadlines are measured with ({@link Ticker#SYSTEM}; tests pass a manual one)
 * @param meterRegistry       where the manager records its meters (docs/ARCHITECTURE.md, Metrics): the embedding
 *                            process's registry; default {@link #NO_METERS}, which keeps
 *                            nothing, so a library user who exports no metrics pays nothing
 * @param statusUrl           prefill: the {@code http://host:port/status.json} of this rank's process, published in
 *                            its registration (kvferry's optional {@code kvferry_status_url} field) so the registry's
 *                            status page can reach it; null publishes none
 *
 * <p>Every knob-backed field (see {@link Knobs}) resolves as default ← {@code KVFERRY_*} environment ←
 * the builder's explicit value.
 */
public record KVManagerConfig(
        int attnTpSize, int attnTpRank, int attnCpSize, int attnCpRank, int dpSize, int dpRank,
        int ppSize, boolean isMla, String bootstrapHost, int bootstrapPort, String listenHost,
        String authToken, int transferWorkers, Duration bootstrapTimeout, Duration waitingTimeout,
        Duration connectTimeout, String loadBalanceMethod, int prefillHttpPort, Duration writeStallTimeout,
        Duration prefillInfoTimeout, boolean allCpRanksTransfer, double failureInjectionProbability,
        String advertiseHost, int advertisePort, Duration heartbeatInterval, int heartbeatMisses,
        Duration abortAckTimeout, int tcpStripes, ChecksumMode checksum, boolean insecure, String instanceId,
        String modelIdentity, double corruptionInjectionProbability, KVFerrySettings settings, Ticker ticker,
        MeterRegistry meterRegistry, String statusUrl) {

    /** The decode instance id of this process's ranks unless the engine names one (all ranks of one JVM share it). */
    public static final String PROCESS_INSTANCE_ID = UUID.randomUUID().toString();

    /**
     * The registry of managers whose config names none: every meter is denied, so recording is an
     * empty call and nothing is kept.
     */
    public static final MeterRegistry NO_METERS = noMeters();

    private static MeterRegistry noMeters() {
        SimpleMeterRegistry r = new SimpleMeterRegistry();
        r.config().meterFilter(MeterFilter.deny());
        return r;
    }

    public KVManagerConfig {
        requireRank("attn_tp", attnTpRank, attnTpSize);
        requireRank("attn_cp", attnCpRank, attnCpSize);
        requireRank("dp", dpRank, dpSize);
        if (ppSize < 1) throw new IllegalArgumentException("pp_size must be >= 1, got " + ppSize);
        // As its knob (KVFERRY_TRANSFER_WORKERS): each is a thread that may be started per decode link.
        if (transferWorkers < 1 || transferWorkers > 1024) {
            throw new IllegalArgumentException("transferWorkers must be in [1, 1024], got " + transferWorkers);
        }
        if (listenHost == null || listenHost.isBlank()) throw new IllegalArgumentException("listenHost is required");
        if (failureInjectionProbability < 0 || failureInjectionProbability > 1) {
            throw new IllegalArgumentException("failureInjectionProbability must be in [0, 1], got " + failureInjectionProbability);
        }
        // As their knobs (at least 1 ms): 0 is no "no timeout" here. A prefill's connectTimeout of 0 cut every
        // decode before its HELLO ("connection closed"), a bootstrap or waiting timeout of 0 failed every room.
        requireAtLeastOneMilli("bootstrapTimeout", bootstrapTimeout);
        requireAtLeastOneMilli("waitingTimeout", waitingTimeout);
        requireAtLeastOneMilli("connectTimeout", connectTimeout);
        if (prefillInfoTimeout == null || prefillInfoTimeout.isNegative()) {
            throw new IllegalArgumentException("prefillInfoTimeout must be >= 0, got " + prefillInfoTimeout);
        }
        if (writeStallTimeout == null || writeStallTimeout.isNegative() || writeStallTimeout.isZero()) {
            throw new IllegalArgumentException("writeStallTimeout must be positive");
        }
        if (advertisePort < 0 || advertisePort > 65535) throw new IllegalArgumentException("advertisePort " + advertisePort + " is outside [0, 65535]");
        if (heartbeatInterval == null || heartbeatInterval.toMillis() < 1) {
            throw new IllegalArgumentException("heartbeatInterval must be at least 1 ms");
        }
        if (heartbeatMisses < 1) throw new IllegalArgumentException("heartbeatMisses must be >= 1, got " + heartbeatMisses);
        if (abortAckTimeout == null || abortAckTimeout.isNegative()) throw new IllegalArgumentException("abortAckTimeout must be >= 0");
        if (tcpStripes < 1 || tcpStripes > 64) throw new IllegalArgumentException("tcpStripes must be in [1, 64], got " + tcpStripes);
        if (checksum == null) throw new IllegalArgumentException("checksum mode is required (ChecksumMode.OFF)");
        if (instanceId == null || instanceId.isBlank()) throw new IllegalArgumentException("instanceId must not be empty");
        if (instanceId.length() > 256) throw new IllegalArgumentException("instanceId is longer than 256 characters");
        modelIdentity = modelIdentity == null ? "" : modelIdentity;
        if (modelIdentity.length() > 1024) throw new IllegalArgumentException("modelIdentity is longer than 1024 characters");
        if (corruptionInjectionProbability < 0 || corruptionInjectionProbability > 1) {
            throw new IllegalArgumentException("corruptionInjectionProbability must be in [0, 1], got " + corruptionInjectionProbability);
        }
        if (settings == null) throw new IllegalArgumentException("settings are required (KVFerrySettings.defaults() for none)");
        if (ticker == null) throw new IllegalArgumentException("ticker is required (Ticker.SYSTEM)");
        if (meterRegistry == null) throw new IllegalArgumentException("meterRegistry is required (KVManagerConfig.NO_METERS for none)");
    }

    /** How long a control connection may receive nothing before it is declared dead. */
    public Duration heartbeatTimeout() {
        return heartbeatInterval.multipliedBy(heartbeatMisses);
    }

    private static void requireAtLeastOneMilli(String name, Duration d) {
        if (d == null || d.compareTo(Duration.ofMillis(1)) < 0) {
            throw new IllegalArgumentException(name + " must be at least 1 ms, got " + d);
        }
    }

    private static void requireRank(String name, int rank, int size) {
        if (size < 1) throw new IllegalArgumentException(name + "_size must be >= 1, got " + size);
        if (rank < 0 || rank >= size) {
            throw new IllegalArgumentException(name + "_rank " + rank + " is outside [0, " + size + ")");
        }
    }

    /** "host:port" of the bootstrap registry, as decode addresses it. */
    public String bootstrapAddr() {
        return bootstrapHost + ":" + bootstrapPort;
    }

    public static Builder builder() {
        return new Builder();
    }

    public Builder toBuilder() {
        Builder b = new Builder();
        b.attnTpSize = attnTpSize; b.attnTpRank = attnTpRank; b.attnCpSize = attnCpSize; b.attnCpRank = attnCpRank;
        b.dpSize = dpSize; b.dpRank = dpRank; b.ppSize = ppSize; b.isMla = isMla;
        b.bootstrapHost = bootstrapHost; b.bootstrapPort = bootstrapPort; b.listenHost = listenHost;
        b.authToken = authToken; b.transferWorkers = transferWorkers; b.bootstrapTimeout = bootstrapTimeout;
        b.waitingTimeout = waitingTimeout; b.connectTimeout = connectTimeout;
        b.loadBalanceMethod = loadBalanceMethod; b.prefillHttpPort = prefillHttpPort;
        b.writeStallTimeout = writeStallTimeout;
        b.prefillInfoTimeout = prefillInfoTimeout;
        b.allCpRanksTransfer = allCpRanksTransfer;
        b.failureInjectionProbability = failureInjectionProbability;
        b.advertiseHost = advertiseHost; b.advertisePort = advertisePort;
        b.heartbeatInterval = heartbeatInterval; b.heartbeatMisses = heartbeatMisses;
        b.abortAckTimeout = abortAckTimeout; b.tcpStripes = tcpStripes;
        b.checksum = checksum; b.insecure = insecure; b.instanceId = instanceId; b.modelIdentity = modelIdentity;
        b.corruptionInjectionProbability = corruptionInjectionProbability;
        b.settings = settings; b.ticker = ticker;
        b.meterRegistry = meterRegistry; b.statusUrl = statusUrl;
        return b;
    }

    /**
     * Defaults follow SGLang (300 s bootstrap and waiting timeouts, 4 transfer queues); knob-backed
     * fields left unset here come from the settings ({@link KVFerrySettings#fromEnvironment()} unless
     * {@link #settings} says otherwise).
     */
    public static final class Builder {
        private int attnTpSize = 1, attnTpRank, attnCpSize = 1, attnCpRank, dpSize = 1, dpRank, ppSize = 1;
        private boolean isMla;
        private String bootstrapHost = "127.0.0.1";
        private int bootstrapPort = 8998;
        private String listenHost = "127.0.0.1";
        private String authToken;
        private Integer transferWorkers;
        private Duration bootstrapTimeout;
        private Duration waitingTimeout;
        private Duration connectTimeout;
        private String loadBalanceMethod = "follow_bootstrap_room";
        private int prefillHttpPort;
        private Duration writeStallTimeout;
        private Duration prefillInfoTimeout;
        private boolean allCpRanksTransfer;
        private Double failureInjectionProbability;
        private String advertiseHost;
        private int advertisePort;
        private Duration heartbeatInterval;
        private Integer heartbeatMisses;
        private Duration abortAckTimeout;
        private Integer tcpStripes;
        private ChecksumMode checksum;
        private Boolean insecure;
        private String instanceId = PROCESS_INSTANCE_ID;
        private String modelIdentity = "";
        private Double corruptionInjectionProbability;
        private KVFerrySettings settings;
        private Ticker ticker = Ticker.SYSTEM;
        private MeterRegistry meterRegistry = NO_METERS;
        private String statusUrl;

        public Builder attnTp(int size, int rank) { attnTpSize = size; attnTpRank = rank; return this; }
        public Builder attnCp(int size, int rank) { attnCpSize = size; attnCpRank = rank; return this; }
        public Builder dp(int size, int rank) { dpSize = size; dpRank = rank; return this; }
        public Builder ppSize(int size) { ppSize = size; return this; }
        public Builder mla(boolean mla) { isMla = mla; return this; }
        public Builder bootstrap(String host, int port) { bootstrapHost = host; bootstrapPort = port; return this; }
        public Builder listenHost(String host) { listenHost = host; return this; }
        public Builder authToken(String token) { authToken = token; return this; }
        public Builder transferWorkers(int n) { transferWorkers = n; return this; }
        public Builder bootstrapTimeout(Duration d) { bootstrapTimeout = d; return this; }
        public Builder waitingTimeout(Duration d) { waitingTimeout = d; return this; }
        public Builder connectTimeout(Duration d) { connectTimeout = d; return this; }
        public Builder loadBalanceMethod(String m) { loadBalanceMethod = m; return this; }
        public Builder prefillHttpPort(int p) { prefillHttpPort = p; return this; }
        public Builder writeStallTimeout(Duration d) { writeStallTimeout = d; return this; }
        public Builder prefillInfoTimeout(Duration d) { prefillInfoTimeout = d; return this; }
        public Builder allCpRanksTransfer(boolean b) { allCpRanksTransfer = b; return this; }
        public Builder failureInjectionProbability(double p) { failureInjectionProbability = p; return this; }
        public Builder advertise(String host, int port) { advertiseHost = host; advertisePort = port; return this; }
        public Builder heartbeat(Duration interval, int misses) { heartbeatInterval = interval; heartbeatMisses = misses; return this; }
        public Builder abortAckTimeout(Duration d) { abortAckTimeout = d; return this; }
        public Builder tcpStripes(int n) { tcpStripes = n; return this; }
        public Builder checksum(ChecksumMode m) { checksum = m; return this; }
        /** Allows a tokenless manager beyond loopback (its control connections are then unauthenticated). */
        public Builder insecure(boolean b) { insecure = b; return this; }
        public Builder instanceId(String id) { instanceId = id; return this; }
        public Builder modelIdentity(String id) { modelIdentity = id; return this; }
        public Builder corruptionInjectionProbability(double p) { corruptionInjectionProbability = p; return this; }
        /** The configuration context (default: this process's environment); knobs not set on the builder come from it. */
        public Builder settings(KVFerrySettings s) { settings = s; return this; }
        public Builder ticker(Ticker t) { ticker = t; return this; }
        /** Where the manager's meters go (the process's registry, e.g. a PrometheusMeterRegistry). */
        public Builder meterRegistry(MeterRegistry r) { meterRegistry = r; return this; }
        /** Prefill: the status URL published with this rank's registration. */
        public Builder statusUrl(String url) { statusUrl = url; return this; }

        public KVManagerConfig build() {
            KVFerrySettings s = settings != null ? settings : KVFerrySettings.fromEnvironment();
            return new KVManagerConfig(attnTpSize, attnTpRank, attnCpSize, attnCpRank, dpSize, dpRank, ppSize, isMla,
                    bootstrapHost, bootstrapPort, listenHost, authToken,
                    transferWorkers != null ? transferWorkers : s.getInt(Knobs.TRANSFER_WORKERS, 1, 1024),
                    or(bootstrapTimeout, s, Knobs.BOOTSTRAP_TIMEOUT_MS, 1), or(waitingTimeout, s, Knobs.WAITING_TIMEOUT_MS, 1),
                    or(connectTimeout, s, Knobs.CONNECT_TIMEOUT_MS, 1), loadBalanceMethod, prefillHttpPort,
                    or(writeStallTimeout, s, Knobs.WRITE_STALL_TIMEOUT_MS, 1), or(prefillInfoTimeout, s, Knobs.PREFILL_INFO_TIMEOUT_MS, 0),
                    allCpRanksTransfer,
                    failureInjectionProbability != null ? failureInjectionProbability : s.getProbability(Knobs.FAILURE_INJECTION),
                    advertiseHost, advertisePort, or(heartbeatInterval, s, Knobs.HEARTBEAT_INTERVAL_MS, 1),
                    heartbeatMisses != null ? heartbeatMisses : s.getInt(Knobs.HEARTBEAT_MAX_FAILURE, 1, 1_000_000),
                    or(abortAckTimeout, s, Knobs.ABORT_ACK_TIMEOUT_MS, 0),
                    tcpStripes != null ? tcpStripes : s.getInt(Knobs.TCP_STRIPES, 1, 64),
                    checksum != null ? checksum : s.getChecksum(Knobs.CHECKSUM),
                    insecure != null ? insecure : s.getBoolean(Knobs.INSECURE), instanceId, modelIdentity,
                    corruptionInjectionProbability != null ? corruptionInjectionProbability : s.getProbability(Knobs.CORRUPTION_INJECTION),
                    s, ticker, meterRegistry, statusUrl);
        }

        private static Duration or(Duration explicit, KVFerrySettings s, Knob knob, long minMillis) {
            return explicit != null ? explicit : s.getMillis(knob, minMillis);
        }
    }

    /** Hides the cluster token, so the config can be logged or put in a message. */
    @Override
    public String toString() {
        return Redacted.toString(this, Set.of("authToken"));
    }
}
