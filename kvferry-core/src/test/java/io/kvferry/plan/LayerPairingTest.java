package io.kvferry.plan;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class LayerPairingTest {
    @Test
    void aStagesKAndVBuffersFindTheirPlaceInTheFullModel() {
        // Decode holds [K0..K3, V0..V3]; PP stage 1 holds [K2, K3, V2, V3].
        assertArrayEquals(new int[]{2, 3, 6, 7}, LayerPairing.pair(new int[]{2, 3, 2, 3}, new int[]{0, 1, 2, 3, 0, 1, 2, 3}));
    }

    @Test
    void draftModelBuffersAppendedAfterTheTargetsPairByTheirOwnLayerIds() {
        // Target layers 0..1 (K, V) then EAGLE draft layer 100 (K, V); a PP stage holding layer 1 and the draft.
        int[] decode = {0, 1, 0, 1, 100, 100};
        assertArrayEquals(new int[]{1, 3, 4, 5}, LayerPairing.pair(new int[]{1, 1, 100, 100}, decode));
        assertArrayEquals(new int[]{0, 1, 2, 3, 4, 5}, LayerPairing.pair(decode, decode));
    }

    @Test
    void identicalLayoutsPairByPosition() {
        assertArrayEquals(new int[]{0, 1, 2}, LayerPairing.pair(new int[]{5, 6, 7}, new int[]{5, 6, 7}));
    }

    @Test
    void aLayerTheDecodeDoesNotHoldIsAClearError() {
        PlanException e = assertThrows(PlanException.class, () -> LayerPairing.pair(new int[]{0, 0}, new int[]{0, 1}));
        assertTrue(e.getMessage().contains("prefill KV buffer 1 (layer 0, occurrence 1)"), e.getMessage());
    }
}
