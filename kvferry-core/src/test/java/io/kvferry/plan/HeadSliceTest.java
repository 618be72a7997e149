package io.kvferry.plan;

import io.kvferry.protocol.Region;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class HeadSliceTest {
    static final int PS = 16;
    static final long HEAD = 256; // 128 dims bf16

    static long item(int heads) {
        return PS * heads * HEAD;
    }

    @Test
    void prefillFourToDecodeTwoPlacesEachRanksHeadsSideBySide() {
        // H=8: prefill ranks hold 2 heads, decode ranks 4. Prefill rank 3 fills heads 2..3 of decode rank 1.
        HeadSlice s = HeadSlice.resolve(8, 4, 3, 2, 1, item(2), item(4), PS);
        assertEquals(new HeadSlice(0, 2, 2, HEAD, 2 * HEAD, 4 * HEAD), s);
        assertEquals(2 * HEAD, s.pieceBytes());
    }

    @Test
    void prefillTwoToDecodeFourSendsEachDecodeRankItsHalf() {
        HeadSlice s = HeadSlice.resolve(8, 2, 0, 4, 1, item(4), item(2), PS);
        assertEquals(new HeadSlice(2, 0, 2, HEAD, 4 * HEAD, 2 * HEAD), s);
    }

    @Test
    void replicatedGqaHeadsMapByDivisionNotModulo() {
        // H=2, D=8: decode ranks 0-3 hold head 0, ranks 4-7 head 1; prefill TP1 holds both.
        assertEquals(0, HeadSlice.resolve(2, 1, 0, 8, 3, item(2), item(1), PS).srcHeadStart());
        assertEquals(1, HeadSlice.resolve(2, 1, 0, 8, 4, item(2), item(1), PS).srcHeadStart());
        // H=2, P=4 -> D=1: prefill ranks 0,1 hold head 0 and ranks 2,3 head 1.
        assertEquals(0, HeadSlice.resolve(2, 4, 1, 1, 0, item(1), item(2), PS).dstHeadStart());
        assertEquals(1, HeadSlice.resolve(2, 4, 2, 1, 0, item(1), item(2), PS).dstHeadStart());
    }

    @Test
    void inconsistentLayoutsAreClearErrors() {
        assertTrue(assertThrows(PlanException.class, () -> HeadSlice.resolve(0, 2, 0, 4, 0, item(4), item(2), PS))
                .getMessage().contains("totalKvHeadNum"));
        assertTrue(assertThrows(PlanException.class, () -> HeadSlice.resolve(8, 2, 0, 4, 0, item(4), item(2) * 2, PS))
                .getMessage().contains("head size differs"));
    }

    @Test
    void slicedPlanHasOneStridedOpPerBufferAndRunNotPerToken() {
        HeadSlice s = HeadSlice.resolve(8, 4, 1, 2, 0, item(2), item(4), PS);
        CopyPlan plan = TransferPlanner.planKvSliced(new int[]{3, 4, 5, 9}, new int[]{10, 11, 12, 13},
                new long[]{item(2), item(2)}, new long[]{item(4), item(4)}, PS, new HeadSlice[]{s, s});
        assertEquals(4, plan.size()); // 2 buffers x 2 runs ([3,4,5] and [9])
        assertTrue(plan.strided(0));
        assertEquals(3L * PS, plan.pieces(0));
        assertEquals(2 * HEAD, plan.pieceLength(0));
        assertEquals(3 * item(2) + 0, plan.srcOffset(0));
        assertEquals(10 * item(4) + 2 * HEAD, plan.dstOffset(0));
        assertEquals(2 * HEAD, plan.srcStride(0));
        assertEquals(4 * HEAD, plan.dstStride(0));
        assertEquals((3L * PS - 1) * 4 * HEAD + 2 * HEAD, plan.dstSpan(0));
        assertEquals(Region.KV, plan.region(3));
        assertEquals(4L * PS * 2 * HEAD * 2, plan.totalBytes());
    }

    @Test
    void aWholeSlotSliceIsAContiguousCopyAndLongRunsAreSplitAtTheOpLimit() {
        CopyPlan whole = new CopyPlan(1);
        whole.addPieces(Region.KV, 0, 0, 0, 0, 512, 4, 25, 512, 512);
        assertEquals(1, whole.size());
        assertFalse(whole.strided(0));
        CopyPlan big = new CopyPlan(1);
        big.addPieces(Region.KV, 0, 0, 0, 0, 512, 16, 1250, 1024, 2048);
        long perOp = CopyPlan.MAX_OP_BYTES / 512;
        assertEquals((20_000 + perOp - 1) / perOp, big.size());
        assertEquals(perOp * 1024, big.srcOffset(1));
        assertEquals(perOp * 2048, big.dstOffset(1));
        for (int i = 0; i < big.size(); i++) assertTrue(big.length(i) <= CopyPlan.MAX_OP_BYTES);
    }
}
