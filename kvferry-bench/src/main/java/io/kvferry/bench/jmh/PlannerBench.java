package io.kvferry.bench.jmh;

import io.kvferry.plan.CopyPlan;
import io.kvferry.plan.TransferPlanner;
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
import java.util.Random;
import java.util.concurrent.TimeUnit;

/**
 * Planning one 4096-page chunk over 32 KV buffers: contiguous pages (a few long runs) against
 * shuffled free lists on both sides (a run per page), the fragmented case issue 16 is about.
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(1)
public class PlannerBench {
    @Param({"contiguous", "fragmented"})
    public String pages;

    int[] src;
    int[] dst;
    long[] itemLens;

    @Setup
    public void setUp() {
        int n = 4096;
        src = new int[n];
        dst = new int[n];
        for (int i = 0; i < n; i++) {
            src[i] = i;
            dst[i] = i;
        }
        if ("fragmented".equals(pages)) {
            Random rnd = new Random(7);
            shuffle(src, rnd);
            shuffle(dst, rnd);
        }
        itemLens = new long[32];
        Arrays.fill(itemLens, 16 * 1024);
    }

    private static void shuffle(int[] a, Random rnd) {
        for (int i = a.length - 1; i > 0; i--) {
            int j = rnd.nextInt(i + 1), t = a[i];
            a[i] = a[j];
            a[j] = t;
        }
    }

    @Benchmark
    public CopyPlan planKv() {
        return TransferPlanner.planKv(src, dst, itemLens);
    }
}
