package io.kvferry.engine.serving;

import io.kvferry.engine.model.TokenLogprobs;

import java.util.List;

/**
 * A prompt's input token log probabilities (SGLang's {@code input_token_logprobs}, OpenAI's {@code echo} with
 * {@code logprobs}): prompt token p's is its {@link TokenLogprobs} under the logits of position p - 1, the same
 * computation as an output token's; the first prompt token has none (null: nothing comes before it). A request asks
 * from {@code start} on ({@code logprob_start_len}): the entries are positions [start, prompt length). Chunked prefill
 * computes the logits of each chunk's positions that need them, and only for a request that asked.
 */
final class PromptLogprobs {
    private PromptLogprobs() {
    }

    /** Checks a request's {@code start} (-1: none asked, else within the prompt) and {@code top}. */
    static void check(int start, int top, int promptLength) {
        if (start < -1 || start >= promptLength) {
            throw new IllegalArgumentException("logprob_start_len must be -1 (none) or in [0, " + promptLength + ") (the prompt's tokens), got " + start);
        }
        if (top < 0 || top > TokenLogprobs.MAX_TOP) throw new IllegalArgumentException("top logprobs must be in [0, " + TokenLogprobs.MAX_TOP + "], got " + top);
    }

    /**
     * The first position of chunk [from, to) whose logits are needed: those of input log probabilities from {@code start}
     * (-1: none), and the last chunk's last position (the first output token's); {@code to} when none is.
     */
    static int logitsFrom(int start, int from, int to, int promptLength) {
        int first = to;
        if (start >= 0) {
            int lo = Math.max(from, Math.max(start, 1) - 1), hi = Math.min(to, promptLength - 1);
            if (lo < hi) first = lo;
        }
        if (to == promptLength) first = Math.min(first, to - 1);
        return first;
    }

    /**
     * Adds to {@code out} the input log probabilities chunk [from, to) makes known: prompt positions p in [start, length)
     * with p - 1 in the chunk ({@code logits[p - 1 - from]}); position 0, when asked, gets null with the first chunk.
     */
    static void add(List<TokenLogprobs> out, float[][] logits, int[] prompt, int start, int from, int to, int top) {
        if (start < 0) return;
        if (start == 0 && from == 0) out.add(null);
        int lo = Math.max(from, Math.max(start, 1) - 1), hi = Math.min(to, prompt.length - 1);
        for (int q = lo; q < hi; q++) out.add(TokenLogprobs.of(logits[q - from], prompt[q + 1], top));
    }
}
