package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import io.kvferry.engine.model.TokenLogprobs;

import java.util.List;

/**
 * A finished request; {@code logprobs} (each token's) and {@code textOffsets} (where each token's text begins in
 * {@code text}) are null unless the request asked for log probabilities, {@code inputLogprobs} (the prompt's from
 * the position asked for on, the first prompt token's null, as the prefill computed them) unless it asked for those; {@code finish}: why it ended ({@link Finish}).
 */
record Outcome(long room, int promptTokens, int[] tokens, String text, Finish finish, double ttftMs,
               double e2eMs, JsonNode prefill, JsonNode decodeTimings, List<TokenLogprobs> logprobs, int[] textOffsets,
               List<TokenLogprobs> inputLogprobs) {
    /** OpenAI's {@code finish_reason}: {@code stop} or {@code length}. */
    String finishReason() {
        return finish.reason();
    }

    /** Prompt tokens the prefill took from its prefix cache, not computed (0 from a prefill that does not say). */
    int cachedTokens() {
        return prefill == null ? 0 : prefill.path("cached_tokens").asInt(0);
    }
}
