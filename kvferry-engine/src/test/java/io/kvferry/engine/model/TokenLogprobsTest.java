package io.kvferry.engine.model;

import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class TokenLogprobsTest {
    /** The top list is the most likely tokens, most likely first (ties: the lower id), each value bit for bit Sampling.logprob's. */
    @Test
    void theTopTokensAreTheMostLikelyInOrderWithSamplingsValues() {
        SplittableRandom r = new SplittableRandom(3);
        for (int round = 0; round < 50; round++) {
            float[] logits = new float[512];
            for (int i = 0; i < logits.length; i++) logits[i] = (float) (r.nextGaussian() * 4);
            logits[r.nextInt(512)] = logits[r.nextInt(512)]; // a tie, now and then in the top
            int top = r.nextInt(TokenLogprobs.MAX_TOP + 1), token = r.nextInt(512);
            TokenLogprobs lp = TokenLogprobs.of(logits, token, top);
            assertEquals(token, lp.token());
            assertEquals(Sampling.logprob(logits, token), lp.logprob(), 0f);
            assertEquals(top, lp.topTokens().length);
            Integer[] order = new Integer[512];
            for (int i = 0; i < 512; i++) order[i] = i;
            Arrays.sort(order, (a, b) -> logits[a] != logits[b] ? Float.compare(logits[b], logits[a]) : Integer.compare(a, b));
            double sum = 0;
            for (int k = 0; k < top; k++) {
                assertEquals(order[k], lp.topTokens()[k], "rank " + k);
                assertEquals(Sampling.logprob(logits, order[k]), lp.topLogprobs()[k], 0f, "bit for bit: rank " + k);
                sum += Math.exp(lp.topLogprobs()[k]);
            }
            assertTrue(sum <= 1 + 1e-6, "exp-sum " + sum);
        }
        float[] flat = new float[8];
        assertArrayEquals(new int[]{0, 1, 2}, TokenLogprobs.of(flat, 5, 3).topTokens(), "ties: the lower id first");
        assertEquals(0, TokenLogprobs.of(flat, 5, 0).topTokens().length);
        assertThrows(IllegalArgumentException.class, () -> TokenLogprobs.of(flat, 5, TokenLogprobs.MAX_TOP + 1));
        assertThrows(IllegalArgumentException.class, () -> TokenLogprobs.of(flat, 5, -1));
    }

    /** Every token has a name of its own (a top-logprobs map keyed by them keeps them all), and its bytes are what it adds to a text. */
    @Test
    void tokensHaveDistinctNamesAndTheirTextsBytes() throws Exception {
        for (Tokenizer t : new Tokenizer[]{ModelFiles.load(null, null).tokenizer(), Tokenizer.synthetic(512)}) {
            Set<String> names = new HashSet<>();
            for (int i = 0; i < t.vocabSize(); i++) assertTrue(names.add(t.tokenText(i)), "token " + i + " '" + t.tokenText(i) + "' named twice");
            assertEquals("<0x61>", t.tokenText(3 + 'a'));
            assertArrayEquals(new byte[]{'a'}, t.tokenBytes(3 + 'a'));
            assertArrayEquals(new byte[0], t.tokenBytes(Tokenizer.BOS));
            assertArrayEquals(new byte[0], t.tokenBytes(Tokenizer.EOS));
            int[] ids = t.encode("Once upon a time", false, false);
            ByteArrayOutputStream text = new ByteArrayOutputStream();
            for (int id : ids) text.writeBytes(t.tokenBytes(id));
            assertEquals(t.decode(ids), text.toString(StandardCharsets.UTF_8));
        }
    }
}
