package io.kvferry.plan;

import java.util.HashMap;
import java.util.Map;

/**
 * Pairs a prefill rank's KV buffers with a decode rank's by global layer id, so a PP stage (which
 * holds only its layers) writes into the right buffers of a decode that holds them all. Buffers
 * that share a layer id (K and V of one layer, MHA) pair by order of appearance. Pure.
 */
public final class LayerPairing {
    private LayerPairing() {}

    /**
     * @return for each source buffer, the index of its destination buffer
     * @throws PlanException naming the first source buffer without a counterpart
     */
    public static int[] pair(int[] srcLayerIds, int[] dstLayerIds) {
        Map<Long, Integer> dstIndex = new HashMap<>();
        Map<Integer, Integer> seen = new HashMap<>();
        for (int j = 0; j < dstLayerIds.length; j++) {
            int occurrence = seen.merge(dstLayerIds[j], 1, Integer::sum) - 1;
            dstIndex.put(key(dstLayerIds[j], occurrence), j);
        }
        seen.clear();
        int[] out = new int[srcLayerIds.length];
        for (int i = 0; i < srcLayerIds.length; i++) {
            int occurrence = seen.merge(srcLayerIds[i], 1, Integer::sum) - 1;
            Integer j = dstIndex.get(key(srcLayerIds[i], occurrence));
            if (j == null) {
                throw new PlanException("prefill KV buffer " + i + " (layer " + srcLayerIds[i] + ", occurrence " + occurrence
                        + ") has no decode buffer with that layer id");
            }
            out[i] = j;
        }
        return out;
    }

    private static long key(int layer, int occurrence) {
        return ((long) layer << 32) | (occurrence & 0xFFFFFFFFL);
    }
}
