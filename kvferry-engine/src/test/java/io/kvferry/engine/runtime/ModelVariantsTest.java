package io.kvferry.engine.runtime;

import io.kvferry.engine.model.LlamaConfig;
import io.kvferry.engine.model.Model;
import io.kvferry.engine.model.ModelVariant;
import io.kvferry.engine.model.ModelWeights;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.serving.ColocatedEngine;
import io.kvferry.engine.serving.EngineSpec;
import io.kvferry.engine.serving.Generation;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.util.Arrays;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The variant layers' math: an independent reference, and exactness under TP, PP, page size and chunking. */
class ModelVariantsTest {
    static final ModelWeights WEIGHTS = ModelWeights.random(LlamaConfig.stories260K(), 7);

    static int[] prompt(int n) {
        int[] p = new int[n];
        p[0] = 1;
        for (int i = 1; i < n; i++) p[i] = 3 + (i * 131 + 17) % 500;
        return p;
    }

    /**
     * The engine (TP2, 4-token pages, 5-token chunks: window rings wrap, latents replicate, recurrent
     * channels split) agrees with the scalar reference over a prompt longer than the window and 30
     * greedy steps past it.
     */
    @ParameterizedTest
    @EnumSource(ModelVariant.class)
    void matchesTheIndependentReference(ModelVariant variant) {
        Model m = Model.of(WEIGHTS, variant);
        int[] prompt = prompt(41);
        int steps = 30;
        ReferenceModel ref = new ReferenceModel(m);
        float[] logits = null;
        for (int p = 0; p < prompt.length; p++) logits = ref.forward(prompt[p], p);
        float[] refFirst = logits.clone();
        int[] refTokens = new int[steps];
        for (int s = 0; s < steps; s++) {
            refTokens[s] = Sampling.argmax(logits);
            logits = ref.forward(refTokens[s], prompt.length + s);
        }
        try (ColocatedEngine e = new ColocatedEngine(new EngineSpec(m, 2, 1, 4, 64, 2, 5))) {
            Generation g = e.generate(prompt, steps, Sampling.GREEDY);
            for (int i = 0; i < refFirst.length; i++) {
                assertEquals(refFirst[i], g.firstLogits()[i], 1e-4f * Math.max(1f, Math.abs(refFirst[i])), variant + " first-token logit " + i);
            }
            assertArrayEquals(Arrays.copyOf(refTokens, g.tokens().length), g.tokens(), variant + ": greedy tokens differ from the reference");
        }
    }

    @ParameterizedTest
    @EnumSource(ModelVariant.class)
    void everyParallelismPageSizeAndChunkingGivesTheSameBits(ModelVariant variant) {
        Model m = Model.of(WEIGHTS, variant);
        int[] prompt = prompt(37);
        Sampling sampled = new Sampling(0.9f, 0.9f, 1234);
        Generation base;
        try (ColocatedEngine e = new ColocatedEngine(new EngineSpec(m, 1, 1, 16, 16, 1, 256))) {
            base = e.generate(prompt, 20, sampled);
        }
        int[][] cases = {{2, 1, 16, 256}, {4, 1, 16, 256}, {1, 2, 16, 256}, {1, 1, 1, 7}, {4, 2, 4, 5}, {2, 1, 5, 1}};
        for (int[] k : cases) {
            try (ColocatedEngine e = new ColocatedEngine(new EngineSpec(m, k[0], k[1], k[2], 128, 1, k[3]))) {
                Generation g = e.generate(prompt, 20, sampled);
                String what = variant + " tp=" + k[0] + " pp=" + k[1] + " page=" + k[2] + " chunk=" + k[3];
                assertArrayEquals(base.tokens(), g.tokens(), what);
                assertArrayEquals(base.firstLogits(), g.firstLogits(), what); // bit for bit
            }
        }
    }

    @Test
    void variantsDifferFromLlamaAndFromEachOther() {
        int[] prompt = prompt(30);
        float[][] first = new float[ModelVariant.values().length][];
        for (ModelVariant v : ModelVariant.values()) {
            try (ColocatedEngine e = new ColocatedEngine(new EngineSpec(Model.of(WEIGHTS, v), 1, 1, 16, 16, 1, 64))) {
                first[v.ordinal()] = e.generate(prompt, 1, Sampling.GREEDY).firstLogits();
            }
        }
        for (int a = 0; a < first.length; a++) {
            for (int b = a + 1; b < first.length; b++) {
                assertFalse(Arrays.equals(first[a], first[b]), ModelVariant.values()[a] + " and " + ModelVariant.values()[b] + " compute the same");
            }
        }
    }

    @Test
    void badVariantsAndLayoutsAreRefusedNamingTheProblem() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ModelVariant.parse("mamba2"));
        assertTrue(e.getMessage().contains("unknown model variant 'mamba2'; use one of llama, mla, swa, hybrid"), e.getMessage());
        // pp 5 gives every layer its own stage: a hybrid stage of one recurrent layer has no KV pages to transfer
        e = assertThrows(IllegalArgumentException.class, () -> new EngineSpec(Model.of(WEIGHTS, ModelVariant.HYBRID), 1, 5, 16, 8, 1, 8));
        assertTrue(e.getMessage().contains("stage 0 (layers 0..0) no attention layer"), e.getMessage());
        assertEquals(5, new EngineSpec(Model.of(WEIGHTS, ModelVariant.MLA), 1, 5, 16, 8, 1, 8).pp());
    }
}
