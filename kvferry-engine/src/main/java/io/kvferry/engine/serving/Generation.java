package io.kvferry.engine.serving;

import io.kvferry.engine.model.TokenLogprobs;

import java.util.List;

/**
 * A finished request: its output tokens (the first from the prefill), the first token's logits (as
 * the prefill computed them), why it stopped, and where its time went.
 *
 * @param logprobs      each output token's log probabilities, when the request asked for them (null when it did not)
 * @param inputLogprobs the prompt's input token log probabilities from the position asked for on, the first prompt
 *                      token's null ({@code PromptLogprobs}); null when the request did not ask
 * @param finishReason "stop" (EOS or BOS, the last token: {@link io.kvferry.engine.model.Tokenizer#endsSequence}, unless
 *                     the request ignores them; or one of its stop token ids: {@link io.kvferry.engine.model.SamplingRules#ends}),
 *                     "length" (max tokens or the model's seq_len)
 */
public record Generation(long room, int[] tokens, float[] firstLogits, String finishReason, Timings timings, List<TokenLogprobs> logprobs,
                         List<TokenLogprobs> inputLogprobs) {
    /** Without log probabilities. */
    public Generation(long room, int[] tokens, float[] firstLogits, String finishReason, Timings timings) {
        this(room, tokens, firstLogits, finishReason, timings, null, null);
    }

    /** Without input token log probabilities. */
    public Generation(long room, int[] tokens, float[] firstLogits, String finishReason, Timings timings, List<TokenLogprobs> logprobs) {
        this(room, tokens, firstLogits, finishReason, timings, logprobs, null);
    }

    /** The token that ended the request (its last: a stop token id, EOS or BOS) when it ended with "stop", else -1. */
    public int matchedToken() {
        return "stop".equals(finishReason) && tokens.length > 0 ? tokens[tokens.length - 1] : -1;
    }

    /**
     * @param prefillComputeMs prefill forward of the prompt (all chunks)
     * @param transferMs       decode: metadata sent → every rank's KV landed (Success)
     * @param firstDecodeMs    the first decode step after the KV landed (the running batch's step that included it)
     * @param bytes            KV + aux bytes that landed on the decode ranks
     */
    public record Timings(double prefillComputeMs, double transferMs, double firstDecodeMs, long bytes) {
        public static final Timings NONE = new Timings(0, 0, 0, 0);
    }
}
