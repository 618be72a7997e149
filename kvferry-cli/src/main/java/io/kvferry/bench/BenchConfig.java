package io.kvferry.bench;

/**
 * Everything a bench run or a role process needs to agree on.
 *
 * @param transport tcp, inproc or fake
 * @param tp        attention-TP size (same on both sides in this version)
 */
public record BenchConfig(ModelShape shape, Workload workload, String transport, int tp, String authToken) {}
