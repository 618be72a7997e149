package io.kvferry.engine.http;

import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.model.SamplingRules;

import java.util.Objects;
import java.util.OptionalLong;

/**
 * What the client asked for, checked: sampling (top_k -1: no limit) without its seed (the room is the default seed, so
 * prefill and decode agree on it), the seed if one was given, the stop strings, and the log probabilities
 * ({@code topLogprobs}: -1 none, else each token's with that many of the most likely tokens'); {@code logprobStart}: the
 * first prompt position whose input token log probabilities it asks for (SGLang's {@code logprob_start_len}, -1: none),
 * each with {@code max(topLogprobs, 0)} top ones. {@code maxTokens} 0: the prompt alone, on the prefill only.
 * {@code rules}: its penalties, logit bias, min-p and end rules ({@link RequestParams#rules}), which the engines apply.
 * {@code cacheSalt}: vLLM's {@code cache_salt} (null: none), sent to both engines: the request shares prefix cache pages only
 * with requests of the same salt.
 */
record Ask(Prompt prompt, int maxTokens, float temperature, float topP, int topK, OptionalLong seed, StopSequences stop, int topLogprobs,
           int logprobStart, SamplingRules rules, String cacheSalt) {
    Ask {
        Objects.requireNonNull(rules, "rules");
        if (topLogprobs < -1 || topLogprobs > LogprobsShape.MAX_TOP) {
            throw new IllegalArgumentException("top logprobs must be in [-1, " + LogprobsShape.MAX_TOP + "], got " + topLogprobs);
        }
        if (logprobStart < -1 || maxTokens < 0) throw new IllegalArgumentException("logprob start " + logprobStart + ", max tokens " + maxTokens);
        try {
            new Sampling(temperature, topP, 0, topK); // its checks, with messages naming the parameter
        } catch (IllegalArgumentException e) { // the message starts with the field's name: the 400's param
            throw new Http.BadRequest(e.getMessage().split(" ", 2)[0], e.getMessage());
        }
    }

    Sampling sampling(long room) {
        return new Sampling(temperature, topP, seed.orElse(room), topK, rules);
    }

    /** The ask of sample {@code sample} of {@code prompt}: the seed, if any, plus the sample's number ({@link OpenAiRoutes#choices}). */
    Ask sample(Prompt prompt, int sample) {
        OptionalLong s = seed.isPresent() ? OptionalLong.of(seed.getAsLong() + sample) : seed;
        return new Ask(prompt, maxTokens, temperature, topP, topK, s, stop, topLogprobs, logprobStart, rules, cacheSalt);
    }
}
