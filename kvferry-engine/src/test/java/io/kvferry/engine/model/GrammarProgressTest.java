package io.kvferry.engine.model;

import io.kvferry.engine.TestModels;
import io.kvferry.engine.serving.ColocatedEngine;
import io.kvferry.engine.serving.EngineSpec;
import io.kvferry.engine.serving.Generation;
import org.junit.jupiter.api.Test;

import java.util.Arrays;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A request's {@link OutputConstraint.Progress} through its grammar: the Earley chart kept between its steps, each step
 * extending it by the last token's text, the bound on steps charged for that new work alone; the masks equal those of a
 * chart replayed from the start.
 */
class GrammarProgressTest {
    static final String JSON_GRAMMAR = """
            root ::= object
            value ::= object | array | string | number | "true" | "false" | "null"
            object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
            array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
            string ::= "\\"" ( [^"\\\\\\x00-\\x1f] | "\\\\" ( ["\\\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\\""
            number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
            ws ::= [ \\t\\n]*
            """;

    /** The token whose text (not after BOS) is {@code text}, or the longest of ASCII letters and spaces where {@code text} is null. */
    static int token(OutputConstraint.TokenTexts texts, int vocab, String text) {
        int best = -1;
        for (int t = Tokenizer.EOS + 1; t < vocab; t++) {
            char[] c = texts.text(-1, t);
            if (c == null) continue;
            String s = new String(c);
            if (text != null ? s.equals(text) : s.matches("[a-z ]+") && (best < 0 || s.length() > texts.text(-1, best).length)) {
                best = t;
                if (text != null) break;
            }
        }
        assertTrue(best >= 0, "a token " + text);
        return best;
    }

    /**
     * A long answer, a JSON object's string of 120,000 characters: every step costs the same steps (the chart extended
     * by one token, then the walk), far within the bound, where replaying the answer at each step passed the bound of
     * {@link Earley#MAX_WORK} steps a token at 108,055 characters of such a string (the request failed) and cost quadratic
     * work in all. The kept chart's last mask equals the replayed one's.
     */
    @Test
    void aLongAnswerCostsEachStepTheSameAndPassesNoBound() throws Exception {
        TestModels.requireStories();
        Tokenizer tok = ModelFiles.load(null, null).tokenizer();
        int vocab = tok.vocabSize();
        OutputConstraint c = new OutputConstraint.Compiler(tok).ebnf(JSON_GRAMMAR);
        OutputConstraint.TokenTexts texts = new OutputConstraint.TokenTexts(tok);
        int open = token(texts, vocab, "{"), quote = token(texts, vocab, "\""), word = token(texts, vocab, null);
        int n = 2 + 120_000 / texts.text(-1, word).length;
        int[] prompt = tok.encode("x", true, false);
        int[] seq = Arrays.copyOf(prompt, prompt.length + n);
        seq[prompt.length] = open;
        seq[prompt.length + 1] = quote;
        Arrays.fill(seq, prompt.length + 2, seq.length, word);
        OutputConstraint.Progress p = new OutputConstraint.Progress();
        long steady = -1;
        for (int step = 0; step < n; step++) {
            float[] kept = new float[vocab];
            c.mask(kept, seq, prompt.length, step, true, true, new int[0], p);
            assertTrue(kept[seq[prompt.length + step]] == 0f, "the answer goes on at step " + step);
            if (step == 4) steady = p.lastStepWork();
            if (step > 4) assertEquals(steady, p.lastStepWork(), "the steps of step " + step);
        }
        assertTrue(steady > 0 && steady < Earley.MAX_WORK / 100, "steps a token: " + steady);
        float[] kept = new float[vocab], replayed = new float[vocab];
        c.mask(kept, seq, prompt.length, n, true, true, new int[0], p);
        c.mask(replayed, seq, prompt.length, n, true, true, new int[0]);
        assertArrayEquals(replayed, kept);
        assertTrue(p.size() < Earley.MAX_CHART_ITEMS, "size: " + p.size());
    }

    /**
     * On a real answer (the model's, sampled under the grammar): the masks of a chart kept across the steps, of one the
     * decode rebuilds at its first step (after the prefill's first token) and of one replayed at every step are the same,
     * and so are their steps charged against the bound.
     */
    @Test
    void theKeptChartMasksAsTheReplayedOnARealAnswer() throws Exception {
        TestModels.requireStories();
        ModelFiles.Loaded m = ModelFiles.load(null, null);
        Tokenizer tok = m.tokenizer();
        int vocab = tok.vocabSize();
        OutputConstraint c = new OutputConstraint.Compiler(tok).ebnf(JSON_GRAMMAR);
        int[] prompt = tok.encode("Once upon a time", true, false);
        Generation g;
        try (ColocatedEngine engine = new ColocatedEngine(new EngineSpec(m.weights(), 1, 1, 16, 256, 1, 32))) {
            SamplingRules r = SamplingRules.of(0, 0, 1, 0, Map.of(), 96, true, new int[0]).withConstraint(c);
            g = engine.generate(prompt, 96, new Sampling(0.9f, 0.95f, 7, -1, r));
        }
        int[] out = g.tokens();
        assertEquals(96, out.length);
        assertTrue(c.startsMatch(tok.decode(out)), tok.decode(out));
        int[] seq = Arrays.copyOf(prompt, prompt.length + out.length);
        System.arraycopy(out, 0, seq, prompt.length, out.length);
        OutputConstraint.Progress kept = new OutputConstraint.Progress(), decode = new OutputConstraint.Progress();
        for (int step = 0; step < out.length; step++) {
            float[] a = new float[vocab], b = new float[vocab], d = new float[vocab];
            c.mask(a, seq, prompt.length, step, true, true, new int[0], kept);
            OutputConstraint.Progress fresh = new OutputConstraint.Progress();
            c.mask(b, seq, prompt.length, step, true, true, new int[0], fresh);
            assertArrayEquals(b, a, "step " + step);
            assertEquals(fresh.lastStepWork(), kept.lastStepWork(), "the steps charged at step " + step);
            if (step >= 1) {
                c.mask(d, seq, prompt.length, step, true, true, new int[0], decode);
                assertArrayEquals(b, d, "step " + step);
            }
            assertTrue(a[out[step]] == 0f, "the answer's token at step " + step);
        }
    }

    /**
     * The chart kept grows with the output (items per character × characters): past its bound ({@link
     * Earley#MAX_CHART_ITEMS}; here a smaller one, that a short answer reaches) the request fails with that bound named,
     * at the same token whether the chart was kept or rebuilt (the decode's first step).
     */
    @Test
    void theChartsSizeIsBounded() throws Exception {
        TestModels.requireStories();
        Tokenizer tok = ModelFiles.load(null, null).tokenizer();
        int vocab = tok.vocabSize();
        OutputConstraint c = new OutputConstraint.Compiler(tok).ebnf(JSON_GRAMMAR);
        OutputConstraint.TokenTexts texts = new OutputConstraint.TokenTexts(tok);
        int open = token(texts, vocab, "{"), quote = token(texts, vocab, "\""), word = token(texts, vocab, null);
        int n = 2_000, limit = 20_000;
        int[] prompt = tok.encode("x", true, false);
        int[] seq = Arrays.copyOf(prompt, prompt.length + n);
        seq[prompt.length] = open;
        seq[prompt.length + 1] = quote;
        Arrays.fill(seq, prompt.length + 2, seq.length, word);
        OutputConstraint.Progress p = new OutputConstraint.Progress(limit);
        OutputConstraint.Exceeded e = null;
        int failed = -1;
        for (int step = 0; step < n && e == null; step++) {
            try {
                c.mask(new float[vocab], seq, prompt.length, step, true, true, new int[0], p);
            } catch (OutputConstraint.Exceeded x) {
                e = x;
                failed = step;
            }
        }
        assertNotNull(e, "the chart's bound passed");
        assertTrue(e.getMessage().contains("passed a bound of its recognizer at output token " + failed + ": more than " + limit
                + " items in the request's Earley chart"), e.getMessage());
        int f = failed;
        assertThrows(OutputConstraint.Exceeded.class,
                () -> c.mask(new float[vocab], seq, prompt.length, f, true, true, new int[0], new OutputConstraint.Progress(limit)));
        c.mask(new float[vocab], seq, prompt.length, f - 1, true, true, new int[0], new OutputConstraint.Progress(limit));
        c.mask(new float[vocab], seq, prompt.length, f, true, true, new int[0]); // the served bound is far above
    }

    /**
     * A grammar of few items a character (a plain text) still has a set a character, which costs more than its items:
     * the chart's bound counts each set as {@link Earley#SET_ITEMS} items too, so a long output's sets are bounded, not
     * only its items (an output of 2M characters under {@code [a-z ]*} held ~200 MB of sets within a bound on items).
     */
    @Test
    void theChartsBoundCountsItsSets() throws Exception {
        TestModels.requireStories();
        Tokenizer tok = ModelFiles.load(null, null).tokenizer();
        int vocab = tok.vocabSize();
        OutputConstraint c = new OutputConstraint.Compiler(tok).ebnf("root ::= [a-z ]*");
        OutputConstraint.TokenTexts texts = new OutputConstraint.TokenTexts(tok);
        int word = token(texts, vocab, null), limit = 20_000;
        int n = 20_000;
        int[] prompt = tok.encode("x", true, false);
        int[] seq = Arrays.copyOf(prompt, prompt.length + n);
        Arrays.fill(seq, prompt.length, seq.length, word);
        OutputConstraint.Progress p = new OutputConstraint.Progress(limit);
        int step = 0;
        long items = 0;
        try {
            for (; step < n; step++) {
                c.mask(new float[vocab], seq, prompt.length, step, true, true, new int[0], p);
                items = p.items();
            }
        } catch (OutputConstraint.Exceeded e) {
            assertTrue(e.getMessage().contains("more than " + limit + " items in the request's Earley chart (its sets' items and "
                    + Earley.SET_ITEMS + " for each set"), e.getMessage());
        }
        assertTrue(step < n && items < limit / 2, "failed at step " + step + " with " + items + " items");
    }

    /**
     * The whole-match and prefix checks (tests, the compiler's) read a long output as the masks do: bounded by the
     * steps a token times its tokens, not by one token's bound (they threw the recognizer's own error past 5M steps).
     */
    @Test
    void theWholeMatchOfALongOutputIsAnswered() throws Exception {
        TestModels.requireStories();
        Tokenizer tok = ModelFiles.load(null, null).tokenizer();
        int vocab = tok.vocabSize();
        OutputConstraint c = new OutputConstraint.Compiler(tok).ebnf(JSON_GRAMMAR);
        OutputConstraint.TokenTexts texts = new OutputConstraint.TokenTexts(tok);
        int open = token(texts, vocab, "{"), quote = token(texts, vocab, "\""), word = token(texts, vocab, null);
        int n = 2 + 120_000 / texts.text(-1, word).length;
        int[] prompt = tok.encode("x", true, false);
        int[] seq = Arrays.copyOf(prompt, prompt.length + n);
        seq[prompt.length] = open;
        seq[prompt.length + 1] = quote;
        Arrays.fill(seq, prompt.length + 2, seq.length, word);
        assertTrue(!c.wholeMatch(seq, prompt.length, n));
        String text = "{\"" + new String(texts.text(-1, word)).repeat(n - 2);
        assertTrue(c.startsMatch(text) && !c.matches(text) && c.matches(text + "\":1}"));
    }
}
