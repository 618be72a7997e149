package io.kvferry.registry;

import com.fasterxml.jackson.annotation.JsonIgnore;
import com.fasterxml.jackson.annotation.JsonProperty;
import com.fasterxml.jackson.annotation.JsonPropertyOrder;

import java.util.List;

/**
 * The topology {@code GET /route} returns for the all-minus-one query (SGLang's
 * {@code PrefillServerInfo} dataclass). The {@code target_*} and {@code required_*} fields belong to the
 * decode side's rank mapping; the server always sends them as null, and they stay in the record only
 * because SGLang serialises the whole dataclass and decoders may expect the keys.
 */
@JsonPropertyOrder({"attn_tp_size", "attn_cp_size", "dp_size", "pp_size", "page_size", "kv_cache_dtype",
        "follow_bootstrap_room", "enable_dsa_cache_layer_split", "prefill_http_port", "target_tp_rank",
        "target_tp_ranks", "target_cp_ranks", "target_pp_ranks", "required_dst_info_num",
        "required_prefill_response_num"})
public record PrefillServerInfo(
        @JsonProperty("attn_tp_size") int attnTpSize,
        @JsonProperty("attn_cp_size") int attnCpSize,
        @JsonProperty("dp_size") int dpSize,
        @JsonProperty("pp_size") int ppSize,
        @JsonProperty("page_size") int pageSize,
        @JsonProperty("kv_cache_dtype") String kvCacheDtype,
        @JsonProperty("follow_bootstrap_room") boolean followBootstrapRoom,
        @JsonProperty("enable_dsa_cache_layer_split") boolean enableDsaCacheLayerSplit,
        @JsonProperty("prefill_http_port") Integer prefillHttpPort,
        @JsonProperty("target_tp_rank") Integer targetTpRank,
        @JsonProperty("target_tp_ranks") List<Integer> targetTpRanks,
        @JsonProperty("target_cp_ranks") List<Integer> targetCpRanks,
        @JsonProperty("target_pp_ranks") List<Integer> targetPpRanks,
        @JsonProperty("required_dst_info_num") Integer requiredDstInfoNum,
        @JsonProperty("required_prefill_response_num") Integer requiredPrefillResponseNum) {

    /** The server's view: the decode-side fields left null. */
    public static PrefillServerInfo of(int attnTpSize, int attnCpSize, int dpSize, int ppSize, int pageSize,
                                       String kvCacheDtype, boolean followBootstrapRoom,
                                       boolean enableDsaCacheLayerSplit, Integer prefillHttpPort) {
        return new PrefillServerInfo(attnTpSize, attnCpSize, dpSize, ppSize, pageSize, kvCacheDtype,
                followBootstrapRoom, enableDsaCacheLayerSplit, prefillHttpPort, null, null, null, null, null, null);
    }

    /** Ranks a complete registration holds: readiness is reached when this many slots are filled. */
    @JsonIgnore
    public long totalRanks() {
        return (long) dpSize * attnCpSize * attnTpSize * ppSize;
    }
}
