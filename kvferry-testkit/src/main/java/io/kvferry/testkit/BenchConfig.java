package io.kvferry.testkit;


import io.kvferry.api.ChecksumMode;
import io.kvferry.api.DisaggregationMode;

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
 * @param transferWorkers prefill transfer worker threads per rank; 0 = the library default
 * @param tcpStripes      TCP connections per decode link for data (1 = the control connection only)
 * @param pairedMemcpy    time a single-thread copy of each measured request's source pages just before its transfer
 * @param checksum        what both roles' managers verify (KVManagerConfig.checksum)
 */
public record BenchConfig(ModelShape shape, Workload workload, String transport, int prefillTp, int decodeTp,
                          int prefillPp, int decodePp, int prefillCp, boolean allCpRanks, int prefillDp,
                          String authToken, int transferWorkers, long bootstrapTimeoutMillis, long deadlineMillis,
                          Faults faults, int tcpStripes, boolean pairedMemcpy, ChecksumMode checksum) {
    public BenchConfig {
        if (tcpStripes < 1) tcpStripes = 1;
        if (checksum == null) checksum = ChecksumMode.OFF;
    }

    public BenchConfig(ModelShape shape, Workload workload, String transport, int prefillTp, int decodeTp,
                       int prefillPp, int decodePp, int prefillCp, boolean allCpRanks, int prefillDp,
                       String authToken, int transferWorkers, long bootstrapTimeoutMillis, long deadlineMillis,
                       Faults faults, int tcpStripes, boolean pairedMemcpy) {
        this(shape, workload, transport, prefillTp, decodeTp, prefillPp, decodePp, prefillCp, allCpRanks, prefillDp, authToken,
                transferWorkers, bootstrapTimeoutMillis, deadlineMillis, faults, tcpStripes, pairedMemcpy, ChecksumMode.OFF);
    }

    /** The same run with checksums verified in this mode. */
    public BenchConfig withChecksum(ChecksumMode mode) {
        return new BenchConfig(shape, workload, transport, prefillTp, decodeTp, prefillPp, decodePp, prefillCp, allCpRanks,
                prefillDp, authToken, transferWorkers, bootstrapTimeoutMillis, deadlineMillis, faults, tcpStripes, pairedMemcpy, mode);
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
                prefillDp, authToken, transferWorkers, bootstrapTimeoutMillis, deadlineMillis, faults, tcpStripes, on, checksum);
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
                prefillDp, authToken, transferWorkers, bootstrapTimeoutMillis, deadlineMillis, faults, n, pairedMemcpy, checksum);
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
                prefillDp, authToken, transferWorkers, bootstrapTimeoutMillis, deadlineMillis, f, tcpStripes, pairedMemcpy, checksum);
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
                prefillDp, authToken, transferWorkers, bootstrapTimeoutMs, deadlineMs, faults, tcpStripes, pairedMemcpy, checksum);
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
}
