package io.kvferry.testkit;


import io.kvferry.api.DisaggregationMode;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class MemoryBudgetTest {
    static final long GIB = 1L << 30;

    @Test
    void poolsThatFitPass() {
        assertDoesNotThrow(() -> MemoryBudget.require("decode", 2, 4 * GIB, 20 * GIB));
        assertDoesNotThrow(() -> MemoryBudget.require("decode", 100, 100 * GIB, -1)); // unknown: no check
    }

    @Test
    void poolsThatDoNotFitAreRefusedNamingTheNumbersAndTheFix() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> MemoryBudget.require("prefill", 2, 16 * GIB, 24 * GIB));
        String m = e.getMessage();
        assertTrue(m.contains("prefill") && m.contains("32.0 GiB") && m.contains("16.0 GiB") && m.contains("24.0 GiB"), m);
        assertTrue(m.contains("--concurrency"), m);
    }

    @Test
    void theIssuesOomKilledRunIsRefusedOnThisMachine() {
        // ./kvferry bench --prompt-tokens 128 --requests 4000 --concurrency 1000 (Llama-3.1-8B shape): ~16 GiB per pool.
        Workload w = new Workload(4000, 128, 16, 256, 1000, 0, 1);
        long perPool = RankPool.capacity(ModelShape.preset("llama-3.1-8b"), w.pageSize(), 1, 1, w.poolPages(), w.concurrency() + 2);
        assertTrue(perPool > 10 * GIB, "pool bytes " + perPool);
        assertThrows(IllegalArgumentException.class, () -> MemoryBudget.require("decode", 1, perPool, 12 * GIB));
    }

    @Test
    void aWholeBenchCountsBothRolesTogether() {
        // Each role's pools fit alone; both on one machine (one JVM or --processes) do not.
        BenchConfig c = new BenchConfig(ModelShape.preset("llama-3.1-8b"), new Workload(100, 128, 16, 256, 300, 0, 1), "tcp", 1, "t");
        long perRole = MemoryBudget.roleBytes(DisaggregationMode.PREFILL, c, c.prefillTp());
        assertEquals(perRole, MemoryBudget.roleBytes(DisaggregationMode.DECODE, c, c.decodeTp()));
        long available = (long) (1.5 * perRole / MemoryBudget.USABLE_FRACTION);
        assertDoesNotThrow(() -> MemoryBudget.require("prefill", 1, perRole, available));
        MemoryBudget.PoolsDoNotFit e = assertThrows(MemoryBudget.PoolsDoNotFit.class, () -> MemoryBudget.requireBothRoles(c, available));
        assertTrue(e.getMessage().contains("prefill and decode pools"), e.getMessage());
        assertDoesNotThrow(() -> MemoryBudget.requireBothRoles(c, 3 * available));
    }
}
