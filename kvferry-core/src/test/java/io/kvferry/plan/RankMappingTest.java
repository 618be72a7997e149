package io.kvferry.plan;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.HashSet;
import java.util.List;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** SGLang's {@code _resolve_rank_mapping} (reference §2.5). */
class RankMappingTest {

    private static RankMapping tpOnly(int p, int d, int rank, boolean mla) {
        return RankMapping.resolve(p, d, rank, mla, 1, false, 1, 1, 0);
    }

    @ParameterizedTest(name = "D==P={0}, rank {1}")
    @CsvSource({"1,0", "2,1", "4,3", "8,5"})
    void equalTp(int tp, int rank) {
        for (boolean mla : new boolean[] {false, true}) {
            RankMapping m = tpOnly(tp, tp, rank, mla);
            assertEquals(List.of(rank), m.targetTpRanks());
            assertEquals(rank, m.realTpRank());
            assertEquals(1, m.requiredDstInfoNum());
            assertEquals(1, m.requiredPrefillResponseNum());
            assertEquals(List.of(0), m.targetCpRanks());
            assertEquals(List.of(0), m.targetPpRanks());
            assertFalse(m.isDummy(rank, mla));
        }
    }

    @ParameterizedTest(name = "P={0} D={1} rank {2} -> prefill {3}")
    @CsvSource({
            "1,2,0,0", "1,2,1,0",
            "2,8,0,0", "2,8,3,0", "2,8,4,1", "2,8,7,1",
            "4,8,5,2",
    })
    void decodeTpLarger(int p, int d, int rank, int target) {
        for (boolean mla : new boolean[] {false, true}) {
            RankMapping m = tpOnly(p, d, rank, mla);
            assertEquals(List.of(target), m.targetTpRanks());
            assertEquals(target, m.realTpRank());
            assertEquals(d / p, m.requiredDstInfoNum(), "each prefill rank waits for D/P decode infos");
            assertEquals(1, m.requiredPrefillResponseNum());
        }
    }

    @Test
    void decodeTpSmallerMha() {
        RankMapping m = tpOnly(8, 2, 1, false);
        assertEquals(List.of(4, 5, 6, 7), m.targetTpRanks());
        assertEquals(4, m.realTpRank());
        assertEquals(1, m.requiredDstInfoNum());
        assertEquals(4, m.requiredPrefillResponseNum(), "MHA: every prefill rank sends its own head slice");
        for (int t : m.targetTpRanks()) assertFalse(m.isDummy(t, false), "MHA targets are all real");
    }

    @Test
    void decodeTpSmallerMla() {
        RankMapping m = tpOnly(8, 2, 1, true);
        assertEquals(List.of(4, 5, 6, 7), m.targetTpRanks());
        assertEquals(4, m.realTpRank());
        assertEquals(1, m.requiredDstInfoNum());
        assertEquals(1, m.requiredPrefillResponseNum(), "MLA: only the real rank sends");
        assertFalse(m.isDummy(4, true));
        assertTrue(m.isDummy(5, true));
        assertTrue(m.isDummy(6, true));
        assertTrue(m.isDummy(7, true));
    }

    @Test
    void decodeTpSmallerRankZero() {
        RankMapping m = tpOnly(4, 1, 0, false);
        assertEquals(List.of(0, 1, 2, 3), m.targetTpRanks());
        assertEquals(4, m.requiredPrefillResponseNum());
    }

    @Test
    void decodeRankIsTakenModuloDecodeTp() {
        assertEquals(tpOnly(2, 4, 2, false), tpOnly(2, 4, 6, false));
        assertEquals(List.of(1), tpOnly(2, 4, 6, false).targetTpRanks());
        assertEquals(List.of(6, 7), tpOnly(8, 4, 7, false).targetTpRanks());
    }

    @Test
    void allCpRanksMultipliesResponses() {
        RankMapping m = RankMapping.resolve(2, 2, 1, false, 4, true, 1, 1, 0);
        assertEquals(List.of(0, 1, 2, 3), m.targetCpRanks());
        assertEquals(4, m.requiredPrefillResponseNum());
        assertEquals(1, m.requiredDstInfoNum());

        RankMapping mha = RankMapping.resolve(4, 2, 0, false, 2, true, 1, 1, 0);
        assertEquals(2 * 2, mha.requiredPrefillResponseNum());
        RankMapping mla = RankMapping.resolve(4, 2, 0, true, 2, true, 1, 1, 0);
        assertEquals(2, mla.requiredPrefillResponseNum());
    }

    @Test
    void cpWithoutAllRanksTargetsRankZeroOnly() {
        RankMapping m = RankMapping.resolve(2, 2, 1, false, 4, false, 1, 1, 0);
        assertEquals(List.of(0), m.targetCpRanks());
        assertEquals(1, m.requiredPrefillResponseNum());
        RankMapping single = RankMapping.resolve(2, 2, 1, false, 1, true, 1, 1, 0);
        assertEquals(List.of(0), single.targetCpRanks());
        assertEquals(1, single.requiredPrefillResponseNum());
    }

    @Test
    void decodePpOneTargetsEveryPrefillStage() {
        RankMapping m = RankMapping.resolve(2, 2, 0, false, 1, false, 3, 1, 0);
        assertEquals(List.of(0, 1, 2), m.targetPpRanks());
        assertEquals(3, m.requiredPrefillResponseNum());
        assertEquals(1, m.requiredDstInfoNum());
    }

    @Test
    void decodePpEqualToPrefillPpTargetsItsOwnStage() {
        RankMapping m = RankMapping.resolve(2, 2, 0, false, 1, false, 4, 4, 2);
        assertEquals(List.of(2), m.targetPpRanks());
        assertEquals(1, m.requiredPrefillResponseNum());
    }

    @Test
    void bothPpOneTargetsStageZero() {
        RankMapping m = RankMapping.resolve(2, 2, 0, false, 1, false, 1, 1, 0);
        assertEquals(List.of(0), m.targetPpRanks());
        assertEquals(1, m.requiredPrefillResponseNum());
    }

    @Test
    void tpCpAndPpFactorsMultiply() {
        // D < P MHA (ratio 2) × all CP ranks (3) × decode PP 1 against prefill PP 2
        RankMapping m = RankMapping.resolve(4, 2, 1, false, 3, true, 2, 1, 0);
        assertEquals(List.of(2, 3), m.targetTpRanks());
        assertEquals(List.of(0, 1, 2), m.targetCpRanks());
        assertEquals(List.of(0, 1), m.targetPpRanks());
        assertEquals(2 * 3 * 2, m.requiredPrefillResponseNum());
        assertEquals(1, m.requiredDstInfoNum());
        // D > P keeps D/P infos regardless of CP/PP
        RankMapping n = RankMapping.resolve(2, 4, 3, false, 2, true, 2, 1, 0);
        assertEquals(2, n.requiredDstInfoNum());
        assertEquals(1 * 2 * 2, n.requiredPrefillResponseNum());
    }

    @ParameterizedTest(name = "prefill pp {0}, decode pp {1}")
    @CsvSource({"4,2", "2,4", "1,2", "3,2"})
    void decodePpMustBeOneOrPrefillPp(int prefillPp, int decodePp) {
        PlanException e = assertThrows(PlanException.class,
                () -> RankMapping.resolve(2, 2, 0, false, 1, false, prefillPp, decodePp, 0));
        assertTrue(e.getMessage().contains("pp"), e.getMessage());
        assertTrue(e.getMessage().contains(String.valueOf(decodePp)), e.getMessage());
    }

    @ParameterizedTest(name = "P={0} D={1}")
    @CsvSource({"2,3", "3,2", "4,6", "6,4", "5,7"})
    void nonDividingTpSizesAreRejected(int p, int d) {
        PlanException e = assertThrows(PlanException.class, () -> tpOnly(p, d, 0, false));
        assertTrue(e.getMessage().contains(String.valueOf(p)) && e.getMessage().contains(String.valueOf(d)), e.getMessage());
    }

    @Test
    void nonPositiveTpSizesAreRejected() {
        assertThrows(PlanException.class, () -> tpOnly(0, 2, 0, false));
        assertThrows(PlanException.class, () -> tpOnly(2, 0, 0, false));
        assertThrows(PlanException.class, () -> tpOnly(-2, 2, 0, false));
    }

    @Test
    void resultListsAreImmutable() {
        RankMapping m = tpOnly(4, 2, 0, false);
        assertThrows(UnsupportedOperationException.class, () -> m.targetTpRanks().add(9));
        assertThrows(UnsupportedOperationException.class, () -> m.targetCpRanks().add(9));
        assertThrows(UnsupportedOperationException.class, () -> m.targetPpRanks().add(9));
    }

    @Test
    void everyDecodeRankIsCoveredExactlyWhenDecodeIsSmaller() {
        int p = 8, d = 2;
        Set<Integer> seen = new HashSet<>();
        for (int r = 0; r < d; r++) {
            for (int t : tpOnly(p, d, r, false).targetTpRanks()) assertTrue(seen.add(t), "prefill rank " + t + " targeted twice");
        }
        assertEquals(p, seen.size());
    }

    // ------------------------------------------------------------------ prefill unique rank

    @Test
    void prefillUniqueRankFormula() {
        // attn_tp_rank·(pp_size·cp_size) + pp_rank·cp_size + cp_rank
        assertEquals(0, RankMapping.prefillUniqueRank(0, 0, 1, 0, 1));
        assertEquals(3, RankMapping.prefillUniqueRank(3, 0, 1, 0, 1));
        assertEquals(2 * (3 * 4) + 1 * 4 + 3, RankMapping.prefillUniqueRank(2, 1, 3, 3, 4));
        assertEquals(1 * 2 + 1, RankMapping.prefillUniqueRank(0, 1, 2, 1, 2));
    }

    @Test
    void prefillUniqueRankIsABijectionOntoZeroToN() {
        int tp = 4, pp = 3, cp = 2;
        Set<Integer> seen = new HashSet<>();
        for (int t = 0; t < tp; t++) {
            for (int p = 0; p < pp; p++) {
                for (int c = 0; c < cp; c++) {
                    int u = RankMapping.prefillUniqueRank(t, p, pp, c, cp);
                    assertTrue(u >= 0 && u < tp * pp * cp, "out of range: " + u);
                    assertTrue(seen.add(u), "duplicate unique rank " + u);
                }
            }
        }
        assertEquals(tp * pp * cp, seen.size());
    }
}
