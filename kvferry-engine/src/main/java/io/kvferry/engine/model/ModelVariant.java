package io.kvferry.engine.model;

import java.util.Arrays;
import java.util.Locale;
import java.util.stream.Collectors;

/**
 * Which layer kinds a model stacks, each exercising one kvferry transfer family with attention or
 * recurrence reading the transferred memory in place:
 * <ul>
 * <li>{@code llama}: every layer grouped-query attention over paged K/V (MHA-family KV, head-sliced
 * under a TP change).
 * <li>{@code mla}: every layer MLA-style latent attention: one latent buffer per layer (the compressed
 * KV latent and its shared rope key), replicated on every TP rank and registered {@code is_mla}.
 * <li>{@code swa}: odd layers attend over a sliding window whose pages live in a separate window
 * pool and travel as {@code swa} state; even layers are full attention.
 * <li>{@code hybrid}: even layers are a recurrent (conv + selective state-space) mixer whose
 * per-request state travels as {@code mamba} state, re-sliced across TP; odd layers full attention.
 * </ul>
 */
public enum ModelVariant {
    LLAMA, MLA, SWA, HYBRID;

    /** The kind of global layer {@code layer}. */
    public LayerKind kind(int layer) {
        return switch (this) {
            case LLAMA -> LayerKind.ATTENTION;
            case MLA -> LayerKind.LATENT;
            case SWA -> layer % 2 == 1 ? LayerKind.WINDOW : LayerKind.ATTENTION;
            case HYBRID -> layer % 2 == 0 ? LayerKind.RECURRENT : LayerKind.ATTENTION;
        };
    }

    /**
     * Whether requests carry per-request state (swa window pages, hybrid recurrent slots). kvferry pairs
     * state components by position, so a prefill and a decode of such a variant need the same PP size.
     */
    public boolean hasState() {
        return this == SWA || this == HYBRID;
    }

    /** The name on the command line and in /health. */
    public String label() {
        return name().toLowerCase(Locale.ROOT);
    }

    public static ModelVariant parse(String name) {
        for (ModelVariant v : values()) if (v.label().equals(name)) return v;
        throw new IllegalArgumentException("unknown model variant '" + name + "'; use one of "
                + Arrays.stream(values()).map(ModelVariant::label).collect(Collectors.joining(", ")));
    }
}
