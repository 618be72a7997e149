package io.kvferry.engine.model;

import org.junit.jupiter.api.Test;

import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class SamplingTest {
    /** top_k keeps the k most likely tokens: 1 is greedy, the vocabulary or -1 changes nothing, k draws among those k only. */
    @Test
    void topKDrawsAmongTheKMostLikely() {
        SplittableRandom r = new SplittableRandom(9);
        float[] logits = new float[512];
        for (int i = 0; i < logits.length; i++) logits[i] = (float) r.nextGaussian();
        TokenLogprobs top5 = TokenLogprobs.of(logits, 0, 5);
        boolean beyond = false;
        for (int step = 0; step < 300; step++) {
            Sampling free = new Sampling(1.5f, 1f, 42), all = new Sampling(1.5f, 1f, 42, 512), k5 = new Sampling(1.5f, 1f, 42, 5);
            assertEquals(Sampling.argmax(logits), new Sampling(1.5f, 1f, 42, 1).sample(logits, step), "top_k 1 is greedy");
            assertEquals(free.sample(logits, step), all.sample(logits, step), "top_k of the whole vocabulary is no limit");
            int t = k5.sample(logits, step);
            boolean in = false;
            for (int id : top5.topTokens()) in |= id == t;
            assertTrue(in, "step " + step + ": token " + t + " is not among the 5 most likely");
            int f = free.sample(logits, step);
            boolean freeIn = false;
            for (int id : top5.topTokens()) freeIn |= id == f;
            beyond |= !freeIn;
        }
        assertTrue(beyond, "without top_k some draws fall outside the 5 most likely (else the test proves nothing)");
        assertThrows(IllegalArgumentException.class, () -> new Sampling(1f, 1f, 0, 0));
        assertThrows(IllegalArgumentException.class, () -> new Sampling(1f, 1f, 0, -2));
    }
}
