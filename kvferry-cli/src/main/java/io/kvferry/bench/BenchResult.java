package io.kvferry.bench;

import com.fasterxml.jackson.annotation.JsonProperty;

import java.util.List;
import java.util.Map;

/**
 * The summary of a bench run; {@code --json} prints it as the last line.
 *
 * @param gbps              verified KV bytes per second, in GB/s (10^9 bytes per second)
 * @param memcpyGbps        single-thread MemorySegment.copy of the same item sizes, same run, GB/s
 * @param ratioToMemcpy     gbps / memcpy_gbps
 * @param iperf3Gbps        single-stream iperf3 over loopback, same run (null unless asked for and installed)
 * @param ratioToIperf3     gbps / iperf3_gbps
 */
public record BenchResult(
        String model, String transport, boolean processes,
        @JsonProperty("prefill_tp") int prefillTp,
        @JsonProperty("decode_tp") int decodeTp,
        @JsonProperty("prefill_pp") int prefillPp,
        @JsonProperty("decode_pp") int decodePp,
        @JsonProperty("prefill_cp") int prefillCp,
        @JsonProperty("prefill_dp") int prefillDp,
        boolean mla,
        @JsonProperty("kv_heads") int kvHeads,
        int requests, int succeeded, int failed, int corrupted,
        @JsonProperty("verified_bytes") long verifiedBytes,
        @JsonProperty("elapsed_s") double elapsedSeconds,
        double gbps,
        @JsonProperty("latency_ms") Map<String, Double> latencyMs,
        @JsonProperty("memcpy_gbps") double memcpyGbps,
        @JsonProperty("ratio_to_memcpy") double ratioToMemcpy,
        @JsonProperty("iperf3_gbps") Double iperf3Gbps,
        @JsonProperty("ratio_to_iperf3") Double ratioToIperf3,
        @JsonProperty("first_failures") List<String> firstFailures) {}
