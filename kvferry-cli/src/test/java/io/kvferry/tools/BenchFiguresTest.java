package io.kvferry.tools;

import io.kvferry.bench.BenchResult;
import io.kvferry.bench.BenchRunner;
import io.kvferry.bench.MemcpyBaseline;
import io.kvferry.bench.UcxPerftestBaseline;
import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.ModelShape;
import io.kvferry.testkit.PairedMemcpy;
import io.kvferry.testkit.RankPool;
import io.kvferry.testkit.Workload;

import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.File;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The bench's figures: warm-up accounting, data-path totals and the baselines they are compared with. */
@Timeout(180)
class BenchFiguresTest {
    private static BenchConfig config(int requests, int warmup, String transport) {
        Workload w = new Workload(requests, 200, 16, 64, 2, 4, 7, warmup);
        return new BenchConfig(ModelShape.preset("tiny"), w, transport, 1, 1, 1, 1, 1, false, 1, "t0ken", 1, 0, 0);
    }

    @Test
    void warmupRequestsAreVerifiedButLeftOutOfTheTimedFigures() throws Exception {
        // The stream of (warmup 3, requests 5) is the same 8 requests as (warmup 0, requests 8): only
        // the last 5 may count in verified_bytes.
        BenchResult all = new BenchRunner(config(8, 0, "tcp"), null).runWithoutBaselines(false);
        BenchResult first3 = new BenchRunner(config(3, 0, "tcp"), null).runWithoutBaselines(false);
        BenchResult warmed = new BenchRunner(config(5, 3, "tcp"), null).runWithoutBaselines(false);
        assertEquals(8, warmed.requests());
        assertEquals(3, warmed.warmup());
        assertEquals(8, warmed.succeeded());
        assertEquals(0, warmed.corrupted());
        assertEquals(all.verifiedBytes() - first3.verifiedBytes(), warmed.verifiedBytes());
        assertTrue(warmed.latencyMs().get("p50") > 0);
        // The data-path totals (embedded too) leave the warm-up out as well, to the byte.
        assertTrue(warmed.datapathGbps() > 0 && warmed.transferGbps() > 0, warmed.toString());
        assertEquals(all.datapathBytes() - first3.datapathBytes(), warmed.datapathBytes());
        assertTrue(all.datapathOpBytes() > 0);
        assertNull(warmed.pairedMemcpyGbps());
    }

    @Test
    void pairedMemcpyIsReportedOnlyWhenAskedFor() throws Exception {
        BenchResult r = new BenchRunner(config(4, 1, "inproc").withPairedMemcpy(true), null).runWithoutBaselines(false);
        assertEquals(0, r.corrupted());
        assertNotNull(r.pairedMemcpyGbps());
        assertTrue(r.pairedMemcpyGbps() > 0 && r.ratioDatapathToPairedMemcpy() > 0);
    }

    @Test
    void pairedMemcpyCopiesExactlyTheRequestsPagesRunByRun() {
        ModelShape shape = ModelShape.preset("tiny");
        try (RankPool pool = new RankPool(shape, 16, 1, 0, 32, 4, 1);
             PairedMemcpy copy = new PairedMemcpy(pool, 8)) {
            for (int b = 0; b < pool.kv.length; b++) {
                MemorySegment seg = pool.kv[b];
                for (long i = 0; i < seg.byteSize(); i += 8) seg.set(ValueLayout.JAVA_LONG_UNALIGNED, i, b * 1_000_000L + i);
            }
            int[] pages = {5, 6, 7, 2, 20, 21};
            copy.copy(pool, pages);
            assertEquals(pages.length * pool.pageBytes * pool.kv.length, copy.bytes());
            assertTrue(copy.nanos() > 0);
            MemorySegment scratch = copy.scratch();
            for (int b = 0; b < pool.kv.length; b++) {
                for (int i = 0; i < pages.length; i++) {
                    long at = ((long) b * 8 + i) * pool.pageBytes;
                    assertEquals(-1L, scratch.asSlice(at, pool.pageBytes).mismatch(pool.page(b, pages[i])), "buffer " + b + " page " + i);
                }
            }
        }
    }

    @Test
    void memcpyMedianPoolsTheRoundsOfSeveralMeasurements() {
        assertEquals(3.0, MemcpyBaseline.median(new double[]{1, 9, 3}, new double[]{}));
        assertEquals(4.0, MemcpyBaseline.median(new double[]{1, 3}, new double[]{5, 100}));
        assertEquals(0.0, MemcpyBaseline.median());
        assertEquals(MemcpyBaseline.ROUNDS, MemcpyBaseline.rounds(1 << 20).length);
    }

    @Test
    void perftestFinalLineIsParsedInGigabytesPerSecond() {
        String out = "+--------------+\n| Stage | # iterations |\nFinal:  20000  10.937  266.872  50.532  117.10  618.42  3747  19789\n";
        assertEquals(618.42 * 1048576 / 1e9, UcxPerftestBaseline.parseFinalOverallGbps(out), 1e-9);
        assertEquals(-1, UcxPerftestBaseline.parseFinalOverallGbps("no final line"));
    }

    @Test
    void perftestBaselineUsesTheBenchsErrorModeAndMessageSize() {
        boolean installed = new File("/usr/bin/ucx_perftest").canExecute();
        Assumptions.assumeTrue(installed || "1".equals(System.getenv("KVFERRY_REQUIRE_UCX")),
                "ucx_perftest is not installed (apt-get install ucx-utils)");
        UcxPerftestBaseline.Result peer = UcxPerftestBaseline.measure(57_344, true);
        assertNotNull(peer, "ucx_perftest failed");
        assertTrue(peer.gbps() > 0);
        assertTrue(peer.command().contains("-t ucp_put_bw -s 57344 ") && peer.command().endsWith(" -e"), peer.command());
        // The reported figure is the median of the rounds.
        assertEquals(UcxPerftestBaseline.ROUNDS, peer.rounds().size(), peer.toString());
        List<Double> sorted = new ArrayList<>(peer.rounds());
        sorted.sort(null);
        assertEquals(sorted.get(sorted.size() / 2), peer.gbps(), 1e-12); // ROUNDS is odd
        UcxPerftestBaseline.Result none = UcxPerftestBaseline.measureOnce(57_344, false);
        assertNotNull(none);
        assertTrue(!none.command().contains(" -e"), none.command());
        // Private buffers like kvferry's pools (else error mode none measures cache-hot memcpys into a shared segment).
        if (System.getenv("UCX_ALLOC_PRIO") == null) {
            assertTrue(none.command().contains("UCX_ALLOC_PRIO=" + UcxPerftestBaseline.PRIVATE_BUFFERS + " "), none.command());
        }
    }
}
