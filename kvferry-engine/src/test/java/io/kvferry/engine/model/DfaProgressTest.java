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
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A request's {@link OutputConstraint.Progress} through a DFA (regex, JSON schema): the automaton's state kept between its
 * steps, each step extending it by the last token's text, so a step's automaton steps do not grow with the output; the
 * masks equal those of the state replayed from the start ({@link OutputConstraint#state}) at every step.
 */
class DfaProgressTest {
    static final String SCHEMA = "{\"type\":\"object\",\"properties\":{\"story\":{\"type\":\"string\"}},\"required\":[\"story\"]}";

    /**
     * On real answers (the model's, sampled under a regex and under a JSON schema): the masks of a state kept across the
     * steps, of one the decode rebuilds at its first step (after the prefill's first token), of one rebuilt at every step
     * and of the replay without a progress are the same; the kept state's steps a mask are the last token's characters
     * and the vocabulary check's, never a replay, while a state rebuilt at step n replays the n - 1 tokens before.
     */
    @Test
    void theKeptStateMasksAsTheReplayedOnRealAnswers() throws Exception {
        TestModels.requireStories();
        ModelFiles.Loaded m = ModelFiles.load(null, null);
        Tokenizer tok = m.tokenizer();
        OutputConstraint.Compiler compiler = new OutputConstraint.Compiler(tok);
        OutputConstraint.TokenTexts texts = new OutputConstraint.TokenTexts(tok);
        int[] prompt = tok.encode("Once upon a time", true, false);
        try (ColocatedEngine engine = new ColocatedEngine(new EngineSpec(m.weights(), 1, 1, 16, 256, 1, 32))) {
            for (OutputConstraint c : new OutputConstraint[]{compiler.regex("[A-Za-z ,.!']*"), compiler.jsonSchema(SCHEMA)}) {
                SamplingRules r = SamplingRules.of(0, 0, 1, 0, Map.of(), 128, true, new int[0]).withConstraint(c);
                Generation g = engine.generate(prompt, 128, new Sampling(0.9f, 0.95f, 7, -1, r));
                int[] out = g.tokens();
                assertTrue(out.length >= 64, c + ": " + out.length + " tokens");
                assertTrue(c.startsMatch(tok.decode(out)), tok.decode(out));
                int[] seq = Arrays.copyOf(prompt, prompt.length + out.length);
                System.arraycopy(out, 0, seq, prompt.length, out.length);
                OutputConstraint.Progress kept = new OutputConstraint.Progress(), decode = new OutputConstraint.Progress();
                long chars = 0; // the characters of the output tokens before the last
                for (int step = 0; step < out.length; step++) {
                    int vocab = tok.vocabSize();
                    float[] a = new float[vocab], b = new float[vocab], d = new float[vocab], replayed = new float[vocab];
                    c.mask(a, seq, prompt.length, step, true, true, new int[0], kept);
                    c.mask(replayed, seq, prompt.length, step, true, true, new int[0]);
                    assertArrayEquals(replayed, a, c + ", step " + step);
                    OutputConstraint.Progress fresh = new OutputConstraint.Progress();
                    c.mask(b, seq, prompt.length, step, true, true, new int[0], fresh);
                    assertArrayEquals(replayed, b, c + ", step " + step);
                    if (step >= 1) {
                        c.mask(d, seq, prompt.length, step, true, true, new int[0], decode);
                        assertArrayEquals(replayed, d, c + ", step " + step);
                    }
                    assertTrue(a[out[step]] == 0f, "the answer's token at step " + step);
                    assertEquals(0, kept.lastRebuildWork(), "kept: no replay at step " + step);
                    assertEquals(chars, fresh.lastRebuildWork(), "rebuilt: the replay of the tokens before the last, step " + step);
                    assertEquals(fresh.lastStepWork(), kept.lastStepWork(), "the step's own steps at step " + step);
                    if (step >= 1) chars += texts.text(seq[prompt.length + step - 2], seq[prompt.length + step - 1]).length;
                }
                assertTrue(chars > 100, c + ": a long answer, " + chars + " characters");
            }
        }
    }

    /**
     * A long answer (one word token repeated to some 20,000 characters, after a prompt of BOS alone): every step costs the
     * same automaton steps, the last token's characters and the vocabulary check, where a replay at step n reads the n - 1
     * tokens before; the masks equal the replayed ones at every step.
     */
    @Test
    void aLongAnswerCostsEachStepTheSame() throws Exception {
        TestModels.requireStories();
        Tokenizer tok = ModelFiles.load(null, null).tokenizer();
        int vocab = tok.vocabSize();
        OutputConstraint c = new OutputConstraint.Compiler(tok).regex("[a-z ]*");
        OutputConstraint.TokenTexts texts = new OutputConstraint.TokenTexts(tok);
        int word = GrammarProgressTest.token(texts, vocab, null);
        int length = texts.text(-1, word).length, n = 20_000 / length;
        int[] prompt = {Tokenizer.BOS};
        int[] seq = Arrays.copyOf(prompt, prompt.length + n);
        Arrays.fill(seq, prompt.length, seq.length, word);
        OutputConstraint.Progress p = new OutputConstraint.Progress();
        long steady = -1;
        for (int step = 0; step < n; step++) {
            float[] kept = new float[vocab], replayed = new float[vocab];
            c.mask(kept, seq, prompt.length, step, true, true, new int[0], p);
            c.mask(replayed, seq, prompt.length, step, true, true, new int[0]);
            assertArrayEquals(replayed, kept, "step " + step);
            assertTrue(kept[word] == 0f, "the answer goes on at step " + step);
            assertEquals(0, p.lastRebuildWork());
            if (step == 2) steady = p.lastStepWork();
            if (step > 2) assertEquals(steady, p.lastStepWork(), "the steps of step " + step);
        }
        assertTrue(steady > length, "steps a token: " + steady);
        OutputConstraint.Progress fresh = new OutputConstraint.Progress();
        c.mask(new float[vocab], seq, prompt.length, n - 1, true, true, new int[0], fresh);
        // The replay reads every token before the last: the first after BOS has one leading space less where it has one.
        long replayed = (long) (n - 3) * length + texts.text(Tokenizer.BOS, word).length;
        assertEquals(replayed, fresh.lastRebuildWork());
        assertEquals(steady, fresh.lastStepWork());
    }
}
