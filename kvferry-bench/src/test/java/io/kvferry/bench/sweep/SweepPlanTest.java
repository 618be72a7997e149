package io.kvferry.bench.sweep;

import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.MemoryBudget;
import io.kvferry.testkit.ModelShape;
import io.kvferry.testkit.PageLayout;
import io.kvferry.testkit.Workload;
import org.junit.jupiter.api.Test;

import java.util.HashSet;
import java.util.List;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The sweep's grid: what it varies, what it keeps from the command line, and that every point fits before any runs. */
class SweepPlanTest {
    static BenchConfig base() {
        return new BenchConfig(ModelShape.preset("llama-3.1-8b"), new Workload(64, 1024, 16, 256, 4, 8, 42, 8), "tcp", 1, "t")
                .withSuite(new BenchConfig.Suite(PageLayout.CONTIGUOUS, 0, 0));
    }

    @Test
    void theStandardGridCoversOpSizeTransportConcurrencyAndOfferedLoad() {
        SweepPlan plan = SweepPlan.of(base(), SweepPlan.Grid.standard(List.of("tcp", "shm", "ucx")), false, true, true);
        long bw = plan.points().stream().filter(p -> p.kind() == SweepPlan.Kind.BANDWIDTH).count();
        assertEquals(4 * 3 * 2, bw);
        assertEquals(5, plan.points().size() - bw);
        Set<String> ids = new HashSet<>();
        for (SweepPlan.Point p : plan.points()) {
            assertTrue(ids.add(p.id()) && p.id().matches("[a-z0-9-]+"), p.id());
            assertEquals(PageLayout.CONTIGUOUS, p.config().suite().pages(), "the command line's --pages applies");
            assertEquals("t", p.config().authToken());
            if (p.kind() == SweepPlan.Kind.LOAD) {
                assertTrue(p.config().suite().openLoop());
                assertTrue(p.config().deadlineMillis() > 0, "open-loop points are bounded in time");
                assertTrue(p.config().workload().requests() <= 12_000, "and in count");
            } else {
                assertEquals(0.0, p.config().suite().ratePerSecond());
            }
        }
        // On this machine (24 GiB) every default point fits.
        assertDoesNotThrow(() -> SweepRunner.requireFits(plan, 24L << 30));
    }

    @Test
    void aSweepWhosePointsDoNotFitIsRefusedBeforeAnyRuns() {
        SweepPlan plan = SweepPlan.of(base(), SweepPlan.Grid.standard(List.of("tcp")), false, false, false);
        MemoryBudget.PoolsDoNotFit e = assertThrows(MemoryBudget.PoolsDoNotFit.class, () -> SweepRunner.requireFits(plan, 64L << 20));
        assertTrue(e.getMessage().startsWith("sweep point bw-tcp-page1-c1: the prefill and decode pools need"), e.getMessage());
        assertTrue(e.getMessage().contains("GiB"), e.getMessage());
    }
}
