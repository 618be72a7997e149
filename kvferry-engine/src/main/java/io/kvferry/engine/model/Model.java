package io.kvferry.engine.model;

import java.util.Arrays;
import java.util.SplittableRandom;

/**
 * What an engine runs: the Llama weights (embedding, norms, attention, MLPs, classifier: a llama2.c
 * checkpoint or seeded random ones) and, for a {@link ModelVariant} other than llama, the weights of
 * its own layer kinds, seeded random (no checkpoint has them; the text is then noise, the math and the
 * transfers are real). Immutable; shared read-only by every shard.
 *
 * <p>Sizes of the variant layers, all derived from the Llama shape:
 * <ul>
 * <li>window ({@link LayerKind#WINDOW}): {@link #window} positions (not a page multiple on purpose);
 * <li>latent ({@link LayerKind#LATENT}): latent rank {@link #latentRank}, a shared rope key of
 * {@link #ropeDim}; per head a no-rope query/key part and a value of headSize each;
 * <li>recurrent ({@link LayerKind#RECURRENT}): {@link #inner} channels (2 × dim), a causal conv of
 * {@link #convKernel} taps and {@link #stateSize} state entries per channel.
 * </ul>
 */
public final class Model {
    /** Seed of the variant layers' random weights (the same in every process, so separate roles agree). */
    public static final long VARIANT_SEED = 1401;

    public final ModelWeights weights;
    public final LlamaConfig config;
    public final ModelVariant variant;
    public final int window, latentRank, ropeDim, inner, convKernel, stateSize;
    /** Per-layer weights of the variant's own layer kinds; arrays are null for layers of other kinds. */
    public final float[][] qLatent, kvDown, kvNorm, upK, upV;
    public final float[][] inProj, gateProj, conv, convBias, bProj, cProj, aLog, dtWeight, dtBias, skip, outProj;

    private Model(ModelWeights weights, ModelVariant variant) {
        this.weights = weights;
        this.config = weights.config;
        this.variant = variant;
        LlamaConfig c = config;
        window = 24;
        latentRank = 16;
        ropeDim = 4;
        inner = 2 * c.dim();
        convKernel = 4;
        stateSize = 8;
        int L = c.layers(), hs = c.headSize(), dim = c.dim();
        qLatent = new float[L][];
        kvDown = new float[L][];
        kvNorm = new float[L][];
        upK = new float[L][];
        upV = new float[L][];
        inProj = new float[L][];
        gateProj = new float[L][];
        conv = new float[L][];
        convBias = new float[L][];
        bProj = new float[L][];
        cProj = new float[L][];
        aLog = new float[L][];
        dtWeight = new float[L][];
        dtBias = new float[L][];
        skip = new float[L][];
        outProj = new float[L][];
        SplittableRandom r = new SplittableRandom(VARIANT_SEED);
        float inDim = (float) (1 / Math.sqrt(dim));
        for (int l = 0; l < L; l++) {
            switch (variant.kind(l)) {
                case LATENT -> {
                    qLatent[l] = random(c.heads() * (hs + ropeDim) * dim, r, inDim);
                    kvDown[l] = random((latentRank + ropeDim) * dim, r, inDim);
                    kvNorm[l] = filled(latentRank, 1f);
                    float inRank = (float) (1 / Math.sqrt(latentRank));
                    upK[l] = random(c.heads() * hs * latentRank, r, inRank);
                    upV[l] = random(c.heads() * hs * latentRank, r, inRank);
                }
                case RECURRENT -> {
                    inProj[l] = random(inner * dim, r, inDim);
                    gateProj[l] = random(inner * dim, r, inDim);
                    conv[l] = random(inner * convKernel, r, 0.5f);
                    convBias[l] = random(inner, r, 0.1f);
                    bProj[l] = random(stateSize * dim, r, inDim);
                    cProj[l] = random(stateSize * dim, r, inDim);
                    aLog[l] = new float[inner * stateSize];
                    for (int i = 0; i < inner; i++) {
                        for (int n = 0; n < stateSize; n++) aLog[l][i * stateSize + n] = (float) Math.log(n + 1);
                    }
                    dtWeight[l] = random(inner, r, 0.5f);
                    dtBias[l] = filled(inner, -2f);
                    skip[l] = filled(inner, 1f);
                    outProj[l] = random(dim * inner, r, (float) (1 / Math.sqrt(inner)));
                }
                default -> {
                    // attention and window layers use the Llama weights
                }
            }
        }
    }

    /** The plain Llama model of these weights. */
    public static Model llama(ModelWeights weights) {
        return new Model(weights, ModelVariant.LLAMA);
    }

    public static Model of(ModelWeights weights, ModelVariant variant) {
        return new Model(weights, variant);
    }

    public LayerKind kind(int layer) {
        return variant.kind(layer);
    }

    /** Layers of kind {@code k} among global layers [from, to). */
    public int count(LayerKind k, int from, int to) {
        int n = 0;
        for (int l = from; l < to; l++) if (kind(l) == k) n++;
        return n;
    }

    /** Checks a TP size: whole KV heads per rank (and whole reduction groups of every variant layer). */
    public void requireTp(int tp) {
        config.requireTp(tp);
        if (inner % config.reductionGroups() != 0) {
            throw new IllegalArgumentException("recurrent width " + inner + " is not a multiple of the " + config.reductionGroups()
                    + " reduction groups");
        }
    }

    /** Window pages a request holds (a ring): enough for any {@link #window} consecutive positions. */
    public int windowPagesPerRequest(int pageSize) {
        return (window - 2) / pageSize + 2;
    }

    /** The model's identity for kvferry's handshake: the weights' and the variant's, so engines of different ones never pair. */
    public String identity() {
        return weights.identity() + "/" + variant.label();
    }

    /** One line for logs and banners. */
    public String describe() {
        return switch (variant) {
            case LLAMA -> "llama";
            case MLA -> "mla (latent rank " + latentRank + " + rope " + ropeDim + " per token, one buffer per layer, replicated over TP)";
            case SWA -> "swa (odd layers attend over a " + window + "-token window; its pages travel as swa state)";
            case HYBRID -> "hybrid (even layers recurrent: " + inner + " channels, conv " + convKernel + ", state " + stateSize
                    + "; their state travels as mamba state)";
        };
    }

    private static float[] random(int n, SplittableRandom r, float scale) {
        float[] a = new float[n];
        for (int i = 0; i < n; i++) a[i] = (float) ((r.nextDouble() * 2 - 1) * scale);
        return a;
    }

    private static float[] filled(int n, float v) {
        float[] a = new float[n];
        Arrays.fill(a, v);
        return a;
    }
}
