package io.kvferry.bench;

/**
 * Everything a bench run or a role process needs to agree on.
 *
 * @param transport tcp, inproc or fake
 * @param tp        attention-TP size (same on both sides in this version)
 * @param transferWorkers prefill transfer worker threads per rank; 0 = the library default
 */
public record BenchConfig(ModelShape shape, Workload workload, String transport, int tp, String authToken,
                          int transferWorkers) {
    /** With the library's default number of prefill transfer workers. */
    public BenchConfig(ModelShape shape, Workload workload, String transport, int tp, String authToken) {
        this(shape, workload, transport, tp, authToken, 0);
    }
}
