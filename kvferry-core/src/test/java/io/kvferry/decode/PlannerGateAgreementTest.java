package io.kvferry.decode;

import io.kvferry.plan.CopyPlan;
import io.kvferry.plan.HeadSlice;
import io.kvferry.plan.PlanException;
import io.kvferry.plan.StateSlice;
import io.kvferry.plan.TransferPlanner;
import net.jqwik.api.Assume;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.constraints.LongRange;

import java.util.HashMap;
import java.util.Map;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The planner and the decode's write gate cut a prefill rank's bytes at the same places
 * ({@link io.kvferry.plan.Granules}): every op an honest prefill plans is admitted by the gate's
 * shape rule ({@link LinkGranules.Covered#items}), and the ops of a transfer mark every granule the
 * rank owes exactly once — for page copies, head slices and re-sliced mamba state, with items that
 * do and do not fit one op.
 */
class PlannerGateAgreementTest {

    @Property(seed = "20261207", tries = 300)
    void pageCopiesAreWholeGranules(@ForAll @LongRange(min = 1, max = 9L << 20) long item, @ForAll @IntRange(min = 1, max = 24) int pages,
                                    @ForAll long seed) {
        int[][] pair = pages(pages, seed);
        CopyPlan plan = TransferPlanner.planKv(pair[0], pair[1], new long[] {item});
        assertEachGranuleOnce(plan, LinkGranules.Covered.of(item, item, 0, item), pair[1]);
    }

    @Property(seed = "20261207", tries = 400)
    void headSlicesAreWholeGranules(@ForAll @IntRange(min = 0, max = 4) int headsLog, @ForAll @IntRange(min = 0, max = 3) int pLog,
                                    @ForAll @IntRange(min = 0, max = 3) int dLog, @ForAll @IntRange(min = 0, max = 7) int rank,
                                    @ForAll @IntRange(min = 0, max = 3) int pageSizeChoice,
                                    @ForAll @IntRange(min = 0, max = 3) int headBytesChoice, @ForAll @IntRange(min = 1, max = 12) int pages,
                                    @ForAll long seed) {
        int totalHeads = 1 << headsLog, prefillTp = 1 << pLog, decodeTp = 1 << dLog;
        Assume.that(prefillTp != decodeTp);
        int pageSize = new int[] {1, 16, 64, 256}[pageSizeChoice];
        long headBytes = new long[] {64, 96, 4096, 40_960}[headBytesChoice];
        int srcHeads = Math.max(1, totalHeads / prefillTp), dstHeads = Math.max(1, totalHeads / decodeTp);
        long srcItem = pageSize * srcHeads * headBytes, dstItem = pageSize * dstHeads * headBytes;
        HeadSlice slice;
        try {
            slice = HeadSlice.resolve(totalHeads, prefillTp, rank % prefillTp, decodeTp, rank % decodeTp, srcItem, dstItem, pageSize);
        } catch (PlanException e) {
            Assume.that(false);
            return;
        }
        int[][] pair = pages(pages, seed);
        CopyPlan plan = TransferPlanner.planKvSliced(pair[0], pair[1], new long[] {srcItem}, new long[] {dstItem}, pageSize,
                new HeadSlice[] {slice});
        // The coverage the prefill declares for it (HandshakeValidator.coverage).
        LinkGranules.Covered c = LinkGranules.Covered.of(dstItem, slice.dstTokenBytes(), slice.dstHeadStart() * slice.headBytes(),
                slice.pieceBytes());
        assertEachGranuleOnce(plan, c, pair[1]);
    }

    @Property(seed = "20261207", tries = 400)
    void reslicedMambaStateIsWholeGranules(@ForAll @IntRange(min = 1, max = 64) int outer, @ForAll @IntRange(min = 0, max = 3) int innerChoice,
                                           @ForAll @IntRange(min = 1, max = 8) int dimPerGroup, @ForAll @IntRange(min = 0, max = 3) int pLog,
                                           @ForAll @IntRange(min = 0, max = 3) int dLog, @ForAll @IntRange(min = 0, max = 7) int rank) {
        int prefillTp = 1 << pLog, decodeTp = 1 << dLog;
        Assume.that(prefillTp != decodeTp);
        long inner = new long[] {2, 64, 12_288, 40_960}[innerChoice];
        // Entries of the sharded dimension over all ranks: divisible by both TP sizes.
        int total = dimPerGroup * Math.max(prefillTp, decodeTp);
        int srcDim = total / prefillTp, dstDim = total / decodeTp;
        long srcItem = outer * srcDim * inner, dstItem = outer * dstDim * inner;
        int prefillRank = rank % prefillTp, decodeRank = rank % decodeTp;
        CopyPlan plan = CopyPlan.reusable();
        try {
            StateSlice.append(plan, 0, 0, 3, 5, srcItem, dstItem, outer, srcDim, prefillTp, prefillRank, decodeTp, decodeRank);
        } catch (PlanException e) {
            Assume.that(false);
            return;
        }
        long dstRow = dstItem / outer, srcRow = srcItem / outer;
        LinkGranules.Covered c = prefillTp >= decodeTp
                ? LinkGranules.Covered.of(dstItem, dstRow, (long) (prefillRank % (prefillTp / decodeTp)) * srcRow, srcRow)
                : LinkGranules.Covered.of(dstItem, dstRow, 0, dstRow);
        assertEachGranuleOnce(plan, c, new int[] {5});
    }

    /** Source and destination page ids: {@code n} distinct ids each, in runs and gaps as a fragmented pool gives them. */
    private static int[][] pages(int n, long seed) {
        Random rnd = new Random(seed);
        int[][] pair = new int[2][n];
        for (int side = 0; side < 2; side++) {
            int id = rnd.nextInt(4);
            for (int i = 0; i < n; i++) {
                pair[side][i] = id;
                id += rnd.nextInt(3) == 0 ? 2 + rnd.nextInt(5) : 1;
            }
        }
        return pair;
    }

    private static void assertEachGranuleOnce(CopyPlan plan, LinkGranules.Covered c, int[] dstItems) {
        Map<Long, Integer> ordinal = new HashMap<>();
        for (int i = 0; i < dstItems.length; i++) ordinal.put((long) dstItems[i], i);
        boolean[] seen = new boolean[(int) (dstItems.length * c.perItem())];
        for (int op = 0; op < plan.size(); op++) {
            assertTrue(plan.length(op) <= CopyPlan.MAX_OP_BYTES, "op " + op + " exceeds the op limit: " + plan);
            long at = plan.dstOffset(op);
            boolean strided = plan.strided(op);
            long piece = strided ? plan.pieceLength(op) : plan.length(op), stride = strided ? plan.dstStride(op) : plan.length(op);
            long items = c.items(at, plan.dstSpan(op), plan.length(op), piece, stride);
            assertTrue(items >= 1, "the gate would refuse op " + op + " of " + plan + " for " + c);
            long first = at / c.item(), granule = c.position(at) / c.granule();
            for (long k = 0; k < (c.perItem() == 1 ? items : 1); k++) {
                Integer idx = ordinal.get(first + k);
                assertTrue(idx != null, "op " + op + " lands in item " + (first + k) + ", not one of the destination's");
                int bit = (int) (idx * c.perItem() + granule);
                assertFalse(seen[bit], "granule " + bit + " planned twice: " + plan);
                seen[bit] = true;
            }
        }
        for (int bit = 0; bit < seen.length; bit++) assertTrue(seen[bit], "granule " + bit + " never planned for " + c + ": " + plan);
    }
}
