package io.kvferry.plan;

import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Combinators;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.Tuple;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** SGLang's {@code group_concurrent_contiguous} (reference §4.3, §7.1 TestGroupConcurrentContiguous). */
class PageRunsTest {

    /** (srcStart, dstStart, length) of every run. */
    private static int[][] runs(PageRuns r) {
        int[][] out = new int[r.count()][];
        for (int i = 0; i < r.count(); i++) out[i] = new int[] {r.srcStart(i), r.dstStart(i), r.length(i)};
        return out;
    }

    @Test
    void sglangExample() {
        PageRuns r = PageRuns.group(new int[] {10, 11, 12, 20}, new int[] {5, 6, 7, 8});
        assertEquals(2, r.count());
        assertArrayEquals(new int[][] {{10, 5, 3}, {20, 8, 1}}, runs(r));
        assertEquals(4, r.totalPages());
    }

    @Test
    void singleRun() {
        PageRuns r = PageRuns.group(new int[] {3, 4, 5, 6}, new int[] {100, 101, 102, 103});
        assertArrayEquals(new int[][] {{3, 100, 4}}, runs(r));
        assertEquals(4, r.totalPages());
    }

    @Test
    void singlePage() {
        assertArrayEquals(new int[][] {{0, 0, 1}}, runs(PageRuns.group(new int[] {0}, new int[] {0})));
    }

    @Test
    void splitOnSrcGap() {
        PageRuns r = PageRuns.group(new int[] {1, 2, 4, 5}, new int[] {10, 11, 12, 13});
        assertArrayEquals(new int[][] {{1, 10, 2}, {4, 12, 2}}, runs(r));
    }

    @Test
    void splitOnDstGap() {
        PageRuns r = PageRuns.group(new int[] {1, 2, 3, 4}, new int[] {10, 11, 20, 21});
        assertArrayEquals(new int[][] {{1, 10, 2}, {3, 20, 2}}, runs(r));
    }

    @Test
    void splitOnDescendingAndRepeatedPages() {
        assertArrayEquals(new int[][] {{5, 0, 1}, {4, 1, 1}, {3, 2, 1}},
                runs(PageRuns.group(new int[] {5, 4, 3}, new int[] {0, 1, 2})));
        assertArrayEquals(new int[][] {{7, 0, 1}, {7, 1, 1}},
                runs(PageRuns.group(new int[] {7, 7}, new int[] {0, 1})));
    }

    @Test
    void everyPageItsOwnRunWhenNothingIsContiguous() {
        PageRuns r = PageRuns.group(new int[] {0, 2, 4, 6}, new int[] {1, 3, 5, 7});
        assertEquals(4, r.count());
        assertEquals(4, r.totalPages());
    }

    @Test
    void emptySrcOrDstGivesNoRuns() {
        assertSame(PageRuns.EMPTY, PageRuns.group(new int[0], new int[0]));
        assertEquals(0, PageRuns.group(new int[0], new int[] {1, 2}).count());
        assertEquals(0, PageRuns.group(new int[] {1, 2}, new int[0]).count());
        assertEquals(0, PageRuns.EMPTY.totalPages());
    }

    @Test
    void mismatchedNonEmptyLengthsAreRejected() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> PageRuns.group(new int[] {1, 2, 3}, new int[] {1, 2}));
        assertTrue(e.getMessage().contains("3") && e.getMessage().contains("2"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> PageRuns.group(new int[] {1}, new int[] {1, 2}));
    }

    // ------------------------------------------------------------------ properties

    /** Parallel page lists with realistic (non-negative) ids and a good share of contiguity on each side. */
    @Provide
    Arbitrary<int[][]> pagePairs() {
        Arbitrary<Integer> step = Arbitraries.frequency(
                Tuple.of(6, 1), Tuple.of(1, 0), Tuple.of(1, 2),
                Tuple.of(1, -1), Tuple.of(1, 1000));
        Arbitrary<int[]> steps = Combinators.combine(step, step).as((a, b) -> new int[] {a, b});
        return Combinators.combine(Arbitraries.integers().between(0, 1 << 20), Arbitraries.integers().between(0, 1 << 20),
                steps.list().ofMaxSize(200)).as((s0, d0, st) -> {
                    int n = st.size();
                    int[] src = new int[n], dst = new int[n];
                    int s = s0, d = d0;
                    for (int i = 0; i < n; i++) {
                        if (i > 0) {
                            s = Math.max(0, s + st.get(i)[0]);
                            d = Math.max(0, d + st.get(i)[1]);
                        }
                        src[i] = s;
                        dst[i] = d;
                    }
                    return new int[][] {src, dst};
                });
    }

    @Property(seed = "20261207", tries = 500)
    void runsExpandToTheInputAndAreMaximal(@ForAll("pagePairs") int[][] pair) {
        int[] src = pair[0], dst = pair[1];
        PageRuns r = PageRuns.group(src, dst);
        List<Integer> s = new ArrayList<>(), d = new ArrayList<>();
        for (int i = 0; i < r.count(); i++) {
            assertTrue(r.length(i) >= 1, "empty run");
            for (int k = 0; k < r.length(i); k++) {
                s.add(r.srcStart(i) + k);
                d.add(r.dstStart(i) + k);
            }
        }
        assertEquals(Arrays.stream(src).boxed().toList(), s);
        assertEquals(Arrays.stream(dst).boxed().toList(), d);
        assertEquals(src.length, r.totalPages());
        for (int i = 0; i + 1 < r.count(); i++) {
            boolean mergeable = r.srcStart(i + 1) == r.srcStart(i) + r.length(i)
                    && r.dstStart(i + 1) == r.dstStart(i) + r.length(i);
            assertFalse(mergeable, "runs " + i + " and " + (i + 1) + " could be merged");
        }
    }

    @Property(seed = "20261207", tries = 300)
    void arbitraryIntsAlsoExpandBack(@ForAll("anyPairs") int[][] pair) {
        PageRuns r = PageRuns.group(pair[0], pair[1]);
        int idx = 0;
        for (int i = 0; i < r.count(); i++) {
            for (int k = 0; k < r.length(i); k++, idx++) {
                assertEquals(pair[0][idx], r.srcStart(i) + k);
                assertEquals(pair[1][idx], r.dstStart(i) + k);
            }
        }
        assertEquals(pair[0].length, idx);
    }

    @Provide
    Arbitrary<int[][]> anyPairs() {
        return Arbitraries.integers().between(0, 50).flatMap(n -> Combinators.combine(
                Arbitraries.integers().array(int[].class).ofSize(n),
                Arbitraries.integers().array(int[].class).ofSize(n)).as((a, b) -> new int[][] {a, b}));
    }
}
