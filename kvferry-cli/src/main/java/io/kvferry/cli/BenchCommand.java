package io.kvferry.cli;

import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.RoleOptions;
import io.kvferry.testkit.RoleRunner;
import io.kvferry.bench.BenchResult;
import io.kvferry.bench.BenchRunner;
import io.kvferry.bench.SuiteFigures;
import io.kvferry.bench.sweep.SweepPlan;
import io.kvferry.bench.sweep.SweepRunner;
import io.kvferry.api.KVFerrySettings;
import io.kvferry.ucx.UcxTransportProvider;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

import java.io.IOException;
import java.nio.file.AccessDeniedException;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.FileSystemException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;

/** The main job: an embedded cluster moving Llama-shaped KV, verified byte for byte. */
@Command(name = "bench", mixinStandardHelpOptions = true,
        description = {"Transfer KV for a stream of requests between a prefill and a decode (bootstrap registry, "
                + "control protocol, real transport), verify every destination byte, and print a summary.",
                "With no options: Llama-3.1-8B shape, 64 requests of ~1024 tokens, TCP over loopback, one JVM."})
public final class BenchCommand implements Callable<Integer> {
    @Mixin
    WorkloadOptions workload;

    @Option(names = "--processes", description = "Run prefill and decode as separate JVMs.")
    boolean processes;

    @Option(names = "--iperf3", description = "Also measure single-stream iperf3 over loopback as the TCP baseline (needs iperf3).")
    boolean iperf3;

    @Option(names = "--json", description = "Print the summary as one JSON object on the last line.")
    boolean json;

    @Option(names = "--metrics-dump", arity = "0..1", fallbackValue = "kvferry-metrics.prom", paramLabel = "FILE",
            description = "Write the final Prometheus scrape of every role to FILE (default name: ${FALLBACK-VALUE}) and name it "
                    + "in the JSON (metrics_dump).")
    Path metricsDump;

    // ---- benchmark suite (issue 16): the sweep

    @Option(names = "--sweep",
            description = "Run the sweep: op size (page size) x transport (tcp, shm, ucx when available) x concurrency, "
                    + "then an offered-load series (--rate); one JSON per point, sweep.csv and PNG charts under --out.")
    boolean sweep;

    @Option(names = "--sweep-quick", description = "A sweep in seconds (tiny model, tcp and inproc, two loads): to try it out.")
    boolean sweepQuick;

    @Option(names = "--out", defaultValue = "bench-sweep",
            description = "Directory the sweep writes to (created). Default: ${DEFAULT-VALUE}.")
    Path out;

    @Spec
    CommandSpec spec;

    @Override
    public Integer call() throws Exception {
        if (!(sweep || sweepQuick) && spec.commandLine().getParseResult().hasMatchedOption("--out")) {
            // Only a sweep writes there: a plain run took --out, ran, and wrote nothing.
            System.err.println("kvferry bench: --out is the directory of a sweep; add --sweep or --sweep-quick (a single run prints its "
                    + "results, --json for a JSON line, --metrics-dump FILE for its metrics)");
            return 2;
        }
        BenchConfig config;
        try {
            config = workload.toConfig(true, true);
        } catch (IllegalArgumentException e) {
            System.err.println("kvferry bench: " + e.getMessage());
            return 2;
        }
        try {
            // Where results go is checked before the run, not found unwritable after it (and its results lost).
            if (metricsDump != null) requireWritableFile("--metrics-dump", metricsDump);
            if (sweep || sweepQuick) requireWritableDirectory("--out", out, out);
            // The knobs as the roles will read them, before any process starts (--set KVFERRY_CONNECT_TIMEOUT_MS=abc).
            RoleRunner.checkSettings(config, RoleOptions.NONE);
        } catch (IllegalArgumentException e) {
            System.err.println("kvferry bench: " + e.getMessage());
            return 2;
        }
        if (sweep || sweepQuick) return runSweep(config);
        if (processes && config.transport().equals("inproc")) {
            System.err.println("kvferry bench: --transport inproc moves memory inside one JVM; it cannot be combined with --processes");
            return 2;
        }
        long perRequest = config.shape().requestBytes(config.workload().promptTokens(), config.decodeTp());
        System.err.printf("[bench] model=%s transport=%s tp=%d->%d requests=%d (+%d warm-up) prompt=%d tokens (~%.1f MiB KV each), "
                        + "page=%d, chunk=%d tokens, concurrency=%d, %s%n",
                config.shape().name(), config.transport(), config.prefillTp(), config.decodeTp(), config.workload().requests(),
                config.workload().warmup(),
                config.workload().promptTokens(), perRequest / 1048576.0, config.workload().pageSize(),
                config.workload().chunkTokens(), config.workload().concurrency(),
                processes ? "separate processes" : "one JVM");
        BenchResult r = new BenchRunner(config, System.err).withMetricsDump(metricsDump).run(processes, iperf3);
        if (r.metricsDump() != null) System.err.println("[bench] metrics of every role written to " + r.metricsDump());
        System.out.printf("requests=%d succeeded=%d failed=%d corrupted=%d verified=%.2f GiB in %.2f s -> %.2f GB/s "
                        + "(memcpy baseline %.2f GB/s, ratio %.2f); latency p50=%.1f ms p99=%.1f ms%n",
                r.requests(), r.succeeded(), r.failed(), r.corrupted(), r.verifiedBytes() / 1073741824.0,
                r.elapsedSeconds(), r.gbps(), r.memcpyGbps(), r.ratioToMemcpy(), r.latencyMs().get("p50"),
                r.latencyMs().get("p99"));
        if (r.iperf3Gbps() != null) {
            System.out.printf("iperf3 loopback baseline %.2f GB/s, ratio %.2f%s%n", r.iperf3Gbps(), r.ratioToIperf3(),
                    r.ratioTransferToIperf3() == null ? "" : String.format(" (transfer_gbps ratio %.2f)", r.ratioTransferToIperf3()));
        }
        if (r.datapathGbps() > 0) {
            System.out.printf("data path %s: %.2f GB/s per transfer worker (ratio to memcpy %.2f), %.2f GB/s with all "
                            + "workers (ratio %.2f), mean op %d bytes%n",
                    r.dataPaths().keySet(), r.datapathGbps(), r.ratioDatapathToMemcpy(), r.transferGbps(),
                    r.ratioTransferToMemcpy(), r.datapathOpBytes());
            if (r.pairedMemcpyGbps() != null) {
                System.out.printf("paired memcpy %.2f GB/s, data path ratio %.2f%n", r.pairedMemcpyGbps(),
                        r.ratioDatapathToPairedMemcpy());
            }
        }
        if (r.ucxPerftestGbps() != null) {
            System.out.printf("ucx_perftest baseline %.2f GB/s (median of %s; %s), transfer ratio %.2f%n", r.ucxPerftestGbps(),
                    r.ucxPerftestRoundsGbps(), r.ucxPerftestCommand(), r.ratioTransferToUcxPerftest());
        }
        printSuiteSummary(r);
        for (String f : r.firstFailures()) System.out.println("  failure: " + f);
        if (json) System.out.println(BenchRunner.toJson(r));
        return r.failed() == 0 && r.corrupted() == 0 ? 0 : 1;
    }

    /**
     * A file the run will write: not a directory, not read-only, its directory created when missing and writable.
     *
     * @throws IllegalArgumentException naming the option, the file and what is wrong
     */
    static void requireWritableFile(String option, Path file) {
        if (Files.isDirectory(file)) throw new IllegalArgumentException(option + " " + file + " is a directory, not a file");
        if (Files.exists(file) && !Files.isWritable(file)) throw new IllegalArgumentException(option + " " + file + " is not writable");
        Path parent = file.toAbsolutePath().getParent();
        if (parent != null) requireWritableDirectory(option, file, parent);
        // isWritable is true for root nearly everywhere (/proc too), where the write after the run then failed with a
        // stack trace and the results were lost: open the file for writing now, and leave no trace of the try.
        boolean existed = Files.exists(file);
        try (var ignored = Files.newByteChannel(file, StandardOpenOption.CREATE, StandardOpenOption.WRITE)) {
            // opened: it can be written
        } catch (IOException e) {
            String why = e instanceof AccessDeniedException ? "permission denied"
                    : e instanceof NoSuchFileException ? "that file system makes no such file"
                    : e instanceof FileSystemException f && f.getReason() != null ? f.getReason() : e.toString();
            throw new IllegalArgumentException(option + " " + file + ": cannot write it: " + why);
        } finally {
            if (!existed) {
                try {
                    Files.deleteIfExists(file);
                } catch (IOException ignored) {
                    // it was not made
                }
            }
        }
    }

    /**
     * A directory the run will write into, created (with its parents) when missing.
     *
     * @param given what the user gave for the option (the file or the directory), named in the error
     * @throws IllegalArgumentException naming the option, what was given and what is wrong
     */
    static void requireWritableDirectory(String option, Path given, Path dir) {
        try {
            Files.createDirectories(dir);
        } catch (FileSystemException e) {
            String where = e.getFile() != null ? e.getFile() : dir.toString();
            String why = e instanceof FileAlreadyExistsException ? "exists and is not a directory"
                    : e instanceof AccessDeniedException ? "permission denied"
                    : e instanceof NoSuchFileException ? "that file system makes no such directory"
                    : e.getReason() != null ? e.getReason() : e.toString();
            throw new IllegalArgumentException(option + " " + given + ": cannot create directory " + where + ": " + why);
        } catch (IOException e) {
            throw new IllegalArgumentException(option + " " + given + ": cannot create directory " + dir + ": " + e.getMessage());
        }
        if (!Files.isWritable(dir)) throw new IllegalArgumentException(option + " " + given + ": directory " + dir + " is not writable");
    }

    // ---- benchmark suite (issue 16): the sweep

    /** Runs the sweep; the command line's TP, seed, --pages, --transfer-workers and --processes apply to every point. */
    private int runSweep(BenchConfig base) throws Exception {
        SweepPlan.Grid grid;
        if (sweepQuick) {
            grid = SweepPlan.Grid.quick();
        } else {
            List<String> transports = new ArrayList<>(List.of("tcp", "shm"));
            String noUcx = new UcxTransportProvider().unavailableReason(KVFerrySettings.fromEnvironment());
            if (noUcx == null) transports.add("ucx");
            else System.err.println("[sweep] no ucx points: " + noUcx);
            grid = SweepPlan.Grid.standard(transports);
        }
        if (processes && grid.transports().contains("inproc")) {
            System.err.println("kvferry bench: --sweep-quick has inproc points, which cannot run with --processes");
            return 2;
        }
        SweepPlan plan = SweepPlan.of(base, grid, processes, !sweepQuick, !sweepQuick);
        System.err.printf("[sweep] %d points -> %s%n", plan.points().size(), out.toAbsolutePath());
        SweepRunner.Outcome o = new SweepRunner(plan, out, System.err).run();
        System.out.printf("sweep: %d points (%d failed) in %s: %s, %s, charts %s%n", o.pointFiles().size(), o.failedPoints(),
                o.dir(), o.csv().getFileName(), o.baselines().getFileName(),
                o.charts().stream().map(c -> c.getFileName().toString()).toList());
        return o.failedPoints() == 0 ? 0 : 1;
    }

    // ---- benchmark suite (issue 16): the nixlbench columns, open-loop and room-rate lines

    /** The suite's columns: nixlbench row, load and latency from arrival, per-room cost, the schedulers' poll lag. */
    static void printSuiteSummary(BenchResult r) {
        SuiteFigures s = r.suite();
        if (s == null) return;
        System.out.printf("nixl: block %d B, batch %.1f ops/request, %.2f GB/s (transfer %.2f), avg latency %.3f ms; "
                        + "prepare avg %.3f p99 %.3f ms, post avg %.3f p99 %.3f ms, transfer avg %.3f p99 %.3f ms (pages %s)%n",
                s.blockBytes(), s.batchSize(), r.gbps(), r.transferGbps(), s.avgLatencyMs(), s.prepareMs().get("avg"),
                s.prepareMs().get("p99"), s.postMs().get("avg"), s.postMs().get("p99"), s.transferMs().get("avg"),
                s.transferMs().get("p99"), s.pages());
        System.out.printf("load: %s, achieved %.1f requests/s; latency from arrival p50 %.3f p99 %.3f p999 %.3f ms%n",
                s.offeredRate() == null ? "closed loop" : String.format("offered %.1f requests/s", s.offeredRate()),
                s.achievedRate(), s.requestLatencyMs().get("p50"), s.requestLatencyMs().get("p99"),
                s.requestLatencyMs().get("p999"));
        Map<String, Object> cpu = s.cpuUsPerRoom();
        System.out.printf("rooms: %.1f rooms/s; CPU per room prefill %s µs, decode %s µs (%s)%n", s.roomsPerSecond(),
                cpu.get("prefill"), cpu.get("decode"), "threads".equals(cpu.get("method"))
                        ? "one JVM, by Java thread group; other threads " + cpu.get("other") + " µs, whole JVM with GC and JIT "
                        + cpu.get("process") + " µs" : "per role JVM, GC and JIT included");
        if (s.pollLagMs() != null) {
            StringBuilder lag = new StringBuilder("poll lag (Success/Failed to the scheduler's first poll that saw it):");
            s.pollLagMs().forEach((role, f) -> lag.append(' ').append(role).append(" avg ").append(f.get("avg")).append(" p50 ")
                    .append(f.get("p50")).append(" p99 ").append(f.get("p99")).append(" ms;"));
            System.out.println(lag.substring(0, lag.length() - 1));
        }
        if (s.roomMemory() != null) {
            s.roomMemory().forEach((scope, m) -> System.out.printf(
                    "room memory (%s): %d B heap + %d B native (%s) = %d B per in-flight room, %d rooms parked%n",
                    scope, m.heapBytesPerRoom(), m.nativeBytesPerRoom(), m.nativeSource(), m.totalBytesPerRoom(), m.rooms()));
        }
    }
}
