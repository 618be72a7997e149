package io.kvferry.tools;

import io.kvferry.bench.BenchResult;
import io.kvferry.bench.BenchRunner;
import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.ModelShape;
import io.kvferry.testkit.Workload;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.PrintStream;
import java.io.OutputStream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Prefill and decode as two separate JVMs over TCP loopback, found through a bootstrap registry
 * with auth: ≥ 100 requests and ≥ 256 MiB, fragmented page lists on both sides, chunked sends,
 * decode prefixes (including whole-prompt prefixes, whose last chunk has zero pages), one
 * state component; the decode process verifies every destination page, aux row and state slot.
 */
class SeparateProcessTransferTest {
    @Test
    @Timeout(300)
    void twoProcessesMoveAQuarterGibByteExact() throws Exception {
        Workload w = new Workload(128, 1300, 16, 256, 4, 8, 20261202L);
        BenchConfig config = new BenchConfig(ModelShape.preset("tiny-hybrid"), w, "tcp", 1, "it-token");
        BenchResult r = new BenchRunner(config, new PrintStream(OutputStream.nullOutputStream())).run(true);
        assertEquals(128, r.requests());
        assertEquals(0, r.failed(), () -> "failures: " + r.firstFailures());
        assertEquals(0, r.corrupted());
        assertEquals(128, r.succeeded());
        assertTrue(r.verifiedBytes() >= 256L << 20, "verified only " + r.verifiedBytes() + " bytes");
        assertTrue(r.processes());
    }

    @Test
    @Timeout(300)
    void tensorParallelTwoAcrossProcesses() throws Exception {
        Workload w = new Workload(24, 300, 16, 64, 3, 4, 99L);
        BenchConfig config = new BenchConfig(ModelShape.preset("tiny-hybrid"), w, "tcp", 2, "it-token");
        BenchResult r = new BenchRunner(config, new PrintStream(OutputStream.nullOutputStream())).run(true);
        assertEquals(24, r.succeeded(), () -> "failures: " + r.firstFailures());
        assertEquals(0, r.corrupted());
    }

    @Test
    @Timeout(300)
    void heterogeneousTensorParallelAcrossProcesses() throws Exception {
        // Prefill TP2 feeds decode TP1: each prefill rank's heads land side by side in the decode's token slots.
        Workload w = new Workload(12, 300, 16, 64, 3, 4, 7L);
        BenchConfig config = new BenchConfig(ModelShape.preset("tiny").withKvHeads(4), w, "tcp", 2, 1, "it-token", 0);
        BenchResult r = new BenchRunner(config, new PrintStream(OutputStream.nullOutputStream())).run(true);
        assertEquals(12, r.succeeded(), () -> "failures: " + r.firstFailures());
        assertEquals(0, r.corrupted());
    }

    @Test
    @Timeout(300)
    void pipelineParallelPrefillAcrossProcesses() throws Exception {
        // Two prefill stages (each its own layers) feed one decode that holds all layers.
        Workload w = new Workload(12, 300, 16, 64, 3, 4, 11L);
        BenchConfig config = new BenchConfig(ModelShape.preset("tiny"), w, "tcp", 1, 1, 2, 1, "it-token", 0);
        BenchResult r = new BenchRunner(config, new PrintStream(OutputStream.nullOutputStream())).run(true);
        assertEquals(12, r.succeeded(), () -> "failures: " + r.firstFailures());
        assertEquals(0, r.corrupted());
    }
}
