package io.kvferry.registry;

import com.fasterxml.jackson.annotation.JsonProperty;

/** Where one prefill rank accepts control connections, as {@code GET /route} reports it. */
public record RankEndpoint(@JsonProperty("rank_ip") String rankIp, @JsonProperty("rank_port") int rankPort) {
}
