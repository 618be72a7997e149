package io.kvferry.registry;

import com.fasterxml.jackson.annotation.JsonIgnore;
import com.fasterxml.jackson.annotation.JsonInclude;
import com.fasterxml.jackson.annotation.JsonProperty;

/**
 * The {@code PUT /route} body one prefill rank sends. Field names are SGLang's so either side can be
 * SGLang. The record itself does not validate: the server does, so that it can answer 400 with a
 * message instead of the client throwing before anything reached the wire.
 *
 * @param loadBalanceMethod null is left out of the JSON, which SGLang reads as "follow_bootstrap_room"
 * @param prefillHttpPort   null is left out of the JSON (older senders have no HTTP port to publish)
 * @param kvferryStatusUrl  kvferry's own optional field: the {@code http://host:port/status.json} of the rank's
 *                          process, for the registry's status page; null is left out. SGLang's registry ignores
 *                          fields it does not know, and SGLang ranks never send it (docs/PROTOCOL.md)
 */
@JsonInclude(JsonInclude.Include.NON_NULL)
public record PrefillRankRegistration(
        @JsonProperty("attn_tp_size") int attnTpSize,
        @JsonProperty("attn_tp_rank") int attnTpRank,
        @JsonProperty("attn_cp_size") int attnCpSize,
        @JsonProperty("attn_cp_rank") int attnCpRank,
        @JsonProperty("attn_dp_size") int attnDpSize,
        @JsonProperty("attn_dp_rank") int attnDpRank,
        @JsonProperty("pp_size") int ppSize,
        @JsonProperty("pp_rank") int ppRank,
        @JsonProperty("system_dp_size") int systemDpSize,
        @JsonProperty("system_dp_rank") int systemDpRank,
        @JsonProperty("rank_ip") String rankIp,
        @JsonProperty("rank_port") int rankPort,
        @JsonProperty("page_size") int pageSize,
        @JsonProperty("kv_cache_dtype") String kvCacheDtype,
        @JsonProperty("load_balance_method") String loadBalanceMethod,
        @JsonProperty("enable_dsa_cache_layer_split") boolean enableDsaCacheLayerSplit,
        @JsonProperty("prefill_http_port") Integer prefillHttpPort,
        @JsonProperty("kvferry_status_url") String kvferryStatusUrl) {

    public static final String FOLLOW_BOOTSTRAP_ROOM = "follow_bootstrap_room";

    /** A registration without a status URL (what SGLang ranks send). */
    public PrefillRankRegistration(int attnTpSize, int attnTpRank, int attnCpSize, int attnCpRank, int attnDpSize, int attnDpRank,
                                   int ppSize, int ppRank, int systemDpSize, int systemDpRank, String rankIp, int rankPort,
                                   int pageSize, String kvCacheDtype, String loadBalanceMethod, boolean enableDsaCacheLayerSplit,
                                   Integer prefillHttpPort) {
        this(attnTpSize, attnTpRank, attnCpSize, attnCpRank, attnDpSize, attnDpRank, ppSize, ppRank, systemDpSize, systemDpRank,
                rankIp, rankPort, pageSize, kvCacheDtype, loadBalanceMethod, enableDsaCacheLayerSplit, prefillHttpPort, null);
    }

    /** The DP group the server files this rank under: system DP wins when it is in use. */
    @JsonIgnore
    public int dpGroup() {
        return systemDpSize == 1 ? attnDpRank : systemDpRank;
    }

    /** The DP size derived the same way as {@link #dpGroup()}. */
    @JsonIgnore
    public int dpSize() {
        return systemDpSize == 1 ? attnDpSize : systemDpSize;
    }

    /** A missing method counts as following the room, as SGLang does. */
    @JsonIgnore
    public boolean followBootstrapRoom() {
        return followsBootstrapRoom(loadBalanceMethod);
    }

    /** Whether a prefill with this load-balance method puts room r in DP group r % dp (null: yes, as SGLang reads it). */
    public static boolean followsBootstrapRoom(String loadBalanceMethod) {
        return loadBalanceMethod == null || FOLLOW_BOOTSTRAP_ROOM.equals(loadBalanceMethod);
    }
}
