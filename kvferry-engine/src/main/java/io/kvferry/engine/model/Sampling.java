package io.kvferry.engine.model;

import java.util.Arrays;
import java.util.Objects;
import java.util.SplittableRandom;

/**
 * How the next token is chosen: greedy (temperature 0) or seeded temperature / top-k / top-p (nucleus): the
 * candidates are the most likely tokens, at most {@code topK} of them (-1: no limit) and no more than reach
 * {@code topP} of the probability, as SGLang's sampler cuts both on the one sorted distribution. The
 * coin of step {@code n} is derived from (seed, n) alone, so the prefill (first token) and the decode
 * (the rest) draw the same sequence as one colocated run without handing any RNG state over. A request's
 * {@link SamplingRules} (penalties, logit bias, min-p, the rules of its end) are functions of its token sequence so
 * far, so both sides derive them too; a request without any samples exactly as before them, at no extra cost.
 */
public record Sampling(float temperature, float topP, long seed, int topK, SamplingRules rules) {
    public static final Sampling GREEDY = new Sampling(0f, 1f, 0);

    public Sampling {
        Objects.requireNonNull(rules, "rules");
        if (!(temperature >= 0) || Float.isInfinite(temperature)) throw new IllegalArgumentException("temperature must be >= 0, got " + temperature);
        if (!(topP > 0 && topP <= 1)) throw new IllegalArgumentException("top_p must be in (0, 1], got " + topP);
        if (topK != -1 && topK < 1) throw new IllegalArgumentException("top_k must be -1 (no limit) or at least 1, got " + topK);
    }

    /** Without {@link SamplingRules}. */
    public Sampling(float temperature, float topP, long seed, int topK) {
        this(temperature, topP, seed, topK, SamplingRules.NONE);
    }

    /** Without a top-k limit. */
    public Sampling(float temperature, float topP, long seed) {
        this(temperature, topP, seed, -1);
    }

    /**
     * The token for output position {@code step} (0 = the first output token), of a request without rules that read the
     * sequence (penalties, logit bias, min tokens): {@link #sample(float[], int, int[], int)} otherwise.
     */
    public int sample(float[] logits, int step) {
        if (rules.changesLogits(step)) throw new IllegalStateException("the rules " + rules + " need the sequence: sample(logits, step, seq, promptLength)");
        return pick(logits, step);
    }

    /**
     * The token for output position {@code step}, with the rules applied to a copy of {@code logits} (the caller's stay
     * the model's: log probabilities are of those): {@code seq} holds the prompt ({@code promptLength} tokens) and then
     * the {@code step} output tokens so far.
     */
    public int sample(float[] logits, int step, int[] seq, int promptLength) {
        return sample(logits, step, seq, promptLength, null);
    }

    /**
     * {@link #sample(float[], int, int[], int)} with the request's {@link OutputConstraint.Progress} through its structured
     * output, kept by the caller between the request's steps (null: none; the token is the same).
     */
    public int sample(float[] logits, int step, int[] seq, int promptLength, OutputConstraint.Progress progress) {
        if (!rules.changesLogits(step)) return pick(logits, step);
        float[] ruled = logits.clone();
        rules.apply(ruled, step, seq, promptLength, progress);
        return pick(ruled, step);
    }

    /** Whether {@code token}, sampled at output position {@code step}, ends the answer ({@link SamplingRules#ends}). */
    public boolean ends(int token, int step) {
        return rules.ends(token, step);
    }

    private int pick(float[] logits, int step) {
        if (temperature == 0f) return argmax(logits);
        int n = logits.length;
        float max = Float.NEGATIVE_INFINITY;
        for (float l : logits) max = Math.max(max, l);
        double[] p = new double[n];
        double sum = 0;
        for (int i = 0; i < n; i++) {
            p[i] = Math.exp((logits[i] - max) / temperature);
            sum += p[i];
        }
        Integer[] order = new Integer[n];
        for (int i = 0; i < n; i++) {
            p[i] /= sum;
            order[i] = i;
        }
        Arrays.sort(order, (a, b) -> p[b] != p[a] ? Double.compare(p[b], p[a]) : Integer.compare(a, b));
        double cum = 0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            cum += p[order[i]];
            if (cum >= topP) {
                keep = i + 1;
                break;
            }
        }
        if (topK > 0 && topK < keep) { // fewer candidates: the coin spans their mass (no limit: the same bits as before)
            keep = topK;
            cum = 0;
            for (int i = 0; i < keep; i++) cum += p[order[i]];
        }
        if (rules.minP() > 0) { // drops the candidates below min_p times the most likely's probability (none: the same bits as before)
            double floor = rules.minP() * p[order[0]];
            int k = 1;
            while (k < keep && p[order[k]] >= floor) k++;
            if (k < keep) {
                keep = k;
                cum = 0;
                for (int i = 0; i < keep; i++) cum += p[order[i]];
            }
        }
        double coin = new SplittableRandom(seed * 0x9E3779B97F4A7C15L + step).nextDouble() * Math.min(cum, 1.0);
        double acc = 0;
        for (int i = 0; i < keep; i++) {
            acc += p[order[i]];
            if (coin < acc) return order[i];
        }
        return order[keep - 1];
    }

    public static int argmax(float[] logits) {
        int best = 0;
        for (int i = 1; i < logits.length; i++) if (logits[i] > logits[best]) best = i;
        return best;
    }

    /** log softmax(logits)[token] at temperature 1. */
    public static float logprob(float[] logits, int token) {
        float max = Float.NEGATIVE_INFINITY;
        for (float l : logits) max = Math.max(max, l);
        double sum = 0;
        for (float l : logits) sum += Math.exp(l - max);
        return (float) (logits[token] - max - Math.log(sum));
    }
}
