package io.kvferry.engine.model;

/**
 * One output token's log probabilities under the model's own distribution: log softmax of the raw logits, at
 * temperature 1 whatever the request samples with (as {@link Sampling#logprob} and OpenAI's and SGLang's logprobs),
 * its own and those of the {@code topTokens.length} most likely tokens, most likely first (ties: the lower id first).
 * Computed only for a request that asks for them.
 */
public record TokenLogprobs(int token, float logprob, int[] topTokens, float[] topLogprobs) {
    /** The most top log probabilities a request may ask for per token (OpenAI's chat limit, 20; its legacy completions' is 5). */
    public static final int MAX_TOP = 20;

    public TokenLogprobs {
        if (topTokens.length != topLogprobs.length) throw new IllegalArgumentException("top tokens and logprobs differ in length");
    }

    /** {@code token}'s log probability and the {@code top} most likely tokens' in {@code logits}. */
    public static TokenLogprobs of(float[] logits, int token, int top) {
        return of(logits, token, Sampling.logprob(logits, token), top);
    }

    /**
     * As {@link #of(float[], int, int)}, with {@code token}'s log probability as already computed (the prefill's, from
     * the aux row: the same {@link Sampling#logprob} of the same logits).
     */
    public static TokenLogprobs of(float[] logits, int token, float logprob, int top) {
        if (top < 0 || top > MAX_TOP) throw new IllegalArgumentException("top logprobs must be in [0, " + MAX_TOP + "], got " + top);
        int n = Math.min(top, logits.length);
        int[] ids = new int[n];
        float[] lps = new float[n];
        if (n == 0) return new TokenLogprobs(token, logprob, ids, lps);
        // The same terms, in the same order, as Sampling.logprob: a token's value here is bit for bit its value there.
        float max = Float.NEGATIVE_INFINITY;
        for (float l : logits) max = Math.max(max, l);
        double sum = 0;
        for (float l : logits) sum += Math.exp(l - max);
        double logSum = Math.log(sum);
        int kept = 0;
        for (int i = 0; i < logits.length; i++) {
            float lp = (float) (logits[i] - max - logSum);
            if (kept == n && !(lp > lps[n - 1])) continue; // ties keep the lower id, already in
            int at = Math.min(kept, n - 1);
            while (at > 0 && lp > lps[at - 1]) {
                lps[at] = lps[at - 1];
                ids[at] = ids[at - 1];
                at--;
            }
            lps[at] = lp;
            ids[at] = i;
            if (kept < n) kept++;
        }
        return new TokenLogprobs(token, logprob, ids, lps);
    }
}
