package io.kvferry.engine.serving;

import io.kvferry.engine.kv.KvPool;
import io.kvferry.engine.model.LayerKind;
import io.kvferry.engine.model.Model;
import io.kvferry.engine.model.ModelWeights;

/**
 * One engine instance's model and memory: the model (weights and variant), its TP and PP sizes, and
 * its KV pool (pages of {@code pageSize} tokens, {@code pages} of them per shard, one aux row per
 * request in flight, {@code maxRequests} of them). {@code chunkTokens}: the chunked-prefill size (any
 * number of tokens, not page aligned).
 */
public record EngineSpec(Model model, int tp, int pp, int pageSize, int pages, int maxRequests, int chunkTokens) {
    public EngineSpec {
        model.requireTp(tp);
        model.config.requirePp(pp);
        if (pageSize < 1) throw new IllegalArgumentException("page size must be >= 1, got " + pageSize);
        if (pages < 1) throw new IllegalArgumentException("pages must be >= 1, got " + pages);
        if (maxRequests < 1) throw new IllegalArgumentException("max requests must be >= 1, got " + maxRequests);
        if (chunkTokens < 1) throw new IllegalArgumentException("chunk tokens must be >= 1, got " + chunkTokens);
        for (int s = 0; s < pp; s++) {
            int first = model.config.stageStart(pp, s), end = model.config.stageStart(pp, s + 1);
            if (model.count(LayerKind.ATTENTION, first, end) + model.count(LayerKind.LATENT, first, end) == 0) {
                throw new IllegalArgumentException("pp " + pp + " gives stage " + s + " (layers " + first + ".." + (end - 1)
                        + ") no attention layer, so no KV pages to transfer; the " + model.variant.label()
                        + " variant needs fewer stages");
            }
        }
    }

    /** The plain Llama model of {@code weights}. */
    public EngineSpec(ModelWeights weights, int tp, int pp, int pageSize, int pages, int maxRequests, int chunkTokens) {
        this(Model.llama(weights), tp, pp, pageSize, pages, maxRequests, chunkTokens);
    }

    public ModelWeights weights() {
        return model.weights;
    }

    public EngineSpec withParallelism(int tp, int pp) {
        return new EngineSpec(model, tp, pp, pageSize, pages, maxRequests, chunkTokens);
    }

    public EngineSpec withChunkTokens(int chunk) {
        return new EngineSpec(model, tp, pp, pageSize, pages, maxRequests, chunk);
    }

    public EngineSpec withPages(int pages) {
        return new EngineSpec(model, tp, pp, pageSize, pages, maxRequests, chunkTokens);
    }

    public EngineSpec withMaxRequests(int n) {
        return new EngineSpec(model, tp, pp, pageSize, pages, n, chunkTokens);
    }

    public EngineSpec withModel(Model m) {
        return new EngineSpec(m, tp, pp, pageSize, pages, maxRequests, chunkTokens);
    }

    public int pagesFor(int tokens) {
        return (tokens + pageSize - 1) / pageSize;
    }

    /** Pools [stage][rank]: rank r holds KV heads [r·H/tp, (r+1)·H/tp), stage s its layers. */
    KvPool[][] newPools(boolean sharedMemory, String label) {
        var c = model.config;
        KvPool[][] pools = new KvPool[pp][tp];
        try {
            for (int s = 0; s < pp; s++) {
                int first = c.stageStart(pp, s), layers = c.stageStart(pp, s + 1) - first;
                for (int r = 0; r < tp; r++) {
                    pools[s][r] = new KvPool(model, pageSize, pages, maxRequests, first, layers, tp, sharedMemory,
                            label + "-pp" + s + "-tp" + r);
                }
            }
        } catch (RuntimeException e) {
            for (KvPool[] s : pools) for (KvPool p : s) if (p != null) p.close();
            throw e;
        }
        return pools;
    }
}
