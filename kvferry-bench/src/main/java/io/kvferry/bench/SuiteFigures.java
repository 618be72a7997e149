package io.kvferry.bench;

import io.kvferry.testkit.CpuMeter;
import io.kvferry.testkit.MicrosHistogram;
import io.kvferry.testkit.RoleReport;
import io.kvferry.testkit.RoomMemoryProbe;

import com.fasterxml.jackson.annotation.JsonInclude;
import com.fasterxml.jackson.annotation.JsonProperty;
import org.HdrHistogram.Histogram;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The benchmark suite's columns of a run (issue 16), flattened into {@link BenchResult}'s JSON: the
 * nixlbench columns, the open-loop figures and the room-rate figures. docs/PERFORMANCE.md defines each.
 *
 * @param pages           fragmented or contiguous
 * @param hugePages       the pools' memory: "on (thp MODE)" (private pools advised for transparent huge pages; MODE is the
 *                        kernel's setting) or "off"
 * @param offeredRate     open loop: requests/s offered (null: closed loop)
 * @param achievedRate    measured requests that succeeded ÷ the decode's measured window (from the arrival
 *                        schedule's origin, a mean gap before the first arrival, to the last conclusion)
 * @param roomsPerSecond  the same figure under the room-rate name (one room = one request on all its ranks)
 * @param requestLatencyMs arrival → Success on the decode: avg, p50, p99, p999, max (HdrHistogram, 3 digits)
 * @param blockBytes      nixlbench "block size": mean bytes per data-path op
 * @param batchSize       nixlbench "batch size": data-path ops per request (all prefill ranks)
 * @param avgLatencyMs    nixlbench "avg latency": mean arrival → Success
 * @param prepareMs       decode: KVReceiver.init → sendMetadata returned; avg and p99
 * @param postMs          prefill: time inside KVSender.init and send; avg and p99
 * @param transferMs      prefill: last send returned → Success; avg and p99
 * @param cpuUsPerRoom    CPU µs per measured room per side ({@code prefill}, {@code decode}) and {@code method}:
 *                        process (each role's JVM over its measured window, GC and JIT included) or threads (one
 *                        JVM: per Java thread group over the decode's window; also {@code other}, Java threads of
 *                        neither role, and {@code process}, the whole JVM with GC and JIT, which no thread group has)
 * @param roomMemory      with --room-memory: bytes per in-flight room by scope (prefill, decode, or both in one JVM)
 * @param pollLagMs       per role: a room's Success or Failed to its scheduler's first poll that returned it, ms
 *                        ({@code avg}, {@code p50}, {@code p99}; {@link PollLagFigures}), every polled room
 */
@JsonInclude(JsonInclude.Include.NON_NULL)
public record SuiteFigures(
        String pages,
        @JsonProperty("huge_pages") String hugePages,
        @JsonProperty("offered_rate") Double offeredRate,
        @JsonProperty("achieved_rate") double achievedRate,
        @JsonProperty("rooms_per_s") double roomsPerSecond,
        @JsonProperty("request_latency_ms") Map<String, Double> requestLatencyMs,
        @JsonProperty("block_bytes") long blockBytes,
        @JsonProperty("batch_size") double batchSize,
        @JsonProperty("avg_latency_ms") double avgLatencyMs,
        @JsonProperty("prepare_ms") Map<String, Double> prepareMs,
        @JsonProperty("post_ms") Map<String, Double> postMs,
        @JsonProperty("transfer_ms") Map<String, Double> transferMs,
        @JsonProperty("cpu_us_per_room") Map<String, Object> cpuUsPerRoom,
        @JsonProperty("room_memory") Map<String, RoomMemoryProbe.Result> roomMemory,
        @JsonProperty("poll_lag_ms") Map<String, Map<String, Double>> pollLagMs) {

    /** The same figures with the pools' memory named. */
    SuiteFigures withHugePages(String label) {
        return new SuiteFigures(pages, label, offeredRate, achievedRate, roomsPerSecond, requestLatencyMs, blockBytes, batchSize,
                avgLatencyMs, prepareMs, postMs, transferMs, cpuUsPerRoom, roomMemory, pollLagMs);
    }

    /** The same figures with the schedulers' poll lag (null or empty: not known). */
    SuiteFigures withPollLag(Map<String, Map<String, Double>> lag) {
        return new SuiteFigures(pages, hugePages, offeredRate, achievedRate, roomsPerSecond, requestLatencyMs, blockBytes, batchSize,
                avgLatencyMs, prepareMs, postMs, transferMs, cpuUsPerRoom, roomMemory, lag == null || lag.isEmpty() ? null : lag);
    }

    /**
     * Merges the role reports' figures.
     *
     * @param measured       measured requests (warm-up left out)
     * @param succeededMeasured measured requests that succeeded
     * @param elapsedSeconds the decode's measured window
     * @param processes      roles ran as separate JVMs (CPU per process) or in one (CPU per thread group)
     * @param embeddedProbe  one JVM: the probe shared by both roles (null otherwise)
     */
    static SuiteFigures merge(List<RoleReport> reports, String pages, double offeredRate, int measured, int succeededMeasured,
                              double elapsedSeconds, long datapathBytes, long datapathOps, boolean processes,
                              RoomMemoryProbe embeddedProbe) {
        Histogram request = new Histogram(3), prepare = new Histogram(3), post = new Histogram(3), transfer = new Histogram(3);
        CpuMeter.Window prefillCpu = null, decodeCpu = null;
        Map<String, RoomMemoryProbe.Result> memory = new LinkedHashMap<>();
        for (RoleReport r : reports) {
            record(request, r.figures().requestMicros());
            record(prepare, r.figures().prepareMicros());
            record(post, r.figures().postMicros());
            record(transfer, r.figures().transferMicros());
            // Rank 0 of each role: its process (or, in one JVM, its thread groups) over its window.
            if (r.rank() == 0 && r.role().equals("prefill") && prefillCpu == null) prefillCpu = r.figures().cpu();
            if (r.rank() == 0 && r.role().equals("decode") && decodeCpu == null) decodeCpu = r.figures().cpu();
            if (r.figures().roomMemory() != null) memory.put(r.figures().roomMemory().scope(), r.figures().roomMemory());
        }
        if (embeddedProbe != null && embeddedProbe.result() != null) memory.put("both", embeddedProbe.result());
        double rate = elapsedSeconds > 0 ? succeededMeasured / elapsedSeconds : 0;
        Map<String, Object> cpu = new LinkedHashMap<>();
        if (measured > 0) {
            if (processes) {
                cpu.put("prefill", prefillCpu == null || prefillCpu.processNanos() < 0 ? null
                        : round(prefillCpu.processNanos() / 1000.0 / measured));
                cpu.put("decode", decodeCpu == null || decodeCpu.processNanos() < 0 ? null
                        : round(decodeCpu.processNanos() / 1000.0 / measured));
                cpu.put("method", "process");
            } else if (decodeCpu != null) {
                cpu.put("prefill", round(decodeCpu.prefillNanos() / 1000.0 / measured));
                cpu.put("decode", round(decodeCpu.decodeNanos() / 1000.0 / measured));
                cpu.put("other", round(decodeCpu.otherNanos() / 1000.0 / measured));
                // GC and JIT threads are not Java threads: only the whole process's figure includes them.
                cpu.put("process", decodeCpu.processNanos() < 0 ? null : round(decodeCpu.processNanos() / 1000.0 / measured));
                cpu.put("method", "threads");
            }
        }
        return new SuiteFigures(pages, null, offeredRate > 0 ? offeredRate : null, round(rate), round(rate),
                percentiles(request, true), datapathOps > 0 ? datapathBytes / datapathOps : 0,
                succeededMeasured > 0 ? round(datapathOps / (double) succeededMeasured) : 0,
                request.getTotalCount() == 0 ? 0 : round(request.getMean() / 1000.0),
                avgP99(prepare), avgP99(post), avgP99(transfer), cpu, memory.isEmpty() ? null : memory, null);
    }

    private static void record(Histogram h, MicrosHistogram micros) {
        micros.addTo(h);
    }

    private static Map<String, Double> percentiles(Histogram h, boolean full) {
        Map<String, Double> m = new LinkedHashMap<>();
        boolean empty = h.getTotalCount() == 0;
        m.put("avg", empty ? 0 : round(h.getMean() / 1000.0));
        m.put("p50", empty ? 0 : h.getValueAtPercentile(50) / 1000.0);
        m.put("p99", empty ? 0 : h.getValueAtPercentile(99) / 1000.0);
        if (full) {
            m.put("p999", empty ? 0 : h.getValueAtPercentile(99.9) / 1000.0);
            m.put("max", empty ? 0 : h.getMaxValue() / 1000.0);
        }
        return m;
    }

    private static Map<String, Double> avgP99(Histogram h) {
        Map<String, Double> m = new LinkedHashMap<>();
        boolean empty = h.getTotalCount() == 0;
        // To the nanosecond: a phase under a microsecond for most rooms (post, on an idle machine) averages below 0.0005 ms,
        // which rounding to the microsecond showed as 0 though its p99 read several microseconds.
        m.put("avg", empty ? 0 : Math.round(h.getMean() * 1000) / 1e6);
        m.put("p99", empty ? 0 : h.getValueAtPercentile(99) / 1000.0);
        return m;
    }

    private static double round(double v) {
        return Math.round(v * 1000) / 1000.0;
    }
}
