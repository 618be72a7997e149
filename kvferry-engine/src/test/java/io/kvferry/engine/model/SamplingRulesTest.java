package io.kvferry.engine.model;

import org.junit.jupiter.api.Test;

import java.util.HashMap;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.stream.IntStream;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The sampler's request rules: penalties, logit bias, min-p, min tokens, ignore_eos and stop token ids, as vLLM applies them. */
class SamplingRulesTest {
    static final int VOCAB = 32;

    static SamplingRules rules(float freq, float pres, float rep, float minP, Map<Integer, Float> bias, int minTokens, boolean ignoreEos,
                               int... stopIds) {
        return SamplingRules.of(freq, pres, rep, minP, bias, minTokens, ignoreEos, stopIds);
    }

    static Sampling greedy(SamplingRules r) {
        return new Sampling(0f, 1f, 0, -1, r);
    }

    /** Logits of a small vocabulary, every one well below {@code 7} (the argmax, 3.0) and {@code 9} (2.5). */
    static float[] logits() {
        float[] l = new float[VOCAB];
        for (int i = 0; i < VOCAB; i++) l[i] = -1f - i * 0.01f;
        l[7] = 3.0f;
        l[9] = 2.5f;
        return l;
    }

    /** The sequence: prompt {1, 4, 5}, then the outputs. */
    static int[] seq(int... outputs) {
        int[] s = new int[3 + outputs.length];
        s[0] = 1;
        s[1] = 4;
        s[2] = 5;
        System.arraycopy(outputs, 0, s, 3, outputs.length);
        return s;
    }

    @Test
    void frequencyAndPresencePenaltiesCountTheOutputSoFarAndChangeTheGreedyToken() {
        float[] l = logits();
        float[] before = l.clone();
        assertEquals(7, greedy(SamplingRules.NONE).sample(l, 1, seq(7), 3));
        // frequency: 7 occurs once (0.4 < the 0.5 lead), then twice (0.8): the penalty is per occurrence.
        Sampling freq = greedy(rules(0.4f, 0, 1, 0, Map.of(), 0, false));
        assertEquals(7, freq.sample(l, 1, seq(7), 3));
        assertEquals(9, freq.sample(l, 2, seq(7, 7), 3));
        // Only the step's output counts: the same sequence read at step 1 has one 7 of output.
        assertEquals(7, freq.sample(l, 1, seq(7, 7), 3));
        // presence: once, however many times.
        Sampling pres = greedy(rules(0, 0.6f, 1, 0, Map.of(), 0, false));
        assertEquals(9, pres.sample(l, 1, seq(7), 3));
        assertEquals(7, pres.sample(l, 0, seq(), 3), "nothing generated yet: no penalty");
        // A token of the prompt only is not penalised by either.
        float[] promptTop = logits();
        promptTop[4] = 4f;
        assertEquals(4, greedy(rules(2, 2, 1, 0, Map.of(), 0, false)).sample(promptTop, 1, seq(7), 3));
        // A negative penalty rewards repeats.
        float[] nine = logits();
        nine[9] = 3.1f;
        assertEquals(7, greedy(rules(0, -0.5f, 1, 0, Map.of(), 0, false)).sample(nine, 1, seq(7), 3));
        assertArrayEquals(before, l, 0f, "the caller's logits stay the model's (log probabilities are of those)");
        // The formula: logit - freq * count - pres * (count > 0).
        float[] applied = logits();
        rules(0.25f, 0.5f, 1, 0, Map.of(), 0, false).apply(applied, 3, seq(7, 7, 9), 3);
        assertEquals(3.0f - 0.25f * 2 - 0.5f, applied[7], 0f);
        assertEquals(2.5f - 0.25f - 0.5f, applied[9], 0f);
        assertEquals(logits()[4], applied[4], 0f);
    }

    @Test
    void repetitionPenaltyDividesPositiveAndMultipliesNegativeLogitsOfPromptAndOutputTokens() {
        float[] l = logits();
        l[4] = 3.0f; // a prompt token at the top (tie with 7: the lower id wins)
        l[9] = 2.5f;
        assertEquals(4, greedy(SamplingRules.NONE).sample(l, 1, seq(7), 3));
        Sampling rep = greedy(rules(0, 0, 1.5f, 0, Map.of(), 0, false));
        assertEquals(9, rep.sample(l, 1, seq(7), 3), "4 (prompt) and 7 (output) are penalised: 3 / 1.5 = 2 < 2.5");
        float[] applied = l.clone();
        rules(0, 0, 2f, 0, Map.of(), 0, false).apply(applied, 1, seq(20), 3);
        assertEquals(3.0f / 2, applied[4], 0f);
        assertEquals(l[20] * 2, applied[20], 0f, "a negative logit is multiplied");
        assertEquals(l[1] * 2, applied[1], 0f, "the prompt's BOS too");
        assertEquals(l[9], applied[9], 0f, "a token not in the sequence is untouched");
        assertEquals(l[7], applied[7], 0f);
    }

    @Test
    void anExtremeRepetitionPenaltyKeepsTheLogitsFiniteAndTheDrawTheModels() {
        float[] l = logits();
        l[4] = 3.0f; // prompt token 4 and output token 7 at the top: divided by 1e-40 both pass the float range
        SamplingRules tiny = rules(0, 0, 1e-40f, 0, Map.of(), 0, false);
        float[] applied = l.clone();
        tiny.apply(applied, 1, seq(7), 3);
        for (int t = 0; t < VOCAB; t++) assertTrue(Float.isFinite(applied[t]), "token " + t + ": " + applied[t]);
        for (long seed = 0; seed < 16; seed++) {
            int token = new Sampling(0.9f, 1f, seed, -1, tiny).sample(l, 1, seq(7), 3);
            // Before: inf - inf in the softmax made every probability NaN, and each draw returned the vocabulary's last token.
            assertTrue(token == 4 || token == 7, "seed " + seed + " drew " + token);
            assertTrue(new Sampling(0.9f, 1f, seed, -1, rules(0, 0, 1e-40f, 0.5f, Map.of(), 0, false)).sample(l, 1, seq(7), 3) != VOCAB - 1);
        }
        SamplingRules huge = rules(0, 0, 3e38f, 0, Map.of(), 0, false);
        float[] negative = l.clone();
        huge.apply(negative, 1, seq(20), 3); // -1.2 * 3e38 passes -Float.MAX_VALUE
        assertEquals(-Float.MAX_VALUE, negative[20], 0f);
        float[] masked = l.clone();
        masked[5] = Float.NEGATIVE_INFINITY;
        huge.apply(masked, 1, seq(20), 3);
        assertEquals(Float.NEGATIVE_INFINITY, masked[5], 0f, "a masked logit stays masked");
    }

    @Test
    void minPDropsTokensBelowItsShareOfTheMostLikelysProbability() {
        SplittableRandom r = new SplittableRandom(5);
        float[] l = new float[VOCAB];
        for (int i = 0; i < VOCAB; i++) l[i] = (float) r.nextGaussian() * 0.5f;
        l[3] = 2f;
        l[11] = 1.6f; // p(11) / p(3) = e^-0.4 = 0.67: kept by min_p 0.6, every other token well below
        Sampling plain = new Sampling(1f, 1f, 42), cut = new Sampling(1f, 1f, 42, -1, rules(0, 0, 1, 0.6f, Map.of(), 0, false));
        boolean outside = false;
        boolean[] seen = new boolean[VOCAB];
        for (int step = 0; step < 400; step++) {
            int t = cut.sample(l, step, seq(), 3);
            assertTrue(t == 3 || t == 11, "step " + step + ": token " + t + " is below min_p");
            seen[t] = true;
            int f = plain.sample(l, step);
            outside |= f != 3 && f != 11;
        }
        assertTrue(seen[3] && seen[11], "both tokens above min_p are drawn");
        assertTrue(outside, "without min_p some draws fall outside (else the test proves nothing)");
        // min_p 1 keeps the most likely alone: greedy at any temperature.
        Sampling one = new Sampling(1f, 1f, 42, -1, rules(0, 0, 1, 1f, Map.of(), 0, false));
        for (int step = 0; step < 50; step++) assertEquals(3, one.sample(l, step));
        // min_p 0 is no rule: the same bits as the plain sampler.
        Sampling zero = new Sampling(1f, 1f, 42, -1, rules(0, 0, 1, 0f, Map.of(), 0, false));
        for (int step = 0; step < 50; step++) assertEquals(plain.sample(l, step), zero.sample(l, step, seq(), 3));
    }

    @Test
    void logitBiasForcesOrBansAToken() {
        float[] l = logits();
        assertEquals(25, greedy(rules(0, 0, 1, 0, Map.of(25, 100f), 0, false)).sample(l, 0, seq(), 3));
        assertEquals(9, greedy(rules(0, 0, 1, 0, Map.of(7, -100f), 0, false)).sample(l, 0, seq(), 3));
        Sampling hot = new Sampling(1.5f, 1f, 3, -1, rules(0, 0, 1, 0, Map.of(25, 100f), 0, false));
        for (int step = 0; step < 50; step++) assertEquals(25, hot.sample(l, step, seq(), 3), "step " + step);
        assertEquals(7, greedy(rules(0, 0, 1, 0, Map.of(25, 1f), 0, false)).sample(l, 0, seq(), 3), "a small bias leaves the order");
    }

    @Test
    void minTokensMasksTheEndingTokensUntilThenAndIgnoreEosLetsThemThrough() {
        float[] l = logits();
        l[Tokenizer.BOS] = 5f; // the model would end the story now
        l[Tokenizer.EOS] = 4f;
        assertEquals(Tokenizer.BOS, greedy(SamplingRules.NONE).sample(l, 0, seq(), 3));
        Sampling min2 = greedy(rules(0, 0, 1, 0, Map.of(), 2, false));
        assertEquals(7, min2.sample(l, 0, seq(), 3), "neither BOS nor EOS before 2 tokens");
        assertEquals(7, min2.sample(l, 1, seq(7), 3));
        assertEquals(Tokenizer.BOS, min2.sample(l, 2, seq(7, 7), 3));
        assertFalse(min2.ends(Tokenizer.BOS, 1));
        assertTrue(min2.ends(Tokenizer.BOS, 2));
        assertTrue(min2.ends(Tokenizer.EOS, 2));
        assertTrue(Sampling.GREEDY.ends(Tokenizer.BOS, 0));
        // ignore_eos: BOS is sampled (not masked) and does not end the answer.
        Sampling ignore = greedy(rules(0, 0, 1, 0, Map.of(), 2, true));
        assertEquals(Tokenizer.BOS, ignore.sample(l, 0, seq(), 3));
        assertFalse(ignore.ends(Tokenizer.BOS, 0));
        assertFalse(ignore.ends(Tokenizer.EOS, 5));
        // Sampled at temperature: BOS holds most of the mass, and never comes before min_tokens.
        Sampling hot = new Sampling(1f, 1f, 8, -1, rules(0, 0, 1, 0, Map.of(), 50, false));
        Sampling plain = new Sampling(1f, 1f, 8);
        boolean ends = false;
        for (int step = 0; step < 50; step++) {
            int t = hot.sample(l, step, new int[60], 3);
            assertTrue(t != Tokenizer.BOS && t != Tokenizer.EOS, "step " + step + ": " + t);
            ends |= Tokenizer.endsSequence(plain.sample(l, step));
        }
        assertTrue(ends, "without min_tokens the story ends (else the test proves nothing)");
    }

    @Test
    void stopTokenIdsEndTheAnswerAndAreMaskedBeforeMinTokens() {
        float[] l = logits();
        Sampling stop7 = greedy(rules(0, 0, 1, 0, Map.of(), 0, false, 7, 7));
        assertArrayEquals(new int[]{7}, stop7.rules().stopTokenIds(), "named twice, once");
        assertTrue(stop7.ends(7, 0));
        assertFalse(Sampling.GREEDY.ends(7, 0));
        assertFalse(stop7.ends(9, 0));
        assertTrue(stop7.ends(Tokenizer.BOS, 0), "EOS and BOS still end");
        Sampling ignoring = greedy(rules(0, 0, 1, 0, Map.of(), 0, true, 7));
        assertTrue(ignoring.ends(7, 0), "ignore_eos leaves stop token ids (vLLM's)");
        Sampling min1 = greedy(rules(0, 0, 1, 0, Map.of(), 1, false, 7));
        assertEquals(9, min1.sample(l, 0, seq(), 3), "a stop token id is masked before min_tokens");
        assertFalse(min1.ends(7, 0));
        assertEquals(7, min1.sample(l, 1, seq(9), 3));
        assertTrue(min1.ends(7, 1));
    }

    private static void built(SamplingRules r) {
        assertTrue(r != null);
    }

    @Test
    void outOfRangeValuesAreRefusedNamingTheField() {
        String[][] cases = {
                {"frequency_penalty", "2.5"}, {"presence_penalty", "-3"}, {"repetition_penalty", "0"}, {"min_p", "1.5"},
                {"logit_bias", "101"}, {"min_tokens", "-1"}, {"stop_token_ids", "-1"},
        };
        for (String[] c : cases) {
            float v = Float.parseFloat(c[1]);
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> built(switch (c[0]) {
                case "frequency_penalty" -> rules(v, 0, 1, 0, Map.of(), 0, false);
                case "presence_penalty" -> rules(0, v, 1, 0, Map.of(), 0, false);
                case "repetition_penalty" -> rules(0, 0, v, 0, Map.of(), 0, false);
                case "min_p" -> rules(0, 0, 1, v, Map.of(), 0, false);
                case "logit_bias" -> rules(0, 0, 1, 0, Map.of(3, v), 0, false);
                case "min_tokens" -> rules(0, 0, 1, 0, Map.of(), (int) v, false);
                default -> rules(0, 0, 1, 0, Map.of(), 0, false, (int) v);
            }), c[0]);
            assertTrue(e.getMessage().startsWith(c[0]), e.getMessage());
        }
        assertThrows(IllegalArgumentException.class, () -> rules(0, 0, 1, 0, Map.of(), 0, false, IntStream.range(0, SamplingRules.MAX_STOP_TOKEN_IDS + 1).toArray()));
        Map<Integer, Float> many = new HashMap<>();
        for (int t = 0; t <= SamplingRules.MAX_LOGIT_BIAS; t++) many.put(t, 1f);
        assertTrue(assertThrows(IllegalArgumentException.class, () -> rules(0, 0, 1, 0, many, 0, false)).getMessage().startsWith("logit_bias may name at most"));
        IllegalArgumentException vocab = assertThrows(IllegalArgumentException.class, () -> rules(0, 0, 1, 0, Map.of(32, 1f), 0, false).checkVocab(VOCAB));
        assertTrue(vocab.getMessage().startsWith("logit_bias names token 32"), vocab.getMessage());
        vocab = assertThrows(IllegalArgumentException.class, () -> rules(0, 0, 1, 0, Map.of(), 0, false, 40).checkVocab(VOCAB));
        assertTrue(vocab.getMessage().startsWith("stop_token_ids names token 40"), vocab.getMessage());
        assertThrows(IllegalStateException.class, () -> greedy(rules(0.5f, 0, 1, 0, Map.of(), 0, false)).sample(logits(), 0),
                "a penalty needs the sequence");
        assertTrue(SamplingRules.NONE.isNone());
        assertEquals(SamplingRules.NONE, rules(0, 0, 1, 0, Map.of(), 0, false));
    }
}
