package io.kvferry.plan;

import io.kvferry.protocol.Region;

/**
 * Re-slicing per-request state between different attention-TP sizes (SGLang §4.8, extended to
 * sliding-window pages). Both kinds are described by the two numbers SGLang registers per state
 * tensor: {@code state_dim_per_tensor} (this rank's entries of the TP-sharded dimension) and
 * {@code state_slice_outer_counts} (rows before the slice axis).
 * <ul>
 * <li>mamba: a slot is {@code outer} rows, each holding this rank's {@code dim} entries of the sharded
 * dimension, each entry {@code inner} bytes. With P &gt; D a prefill rank's rows fill its part of each
 * decode row; with P &lt; D a decode rank takes its part of each prefill row. One strided op per
 * (tensor, slot): a piece per row ({@link #append}).
 * <li>swa: an index is a window page laid out like a KV page, [token][head][head bytes]: {@code outer}
 * = tokens per page, {@code dim} = this rank's KV heads. Heads are sliced exactly as KV pages are
 * ({@link HeadSlice}), one strided op per (tensor, run of pages) ({@link #appendPages}).
 * </ul>
 * Pure.
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
        plan.addPieces(Region.STATE, component, tensor, src, dst, piece, outer, 1, srcRow, dstRow);
    }

    /**
     * The head slice of a swa tensor's window pages between this prefill rank and one decode rank.
     * Pages are [token][head][bytes] as KV pages are; the model's head count is not registered for
     * state, so it is derived: the side whose ranks do not replicate heads holds them all between
     * its ranks (heads per rank x TP), and a side that replicates holds more than that product.
     *
     * @param tokensPerPage state_slice_outer_counts of the tensor
     * @param srcHeads      state_dim_per_tensor of the tensor: this prefill rank's heads per token
     */
    public static HeadSlice pageHeads(int component, int tensor, long srcItem, long dstItem, int tokensPerPage, int srcHeads,
                                      int prefillTp, int prefillRank, int decodeTp, int decodeRank) {
        String what = "state component " + component + " (swa) tensor " + tensor;
        if (tokensPerPage < 1 || srcHeads < 1) {
            throw new PlanException(what + " needs state_slice_outer_counts (tokens per page) and state_dim_per_tensor (heads) "
                    + "to be resharded across attention TP sizes, got " + tokensPerPage + " and " + srcHeads);
        }
        if (srcItem % ((long) tokensPerPage * srcHeads) != 0) {
            throw new PlanException(what + ": page of " + srcItem + " bytes is not " + tokensPerPage + " tokens x " + srcHeads + " heads");
        }
        long headBytes = srcItem / ((long) tokensPerPage * srcHeads);
        if (dstItem % ((long) tokensPerPage * headBytes) != 0) {
            throw new PlanException(what + ": decode page of " + dstItem + " bytes is not " + tokensPerPage + " tokens of whole "
                    + headBytes + "-byte heads");
        }
        long dstHeads = dstItem / ((long) tokensPerPage * headBytes);
        long totalHeads = Math.min((long) srcHeads * prefillTp, dstHeads * decodeTp);
        try {
            return HeadSlice.resolve((int) totalHeads, prefillTp, prefillRank, decodeTp, decodeRank, srcItem, dstItem, tokensPerPage);
        } catch (PlanException e) {
            throw new PlanException(what + ": " + e.getMessage());
        }
    }

    /** Appends the ops moving window pages {@code runs} of one swa tensor, head-sliced by {@code slice}. */
    public static void appendPages(CopyPlan plan, int component, int tensor, PageRuns runs, long srcItem, long dstItem,
                                   int tokensPerPage, HeadSlice slice) {
        for (int r = 0; r < runs.count(); r++) {
            long src = runs.srcStart(r) * srcItem + slice.srcHeadStart() * slice.headBytes();
            long dst = runs.dstStart(r) * dstItem + slice.dstHeadStart() * slice.headBytes();
            plan.addPieces(Region.STATE, component, tensor, src, dst, slice.pieceBytes(), tokensPerPage, runs.length(r),
                    slice.srcTokenBytes(), slice.dstTokenBytes());
        }
    }
}
