package io.kvferry.engine.serving;

import io.kvferry.engine.model.LlamaConfig;

/** Checks of a request against the model, with messages naming what is wrong. */
final class Requests {
    private Requests() {
    }

    static void validate(int[] prompt, int maxNewTokens, LlamaConfig c) {
        if (prompt == null || prompt.length == 0) throw new IllegalArgumentException("the prompt has no tokens");
        if (maxNewTokens < 1) throw new IllegalArgumentException("max_tokens must be >= 1, got " + maxNewTokens);
        if (prompt.length >= c.seqLen()) {
            throw new IllegalArgumentException("the prompt has " + prompt.length + " tokens; the model's context is " + c.seqLen()
                    + " and must leave room for one output token");
        }
        for (int t : prompt) {
            if (t < 0 || t >= c.vocabSize()) throw new IllegalArgumentException("token id " + t + " is outside the vocabulary (0.." + (c.vocabSize() - 1) + ")");
        }
    }

    /**
     * Prompt plus output tokens a request may reach: capped at the model's context, summed in long
     * (max_tokens = 2^31 - 1, a common "no limit", must not wrap around).
     */
    static int totalTokens(int promptTokens, int maxNewTokens, LlamaConfig c) {
        return (int) Math.min(c.seqLen(), (long) promptTokens + maxNewTokens);
    }
}
