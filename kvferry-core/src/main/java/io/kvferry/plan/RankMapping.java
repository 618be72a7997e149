package io.kvferry.plan;

import java.util.ArrayList;
import java.util.List;

/**
 * Which prefill ranks one decode rank talks to, and how many messages each side waits for
 * (SGLang's {@code _resolve_rank_mapping}). Pure.
 *
 * @param targetTpRanks              prefill attention-TP ranks this decode rank sends metadata to
 * @param realTpRank                 the one rank that really writes when KV is replicated (MLA)
 * @param targetCpRanks              prefill CP ranks addressed
 * @param targetPpRanks              prefill PP stages addressed
 * @param requiredDstInfoNum         infos a prefill rank collects per room (decode ranks feeding from it)
 * @param requiredPrefillResponseNum distinct prefill Success statuses this decode rank waits for
 */
public record RankMapping(List<Integer> targetTpRanks, int realTpRank, List<Integer> targetCpRanks,
                          List<Integer> targetPpRanks, int requiredDstInfoNum, int requiredPrefillResponseNum) {

    /**
     * @param prefillTp     prefill attention-TP size P
     * @param decodeTp      decode attention-TP size D
     * @param decodeRank    decode engine rank (taken modulo D)
     * @param mla           KV is replicated across TP ranks
     * @param prefillCp     prefill CP size; {@code allCpRanks} says whether every CP rank transfers
     * @param prefillPp     prefill PP size
     * @param decodePp      decode PP size (must be 1 or equal to prefillPp)
     * @param decodePpRank  decode PP rank
     */
    public static RankMapping resolve(int prefillTp, int decodeTp, int decodeRank, boolean mla,
                                      int prefillCp, boolean allCpRanks, int prefillPp, int decodePp, int decodePpRank) {
        if (prefillTp < 1 || decodeTp < 1) throw new PlanException("TP sizes must be >= 1: prefill " + prefillTp + ", decode " + decodeTp);
        if (Math.max(prefillTp, decodeTp) % Math.min(prefillTp, decodeTp) != 0) {
            throw new PlanException("prefill attn_tp_size " + prefillTp + " and decode attn_tp_size " + decodeTp
                    + " must divide one another");
        }
        if (decodePp != 1 && decodePp != prefillPp) {
            throw new PlanException("decode pp_size " + decodePp + " must be 1 or equal to prefill pp_size " + prefillPp);
        }
        int r = Math.floorMod(decodeRank, decodeTp);
        List<Integer> tp = new ArrayList<>();
        int requiredDst;
        int responses;
        if (decodeTp == prefillTp) {
            tp.add(r);
            requiredDst = 1;
            responses = 1;
        } else if (decodeTp > prefillTp) {
            int ratio = decodeTp / prefillTp;
            tp.add(r / ratio);
            requiredDst = ratio;
            responses = 1;
        } else {
            int ratio = prefillTp / decodeTp;
            for (int i = r * ratio; i < (r + 1) * ratio; i++) tp.add(i);
            requiredDst = 1;
            responses = mla ? 1 : ratio;
        }
        List<Integer> cp = new ArrayList<>();
        if (prefillCp > 1 && allCpRanks) {
            for (int i = 0; i < prefillCp; i++) cp.add(i);
            responses *= prefillCp;
        } else {
            cp.add(0);
        }
        List<Integer> pp = new ArrayList<>();
        if (decodePp == prefillPp) {
            pp.add(decodePpRank);
        } else {
            for (int i = 0; i < prefillPp; i++) pp.add(i);
            responses *= prefillPp;
        }
        return new RankMapping(List.copyOf(tp), tp.getFirst(), List.copyOf(cp), List.copyOf(pp), requiredDst, responses);
    }

    /** A target is a dummy (receives only an empty info and answers with a status) when KV is replicated and it is not the real rank. */
    public boolean isDummy(int tpRank, boolean mla) {
        return mla && tpRank != realTpRank;
    }

    /** SGLang's identity of a prefill sender in decode's response accounting. */
    public static int prefillUniqueRank(int attnTpRank, int ppRank, int ppSize, int cpRank, int cpSize) {
        return attnTpRank * (ppSize * cpSize) + ppRank * cpSize + cpRank;
    }
}
