package io.kvferry.engine.runtime;

import io.kvferry.engine.TestModels;
import io.kvferry.engine.model.LlamaConfig;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.ModelWeights;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.engine.serving.ColocatedEngine;
import io.kvferry.engine.serving.EngineSpec;
import io.kvferry.engine.serving.Generation;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;
import java.util.Arrays;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The engine's model math: llama2.c's sanity figure, an independent reference, and exactness under TP/PP/chunking. */
class ShardedModelTest {
    static final String SANITY = ", there was a little girl named Lily. She loved to play outside in the park.";

    @Test
    void stories260KContinuesOnceUponATimeAsLlama2c() throws Exception {
        Path dir = TestModels.requireStories();
        ModelFiles.Loaded m = ModelFiles.load(dir.resolve(ModelFiles.CHECKPOINT), null);
        int[] prompt = m.tokenizer().encode("Once upon a time", true, false);
        try (ColocatedEngine e = new ColocatedEngine(new EngineSpec(m.weights(), 1, 1, 16, 64, 2, 256))) {
            Generation g = e.generate(prompt, 40, Sampling.GREEDY);
            String text = m.tokenizer().decode(g.tokens());
            assertTrue(text.startsWith(SANITY), () -> "greedy continuation was: " + text);
        }
    }

    @Test
    void matchesAnIndependentScalarReferenceOnStories260K() throws Exception {
        Path dir = TestModels.requireStories();
        ModelFiles.Loaded m = ModelFiles.load(dir.resolve(ModelFiles.CHECKPOINT), null);
        agreesWithReference(m.weights(), m.tokenizer().encode("The little dog ran to the", true, false), 40);
    }

    @Test
    void matchesTheReferenceOnRandomWeights() {
        ModelWeights w = ModelWeights.random(LlamaConfig.stories260K(), 7);
        agreesWithReference(w, new int[]{1, 300, 17, 99, 42, 511, 3}, 30);
    }

    private static void agreesWithReference(ModelWeights w, int[] prompt, int steps) {
        ReferenceLlama ref = new ReferenceLlama(w);
        float[] logits = null;
        for (int p = 0; p < prompt.length; p++) logits = ref.forward(prompt[p], p);
        int[] refTokens = new int[steps];
        float[] refFirst = logits.clone();
        for (int s = 0; s < steps; s++) {
            refTokens[s] = Sampling.argmax(logits);
            logits = ref.forward(refTokens[s], prompt.length + s);
        }
        try (ColocatedEngine e = new ColocatedEngine(new EngineSpec(w, 2, 1, 4, 64, 2, 5))) {
            Generation g = e.generate(prompt, steps, Sampling.GREEDY);
            int n = g.tokens().length;
            assertArrayEquals(Arrays.copyOf(refTokens, n), g.tokens(), "greedy tokens differ from the scalar reference");
            for (int i = 0; i < refFirst.length; i++) {
                assertEquals(refFirst[i], g.firstLogits()[i], 1e-4f * Math.max(1f, Math.abs(refFirst[i])), "first-token logit " + i);
            }
        }
    }

    /** The fixed-group all-reduce makes TP, PP, page size and chunking invisible in the floats. */
    @Test
    void everyParallelismPageSizeAndChunkingGivesTheSameBits() {
        ModelWeights w = ModelWeights.random(LlamaConfig.stories260K(), 11);
        int[] prompt = new int[37];
        for (int i = 0; i < prompt.length; i++) prompt[i] = 3 + (i * 37) % 500;
        Sampling sampled = new Sampling(0.9f, 0.9f, 1234);
        Generation base;
        try (ColocatedEngine e = new ColocatedEngine(new EngineSpec(w, 1, 1, 16, 16, 1, 256))) {
            base = e.generate(prompt, 20, sampled);
        }
        int[][] cases = {{2, 1, 16, 256}, {4, 1, 16, 256}, {1, 2, 16, 256}, {2, 5, 16, 256}, {1, 1, 1, 7}, {4, 2, 4, 5}, {1, 1, 16, 1}};
        for (int[] k : cases) {
            try (ColocatedEngine e = new ColocatedEngine(new EngineSpec(w, k[0], k[1], k[2], 64, 1, k[3]))) {
                Generation g = e.generate(prompt, 20, sampled);
                String what = "tp=" + k[0] + " pp=" + k[1] + " page=" + k[2] + " chunk=" + k[3];
                assertArrayEquals(base.tokens(), g.tokens(), what);
                assertArrayEquals(base.firstLogits(), g.firstLogits(), what); // bit for bit
            }
        }
    }

    /** The batched matrix product sums each output exactly as a lone token's dot product, for any batch and shape. */
    @Test
    void batchedProductsAreBitForBitTheLoneOnes() {
        SplittableRandom r = new SplittableRandom(3);
        int rows = 7, n = 13, stride = 20, colOff = 3, xOff = 2;
        float[] w = new float[(rows + 2) * stride];
        for (int i = 0; i < w.length; i++) w[i] = (float) r.nextGaussian();
        for (int count = 1; count <= 9; count++) {
            float[][] x = new float[count + 1][xOff + n], out = new float[count + 1][rows + 1];
            for (float[] v : x) for (int j = 0; j < v.length; j++) v[j] = (float) r.nextGaussian();
            ShardedModel.matmulBatch(out, 1, x, xOff, 1, count + 1, w, 2, rows, n, stride, colOff);
            for (int b = 1; b <= count; b++) {
                for (int i = 0; i < rows; i++) {
                    float s = 0;
                    for (int j = 0; j < n; j++) s += w[(2 + i) * stride + colOff + j] * x[b][xOff + j];
                    assertEquals(Float.floatToIntBits(s), Float.floatToIntBits(out[b][1 + i]), "batch " + count + " entry " + b + " row " + i);
                }
            }
            assertEquals(0f, out[0][1], "entries outside [from, to) are untouched");
        }
    }

    @Test
    void badShapesAreRefusedNamingTheProblem() {
        ModelWeights w = ModelWeights.random(LlamaConfig.stories260K(), 1);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> new EngineSpec(w, 3, 1, 16, 4, 1, 8));
        assertTrue(e.getMessage().contains("tp 3"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> new EngineSpec(w, 1, 6, 16, 4, 1, 8));
        assertTrue(e.getMessage().contains("pp 6"), e.getMessage());
        try (ColocatedEngine c = new ColocatedEngine(new EngineSpec(w, 1, 1, 16, 64, 1, 8))) {
            e = assertThrows(IllegalArgumentException.class, () -> c.generate(new int[]{1, 600}, 4, Sampling.GREEDY));
            assertTrue(e.getMessage().contains("600"), e.getMessage());
            e = assertThrows(IllegalArgumentException.class, () -> c.generate(new int[0], 4, Sampling.GREEDY));
            assertTrue(e.getMessage().contains("no tokens"), e.getMessage());
        }
        assertEquals(Tokenizer.EOS, 2);
    }
}
