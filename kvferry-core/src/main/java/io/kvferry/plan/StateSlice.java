package io.kvferry.plan;

import io.kvferry.protocol.Region;

/**
 * Re-slicing a per-request state slot (mamba conv/ssm state) between different attention-TP sizes
 * (SGLang §4.8). A slot is laid out as {@code outer} rows, each holding this rank's {@code dim}
 * entries of the TP-sharded dimension, each entry {@code inner} bytes. With P > D a prefill rank's
 * rows fill its part of each decode row; with P < D a decode rank takes its part of each prefill
 * row. Either way it is one strided op per (tensor, slot): a piece per row. Pure.
 */
public final class StateSlice {
    private StateSlice() {}

    /**
     * Appends the op moving one slot of one state tensor.
     *
     * @param srcDim this prefill rank's entries of the sharded dimension (state_dim_per_tensor)
     * @param outer  rows before the slice axis (state_slice_outer_counts)
     */
    public static void append(CopyPlan plan, int component, int tensor, int srcSlot, int dstSlot, long srcItem, long dstItem,
                              int outer, int srcDim, int prefillTp, int prefillRank, int decodeTp, int decodeRank) {
        if (outer < 1 || srcDim < 1 || srcItem % ((long) outer * srcDim) != 0) {
            throw new PlanException("state component " + component + " tensor " + tensor + ": item of " + srcItem
                    + " bytes is not " + outer + " rows x " + srcDim + " entries");
        }
        long inner = srcItem / ((long) outer * srcDim);
        long srcRow = (long) srcDim * inner;
        long dstRow = dstItem / outer;
        if (dstItem % outer != 0 || dstRow % inner != 0) {
            throw new PlanException("state component " + component + " tensor " + tensor + ": decode item of " + dstItem
                    + " bytes does not match " + outer + " rows of " + inner + "-byte entries");
        }
        long dstDim = dstRow / inner;
        long expectedDst = (long) srcDim * prefillTp / decodeTp;
        if (dstDim != expectedDst) {
            throw new PlanException("state component " + component + " tensor " + tensor + ": decode holds " + dstDim
                    + " entries per row, expected " + expectedDst + " for prefill TP " + prefillTp + " -> decode TP " + decodeTp);
        }
        long src = (long) srcSlot * srcItem, dst = (long) dstSlot * dstItem, piece;
        if (prefillTp >= decodeTp) {
            int group = prefillTp / decodeTp;
            piece = srcRow;
            dst += (long) (prefillRank % group) * srcRow;
        } else {
            int group = decodeTp / prefillTp;
            piece = dstRow;
            src += (long) (decodeRank % group) * dstRow;
        }
        plan.addPieces(Region.STATE, component, tensor, src, dst, piece, outer, srcRow, dstRow);
    }
}
