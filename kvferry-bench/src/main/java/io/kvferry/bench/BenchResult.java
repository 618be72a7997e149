package io.kvferry.bench;

import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.annotation.JsonUnwrapped;

import java.util.List;
import java.util.Map;

/**
 * The summary of a bench run; {@code --json} prints it as the last line.
 *
 * @param requests          requests run, warm-up ones included (succeeded + failed)
 * @param failed            requests that did not succeed on every rank: failed, hung, or corrupted (those are counted
 *                          in failed too, and again in corrupted)
 * @param warmup            of those, warm-up requests: verified, counted in succeeded/failed/corrupted, left
 *                          out of verified_bytes, elapsed_s, gbps, latency and the data-path figures
 * @param gbps              verified KV bytes per second, in GB/s (10^9 bytes per second)
 * @param memcpyGbps        single-thread MemorySegment.copy of the same item sizes, same run, GB/s
 * @param ratioToMemcpy     gbps / memcpy_gbps
 * @param iperf3Gbps        single-stream iperf3 over loopback, same run (null unless asked for and installed)
 * @param ratioToIperf3     gbps / iperf3_gbps
 * @param ratioTransferToIperf3 transfer_gbps / iperf3_gbps: the data path against one TCP stream, without the bench's
 *                          fill and verification
 * @param tcpStripes        TCP connections per decode link (tcp data path)
 * @param checksum          the checksum mode the bench asked for (off | sampled | full); a link uses the stronger
 *                          of its two sides' modes, and both sides of a bench use this one
 * @param dataPaths         succeeded requests per data path they actually took (e.g. {"shm": 64})
 * @param datapathGbps      bytes the prefill data paths moved ÷ time the transfer workers spent inside them (summed
 *                          over workers): the transport's own per-worker bandwidth, without the bench's pattern fill
 *                          and verification (an shm write of ≥ 8 MiB may use several copy threads: set
 *                          KVFERRY_SHM_COPY_THREADS=1 to compare one thread with the single-thread memcpy baseline)
 * @param transferGbps      bytes the prefill data paths moved ÷ wall time during which at least one transfer worker
 *                          was inside a data path (per prefill rank, summed over ranks): the transport's bandwidth
 *                          with all its workers, while it had data to move
 * @param ratioTransferToMemcpy transfer_gbps / memcpy_gbps
 * @param pairedMemcpyGbps  with --paired-memcpy: a single-thread copy of each measured request's source pages, timed
 *                          just before its transfer (null otherwise)
 * @param ratioDatapathToPairedMemcpy datapath_gbps / paired_memcpy_gbps
 * @param datapathBytes     bytes the prefill data paths moved for the measured requests (warm-up left out)
 * @param datapathOpBytes   mean bytes per data-path op (a run of pages of one buffer, an aux row, a state slot)
 * @param ratioDatapathToMemcpy datapath_gbps / memcpy_gbps
 * @param ucxPerftestGbps   ucx_perftest -t ucp_put_bw at datapath_op_bytes with the bench's UCX_TLS and
 *                          error-handling mode, same run (ucx only; null when not measured)
 * @param ucxPerftestRoundsGbps each ucx_perftest round's GB/s; ucx_perftest_gbps is their median
 * @param ucxPerftestCommand the ucx_perftest client command line that gave ucx_perftest_gbps
 * @param ratioTransferToUcxPerftest transfer_gbps / ucx_perftest_gbps: ucx_perftest is one stream, and one UCX engine
 *                          thread per prefill rank posts every worker's puts, so the transport's bandwidth is
 *                          transfer_gbps (equal to datapath_gbps with one transfer worker)
 * @param metricsDump       with --metrics-dump: the file holding the final scrape of every role (null otherwise)
 * @param suite             the benchmark suite's columns ({@link SuiteFigures}), flattened into this object's JSON
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
        int requests, int warmup, int succeeded, int failed, int corrupted,
        @JsonProperty("verified_bytes") long verifiedBytes,
        @JsonProperty("elapsed_s") double elapsedSeconds,
        double gbps,
        @JsonProperty("latency_ms") Map<String, Double> latencyMs,
        @JsonProperty("memcpy_gbps") double memcpyGbps,
        @JsonProperty("ratio_to_memcpy") double ratioToMemcpy,
        @JsonProperty("iperf3_gbps") Double iperf3Gbps,
        @JsonProperty("ratio_to_iperf3") Double ratioToIperf3,
        @JsonProperty("ratio_transfer_to_iperf3") Double ratioTransferToIperf3,
        @JsonProperty("tcp_stripes") int tcpStripes,
        String checksum,
        @JsonProperty("data_paths") Map<String, Long> dataPaths,
        @JsonProperty("datapath_gbps") double datapathGbps,
        @JsonProperty("transfer_gbps") double transferGbps,
        @JsonProperty("ratio_transfer_to_memcpy") double ratioTransferToMemcpy,
        @JsonProperty("paired_memcpy_gbps") Double pairedMemcpyGbps,
        @JsonProperty("ratio_datapath_to_paired_memcpy") Double ratioDatapathToPairedMemcpy,
        @JsonProperty("datapath_bytes") long datapathBytes,
        @JsonProperty("datapath_op_bytes") long datapathOpBytes,
        @JsonProperty("ratio_datapath_to_memcpy") double ratioDatapathToMemcpy,
        @JsonProperty("ucx_perftest_gbps") Double ucxPerftestGbps,
        @JsonProperty("ucx_perftest_rounds_gbps") List<Double> ucxPerftestRoundsGbps,
        @JsonProperty("ratio_transfer_to_ucx_perftest") Double ratioTransferToUcxPerftest,
        @JsonProperty("ucx_perftest_command") String ucxPerftestCommand,
        @JsonProperty("first_failures") List<String> firstFailures,
        @JsonProperty("metrics_dump") String metricsDump,
        @JsonUnwrapped SuiteFigures suite) {}
