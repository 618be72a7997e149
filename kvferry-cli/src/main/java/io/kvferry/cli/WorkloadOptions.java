package io.kvferry.cli;

import io.kvferry.KVFerry;
import io.kvferry.api.ChecksumMode;
import io.kvferry.api.KVFerrySettings;
import io.kvferry.api.Knobs;
import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.ModelShape;
import io.kvferry.testkit.PageLayout;
import io.kvferry.testkit.Workload;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Locale;
import java.util.TreeSet;

/** Options shared by bench and the role commands: the model shape, the request stream and the transport. */
public final class WorkloadOptions {
    @Option(names = "--model", defaultValue = "llama-3.1-8b",
            description = "Model preset: ${COMPLETION-CANDIDATES}. Default: ${DEFAULT-VALUE}.",
            completionCandidates = ModelNames.class)
    String model;

    @Option(names = "--kv-heads", description = "Override the preset's KV head count.")
    Integer kvHeads;

    @Option(names = "--mla", description = "Treat the model as MLA (one latent buffer per layer).")
    boolean mla;

    @Option(names = "--requests",
            description = "Requests to transfer (measured ones, after the warm-up). Default: 64; kvferry bench without --rate: "
                    + "enough to move 2 GiB (at most 100000) or 16 x --concurrency (at most 200000), whichever is more, at least 64.")
    Integer requests;

    @Option(names = "--prompt-tokens", defaultValue = "1024", description = "Prompt length in tokens. Default: ${DEFAULT-VALUE}.")
    int promptTokens;

    @Option(names = "--warmup",
            description = "Requests run (and verified) before the measured ones, left out of every timing figure "
                    + "(kvferry bench: enough to move 1 GiB, at least 8, at most 50000; kvferry chaos: 0).")
    Integer warmup;

    @Option(names = "--page-size", defaultValue = "16", description = "Tokens per KV page. Default: ${DEFAULT-VALUE}.")
    int pageSize;

    @Option(names = "--chunk-tokens", defaultValue = "256", description = "Chunked-prefill size in tokens. Default: ${DEFAULT-VALUE}.")
    int chunkTokens;

    @Option(names = "--concurrency", defaultValue = "4", description = "Requests in flight per rank. Default: ${DEFAULT-VALUE}.")
    int concurrency;

    @Option(names = "--prefix-every", defaultValue = "8",
            description = "Every n-th request has a decode prefix (0 = never). Default: ${DEFAULT-VALUE}.")
    int prefixEvery;

    @Option(names = "--seed", defaultValue = "42", description = "Seed of rooms, lengths and page layouts. Default: ${DEFAULT-VALUE}.")
    long seed;

    @Option(names = "--transport", defaultValue = "tcp",
            description = "Transfer backend: tcp, inproc (one JVM), shm (same host: decode pools in /dev/shm), ucx (UCX one-sided puts), "
                    + "auto (shm, else ucx, else tcp), fake. Default: ${DEFAULT-VALUE}.")
    String transport;

    @Option(names = "--tcp-stripes",
            description = "TCP connections per decode link carrying data (rooms spread over them). Default: KVFERRY_TCP_STRIPES "
                    + "(or -Dkvferry.tcpStripes, --set), else 1.")
    Integer tcpStripes;

    @Option(names = "--tp", defaultValue = "1",
            description = "Attention-TP size of prefill and decode (each overridable below). Default: ${DEFAULT-VALUE}.")
    int tp;

    @Option(names = "--prefill-tp", description = "Attention-TP size of the prefill instance. Default: --tp.")
    Integer prefillTp;

    @Option(names = "--decode-tp", description = "Attention-TP size of the decode instance. Default: --tp.")
    Integer decodeTp;

    @Option(names = "--prefill-cp", defaultValue = "1", description = "Context-parallel ranks of the prefill instance. Default: ${DEFAULT-VALUE}.")
    int prefillCp;

    @Option(names = "--all-cp-ranks", description = "Every prefill CP rank sends its share of the pages (else only CP rank 0 sends).")
    boolean allCpRanks;

    @Option(names = "--prefill-dp", defaultValue = "1",
            description = "Attention-DP groups of the prefill instance; a request goes to group room %% dp (see --prefill-dp-balance). "
                    + "Default: ${DEFAULT-VALUE}.")
    int prefillDp;

    @Option(names = "--prefill-dp-balance", defaultValue = "follow_bootstrap_room", paramLabel = "follow_bootstrap_room|round_robin",
            description = "With --prefill-dp > 1: follow_bootstrap_room = request goes to group room %% dp, which the decode "
                    + "computes; round_robin = request i goes to group i %% dp, the prefill publishes each room's group in the "
                    + "registry and the decode looks it up (/register_dp_rank, /query_dp_ranks). Default: ${DEFAULT-VALUE}.")
    String prefillDpBalance;

    @Option(names = "--prefill-pp", defaultValue = "1", description = "Pipeline stages of the prefill instance. Default: ${DEFAULT-VALUE}.")
    int prefillPp;

    @Option(names = "--decode-pp", defaultValue = "1",
            description = "Pipeline stages of the decode instance: 1 or --prefill-pp. Default: ${DEFAULT-VALUE}.")
    int decodePp;

    @Option(names = "--paired-memcpy",
            description = "Before each measured request's transfer, time a single-thread copy of the same source pages "
                    + "(paired_memcpy_gbps): a memcpy baseline taken milliseconds from each transfer.")
    boolean pairedMemcpy;

    @Option(names = "--transfer-workers", defaultValue = "0",
            description = "Prefill transfer workers admitted to one decode link at a time, per rank (0 = library default 4). Default: ${DEFAULT-VALUE}.")
    int transferWorkers;

    @Option(names = "--bootstrap-timeout-ms", defaultValue = "0", hidden = true,
            description = "Prefill bootstrap timeout in ms (0 = 300 s default); used by kvferry chaos.")
    long bootstrapTimeoutMs;

    @Option(names = "--deadline-ms", defaultValue = "0", hidden = true,
            description = "Stop after this long and report unfinished requests as hung (0 = never); used by kvferry chaos.")
    long deadlineMs;

    @Option(names = "--abort-prob", defaultValue = "0", hidden = true, description = "Chance a driver aborts a request (chaos).")
    double abortProb;

    @Option(names = "--slow-decode-ms", defaultValue = "0", hidden = true, description = "Decode pause per request (chaos).")
    long slowDecodeMs;

    @Option(names = "--failure-prob", defaultValue = "0", hidden = true, description = "Library failure-injection probability (chaos).")
    double failureProb;

    @Option(names = "--corrupt-prob", defaultValue = "0", hidden = true,
            description = "Chance a room's KV gets one byte flipped on its way (chaos corrupt: the fault proxy on tcp, the "
                    + "prefill's library hook after its digest on one-sided links; default there 0.5).")
    double corruptProb;

    @Option(names = "--checksum",
            description = "Verify transfers against the prefill's CRC32C digests: off, sampled or full. Default: KVFERRY_CHECKSUM "
                    + "(or -Dkvferry.checksum, --set), else off.")
    String checksum;

    /** The cluster token for registry writes and control connections. */
    @Mixin
    AuthTokenOptions auth = new AuthTokenOptions();

    // ---- benchmark suite (issue 16): page layout, open-loop arrivals, room-memory probe

    @Option(names = "--pages", defaultValue = "fragmented",
            description = "Page lists: fragmented (shuffled free lists on both sides, as a busy server) or contiguous "
                    + "(each request's pages consecutive on both sides). Default: ${DEFAULT-VALUE}.")
    String pages;

    @Option(names = "--rate",
            description = "Open loop: measured requests arrive as a Poisson process of this many requests/s (seeded by "
                    + "--seed); latency counts from arrival, waiting for a free --concurrency slot included. Default: closed loop.")
    Double rate;

    @Option(names = "--room-memory",
            description = "Measure heap + native bytes per in-flight room: park --concurrency extra warm-up requests in "
                    + "flight on both sides and measure the JVM(s) before and after (room_memory in the JSON).")
    boolean roomMemory;

    @Option(names = "--huge-pages", defaultValue = "on",
            description = "on: private pools (tcp, ucx; not shm files) are mapped on their own and advised for transparent huge "
                    + "pages (MADV_HUGEPAGE), as a serving engine's long-lived KV pool should be; off: Arena.ofShared(). "
                    + "Default: ${DEFAULT-VALUE}.")
    String hugePages;

    @Option(names = "--poll", defaultValue = "sweep",
            description = "How the drivers find requests that moved: sweep = poll every request in flight on every step, as "
                    + "SGLang's scheduler; feed = poll only what the managers' change feed hands out "
                    + "(KVManager.enableChangeFeed). Default: ${DEFAULT-VALUE}.")
    String poll;

    @Option(names = "--probe-rooms", defaultValue = "0", hidden = true,
            description = "Role processes: the last N of --warmup are the room-memory probe's parked rooms.")
    int probeRooms;

    /** The drivers add the deadline to System.nanoTime(): at most a quarter of the nanoseconds a long holds (73 years). */
    static final long MAX_DEADLINE_MS = Long.MAX_VALUE / 4 / 1_000_000;

    /** Slack on top of the open-loop arrival span before the drivers call what is left hung. */
    static final long OPEN_LOOP_SLACK_MS = 120_000;

    /**
     * @param generateToken make up a random cluster token when none is given (an embedded cluster
     *                      shares it; separate role processes must be given the same one)
     */
    BenchConfig toConfig(boolean generateToken) {
        return toConfig(generateToken, false);
    }

    /**
     * @param benchDefaults size --requests and --warmup, when not given, by the bytes a request moves
     *                      ({@link BenchDefaults}); otherwise 64 requests and no warm-up
     */
    BenchConfig toConfig(boolean generateToken, boolean benchDefaults) {
        if (!KVFerry.BACKENDS.contains(transport)) {
            throw new IllegalArgumentException("--transport must be one of " + KVFerry.BACKENDS + ", got '" + transport + "'");
        }
        // Without the flag, the knob (environment, property or --set) decides, checked as the library checks it.
        KVFerrySettings settings = KVFerrySettings.fromEnvironment();
        int stripes = tcpStripes != null ? tcpStripes : settings.getInt(Knobs.TCP_STRIPES, 1, 64);
        if (stripes < 1 || stripes > 64) throw new IllegalArgumentException("--tcp-stripes must be in [1, 64], got " + stripes);
        ChecksumMode checksumMode = checksum != null ? checksumFlag(checksum) : settings.getChecksum(Knobs.CHECKSUM);
        int p = prefillTp == null ? tp : prefillTp, d = decodeTp == null ? tp : decodeTp;
        if (p < 1 || d < 1) throw new IllegalArgumentException("--tp, --prefill-tp and --decode-tp must be >= 1");
        if (Math.max(p, d) % Math.min(p, d) != 0) {
            throw new IllegalArgumentException("--prefill-tp " + p + " and --decode-tp " + d + " must divide one another");
        }
        ModelShape shape = ModelShape.preset(model);
        if (kvHeads != null) {
            if (kvHeads < 1) throw new IllegalArgumentException("--kv-heads must be >= 1");
            shape = shape.withKvHeads(kvHeads);
        }
        if (mla) shape = shape.withMla(true);
        for (int t : new int[]{p, d}) {
            if (!shape.mla() && shape.kvHeads() % t != 0 && t % shape.kvHeads() != 0) {
                throw new IllegalArgumentException("TP " + t + " and " + shape.kvHeads() + " KV heads must divide one another");
            }
        }
        if (prefillCp < 1 || prefillDp < 1) throw new IllegalArgumentException("--prefill-cp and --prefill-dp must be >= 1");
        if (prefillPp < 1 || shape.layers() % prefillPp != 0) {
            throw new IllegalArgumentException("--prefill-pp " + prefillPp + " must divide the model's " + shape.layers() + " layers");
        }
        if (decodePp != 1 && decodePp != prefillPp) {
            throw new IllegalArgumentException("--decode-pp must be 1 or equal to --prefill-pp (" + prefillPp + "), got " + decodePp);
        }
        if (prefillPp > 1 && !shape.stateBytes().isEmpty()) {
            throw new IllegalArgumentException("model " + shape.name() + " has per-request state; pipeline-parallel state is not "
                    + "split by stage in this version");
        }
        if (!shape.stateBytes().isEmpty() && (RankPoolLimits.STATE_ENTRIES % p != 0 || RankPoolLimits.STATE_ENTRIES % d != 0)) {
            throw new IllegalArgumentException("the bench's state has " + RankPoolLimits.STATE_ENTRIES
                    + " entries per slot: TP must divide it");
        }
        long roomBytes = shape.requestBytes(Math.max(0, promptTokens), d);
        int requests = this.requests != null ? this.requests
                : benchDefaults && rate == null ? BenchDefaults.measuredRequests(roomBytes, concurrency) : BenchDefaults.REQUESTS;
        int warm = warmup != null ? warmup : benchDefaults ? BenchDefaults.warmupRequests(roomBytes) : 0;
        if (warm < 0) throw new IllegalArgumentException("--warmup must be >= 0, got " + warm);
        PageLayout layout = PageLayout.parse(pages);
        if (rate != null && (!(rate >= MIN_RATE) || rate.isInfinite())) {
            // Below it the first arrival alone is hours away (1e-300 ran for ever): a typo, not a benchmark.
            throw new IllegalArgumentException("--rate must be a finite number of requests per second >= " + MIN_RATE + ", got " + rate);
        }
        if (rate != null && requests > MAX_OPEN_LOOP_REQUESTS) {
            // Open loop holds every measured request's arrival time (8 bytes each) for the whole run.
            throw new IllegalArgumentException("--requests " + requests + " is more than an open-loop run (--rate) takes: at most "
                    + MAX_OPEN_LOOP_REQUESTS);
        }
        if (probeRooms < 0) throw new IllegalArgumentException("--probe-rooms must be >= 0, got " + probeRooms);
        boolean huge = switch (hugePages == null ? "on" : hugePages.toLowerCase(Locale.ROOT)) {
            case "on" -> true;
            case "off" -> false;
            default -> throw new IllegalArgumentException("--huge-pages must be on or off, got '" + hugePages + "'");
        };
        boolean changeFeed = switch (poll == null ? "sweep" : poll.toLowerCase(Locale.ROOT)) {
            case "feed" -> true;
            case "sweep" -> false;
            default -> throw new IllegalArgumentException("--poll must be feed or sweep, got '" + poll + "'");
        };
        int probe = probeRooms;
        if (roomMemory) {
            // The probe's parked rooms are extra warm-up requests: verified, left out of every timing figure.
            probe = concurrency;
            warm += concurrency;
        }
        boolean dpRoundRobin = switch (prefillDpBalance) {
            case "follow_bootstrap_room" -> false;
            case "round_robin" -> true;
            default -> throw new IllegalArgumentException("--prefill-dp-balance must be follow_bootstrap_room or round_robin, got '"
                    + prefillDpBalance + "'");
        };
        Workload w = new Workload(requests, promptTokens, pageSize, chunkTokens, concurrency, prefixEvery, seed, warm, dpRoundRobin);
        // 0 means "the default" for both; a negative one was taken as 0 without a word, a huge deadline overflowed the
        // drivers' nanosecond deadline (every request reported at once).
        if (bootstrapTimeoutMs < 0) {
            throw new IllegalArgumentException("--bootstrap-timeout-ms must be >= 0 (0 = the library's default), not " + bootstrapTimeoutMs);
        }
        if (deadlineMs < 0 || deadlineMs > MAX_DEADLINE_MS) {
            throw new IllegalArgumentException("--deadline-ms must be in [0, " + MAX_DEADLINE_MS + "] (0 = none), not " + deadlineMs);
        }
        long deadline = deadlineMs;
        if (rate != null && deadline == 0) {
            // Open loop is bounded in time too: the arrival span twice over plus slack, then what is left is hung.
            deadline = (long) Math.min(MAX_DEADLINE_MS, 2_000.0 * requests / rate + OPEN_LOOP_SLACK_MS);
        }
        String token = auth.token();
        if (token == null || token.isEmpty()) {
            if (!generateToken) {
                throw new IllegalArgumentException("a cluster token is required: set KVFERRY_AUTH_TOKEN or pass --auth-token-file "
                        + "(the registry's write routes fail closed without one)");
            }
            byte[] b = new byte[32];
            new SecureRandom().nextBytes(b);
            token = Base64.getUrlEncoder().withoutPadding().encodeToString(b);
        }
        if (transferWorkers < 0 || transferWorkers > 1024) {
            throw new IllegalArgumentException("--transfer-workers must be in [0, 1024] (0: the library default), got " + transferWorkers);
        }
        // Written as "not inside" so that NaN, which compares false with everything, is refused too.
        if (!(abortProb >= 0 && abortProb <= 1) || !(failureProb >= 0 && failureProb <= 1) || !(corruptProb >= 0 && corruptProb <= 1)
                || slowDecodeMs < 0) {
            throw new IllegalArgumentException("fault probabilities must be in [0, 1] and --slow-decode-ms >= 0, not --abort-prob "
                    + abortProb + " --failure-prob " + failureProb + " --corrupt-prob " + corruptProb + " --slow-decode-ms " + slowDecodeMs);
        }
        if (prefixEvery < 0) throw new IllegalArgumentException("--prefix-every must be >= 0 (0 = never), not " + prefixEvery);
        return new BenchConfig(shape, w, transport, p, d, prefillPp, decodePp, prefillCp, allCpRanks, prefillDp, token,
                transferWorkers, bootstrapTimeoutMs, deadline, new BenchConfig.Faults(abortProb, slowDecodeMs, failureProb, corruptProb),
                stripes, pairedMemcpy, checksumMode, new BenchConfig.Suite(layout, rate == null ? 0 : rate, probe, huge,
                changeFeed));
    }

    /**
     * The bench's defaults, sized by the bytes one request moves. Rooms of a few KiB need tens of
     * thousands of requests before the per-room path is compiled by C2 (measured on the 2-core VM:
     * 32 KiB rooms ran at 9.5k rooms/s after 8 warm-up requests, 19k after 20,000, 25k after 60,000),
     * and as many again to fill a window long enough to time; rooms of hundreds of MiB need a few.
     * A closed loop fills its pipeline after the warm-up and drains it at the end, so the measured
     * requests are also many times the requests in flight (at 10,000 in flight, 65,536 measured
     * requests read 0.73–0.85 of c=64's rate, 200,000 read 0.86–0.93).
     */
    static final class BenchDefaults {
        static final int REQUESTS = 64, MAX_REQUESTS = 100_000, WARMUP = 8, MAX_WARMUP = 50_000;
        static final int WINDOWS_IN_FLIGHT = 16, MAX_REQUESTS_FOR_CONCURRENCY = 200_000;
        static final long MEASURED_BYTES = 2L << 30, WARMUP_BYTES = 1L << 30;

        static int measuredRequests(long roomBytes, int concurrency) {
            long pipelined = Math.min(MAX_REQUESTS_FOR_CONCURRENCY, (long) WINDOWS_IN_FLIGHT * Math.max(0, concurrency));
            return (int) Math.max(pipelined, sized(MEASURED_BYTES, roomBytes, REQUESTS, MAX_REQUESTS));
        }

        static int warmupRequests(long roomBytes) {
            return sized(WARMUP_BYTES, roomBytes, WARMUP, MAX_WARMUP);
        }

        private static int sized(long bytes, long roomBytes, int floor, int cap) {
            if (roomBytes <= 0) return floor; // a bad shape is refused later, with its own message
            return (int) Math.max(floor, Math.min(cap, (bytes + roomBytes - 1) / roomBytes));
        }

        private BenchDefaults() {
        }
    }

    /** Most measured requests of an open-loop run (--rate): their arrival schedule is 80 MB at this many. */
    static final int MAX_OPEN_LOOP_REQUESTS = 10_000_000;

    /** The --checksum flag's mode; a bad word is refused naming the flag (the parser's own words name no flag). */
    private static ChecksumMode checksumFlag(String text) {
        try {
            return ChecksumMode.parse(text);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("--" + e.getMessage());
        }
    }
    /** The slowest open-loop rate (requests per second): 64 arrivals then span about 2 hours. */
    static final double MIN_RATE = 0.01;

    /** Bench pool limits the options are checked against. */
    static final class RankPoolLimits {
        static final int STATE_ENTRIES = 64;
    }

    /** Completion candidates for --model. */
    static final class ModelNames extends ArrayList<String> {
        ModelNames() {
            super(new TreeSet<>(ModelShape.PRESETS.keySet()));
        }
    }
}
