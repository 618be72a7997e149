package io.kvferry.plan;

import io.kvferry.api.StateType;
import io.kvferry.protocol.Region;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.constraints.Size;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class TransferPlannerTest {

    /** Every op as {region ordinal, component, buffer, src, dst, length}. */
    private static long[][] ops(CopyPlan p) {
        long[][] out = new long[p.size()][];
        for (int i = 0; i < p.size(); i++) {
            out[i] = new long[] {p.region(i).ordinal(), p.component(i), p.buffer(i), p.srcOffset(i), p.dstOffset(i), p.length(i)};
        }
        return out;
    }

    private static long[] op(Region r, int comp, int buf, long src, long dst, long len) {
        return new long[] {r.ordinal(), comp, buf, src, dst, len};
    }

    private static final Region KV = Region.KV, AUX = Region.AUX, STATE = Region.STATE;

    // ================================================================== KV

    @Test
    void planKvOneOpPerBufferAndRunOrderedByBufferThenRun() {
        CopyPlan p = TransferPlanner.planKv(new int[] {10, 11, 12, 20}, new int[] {5, 6, 7, 8}, new long[] {100, 200});
        assertArrayEquals(new long[][] {
                op(KV, 0, 0, 1000, 500, 300),
                op(KV, 0, 0, 2000, 800, 100),
                op(KV, 0, 1, 2000, 1000, 600),
                op(KV, 0, 1, 4000, 1600, 200),
        }, ops(p));
        assertEquals(4 * (100 + 200), p.totalBytes());
    }

    @Test
    void planKvOffsetsDoNotOverflowInt() {
        long item = 1L << 20;
        CopyPlan p = TransferPlanner.planKv(new int[] {3_000_000, 3_000_001}, new int[] {2_500_000, 2_500_001}, new long[] {item});
        assertArrayEquals(new long[][] {op(KV, 0, 0, 3_000_000L * item, 2_500_000L * item, 2 * item)}, ops(p));
    }

    @Test
    void planKvEmptyPagesOrNoBuffersGiveAnEmptyPlan() {
        assertEquals(0, TransferPlanner.planKv(new int[0], new int[0], new long[] {64}).size());
        assertEquals(0, TransferPlanner.planKv(new int[] {1}, new int[0], new long[] {64}).size());
        CopyPlan none = TransferPlanner.planKv(new int[] {1, 2}, new int[] {3, 4}, new long[0]);
        assertEquals(0, none.size());
        assertEquals(0, none.totalBytes());
    }

    @Test
    void planKvRejectsMismatchedPageLists() {
        assertThrows(IllegalArgumentException.class, () -> TransferPlanner.planKv(new int[] {1, 2}, new int[] {1}, new long[] {8}));
    }

    @Property(seed = "20261207", tries = 300)
    void planKvTotalsAndShape(@ForAll("pages") int[] src, @ForAll("pages") int[] dstSeed,
                              @ForAll @Size(max = 6) List<@IntRange(min = 1, max = 1 << 16) Integer> items) {
        int n = Math.min(src.length, dstSeed.length);
        int[] s = Arrays.copyOf(src, n), d = Arrays.copyOf(dstSeed, n);
        long[] itemLens = items.stream().mapToLong(Integer::longValue).toArray();
        CopyPlan p = TransferPlanner.planKv(s, d, itemLens);
        PageRuns runs = PageRuns.group(s, d);
        assertEquals(runs.count() * itemLens.length, p.size());
        long sum = 0;
        for (long it : itemLens) sum += it;
        assertEquals(n * sum, p.totalBytes());
        int op = 0;
        for (int b = 0; b < itemLens.length; b++) {
            for (int r = 0; r < runs.count(); r++, op++) {
                assertEquals(KV, p.region(op));
                assertEquals(0, p.component(op));
                assertEquals(b, p.buffer(op));
                assertEquals(runs.srcStart(r) * itemLens[b], p.srcOffset(op));
                assertEquals(runs.dstStart(r) * itemLens[b], p.dstOffset(op));
                assertEquals(runs.length(r) * itemLens[b], p.length(op));
            }
        }
    }

    @Provide
    Arbitrary<int[]> pages() {
        return Arbitraries.integers().between(0, 64).array(int[].class).ofMaxSize(60);
    }

    @Test
    void planWithManyOpsGrowsBeyondItsInitialCapacity() {
        int n = 50;
        int[] src = new int[n], dst = new int[n];
        for (int i = 0; i < n; i++) {
            src[i] = 2 * i;
            dst[i] = i;
        }
        long[] items = new long[9];
        Arrays.fill(items, 16);
        CopyPlan p = TransferPlanner.planKv(src, dst, items);
        assertEquals(n * 9, p.size());
        assertEquals(n * 9 * 16L, p.totalBytes());
        assertEquals(8, p.buffer(p.size() - 1));
        assertEquals(2L * (n - 1) * 16, p.srcOffset(p.size() - 1));
    }

    // ================================================================== aux

    @Test
    void planAuxOneRowPerBuffer() {
        CopyPlan p = TransferPlanner.planAux(3, 7, new long[] {16, 32, 8});
        assertArrayEquals(new long[][] {
                op(AUX, 0, 0, 48, 112, 16),
                op(AUX, 0, 1, 96, 224, 32),
                op(AUX, 0, 2, 24, 56, 8),
        }, ops(p));
        assertEquals(56, p.totalBytes());
    }

    @Test
    void planAuxRowZero() {
        assertArrayEquals(new long[][] {op(AUX, 0, 0, 0, 0, 64)}, ops(TransferPlanner.planAux(0, 0, new long[] {64})));
    }

    @Test
    void planAuxNothingForIndexMinusOne() {
        assertEquals(0, TransferPlanner.planAux(-1, 4, new long[] {16, 32}).size());
        assertEquals(0, TransferPlanner.planAux(4, -1, new long[] {16, 32}).size());
        assertEquals(0, TransferPlanner.planAux(-1, -1, new long[] {16}).size());
    }

    @Test
    void planAuxLargeRowDoesNotOverflowInt() {
        CopyPlan p = TransferPlanner.planAux(Integer.MAX_VALUE, 1, new long[] {1 << 12});
        assertEquals((long) Integer.MAX_VALUE << 12, p.srcOffset(0));
    }

    // ================================================================== state

    @Test
    void pagedStateMismatchIsTruncatedWithAWarning() {
        List<String> warnings = new ArrayList<>();
        CopyPlan p = TransferPlanner.planState(List.of(StateType.SWA),
                new int[][] {{1, 2, 3}}, new int[][] {{10, 11}}, new long[][] {{8}}, warnings::add);
        assertArrayEquals(new long[][] {op(STATE, 0, 0, 8, 80, 16)}, ops(p));
        assertEquals(1, warnings.size(), warnings.toString());
        String w = warnings.getFirst();
        assertTrue(w.contains("swa") && w.contains("3") && w.contains("2") && w.contains("not sent"), w);
    }

    @Test
    void pagedStateWithFewerSourceIndicesFailsInsteadOfLeavingDecodeSlotsUnwritten() {
        PlanException e = assertThrows(PlanException.class, () -> TransferPlanner.planState(List.of(StateType.DSA),
                new int[][] {{4}}, new int[][] {{9, 10, 11}}, new long[][] {{100}}, w -> {}));
        assertTrue(e.getMessage().contains("prefill 1 vs decode 3") && e.getMessage().contains("unwritten"), e.getMessage());
    }

    @Test
    void positionalStateMismatchThrowsNamingTheComponent() {
        PlanException e = assertThrows(PlanException.class, () -> TransferPlanner.planState(
                List.of(StateType.SWA, StateType.MAMBA), new int[][] {{1}, {4, 5}}, new int[][] {{1}, {9}},
                new long[][] {{8}, {512}}, w -> {}));
        assertTrue(e.getMessage().contains("mamba"), e.getMessage());
        assertTrue(e.getMessage().contains("component 1"), e.getMessage());
    }

    @ParameterizedTest
    @EnumSource(StateType.class)
    void everyStateTypeFollowsItsPagedFlagOnMismatch(StateType type) {
        List<String> warnings = new ArrayList<>();
        int[][] src = {{1, 2}}, dst = {{5}};
        long[][] items = {{64}};
        if (type.isPaged()) {
            CopyPlan p = TransferPlanner.planState(List.of(type), src, dst, items, warnings::add);
            assertArrayEquals(new long[][] {op(STATE, 0, 0, 64, 320, 64)}, ops(p));
            assertEquals(1, warnings.size());
            assertTrue(warnings.getFirst().contains(type.wire()), warnings.getFirst());
        } else {
            PlanException e = assertThrows(PlanException.class,
                    () -> TransferPlanner.planState(List.of(type), src, dst, items, warnings::add));
            assertTrue(e.getMessage().contains(type.wire()), e.getMessage());
            assertTrue(warnings.isEmpty());
        }
    }

    @Test
    void matchingLengthsGiveNoWarning() {
        List<String> warnings = new ArrayList<>();
        CopyPlan p = TransferPlanner.planState(List.of(StateType.MAMBA, StateType.SWA),
                new int[][] {{3}, {7, 8, 20}}, new int[][] {{6}, {1, 2, 3}}, new long[][] {{1000}, {10}}, warnings::add);
        assertTrue(warnings.isEmpty(), warnings.toString());
        assertArrayEquals(new long[][] {
                op(STATE, 0, 0, 3000, 6000, 1000),
                op(STATE, 1, 0, 70, 10, 20),
                op(STATE, 1, 0, 200, 30, 10),
        }, ops(p));
    }

    @Test
    void nullIndicesGiveAnEmptyPlan() {
        List<String> warnings = new ArrayList<>();
        assertEquals(0, TransferPlanner.planState(List.of(StateType.MAMBA), new int[][] {{1}}, null, new long[][] {{8}}, warnings::add).size());
        assertEquals(0, TransferPlanner.planState(List.of(StateType.MAMBA), null, null, new long[][] {{8}}, warnings::add).size());
        assertEquals(0, TransferPlanner.planState(List.of(), null, null, new long[0][], warnings::add).size());
        assertTrue(warnings.isEmpty());
    }

    @Test
    void componentsTheDecodeAskedNothingOfAreSkipped() {
        List<String> warnings = new ArrayList<>();
        CopyPlan p = TransferPlanner.planState(List.of(StateType.MAMBA, StateType.SWA, StateType.MAMBA),
                new int[][] {{5}, {6, 7}, {2}}, new int[][] {null, {}, {3}}, new long[][] {{8}, {8}, {16}}, warnings::add);
        assertArrayEquals(new long[][] {op(STATE, 2, 0, 32, 48, 16)}, ops(p));
        assertTrue(warnings.isEmpty(), "an empty decode side is not a mismatch: " + warnings);
    }

    @Test
    void stateTheDecodeAskedForButTheChunkDoesNotNameFails() {
        // Before: skipped, so the prefill reported Success and the decode failed on the missing bytes.
        for (int[][] src : new int[][][] {null, {}, {null}, {{}}}) {
            PlanException e = assertThrows(PlanException.class, () -> TransferPlanner.planState(List.of(StateType.MAMBA), src,
                    new int[][] {{1}}, new long[][] {{8}}, w -> {}));
            assertEquals("state component 0 (mamba): the decode asked for 1 index but this prefill rank sent none with the last chunk; "
                    + "its slots would stay unwritten", e.getMessage());
        }
        PlanException paged = assertThrows(PlanException.class, () -> TransferPlanner.planState(List.of(StateType.MAMBA, StateType.SWA),
                new int[][] {{1}}, new int[][] {{1}, {4, 5}}, new long[][] {{8}, {8}}, w -> {}));
        assertTrue(paged.getMessage().startsWith("state component 1 (swa): the decode asked for 2 indices"), paged.getMessage());
        PlanException resliced = assertThrows(PlanException.class, () -> TransferPlanner.planStateSliced(List.of(StateType.MAMBA), null,
                new int[][] {{1}}, new long[][] {{8}}, new long[][] {{4}}, new int[][] {{2}}, new int[][] {{1}}, 1, 0, 2, 0));
        assertTrue(resliced.getMessage().contains("the decode asked for 1 index but this prefill rank sent none"), resliced.getMessage());
    }

    @Test
    void multipleTensorsPerComponentInComponentThenTensorOrder() {
        CopyPlan p = TransferPlanner.planState(List.of(StateType.MAMBA, StateType.SWA_RING),
                new int[][] {{2}, {0, 1}}, new int[][] {{5}, {3, 4}},
                new long[][] {{100, 200, 300}, {10, 20}}, w -> {});
        assertArrayEquals(new long[][] {
                op(STATE, 0, 0, 200, 500, 100),
                op(STATE, 0, 1, 400, 1000, 200),
                op(STATE, 0, 2, 600, 1500, 300),
                op(STATE, 1, 0, 0, 30, 20),
                op(STATE, 1, 1, 0, 60, 40),
        }, ops(p));
        assertEquals(100 + 200 + 300 + 2 * 10 + 2 * 20, p.totalBytes());
    }

    @Test
    void onlyComponentsPresentOnAllSidesArePlanned() {
        CopyPlan p = TransferPlanner.planState(List.of(StateType.MAMBA, StateType.MAMBA),
                new int[][] {{1}, {2}}, new int[][] {{3}}, new long[][] {{8}, {8}}, w -> {});
        assertArrayEquals(new long[][] {op(STATE, 0, 0, 8, 24, 8)}, ops(p));
    }
}
