package io.kvferry.metrics;

import io.micrometer.core.instrument.Tags;

/**
 * Who a manager is, as metric tags: its role and its coordinates in the instance.
 *
 * @param role prefill or decode
 */
public record RankIdentity(String role, int tpRank, int ppRank, int dpRank, int cpRank) {
    public Tags tags() {
        return Tags.of("role", role, "tp_rank", Integer.toString(tpRank), "pp_rank", Integer.toString(ppRank),
                "dp_rank", Integer.toString(dpRank), "cp_rank", Integer.toString(cpRank));
    }

    /** {@code role=prefill tp_rank=0 pp_rank=0 dp_rank=0 cp_rank=0}, for log lines. */
    public String logFields() {
        return "role=" + role + " tp_rank=" + tpRank + " pp_rank=" + ppRank + " dp_rank=" + dpRank + " cp_rank=" + cpRank;
    }
}
