package io.kvferry.bench.jmh;

import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.metrics.DataPathMeters;
import io.kvferry.metrics.RankIdentity;
import io.kvferry.metrics.RankTelemetry;
import io.kvferry.metrics.RoomCensus;
import io.kvferry.ops.Ops;
import io.kvferry.plan.CopyPlan;
import io.kvferry.plan.TransferPlanner;
import io.micrometer.core.instrument.MeterRegistry;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.Warmup;

import java.util.Arrays;
import java.util.concurrent.TimeUnit;

/**
 * What metrics cost a transfer: recording one data-path write (a 256-page chunk of a 32-layer model,
 * K and V: 64 ops of 4 MiB, as a contiguous chunk plans) and one concluded room, into a Prometheus
 * registry and into the default no-op one. The write is the hot path's only per-op recording.
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(1)
public class MetricsBench {
    @Param({"prometheus", "none"})
    public String registry;

    CopyPlan plan;
    DataPathMeters meters;
    RankTelemetry telemetry;

    @Setup
    public void setUp() {
        MeterRegistry r = "prometheus".equals(registry) ? Ops.newRegistry() : KVManagerConfig.NO_METERS;
        telemetry = new RankTelemetry(r, new RankIdentity("prefill", 0, 0, 0, 0), new RoomCensus() {
            @Override
            public int rooms(KVPoll state) {
                return 0;
            }

            @Override
            public int peers() {
                return 0;
            }
        });
        meters = telemetry.dataPath("tcp");
        int[] pages = new int[256];
        Arrays.setAll(pages, i -> i);
        long[] itemLens = new long[64];
        Arrays.fill(itemLens, 16 * 1024);
        plan = TransferPlanner.planKv(pages, pages, itemLens);
    }

    /** One data-path write's recording: bytes, ops, ops per write, and each op's size. */
    @Benchmark
    public DataPathMeters recordWrite() {
        meters.written(plan);
        return meters;
    }

    /** One concluded room's recording: latency, speed, size histograms of its transport. */
    @Benchmark
    public RankTelemetry recordConcludedRoom() {
        telemetry.concluded("tcp", 12_000_000L, 134_217_728L);
        return telemetry;
    }
}
