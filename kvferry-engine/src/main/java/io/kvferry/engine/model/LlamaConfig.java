package io.kvferry.engine.model;

/**
 * The shape of a Llama model, as the 7-int header of a llama2.c checkpoint gives it.
 *
 * @param dim        model width
 * @param hiddenDim  SwiGLU MLP width
 * @param layers     transformer layers
 * @param heads      query heads
 * @param kvHeads    key/value heads (grouped-query attention: heads / kvHeads queries share one)
 * @param vocabSize  tokens
 * @param seqLen     longest sequence the model (and its RoPE table) supports
 */
public record LlamaConfig(int dim, int hiddenDim, int layers, int heads, int kvHeads, int vocabSize, int seqLen) {
    public LlamaConfig {
        if (dim <= 0 || hiddenDim <= 0 || layers <= 0 || heads <= 0 || kvHeads <= 0 || vocabSize <= 0 || seqLen <= 0) {
            throw new IllegalArgumentException("every model dimension must be positive: " + describe(dim, hiddenDim, layers,
                    heads, kvHeads, vocabSize, seqLen));
        }
        if (dim % heads != 0) throw new IllegalArgumentException("dim " + dim + " is not a multiple of heads " + heads);
        if (heads % kvHeads != 0) throw new IllegalArgumentException("heads " + heads + " is not a multiple of kv heads " + kvHeads);
    }

    /** stories260K's shape (dim 64, hidden 172, 5 layers, 8 heads, 4 KV heads, vocab 512, seq 512): the random-weight default. */
    public static LlamaConfig stories260K() {
        return new LlamaConfig(64, 172, 5, 8, 4, 512, 512);
    }

    public int headSize() {
        return dim / heads;
    }

    public int kvDim() {
        return kvHeads * headSize();
    }

    /** Query heads per KV head. */
    public int kvMul() {
        return heads / kvHeads;
    }

    /**
     * The fixed reduction groups of the row-parallel sums (attention output and MLP down projection):
     * one per KV head. A TP size must divide it; every rank sums whole groups and the all-reduce adds
     * the groups in one global order, so the floats are the same for every TP size.
     */
    public int reductionGroups() {
        return kvHeads;
    }

    /** Checks that a TP size splits this model into whole KV heads and whole MLP blocks. */
    public void requireTp(int tp) {
        if (tp < 1 || kvHeads % tp != 0) {
            throw new IllegalArgumentException("tp " + tp + " must divide the model's " + kvHeads + " KV heads");
        }
        if (hiddenDim % reductionGroups() != 0) {
            throw new IllegalArgumentException("hidden dim " + hiddenDim + " is not a multiple of the " + reductionGroups()
                    + " reduction groups (one per KV head), so the MLP cannot be split");
        }
    }

    /** Checks a PP size: every stage holds at least one layer. */
    public void requirePp(int pp) {
        if (pp < 1 || pp > layers) throw new IllegalArgumentException("pp " + pp + " must be in 1.." + layers + " (the layers)");
    }

    /** First layer of stage {@code stage} of {@code pp} (stages get layers / pp, the last ones one more when uneven). */
    public int stageStart(int pp, int stage) {
        return stage * layers / pp;
    }

    @Override
    public String toString() {
        return describe(dim, hiddenDim, layers, heads, kvHeads, vocabSize, seqLen);
    }

    private static String describe(int dim, int hidden, int layers, int heads, int kvHeads, int vocab, int seq) {
        return "dim=" + dim + " hidden=" + hidden + " layers=" + layers + " heads=" + heads + " kv_heads=" + kvHeads
                + " vocab=" + vocab + " seq_len=" + seq;
    }
}
