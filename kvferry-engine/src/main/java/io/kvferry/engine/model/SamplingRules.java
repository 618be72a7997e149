package io.kvferry.engine.model;

import java.util.Arrays;
import java.util.Map;
import java.util.Objects;

/**
 * What a request adds to the plain sampler ({@link Sampling}): the penalties and logit bias, min-p, and the rules of its
 * end. Every one is a function of the request's parameters and of the token sequence so far (the prompt, which both
 * engines have as {@code input_ids}, then the output: the prefill samples output position 0 with none, the decode the
 * rest with the first token from the aux row and its own), so the prefill and the decode derive the same logits as one
 * colocated run without handing any state over. Applied in vLLM's order ({@link #apply}): min-tokens mask and logit bias
 * on the raw logits, then the repetition penalty, then the frequency and presence penalties; temperature, then min-p,
 * top-p and top-k come after, in {@link Sampling#sample}. Log probabilities are of the raw logits whatever these say.
 *
 * @param frequencyPenalty  OpenAI's, in [-2, 2]: a token's logit minus this times its count in the output so far
 * @param presencePenalty   OpenAI's, in [-2, 2]: a token's logit minus this once it is in the output so far
 * @param repetitionPenalty CTRL's (HF, vLLM, SGLang), &gt; 0, 1 none: the logit of a token of the prompt or the output so
 *                          far divided by it when positive, multiplied by it otherwise
 * @param minP              in [0, 1], 0 none: candidates whose probability (after temperature) is below this times the
 *                          most likely token's are dropped
 * @param biasTokens        OpenAI's {@code logit_bias}: token ids, ascending, each once
 * @param biasValues        each token's bias, in [-100, 100], added to its raw logit
 * @param minTokens         no end (EOS, BOS, a stop token id; the router's stop strings) before this many output tokens:
 *                          the ending tokens' logits are -inf at output positions below it (vLLM's {@code min_tokens},
 *                          SGLang's {@code min_new_tokens})
 * @param ignoreEos         EOS and BOS do not end the answer (nor are they masked by {@code minTokens}); stop token ids still do
 * @param stopTokenIds      tokens that end the answer (the token is an output token, its text left out), ascending, each once
 * @param constraint        the structured output the answer must match ({@link OutputConstraint}), null for none: applied
 *                          last, it masks the tokens that would leave its language, and the end where the output is not a
 *                          whole match
 */
public record SamplingRules(float frequencyPenalty, float presencePenalty, float repetitionPenalty, float minP, int[] biasTokens,
                            float[] biasValues, int minTokens, boolean ignoreEos, int[] stopTokenIds, OutputConstraint constraint) {
    public static final SamplingRules NONE = new SamplingRules(0f, 0f, 1f, 0f, new int[0], new float[0], 0, false, new int[0]);

    /** Without a structured output. */
    public SamplingRules(float frequencyPenalty, float presencePenalty, float repetitionPenalty, float minP, int[] biasTokens,
                         float[] biasValues, int minTokens, boolean ignoreEos, int[] stopTokenIds) {
        this(frequencyPenalty, presencePenalty, repetitionPenalty, minP, biasTokens, biasValues, minTokens, ignoreEos, stopTokenIds, null);
    }

    /** These rules with {@code c} as the structured output (null: none). */
    public SamplingRules withConstraint(OutputConstraint c) {
        return new SamplingRules(frequencyPenalty, presencePenalty, repetitionPenalty, minP, biasTokens, biasValues, minTokens, ignoreEos,
                stopTokenIds, c);
    }
    /** Most stop token ids a request may name: with {@code minTokens} their logits are masked, and some token must remain. */
    public static final int MAX_STOP_TOKEN_IDS = 64;
    /**
     * Most tokens a {@code logit_bias} may name: the router forwards the map to the engines, whose body limit leaves
     * 64 KiB beside the prompt's ids ({@code Http.engineBodyLimit}), and 2,048 entries take at most ~32 KiB there.
     */
    public static final int MAX_LOGIT_BIAS = 2048;
    /** OpenAI's range of {@code frequency_penalty} and {@code presence_penalty}. */
    public static final float MAX_PENALTY = 2f;
    /** OpenAI's range of a {@code logit_bias} value. */
    public static final float MAX_BIAS = 100f;

    public SamplingRules {
        checkPenalty("frequency_penalty", frequencyPenalty);
        checkPenalty("presence_penalty", presencePenalty);
        if (!(repetitionPenalty > 0) || Float.isInfinite(repetitionPenalty)) {
            throw new IllegalArgumentException("repetition_penalty must be > 0 (1: none), got " + repetitionPenalty);
        }
        if (!(minP >= 0 && minP <= 1)) throw new IllegalArgumentException("min_p must be in [0, 1], got " + minP);
        biasTokens = biasTokens.clone();
        biasValues = biasValues.clone();
        if (biasTokens.length != biasValues.length) throw new IllegalArgumentException("logit_bias has " + biasTokens.length + " ids and " + biasValues.length + " values");
        if (biasTokens.length > MAX_LOGIT_BIAS) {
            throw new IllegalArgumentException("logit_bias may name at most " + MAX_LOGIT_BIAS + " tokens, got " + biasTokens.length);
        }
        for (int i = 0; i < biasTokens.length; i++) {
            if (biasTokens[i] < 0 || i > 0 && biasTokens[i] <= biasTokens[i - 1]) {
                throw new IllegalArgumentException("logit_bias token ids must be >= 0, ascending and distinct, got " + Arrays.toString(biasTokens));
            }
            if (!(Math.abs(biasValues[i]) <= MAX_BIAS)) {
                throw new IllegalArgumentException("logit_bias values must be in [-100, 100], got " + biasValues[i] + " for token " + biasTokens[i]);
            }
        }
        if (minTokens < 0) throw new IllegalArgumentException("min_tokens must be >= 0, got " + minTokens);
        stopTokenIds = stopTokenIds.clone();
        if (stopTokenIds.length > MAX_STOP_TOKEN_IDS) {
            throw new IllegalArgumentException("stop_token_ids may name at most " + MAX_STOP_TOKEN_IDS + " tokens, got " + stopTokenIds.length);
        }
        for (int i = 0; i < stopTokenIds.length; i++) {
            if (stopTokenIds[i] < 0 || i > 0 && stopTokenIds[i] <= stopTokenIds[i - 1]) {
                throw new IllegalArgumentException("stop_token_ids must be >= 0, ascending and distinct, got " + Arrays.toString(stopTokenIds));
            }
        }
    }

    private static void checkPenalty(String name, float v) {
        if (!(v >= -MAX_PENALTY && v <= MAX_PENALTY)) throw new IllegalArgumentException(name + " must be in [-2, 2], got " + v);
    }

    /** The rules with a logit bias given as a map's entries in any order (ids distinct), the stop token ids in any order (duplicates once). */
    public static SamplingRules of(float frequencyPenalty, float presencePenalty, float repetitionPenalty, float minP,
                                   Map<Integer, Float> logitBias, int minTokens, boolean ignoreEos, int[] stopTokenIds) {
        int[] ids = logitBias.keySet().stream().mapToInt(Integer::intValue).sorted().toArray();
        float[] values = new float[ids.length];
        for (int i = 0; i < ids.length; i++) values[i] = logitBias.get(ids[i]);
        return new SamplingRules(frequencyPenalty, presencePenalty, repetitionPenalty, minP, ids, values, minTokens, ignoreEos,
                Arrays.stream(stopTokenIds).distinct().sorted().toArray());
    }

    /** Whether these are {@link #NONE}'s: the request samples as before these rules existed, bit for bit and at no cost. */
    public boolean isNone() {
        return !changesLogits() && minP == 0 && !ignoreEos && stopTokenIds.length == 0 && constraint == null;
    }

    /** Whether {@link #apply} may change a logit at some step: else the sampler reads the model's logits as they are. */
    public boolean changesLogits() {
        return changesLogits(0);
    }

    /** Whether {@link #apply} may change a logit at output position {@code step} (the min-tokens mask ends at {@code minTokens}). */
    public boolean changesLogits(int step) {
        return frequencyPenalty != 0 || presencePenalty != 0 || repetitionPenalty != 1 || biasTokens.length > 0 || step < minTokens
                || constraint != null;
    }

    /** A refusal naming the first token id at or above {@code vocabSize}, if any. */
    public void checkVocab(int vocabSize) {
        for (int t : biasTokens) {
            if (t >= vocabSize) throw new IllegalArgumentException("logit_bias names token " + t + ", outside the vocabulary (0.." + (vocabSize - 1) + ")");
        }
        for (int t : stopTokenIds) {
            if (t >= vocabSize) throw new IllegalArgumentException("stop_token_ids names token " + t + ", outside the vocabulary (0.." + (vocabSize - 1) + ")");
        }
    }

    /** Whether {@code token} is one of the stop token ids. */
    public boolean isStopTokenId(int token) {
        return Arrays.binarySearch(stopTokenIds, token) >= 0;
    }

    /**
     * Whether {@code token}, sampled at output position {@code step} (0: the first), ends the answer: a stop token id, or
     * EOS / BOS unless {@code ignoreEos} ({@link Tokenizer#endsSequence}), at position {@code minTokens} or later; under a
     * {@link #constraint}, EOS always (it is sampled only where it may end the answer, or where nothing else is left).
     */
    public boolean ends(int token, int step) {
        return step >= minTokens && (isStopTokenId(token) || !ignoreEos && Tokenizer.endsSequence(token))
                || constraint != null && token == Tokenizer.EOS;
    }

    /**
     * Applies the rules to {@code logits} (changed in place: the caller's copy) for output position {@code step}, of a
     * sequence whose first {@code promptLength} tokens are the prompt and whose next {@code step} are the output so far.
     */
    public void apply(float[] logits, int step, int[] seq, int promptLength) {
        apply(logits, step, seq, promptLength, null);
    }

    /**
     * {@link #apply(float[], int, int[], int)} with the request's {@link OutputConstraint.Progress} through its constraint
     * (null: none kept; the result is the same, a grammar's chart or a DFA's state replayed from the start).
     */
    public void apply(float[] logits, int step, int[] seq, int promptLength, OutputConstraint.Progress progress) {
        if (step < minTokens) {
            for (int t : stopTokenIds) logits[t] = Float.NEGATIVE_INFINITY;
            if (!ignoreEos) {
                logits[Tokenizer.BOS] = Float.NEGATIVE_INFINITY;
                logits[Tokenizer.EOS] = Float.NEGATIVE_INFINITY;
            }
        }
        for (int i = 0; i < biasTokens.length; i++) logits[biasTokens[i]] += biasValues[i];
        int end = promptLength + step;
        if (repetitionPenalty != 1) {
            boolean[] seen = new boolean[logits.length];
            for (int i = 0; i < end; i++) seen[seq[i]] = true;
            for (int t = 0; t < logits.length; t++) {
                if (seen[t]) logits[t] = penalised(logits[t], repetitionPenalty);
            }
        }
        if (frequencyPenalty != 0 || presencePenalty != 0) {
            int[] count = new int[logits.length];
            for (int i = promptLength; i < end; i++) count[seq[i]]++;
            for (int t = 0; t < logits.length; t++) {
                if (count[t] == 0) continue;
                logits[t] -= frequencyPenalty * count[t];
                logits[t] -= presencePenalty;
            }
        }
        if (constraint != null) {
            constraint.mask(logits, seq, promptLength, step, !ignoreEos && step >= minTokens, step >= minTokens, stopTokenIds, progress);
        }
    }

    /**
     * CTRL's rule for one logit. A penalty far from 1 (any value &gt; 0 is accepted, as vLLM's) can take a finite logit past
     * the float range: an infinite logit would make the sampler's softmax NaN (inf - inf), and a seeded draw would then
     * return the vocabulary's last token whatever the model said. Such a result saturates at the largest finite float of
     * its sign instead (the token stays the most, or least, likely); a masked logit (-inf) stays masked.
     */
    static float penalised(float logit, float penalty) {
        float v = logit > 0 ? logit / penalty : logit * penalty;
        return Float.isInfinite(v) && !Float.isInfinite(logit) ? Math.copySign(Float.MAX_VALUE, v) : v;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof SamplingRules r && frequencyPenalty == r.frequencyPenalty && presencePenalty == r.presencePenalty
                && repetitionPenalty == r.repetitionPenalty && minP == r.minP && Arrays.equals(biasTokens, r.biasTokens)
                && Arrays.equals(biasValues, r.biasValues) && minTokens == r.minTokens && ignoreEos == r.ignoreEos
                && Arrays.equals(stopTokenIds, r.stopTokenIds) && Objects.equals(constraint, r.constraint);
    }

    @Override
    public int hashCode() {
        return Arrays.hashCode(new Object[]{frequencyPenalty, presencePenalty, repetitionPenalty, minP, Arrays.hashCode(biasTokens),
                Arrays.hashCode(biasValues), minTokens, ignoreEos, Arrays.hashCode(stopTokenIds), constraint});
    }

    @Override
    public String toString() {
        return "SamplingRules[frequency_penalty=" + frequencyPenalty + ", presence_penalty=" + presencePenalty + ", repetition_penalty="
                + repetitionPenalty + ", min_p=" + minP + ", logit_bias=" + Arrays.toString(biasTokens) + "/" + Arrays.toString(biasValues)
                + ", min_tokens=" + minTokens + ", ignore_eos=" + ignoreEos + ", stop_token_ids=" + Arrays.toString(stopTokenIds) + (constraint == null ? "" : ", " + constraint) + "]";
    }
}
