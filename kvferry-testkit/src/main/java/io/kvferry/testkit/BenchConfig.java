package io.kvferry.testkit;


import io.kvferry.api.ChecksumMode;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.Redacted;

import java.util.Set;

/**
 * Everything a bench run or a role process needs to agree on.
 *
 * @param transport       tcp, inproc, shm, ucx, auto or fake
 * @param prefillTp       attention-TP size of the prefill instance
 * @param decodeTp        attention-TP size of the decode instance
 * @param prefillPp       pipeline stages of the prefill instance
 * @param decodePp        pipeline stages of the decode instance (1 or prefillPp)
 * @param prefillCp       context-parallel ranks of the prefill instance
 * @param allCpRanks      every CP rank sends its share (else CP ranks other than 0 are dummies)
 * @param prefillDp       attention-DP groups of the prefill instance (requests go to group room % dp)
 * @param bootstrapTimeoutMillis prefill bootstrap timeout; 0 = library default (300 s)
 * @param deadlineMillis  drivers stop after this long and report unfinished requests as hung; 0 = never
 * @param transferWorkers prefill transfer workers admitted to one decode link at a time, per rank; 0 = the library default
 * @param tcpStripes      TCP connections per decode link for data (1 = the control connection only)
 * @param pairedMemcpy    time a single-thread copy of each measured request's source pages just before its transfer
 * @param checksum        what both roles' managers verify (KVManagerConfig.checksum)
 * @param suite           the benchmark-suite settings (page layout, open-loop rate, room-memory probe)
 */
public record BenchConfig(ModelShape shape, Workload workload, String transport, int prefillTp, int decodeTp,
                          int prefillPp, int decodePp, int prefillCp, boolean allCpRanks, int prefillDp,
                          String authToken, int transferWorkers, long bootstrapTimeoutMillis, long deadlineMillis,
                          Faults faults, int tcpStripes, boolean pairedMemcpy, ChecksumMode checksum, Suite suite) {
    public BenchConfig {
        if (tcpStripes < 1) tcpStripes = 1;
        if (checksum == null) checksum = ChecksumMode.OFF;
        if (suite == null) suite = Suite.DEFAULT;
        if (suite.probeRooms() > 0 && suite.probeRooms() >= workload.warmup()) {
            // At least one ordinary warm-up first: connections, JIT and first-touch costs stay out of the baseline.
            throw new IllegalArgumentException("the room-memory probe's " + suite.probeRooms()
                    + " rooms must be the last of the warm-up requests, after at least one other (--warmup >= 1), got "
                    + workload.warmup() + " warm-up requests in all");
        }
        if (suite.probeRooms() > workload.concurrency()) {
            throw new IllegalArgumentException("the room-memory probe parks " + suite.probeRooms()
                    + " rooms but only --concurrency " + workload.concurrency() + " may be in flight");
        }
        if (suite.probeRooms() > 0 && prefillDp > 1) {
            throw new IllegalArgumentException("--room-memory needs --prefill-dp 1 (each DP group would park a share)");
        }
    }

    /** Without the benchmark suite's settings ({@link Suite#DEFAULT}). */
    public BenchConfig(ModelShape shape, Workload workload, String transport, int prefillTp, int decodeTp,
                       int prefillPp, int decodePp, int prefillCp, boolean allCpRanks, int prefillDp,
                       String authToken, int transferWorkers, long bootstrapTimeoutMillis, long deadlineMillis,
                       Faults faults, int tcpStripes, boolean pairedMemcpy, ChecksumMode checksum) {
        this(shape, workload, transport, prefillTp, decodeTp, prefillPp, decodePp, prefillCp, allCpRanks, prefillDp,
                authToken, transferWorkers, bootstrapTimeoutMillis, deadlineMillis, faults, tcpStripes, pairedMemcpy,
                checksum, Suite.DEFAULT);
    }

    /** Checksums off, no benchmark-suite settings. */
    public BenchConfig(ModelShape shape, Workload workload, String transport, int prefillTp, int decodeTp,
                       int prefillPp, int decodePp, int prefillCp, boolean allCpRanks, int prefillDp,
                       String authToken, int transferWorkers, long bootstrapTimeoutMillis, long deadlineMillis,
                       Faults faults, int tcpStripes, boolean pairedMemcpy) {
        this(shape, workload, transport, prefillTp, decodeTp, prefillPp, decodePp, prefillCp, allCpRanks, prefillDp,
                authToken, transferWorkers, bootstrapTimeoutMillis, deadlineMillis, faults, tcpStripes, pairedMemcpy,
                ChecksumMode.OFF, Suite.DEFAULT);
    }

    /** The same run with checksums verified in this mode. */
    public BenchConfig withChecksum(ChecksumMode mode) {
        return new BenchConfig(shape, workload, transport, prefillTp, decodeTp, prefillPp, decodePp, prefillCp, allCpRanks,
                prefillDp, authToken, transferWorkers, bootstrapTimeoutMillis, deadlineMillis, faults, tcpStripes, pairedMemcpy,
                mode, suite);
    }

    /**
     * Settings of the benchmark suite ({@code kvferry bench --pages/--rate/--room-memory/--sweep}).
     *
     * @param pages          how both roles' pools hand out pages
     * @param ratePerSecond  open loop: measured requests arrive at the decode as a Poisson process of this
     *                       rate (seeded by the workload seed), latency counted from arrival; 0 = closed loop
     *                       (a new request as soon as one of the {@code --concurrency} slots is free)
     * @param probeRooms     room-memory probe: the last this-many warm-up requests are parked in flight on both
     *                       sides while heap and native memory are measured ({@link RoomMemoryProbe}); 0 = off
     * @param hugePages      private pools come from a {@link io.kvferry.memory.HugePageArena} (as a serving engine's
     *                       long-lived KV pool should); false: {@code Arena.ofShared()}
     * @param changeFeed     the drivers poll only what the managers' change feed hands out ({@code --poll feed});
     *                       false: every request in flight on every step, as SGLang's scheduler ({@code --poll sweep})
     */
    public record Suite(PageLayout pages, double ratePerSecond, int probeRooms, boolean hugePages, boolean changeFeed) {
        public static final Suite DEFAULT = new Suite(PageLayout.FRAGMENTED, 0, 0, true, false);

        /** With huge-page pools, sweeping (the defaults). */
        public Suite(PageLayout pages, double ratePerSecond, int probeRooms) {
            this(pages, ratePerSecond, probeRooms, true, false);
        }

        /** The same settings with private pools backed by transparent huge pages or not ({@code --huge-pages}). */
        public Suite withHugePages(boolean on) {
            return new Suite(pages, ratePerSecond, probeRooms, on, changeFeed);
        }

        /** The same settings with the drivers polling through the change feed or sweeping every request ({@code --poll}). */
        public Suite withChangeFeed(boolean on) {
            return new Suite(pages, ratePerSecond, probeRooms, hugePages, on);
        }

        public Suite {
            if (pages == null) pages = PageLayout.FRAGMENTED;
            if (!(ratePerSecond >= 0) || Double.isInfinite(ratePerSecond)) {
                throw new IllegalArgumentException("--rate must be a finite number of requests per second >= 0, got "
                        + ratePerSecond);
            }
            if (probeRooms < 0) throw new IllegalArgumentException("probe rooms must be >= 0, got " + probeRooms);
        }

        public boolean openLoop() {
            return ratePerSecond > 0;
        }
    }

    /** The same run with these suite settings. */
    public BenchConfig withSuite(Suite s) {
        return new BenchConfig(shape, workload, transport, prefillTp, decodeTp, prefillPp, decodePp, prefillCp, allCpRanks,
                prefillDp, authToken, transferWorkers, bootstrapTimeoutMillis, deadlineMillis, faults, tcpStripes,
                pairedMemcpy, checksum, s);
    }

    /** The same run with another request stream (the sweep varies it per point). */
    public BenchConfig withWorkload(Workload w) {
        return new BenchConfig(shape, w, transport, prefillTp, decodeTp, prefillPp, decodePp, prefillCp, allCpRanks,
                prefillDp, authToken, transferWorkers, bootstrapTimeoutMillis, deadlineMillis, faults, tcpStripes,
                pairedMemcpy, checksum, suite);
    }

    /** The same run with another model shape. */
    public BenchConfig withShape(ModelShape m) {
        return new BenchConfig(m, workload, transport, prefillTp, decodeTp, prefillPp, decodePp, prefillCp, allCpRanks,
                prefillDp, authToken, transferWorkers, bootstrapTimeoutMillis, deadlineMillis, faults, tcpStripes,
                pairedMemcpy, checksum, suite);
    }

    /** The same run over another transport. */
    public BenchConfig withTransport(String t) {
        return new BenchConfig(shape, workload, t, prefillTp, decodeTp, prefillPp, decodePp, prefillCp, allCpRanks,
                prefillDp, authToken, transferWorkers, bootstrapTimeoutMillis, deadlineMillis, faults, tcpStripes,
                pairedMemcpy, checksum, suite);
    }

    public BenchConfig(ModelShape shape, Workload workload, String transport, int prefillTp, int decodeTp, int prefillPp,
                       int decodePp, int prefillCp, boolean allCpRanks, int prefillDp, String authToken, int transferWorkers,
                       long bootstrapTimeoutMillis, long deadlineMillis, Faults faults, int tcpStripes) {
        this(shape, workload, transport, prefillTp, decodeTp, prefillPp, decodePp, prefillCp, allCpRanks, prefillDp,
                authToken, transferWorkers, bootstrapTimeoutMillis, deadlineMillis, faults, tcpStripes, false);
    }

    /**
     * The same run with the paired memcpy baseline on: before each measured request's transfer the
     * prefill driver copies the same source pages with one MemorySegment.copy per run into a private
     * scratch region and times it ({@link PairedMemcpy}).
     */
    public BenchConfig withPairedMemcpy(boolean on) {
        return new BenchConfig(shape, workload, transport, prefillTp, decodeTp, prefillPp, decodePp, prefillCp, allCpRanks,
                prefillDp, authToken, transferWorkers, bootstrapTimeoutMillis, deadlineMillis, faults, tcpStripes, on, checksum, suite);
    }

    public BenchConfig(ModelShape shape, Workload workload, String transport, int prefillTp, int decodeTp, int prefillPp,
                       int decodePp, int prefillCp, boolean allCpRanks, int prefillDp, String authToken, int transferWorkers,
                       long bootstrapTimeoutMillis, long deadlineMillis, Faults faults) {
        this(shape, workload, transport, prefillTp, decodeTp, prefillPp, decodePp, prefillCp, allCpRanks, prefillDp,
                authToken, transferWorkers, bootstrapTimeoutMillis, deadlineMillis, faults, 1);
    }

    /** The same run with this many TCP stripes per decode link. */
    public BenchConfig withTcpStripes(int n) {
        return new BenchConfig(shape, workload, transport, prefillTp, decodeTp, prefillPp, decodePp, prefillCp, allCpRanks,
                prefillDp, authToken, transferWorkers, bootstrapTimeoutMillis, deadlineMillis, faults, n, pairedMemcpy, checksum, suite);
    }

    /**
     * Faults the drivers inject (kvferry chaos).
     *
     * @param abortProbability    chance that a driver aborts a request it is working on (each side decides)
     * @param slowDecodeMillis    the decode pauses this long before verifying each request (a slow consumer)
     * @param failureProbability  the library's failure-injection hook (KVManagerConfig), on both sides
     * @param corruptProbability  the library's corruption hook on the prefill (a byte flipped after its digest was taken)
     */
    public record Faults(double abortProbability, long slowDecodeMillis, double failureProbability, double corruptProbability) {
        public static final Faults NONE = new Faults(0, 0, 0, 0);

        public Faults(double abortProbability, long slowDecodeMillis, double failureProbability) {
            this(abortProbability, slowDecodeMillis, failureProbability, 0);
        }
    }

    /** Without injected faults. */
    public BenchConfig(ModelShape shape, Workload workload, String transport, int prefillTp, int decodeTp, int prefillPp,
                       int decodePp, int prefillCp, boolean allCpRanks, int prefillDp, String authToken, int transferWorkers,
                       long bootstrapTimeoutMillis, long deadlineMillis) {
        this(shape, workload, transport, prefillTp, decodeTp, prefillPp, decodePp, prefillCp, allCpRanks, prefillDp,
                authToken, transferWorkers, bootstrapTimeoutMillis, deadlineMillis, Faults.NONE);
    }

    /** The same run with injected faults. */
    public BenchConfig withFaults(Faults f) {
        return new BenchConfig(shape, workload, transport, prefillTp, decodeTp, prefillPp, decodePp, prefillCp, allCpRanks,
                prefillDp, authToken, transferWorkers, bootstrapTimeoutMillis, deadlineMillis, f, tcpStripes, pairedMemcpy, checksum, suite);
    }

    /** Without fault-harness settings (library timeouts, no deadline). */
    public BenchConfig(ModelShape shape, Workload workload, String transport, int prefillTp, int decodeTp, int prefillPp,
                       int decodePp, int prefillCp, boolean allCpRanks, int prefillDp, String authToken, int transferWorkers) {
        this(shape, workload, transport, prefillTp, decodeTp, prefillPp, decodePp, prefillCp, allCpRanks, prefillDp,
                authToken, transferWorkers, 0, 0);
    }

    /** The same run with a prefill bootstrap timeout and a driver deadline (for fault injection). */
    public BenchConfig withFaultTimeouts(long bootstrapTimeoutMs, long deadlineMs) {
        return new BenchConfig(shape, workload, transport, prefillTp, decodeTp, prefillPp, decodePp, prefillCp, allCpRanks,
                prefillDp, authToken, transferWorkers, bootstrapTimeoutMs, deadlineMs, faults, tcpStripes, pairedMemcpy, checksum, suite);
    }

    /** Given TP and PP; no CP or DP. */
    public BenchConfig(ModelShape shape, Workload workload, String transport, int prefillTp, int decodeTp, int prefillPp,
                       int decodePp, String authToken, int transferWorkers) {
        this(shape, workload, transport, prefillTp, decodeTp, prefillPp, decodePp, 1, false, 1, authToken, transferWorkers);
    }

    /** Equal TP on both sides, library defaults. */
    public BenchConfig(ModelShape shape, Workload workload, String transport, int tp, String authToken) {
        this(shape, workload, transport, tp, tp, 1, 1, 1, false, 1, authToken, 0);
    }

    /** Given TPs, no PP. */
    public BenchConfig(ModelShape shape, Workload workload, String transport, int prefillTp, int decodeTp, String authToken,
                       int transferWorkers) {
        this(shape, workload, transport, prefillTp, decodeTp, 1, 1, 1, false, 1, authToken, transferWorkers);
    }

    /** Ranks one role runs: DP groups × CP ranks × PP stages × TP ranks. */
    public int rankCount(DisaggregationMode mode) {
        return mode == DisaggregationMode.PREFILL ? prefillDp * prefillCp * prefillPp * prefillTp : decodePp * decodeTp;
    }

    public int pp(DisaggregationMode mode) {
        return mode == DisaggregationMode.PREFILL ? prefillPp : decodePp;
    }

    public int tp(DisaggregationMode mode) {
        return mode == DisaggregationMode.PREFILL ? prefillTp : decodeTp;
    }

    /** Hides the cluster token, so the config can be logged or put in a message. */
    @Override
    public String toString() {
        return Redacted.toString(this, Set.of("authToken"));
    }
}
