package io.kvferry.plan;

import io.kvferry.api.StateType;
import io.kvferry.protocol.Region;

import java.util.Arrays;
import java.util.List;
import java.util.function.Consumer;

/**
 * Pure planning: which local bytes go to which peer bytes for a chunk. No I/O, no shared state.
 * The executing transport checks nothing here; the decode side checks every op against the room.
 */
public final class TransferPlanner {
    private TransferPlanner() {}

    /**
     * KV ops for equal per-page layouts: one op per (buffer, run), all runs of buffer 0, then buffer 1, ….
     *
     * @param itemLens bytes of one page in each KV buffer (must equal the peer's)
     */
    public static CopyPlan planKv(int[] srcPages, int[] dstPages, long[] itemLens) {
        return planKv(srcPages, dstPages, itemLens, null);
    }

    /**
     * As {@link #planKv(int[], int[], long[])}, with source buffer b landing in destination buffer
     * {@code dstBufferOf[b]} (buffers paired by layer id, see {@link LayerPairing}); null = same index.
     */
    public static CopyPlan planKv(int[] srcPages, int[] dstPages, long[] itemLens, int[] dstBufferOf) {
        PageRuns runs = PageRuns.group(srcPages, dstPages);
        CopyPlan plan = new CopyPlan(runs.count() * itemLens.length);
        appendKv(plan, runs, itemLens, dstBufferOf);
        return plan;
    }

    /** Appends the KV ops of {@code runs} to {@code plan} (a worker's reusable plan), as {@link #planKv(int[], int[], long[], int[])}. */
    public static void appendKv(CopyPlan plan, PageRuns runs, long[] itemLens, int[] dstBufferOf) {
        for (int b = 0; b < itemLens.length; b++) {
            plan.targetBuffer(dstBufferOf == null ? b : dstBufferOf[b]);
            long item = itemLens[b];
            for (int r = 0; r < runs.count(); r++) {
                plan.addItems(Region.KV, 0, b, runs.srcStart(r) * item, runs.dstStart(r) * item, item, runs.length(r));
            }
        }
        plan.targetBuffer(-1);
    }

    /**
     * Head-sliced KV ops (MHA/GQA with different TP): per (buffer, run), one strided op whose pieces
     * are the slice's heads of each token, gathered on the sending side. Buffers pair by index and
     * each side's page layout is given by its own item lengths.
     */
    public static CopyPlan planKvSliced(int[] srcPages, int[] dstPages, long[] srcItemLens, long[] dstItemLens,
                                        int pageSize, HeadSlice[] slices) {
        return planKvSliced(srcPages, dstPages, srcItemLens, dstItemLens, pageSize, slices, null);
    }

    /** @param dstBufferOf destination buffer of each source buffer; {@code dstItemLens} is indexed by destination buffer */
    public static CopyPlan planKvSliced(int[] srcPages, int[] dstPages, long[] srcItemLens, long[] dstItemLens,
                                        int pageSize, HeadSlice[] slices, int[] dstBufferOf) {
        PageRuns runs = PageRuns.group(srcPages, dstPages);
        CopyPlan plan = new CopyPlan(runs.count() * srcItemLens.length);
        appendKvSliced(plan, runs, srcItemLens, dstItemLens, pageSize, slices, dstBufferOf);
        return plan;
    }

    /** Appends the head-sliced KV ops of {@code runs} to {@code plan}, as {@link #planKvSliced(int[], int[], long[], long[], int, HeadSlice[], int[])}. */
    public static void appendKvSliced(CopyPlan plan, PageRuns runs, long[] srcItemLens, long[] dstItemLens, int pageSize,
                                      HeadSlice[] slices, int[] dstBufferOf) {
        for (int b = 0; b < srcItemLens.length; b++) {
            HeadSlice s = slices[b];
            int db = dstBufferOf == null ? b : dstBufferOf[b];
            plan.targetBuffer(db);
            for (int r = 0; r < runs.count(); r++) {
                long src = runs.srcStart(r) * srcItemLens[b] + s.srcHeadStart() * s.headBytes();
                long dst = runs.dstStart(r) * dstItemLens[db] + s.dstHeadStart() * s.headBytes();
                plan.addPieces(Region.KV, 0, b, src, dst, s.pieceBytes(), pageSize, runs.length(r), s.srcTokenBytes(),
                        s.dstTokenBytes());
            }
        }
        plan.targetBuffer(-1);
    }

    /**
     * State ops when prefill and decode attention TP differ: mamba slots are re-sliced along their
     * TP-sharded dimension, swa window pages are head-sliced as KV pages are ({@link StateSlice});
     * other state types cannot be resharded and fail. Under a TP change the swa page lists must be
     * of equal length (the same-TP path truncates with a warning; here a mismatch is an error).
     *
     * @param dims  per component, per tensor: this prefill rank's sharded entries per row (swa: heads)
     * @param outer per component, per tensor: rows before the slice axis (swa: tokens per page)
     */
    public static CopyPlan planStateSliced(List<StateType> types, int[][] srcIndices, int[][] dstIndices,
                                           long[][] srcItemLens, long[][] dstItemLens, int[][] dims, int[][] outer,
                                           int prefillTp, int prefillRank, int decodeTp, int decodeRank) {
        CopyPlan plan = new CopyPlan(types.size() * 2);
        appendStateSliced(plan, types, srcIndices, dstIndices, srcItemLens, dstItemLens, dims, outer, prefillTp, prefillRank,
                decodeTp, decodeRank);
        return plan;
    }

    /** Appends re-sliced state ops to {@code plan}, as {@link #planStateSliced}. */
    public static void appendStateSliced(CopyPlan plan, List<StateType> types, int[][] srcIndices, int[][] dstIndices,
                                         long[][] srcItemLens, long[][] dstItemLens, int[][] dims, int[][] outer,
                                         int prefillTp, int prefillRank, int decodeTp, int decodeRank) {
        if (dstIndices == null) return;
        int components = Math.min(types.size(), dstIndices.length);
        for (int c = 0; c < components; c++) {
            int[] src = indicesOf(srcIndices, c), dst = indicesOf(dstIndices, c);
            if (dst.length == 0) continue;
            StateType type = types.get(c);
            if (src.length == 0) throw noneSent(c, type, dst.length);
            if (type == StateType.MAMBA) {
                if (src.length != 1 || dst.length != 1) {
                    throw new PlanException("state component " + c + " (mamba) needs exactly one slot per side, got "
                            + src.length + " and " + dst.length);
                }
                for (int t = 0; t < srcItemLens[c].length; t++) {
                    StateSlice.append(plan, c, t, src[0], dst[0], srcItemLens[c][t], dstItemLens[c][t], outer[c][t], dims[c][t],
                            prefillTp, prefillRank, decodeTp, decodeRank);
                }
            } else if (type == StateType.SWA) {
                if (src.length != dst.length) {
                    throw new PlanException("state component " + c + " (swa) window page count mismatch: prefill " + src.length
                            + " vs decode " + dst.length + "; under a TP change both sides must send the same window");
                }
                PageRuns runs = PageRuns.group(src, dst);
                for (int t = 0; t < srcItemLens[c].length; t++) {
                    HeadSlice s = StateSlice.pageHeads(c, t, srcItemLens[c][t], dstItemLens[c][t], outer[c][t], dims[c][t],
                            prefillTp, prefillRank, decodeTp, decodeRank);
                    StateSlice.appendPages(plan, c, t, runs, srcItemLens[c][t], dstItemLens[c][t], outer[c][t], s);
                }
            } else {
                throw notReshardable(c, type, prefillTp, decodeTp);
            }
        }
    }

    /**
     * Checks that one tensor of a state component can be resharded between this prefill rank and a
     * decode rank of another attention-TP size (the handshake's check, before any request).
     *
     * @throws PlanException naming the component, the tensor and what does not fit
     */
    public static void checkStateReshard(StateType type, int component, int tensor, long srcItem, long dstItem, int outer, int dim,
                                         int prefillTp, int prefillRank, int decodeTp, int decodeRank) {
        if (type != StateType.MAMBA && type != StateType.SWA) throw notReshardable(component, type, prefillTp, decodeTp);
        if (dim < 1 || outer < 1) {
            throw new PlanException("state component " + component + " tensor " + tensor + " needs state_dim_per_tensor and "
                    + "state_slice_outer_counts to be resharded across attention TP sizes");
        }
        if (type == StateType.MAMBA) {
            StateSlice.append(CopyPlan.probe(), component, tensor, 0, 0, srcItem, dstItem, outer, dim, prefillTp, prefillRank,
                    decodeTp, decodeRank);
        } else {
            StateSlice.pageHeads(component, tensor, srcItem, dstItem, outer, dim, prefillTp, prefillRank, decodeTp, decodeRank);
        }
    }

    private static PlanException notReshardable(int component, StateType type, int prefillTp, int decodeTp) {
        return new PlanException("state component " + component + " (" + type.wire() + ") cannot be resharded between "
                + "prefill TP " + prefillTp + " and decode TP " + decodeTp);
    }

    private static final int[] NO_INDICES = new int[0];

    /** A component's indices; none when the list, or the component's entry, is missing. */
    private static int[] indicesOf(int[][] lists, int component) {
        return lists == null || component >= lists.length || lists[component] == null ? NO_INDICES : lists[component];
    }

    /** The decode asked for slots of a component this rank's chunk names no source for: they would stay unwritten. */
    private static PlanException noneSent(int component, StateType type, int asked) {
        return new PlanException("state component " + component + " (" + type.wire() + "): the decode asked for " + asked
                + (asked == 1 ? " index" : " indices") + " but this prefill rank sent none with the last chunk; its slots would stay unwritten");
    }

    /** Aux ops: one row per metadata buffer, from the prefill's row to the decode's row. */
    public static CopyPlan planAux(int srcAuxIndex, int dstAuxIndex, long[] itemLens) {
        CopyPlan plan = new CopyPlan(itemLens.length);
        appendAux(plan, srcAuxIndex, dstAuxIndex, itemLens);
        return plan;
    }

    /** Appends the aux ops to {@code plan}, as {@link #planAux}. */
    public static void appendAux(CopyPlan plan, int srcAuxIndex, int dstAuxIndex, long[] itemLens) {
        if (srcAuxIndex < 0 || dstAuxIndex < 0) return;
        for (int b = 0; b < itemLens.length; b++) {
            plan.addItems(Region.AUX, 0, b, srcAuxIndex * itemLens[b], dstAuxIndex * itemLens[b], itemLens[b], 1);
        }
    }

    /**
     * State ops, component by component in order. Paged types (swa, dsa, …) with more source than
     * destination indices send the first ones, reported through {@code warnings}; fewer source
     * indices (decode slots that would stay unwritten, none at all included) and any mismatch of
     * positional types (mamba slots, ring rows) fail. A component the decode asked nothing of is
     * skipped; null {@code dstIndices} (a rank that writes no state) plans nothing.
     *
     * @param itemLens per component, per tensor: bytes of one index
     */
    public static CopyPlan planState(List<StateType> types, int[][] srcIndices, int[][] dstIndices,
                                     long[][] itemLens, Consumer<String> warnings) {
        CopyPlan plan = new CopyPlan(types.size() * 2);
        appendState(plan, types, srcIndices, dstIndices, itemLens, warnings);
        return plan;
    }

    /** Appends the state ops to {@code plan}, as {@link #planState}. */
    public static void appendState(CopyPlan plan, List<StateType> types, int[][] srcIndices, int[][] dstIndices,
                                   long[][] itemLens, Consumer<String> warnings) {
        if (dstIndices == null) return;
        int components = Math.min(types.size(), dstIndices.length);
        for (int c = 0; c < components; c++) {
            int[] src = indicesOf(srcIndices, c), dst = indicesOf(dstIndices, c);
            if (dst.length == 0) continue;
            if (src.length == 0) throw noneSent(c, types.get(c), dst.length);
            if (src.length != dst.length) {
                StateType t = types.get(c);
                if (!t.isPaged() || src.length < dst.length) {
                    // Fewer source indices would leave decode slots it asked for unwritten: never a silent partial room.
                    throw new PlanException("state component " + c + " (" + t.wire() + ") index count mismatch: prefill "
                            + src.length + " vs decode " + dst.length + (t.isPaged()
                            ? "; the decode's extra indices would stay unwritten"
                            : "; positional state must match exactly"));
                }
                int n = dst.length;
                warnings.accept("state component " + c + " (" + t.wire() + ") index count mismatch: prefill "
                        + src.length + " vs decode " + dst.length + "; the prefill's extra indices are not sent");
                src = Arrays.copyOf(src, n);
            }
            PageRuns runs = PageRuns.group(src, dst);
            for (int tensor = 0; tensor < itemLens[c].length; tensor++) {
                long item = itemLens[c][tensor];
                for (int r = 0; r < runs.count(); r++) {
                    plan.addItems(Region.STATE, c, tensor, runs.srcStart(r) * item, runs.dstStart(r) * item, item, runs.length(r));
                }
            }
        }
    }
}
