package io.kvferry.protocol;

import java.util.List;

/**
 * The shape of a decode rank's registered destination memory, as sent in HELLO: byte length and
 * item (page/row/slot) length of every KV, aux and state buffer. Addresses are never sent; writes
 * name (region, buffer, offset) and the decode side resolves them against its own memory.
 */
public record MemoryDescriptor(long[] kvLengths, long[] kvItemLens, int[] kvLayerIds,
                               long[] auxLengths, long[] auxItemLens, List<StateDescriptor> states) {

    /** One state component: its type's wire string and per-tensor lengths. */
    public record StateDescriptor(String type, long[] lengths, long[] itemLens) {}
}
