package io.kvferry.bench;

import io.kvferry.api.DisaggregationMode;

/**
 * Everything a bench run or a role process needs to agree on.
 *
 * @param transport       tcp, inproc or fake
 * @param prefillTp       attention-TP size of the prefill instance
 * @param decodeTp        attention-TP size of the decode instance
 * @param prefillPp       pipeline stages of the prefill instance
 * @param decodePp        pipeline stages of the decode instance (1 or prefillPp)
 * @param transferWorkers prefill transfer worker threads per rank; 0 = the library default
 */
public record BenchConfig(ModelShape shape, Workload workload, String transport, int prefillTp, int decodeTp,
                          int prefillPp, int decodePp, String authToken, int transferWorkers) {
    /** Equal TP on both sides, library defaults. */
    public BenchConfig(ModelShape shape, Workload workload, String transport, int tp, String authToken) {
        this(shape, workload, transport, tp, tp, 1, 1, authToken, 0);
    }

    /** Given TPs, no PP. */
    public BenchConfig(ModelShape shape, Workload workload, String transport, int prefillTp, int decodeTp, String authToken,
                       int transferWorkers) {
        this(shape, workload, transport, prefillTp, decodeTp, 1, 1, authToken, transferWorkers);
    }

    public int pp(DisaggregationMode mode) {
        return mode == DisaggregationMode.PREFILL ? prefillPp : decodePp;
    }

    public int tp(DisaggregationMode mode) {
        return mode == DisaggregationMode.PREFILL ? prefillTp : decodeTp;
    }
}
