package io.kvferry.testkit;


import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.constraints.Size;
import org.junit.jupiter.api.Test;

import java.util.Arrays;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class PageWalkTest {
    @Test
    void positionsComeInAscendingPageOrder() {
        int[] pages = {40, 7, 1_000_000, 0, 7};
        assertArrayEquals(new int[]{3, 1, 4, 0, 2}, PageWalk.ascending(pages), "equal pages keep their positions' order");
        assertArrayEquals(new int[0], PageWalk.ascending(new int[0]));
    }

    @Test
    void aNegativePageIsRefusedByName() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> PageWalk.ascending(new int[]{3, -1}));
        assertTrue(e.getMessage().contains("-1") && e.getMessage().contains("position 1"), e.getMessage());
    }

    /** Every position is visited exactly once (the drivers fill and verify every page), pages ascending. */
    @Property(seed = "20261207", tries = 200)
    void aPermutationOfPositionsWithAscendingPages(@ForAll @Size(max = 300) List<@IntRange(min = 0, max = Integer.MAX_VALUE) Integer> list) {
        int[] pages = list.stream().mapToInt(Integer::intValue).toArray();
        int[] order = PageWalk.ascending(pages);
        int[] seen = order.clone();
        Arrays.sort(seen);
        for (int i = 0; i < seen.length; i++) assertTrue(seen[i] == i, "positions are a permutation");
        for (int i = 1; i < order.length; i++) assertTrue(pages[order[i - 1]] <= pages[order[i]], "pages ascend");
    }
}
