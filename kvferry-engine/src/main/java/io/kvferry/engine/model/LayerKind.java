package io.kvferry.engine.model;

/** What mixes tokens in one layer (every layer then has the same SwiGLU MLP). */
public enum LayerKind {
    /** Grouped-query attention over all earlier positions, K and V in the paged KV pool. */
    ATTENTION,
    /** MLA-style attention over a per-layer latent page buffer (the compressed KV and its rope key). */
    LATENT,
    /** Grouped-query attention over the last {@code window} positions, K and V in the window pool (swa state). */
    WINDOW,
    /** A recurrent mixer: causal depthwise conv + selective state-space scan, state per request (mamba state). */
    RECURRENT
}
