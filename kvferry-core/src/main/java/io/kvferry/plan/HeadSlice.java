package io.kvferry.plan;

/**
 * Which KV heads move between one prefill rank and one decode rank when their attention-TP sizes
 * differ (MHA/GQA; SGLang §4.4). Per token slot a rank holds {@code heads × headBytes}; the slice
 * is {@code heads} consecutive heads starting at {@code srcHeadStart} in the source slot and
 * {@code dstHeadStart} in the destination slot. Pure.
 *
 * @param headBytes     bytes of one head of one token (head_dim × element size)
 * @param srcTokenBytes bytes of one token slot on the prefill rank
 * @param dstTokenBytes bytes of one token slot on the decode rank
 */
public record HeadSlice(int srcHeadStart, int dstHeadStart, int heads, long headBytes, long srcTokenBytes,
                        long dstTokenBytes) {

    /**
     * @param totalHeads   KV heads of the model (H)
     * @param prefillTp    P; {@code prefillRank} is this prefill rank's attention-TP rank
     * @param decodeTp     D; {@code decodeRank} is the destination's attention-TP rank
     * @param srcItemLen   bytes of one page of one KV buffer on the prefill rank
     * @param dstItemLen   the same on the decode rank
     */
    public static HeadSlice resolve(int totalHeads, int prefillTp, int prefillRank, int decodeTp, int decodeRank,
                                    long srcItemLen, long dstItemLen, int pageSize) {
        if (totalHeads < 1) {
            throw new PlanException("heterogeneous TP needs the model's total KV head count (KVArgs.totalKvHeadNum), got " + totalHeads);
        }
        // A rank holds H/TP heads, or one head replicated over TP/H ranks: any other split leaves heads on no
        // rank (or on two at once), and the slices below would silently move the wrong ones.
        String split = splitError("prefill", totalHeads, prefillTp);
        if (split == null) split = splitError("decode", totalHeads, decodeTp);
        if (split != null) throw new PlanException(split);
        int srcHeads = Math.max(1, totalHeads / prefillTp);
        int dstHeads = Math.max(1, totalHeads / decodeTp);
        if (srcItemLen % ((long) pageSize * srcHeads) != 0 || dstItemLen % ((long) pageSize * dstHeads) != 0) {
            throw new PlanException("page bytes (prefill " + srcItemLen + ", decode " + dstItemLen + ") are not a whole number of "
                    + pageSize + " tokens x heads (" + srcHeads + ", " + dstHeads + ")");
        }
        long srcTokenBytes = srcItemLen / pageSize, dstTokenBytes = dstItemLen / pageSize;
        long headBytes = dstTokenBytes / dstHeads;
        if (srcTokenBytes / srcHeads != headBytes) {
            throw new PlanException("head size differs: prefill " + srcTokenBytes / srcHeads + " bytes per head per token, decode "
                    + headBytes);
        }
        int heads, srcStart, dstStart;
        if (prefillTp > decodeTp) {
            // Several prefill ranks fill one decode rank: each sends all its heads into its place.
            heads = srcHeads;
            srcStart = 0;
            dstStart = ((prefillRank / Math.max(1, prefillTp / totalHeads)) * srcHeads) % dstHeads;
        } else {
            // One prefill rank feeds several decode ranks: each gets its own heads (replicated GQA heads by division).
            heads = dstHeads;
            srcStart = ((decodeRank / Math.max(1, decodeTp / totalHeads)) * dstHeads) % srcHeads;
            dstStart = 0;
        }
        if ((long) (srcStart + heads) * headBytes > srcTokenBytes || (long) (dstStart + heads) * headBytes > dstTokenBytes) {
            throw new PlanException("head slice [" + srcStart + "+" + heads + "] -> [" + dstStart + "+" + heads
                    + "] does not fit the token slots (" + srcTokenBytes + ", " + dstTokenBytes + " bytes)");
        }
        return new HeadSlice(srcStart, dstStart, heads, headBytes, srcTokenBytes, dstTokenBytes);
    }

    private static String splitError(String side, int totalHeads, int tp) {
        if (totalHeads % tp == 0 || tp % totalHeads == 0) return null;
        return "the model's " + totalHeads + " KV heads cannot be split over " + side + " attention TP " + tp
                + ": the TP size must divide the KV head count or be a multiple of it";
    }

    public long pieceBytes() {
        return heads * headBytes;
    }
}
