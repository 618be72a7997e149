package io.kvferry.plan;

import io.kvferry.api.StateType;
import io.kvferry.protocol.Region;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.constraints.IntRange;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * State resharded between attention-TP sizes: mamba slots along their sharded dimension, swa window
 * pages by KV head. The byte-level checks run every prefill rank's plan into the decode rank's memory
 * and compare it with what a decode rank of that TP size must hold, entry by entry.
 */
class StateSliceTest {
    private static final int HEAD_BYTES = 4;

    /** Copies every op of {@code plan} (strided pieces included) from {@code src} into {@code dst}. */
    static void execute(CopyPlan plan, byte[] src, byte[] dst) {
        for (int op = 0; op < plan.size(); op++) {
            for (long i = 0; i < plan.pieces(op); i++) {
                System.arraycopy(src, (int) (plan.srcOffset(op) + i * plan.srcStride(op)), dst,
                        (int) (plan.dstOffset(op) + i * plan.dstStride(op)), (int) plan.pieceLength(op));
            }
        }
    }

    /** Heads a rank of a TP-{@code tp} engine holds when the model has {@code heads} KV heads (replicated when tp > heads). */
    static int firstHead(int heads, int tp, int rank) {
        return tp <= heads ? rank * (heads / tp) : rank / (tp / heads);
    }

    static int localHeads(int heads, int tp) {
        return Math.max(1, heads / tp);
    }

    /** A window page pool of a rank: pool page p, token t, local head h holds the bytes of (p's logical page, t, global head). */
    static byte[] swaPool(int pages, int pageSize, int heads, int tp, int rank, int[] logicalOf) {
        int local = localHeads(heads, tp);
        byte[] b = new byte[pages * pageSize * local * HEAD_BYTES];
        for (int p = 0; p < pages; p++) {
            for (int t = 0; t < pageSize; t++) {
                for (int h = 0; h < local; h++) {
                    int at = ((p * pageSize + t) * local + h) * HEAD_BYTES;
                    int g = firstHead(heads, tp, rank) + h;
                    b[at] = (byte) (logicalOf == null ? 0 : logicalOf[p]);
                    b[at + 1] = (byte) t;
                    b[at + 2] = (byte) g;
                    b[at + 3] = (byte) 0x5a;
                }
            }
        }
        return b;
    }

    @Property(seed = "20261207", tries = 200)
    void swaWindowPagesLandHeadByHeadForEveryTpPair(@ForAll("tps") int prefillTp, @ForAll("tps") int decodeTp,
                                                   @ForAll("tps") int heads, @ForAll @IntRange(min = 1, max = 5) int pageSize,
                                                   @ForAll @IntRange(min = 1, max = 4) int windowPages) {
        int poolPages = 8;
        // The window's pages sit at scattered ids on each side (prefill: 5, 6, 0, ...; decode: 2, 3, 7, ...).
        int[] src = new int[windowPages], dst = new int[windowPages];
        int[] logicalOfSrc = new int[poolPages];
        for (int i = 0; i < windowPages; i++) {
            src[i] = (5 + i) % poolPages;
            dst[i] = i < 2 ? 2 + i : 7 - (i - 2);
            logicalOfSrc[src[i]] = 10 + i;
        }
        long srcItem = (long) pageSize * localHeads(heads, prefillTp) * HEAD_BYTES;
        long dstItem = (long) pageSize * localHeads(heads, decodeTp) * HEAD_BYTES;
        for (int d = 0; d < decodeTp; d++) {
            byte[] decode = new byte[poolPages * (int) dstItem];
            RankMapping m = RankMapping.resolve(prefillTp, decodeTp, d, false, 1, false, 1, 1, 0);
            for (int p : m.targetTpRanks()) {
                byte[] prefill = swaPool(poolPages, pageSize, heads, prefillTp, p, logicalOfSrc);
                CopyPlan plan = prefillTp == decodeTp
                        ? TransferPlanner.planState(List.of(StateType.SWA), new int[][]{src}, new int[][]{dst},
                                new long[][]{{srcItem}}, w -> { })
                        : TransferPlanner.planStateSliced(List.of(StateType.SWA), new int[][]{src}, new int[][]{dst},
                                new long[][]{{srcItem}}, new long[][]{{dstItem}}, new int[][]{{localHeads(heads, prefillTp)}},
                                new int[][]{{pageSize}}, prefillTp, p, decodeTp, d);
                for (int op = 0; op < plan.size(); op++) assertEquals(Region.STATE, plan.region(op));
                execute(plan, prefill, decode);
            }
            for (int i = 0; i < windowPages; i++) {
                for (int t = 0; t < pageSize; t++) {
                    for (int h = 0; h < localHeads(heads, decodeTp); h++) {
                        int at = (int) (dst[i] * dstItem) + (t * localHeads(heads, decodeTp) + h) * HEAD_BYTES;
                        String where = "P" + prefillTp + "->D" + decodeTp + " H" + heads + " decode rank " + d + " window page " + i
                                + " token " + t + " head " + h;
                        assertEquals(10 + i, decode[at], where);
                        assertEquals(t, decode[at + 1], where);
                        assertEquals(firstHead(heads, decodeTp, d) + h, decode[at + 2], where);
                        assertEquals(0x5a, decode[at + 3], where);
                    }
                }
            }
        }
    }

    @Provide
    Arbitrary<Integer> tps() {
        return Arbitraries.of(1, 2, 4, 8);
    }

    @Test
    void swaPlanIsOneStridedOpPerTensorAndRunNotPerToken() {
        // H=4: prefill TP2 rank 1 (heads 2,3) into decode TP1 (heads 0..3): pieces of 2 heads at head 2 of each token.
        long srcItem = 16L * 2 * HEAD_BYTES, dstItem = 16L * 4 * HEAD_BYTES;
        CopyPlan p = TransferPlanner.planStateSliced(List.of(StateType.SWA), new int[][]{{3, 4, 9}}, new int[][]{{0, 1, 2}},
                new long[][]{{srcItem, srcItem}}, new long[][]{{dstItem, dstItem}}, new int[][]{{2, 2}}, new int[][]{{16, 16}},
                2, 1, 1, 0);
        assertEquals(4, p.size()); // 2 tensors (K, V) x 2 runs ([3,4]->[0,1], [9]->[2])
        assertEquals(0, p.buffer(0));
        assertEquals(1, p.buffer(2));
        assertTrue(p.strided(0));
        assertEquals(2L * 16, p.pieces(0));
        assertEquals(2 * HEAD_BYTES, p.pieceLength(0));
        assertEquals(3 * srcItem, p.srcOffset(0));
        assertEquals(2 * HEAD_BYTES, p.dstOffset(0));
        assertEquals(2 * dstItem + 2 * HEAD_BYTES, p.dstOffset(1));
        assertEquals(2 * HEAD_BYTES, p.srcStride(0));
        assertEquals(4 * HEAD_BYTES, p.dstStride(0));
    }

    @Test
    void swaUnderATpChangeNeedsEqualWindowsAndItsDims() {
        long item = 16L * 2 * HEAD_BYTES;
        PlanException count = assertThrows(PlanException.class, () -> TransferPlanner.planStateSliced(List.of(StateType.SWA),
                new int[][]{{1, 2}}, new int[][]{{1}}, new long[][]{{item}}, new long[][]{{2 * item}}, new int[][]{{2}},
                new int[][]{{16}}, 2, 0, 1, 0));
        assertTrue(count.getMessage().contains("state component 0 (swa) window page count mismatch: prefill 2 vs decode 1"),
                count.getMessage());
        PlanException dims = assertThrows(PlanException.class, () -> TransferPlanner.checkStateReshard(StateType.SWA, 0, 1,
                item, 2 * item, 0, 0, 2, 0, 1, 0));
        assertTrue(dims.getMessage().contains("state component 0 tensor 1 needs state_dim_per_tensor"), dims.getMessage());
        PlanException heads = assertThrows(PlanException.class, () -> TransferPlanner.checkStateReshard(StateType.SWA, 0, 0,
                item, 3 * item, 16, 2, 2, 0, 1, 0));
        assertTrue(heads.getMessage().contains("state component 0 (swa) tensor 0"), heads.getMessage());
    }

    @ParameterizedTest(name = "{0}")
    @CsvSource({"dsa", "swa_ring", "minimax_index_k", "c128_state"})
    void otherStateTypesAreRefusedUnderATpChange(String wire) {
        StateType type = StateType.fromWire(wire);
        PlanException e = assertThrows(PlanException.class, () -> TransferPlanner.checkStateReshard(type, 2, 0, 64, 32, 1, 4,
                2, 0, 1, 0));
        assertEquals("state component 2 (" + wire + ") cannot be resharded between prefill TP 2 and decode TP 1", e.getMessage());
        assertThrows(PlanException.class, () -> TransferPlanner.planStateSliced(List.of(type), new int[][]{{1}}, new int[][]{{1}},
                new long[][]{{64}}, new long[][]{{32}}, new int[][]{{4}}, new int[][]{{1}}, 2, 0, 1, 0));
    }

    /** A mamba slot of {@code outer} rows x the rank's {@code dim} entries: entry (row, global channel) = its bytes. */
    static byte[] mambaSlots(int slots, int outer, int channels, int tp, int rank) {
        int dim = channels / tp;
        byte[] b = new byte[slots * outer * dim];
        for (int s = 0; s < slots; s++) {
            for (int r = 0; r < outer; r++) {
                for (int c = 0; c < dim; c++) b[(s * outer + r) * dim + c] = (byte) (s * 64 + r * 16 + rank * dim + c);
            }
        }
        return b;
    }

    @Property(seed = "20261207", tries = 100)
    void mambaSlotsAreReslicedAlongTheShardedDimension(@ForAll("tps") int prefillTp, @ForAll("tps") int decodeTp,
                                                      @ForAll @IntRange(min = 1, max = 3) int outer) {
        int channels = 8;
        assumeTrue(channels % prefillTp == 0 && channels % decodeTp == 0);
        long srcItem = (long) outer * channels / prefillTp, dstItem = (long) outer * channels / decodeTp;
        for (int d = 0; d < decodeTp; d++) {
            byte[] decode = new byte[4 * (int) dstItem];
            for (int p : RankMapping.resolve(prefillTp, decodeTp, d, false, 1, false, 1, 1, 0).targetTpRanks()) {
                CopyPlan plan = TransferPlanner.planStateSliced(List.of(StateType.MAMBA), new int[][]{{1}}, new int[][]{{3}},
                        new long[][]{{srcItem}}, new long[][]{{dstItem}}, new int[][]{{channels / prefillTp}}, new int[][]{{outer}},
                        prefillTp, p, decodeTp, d);
                execute(plan, mambaSlots(4, outer, channels, prefillTp, p), decode);
            }
            byte[] expected = mambaSlots(4, outer, channels, decodeTp, d);
            for (int i = 0; i < dstItem; i++) {
                // Slot 1 of the prefill landed in slot 3 of the decode: compare with the decode rank's own view of slot 1.
                assertEquals(expected[(int) dstItem + i], decode[3 * (int) dstItem + i],
                        "P" + prefillTp + "->D" + decodeTp + " decode rank " + d + " byte " + i);
            }
        }
    }
}
