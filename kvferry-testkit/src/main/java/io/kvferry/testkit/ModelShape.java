package io.kvferry.testkit;


import io.kvferry.api.StateType;

import java.util.List;
import java.util.Map;

/**
 * The KV layout of a model, enough to size and fill realistic buffers: layers, KV heads, head
 * dim, element size, MLA or MHA, and optional per-request state tensors (hybrid models).
 *
 * @param name          preset name
 * @param layers        attention layers
 * @param kvHeads       KV heads (MHA/GQA); ignored for MLA
 * @param headDim       dims per head; for MLA the latent + rope width
 * @param dtypeBytes    bytes per element (2 for bf16)
 * @param mla           one latent buffer per layer instead of K and V
 * @param stateBytes    per state tensor: bytes of one request slot (empty: no state)
 */
public record ModelShape(String name, int layers, int kvHeads, int headDim, int dtypeBytes, boolean mla,
                         List<Long> stateBytes) {

    public static final Map<String, ModelShape> PRESETS = Map.of(
            "llama-3.1-8b", new ModelShape("llama-3.1-8b", 32, 8, 128, 2, false, List.of()),
            "qwen2.5-7b", new ModelShape("qwen2.5-7b", 28, 4, 128, 2, false, List.of()),
            "deepseek-v3", new ModelShape("deepseek-v3", 61, 1, 576, 2, true, List.of()),
            "qwen3-next", new ModelShape("qwen3-next", 12, 2, 256, 2, false, List.of(64L * 1024, 512L * 1024)),
            "tiny", new ModelShape("tiny", 4, 2, 64, 2, false, List.of()),
            "tiny-hybrid", new ModelShape("tiny-hybrid", 4, 2, 64, 2, false, List.of(4096L, 16384L)));

    public static ModelShape preset(String name) {
        ModelShape s = PRESETS.get(name);
        if (s == null) throw new IllegalArgumentException("unknown model preset '" + name + "'; choose one of " + PRESETS.keySet());
        return s;
    }

    public ModelShape withKvHeads(int heads) {
        return new ModelShape(name, layers, heads, headDim, dtypeBytes, mla, stateBytes);
    }

    public ModelShape withMla(boolean m) {
        return new ModelShape(name, layers, kvHeads, headDim, dtypeBytes, m, stateBytes);
    }

    /** KV heads one rank holds under attention-TP {@code tp} (at least one: GQA replicates heads). */
    public int headsPerRank(int tp) {
        return mla ? 1 : Math.max(1, kvHeads / tp);
    }

    /** Buffers per rank: K then V per layer for MHA, one per layer for MLA. */
    public int kvBuffers() {
        return mla ? layers : 2 * layers;
    }

    /** Bytes of one page in one KV buffer of one rank. */
    public long pageBytes(int pageSize, int tp) {
        return (long) pageSize * headsPerRank(tp) * headDim * dtypeBytes;
    }

    /** KV bytes per token per rank, all buffers. */
    public long bytesPerToken(int tp) {
        return pageBytes(1, tp) * kvBuffers();
    }

    /** KV bytes a request of {@code tokens} moves to a decode of TP {@code tp}, all its ranks together. */
    public long requestBytes(long tokens, int tp) {
        return bytesPerToken(tp) * tokens * tp;
    }

    /** Bytes of one head of one token (the verification unit). */
    public long headBytes() {
        return (long) headDim * dtypeBytes;
    }

    /** Global head id held in each local head slot of rank {@code rank} under TP {@code tp} (replicated GQA heads by division). */
    public int[] globalHeads(int tp, int rank) {
        if (mla) return new int[]{0};
        int local = headsPerRank(tp);
        int[] out = new int[local];
        for (int j = 0; j < local; j++) out[j] = tp <= kvHeads ? rank * (kvHeads / tp) + j : rank / (tp / kvHeads);
        return out;
    }

    public StateType stateType() {
        return StateType.MAMBA;
    }
}
