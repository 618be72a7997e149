package io.kvferry.engine.serving;

import io.kvferry.KVFerry;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.engine.model.ModelVariant;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.model.TokenLogprobs;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The prefill's prefix cache: a request whose prompt starts with full pages of an earlier prompt computes only the rest
 * (its cached tokens say how many it skipped, and the engine's counter adds them up), and its answer — tokens, first
 * token logits, output and input log probabilities — is the colocated engine's and an uncached prefill's, bit for bit,
 * with a TP2 prefill, unaligned chunks, and the decode's own prefix cache hitting more, fewer or the same pages.
 */
@Timeout(120)
class PrefillCacheTest {
    private static final int MAX = 12;
    private static final int TOP = 3;

    /** One PD request through prefill {@code p} and decode {@code d}: the prefill's result and the decode's generation. */
    private record Run(PrefillEngine.Result pre, Generation gen) {
    }

    private static Run run(PrefillEngine p, DecodeEngine d, long room, int[] prompt, int logprobStart) throws Exception {
        CompletableFuture<PrefillEngine.Result> pre = p.submit(new PrefillEngine.Request(room, prompt, Sampling.GREEDY, logprobStart, TOP, false));
        Generation g = DisaggregatedTest.decode(d, room, prompt, MAX, Sampling.GREEDY, TOP).get(60, TimeUnit.SECONDS);
        return new Run(pre.get(30, TimeUnit.SECONDS), g);
    }

    private static void sameAnswer(Generation expected, Run r, String what) {
        assertArrayEquals(expected.tokens(), r.gen.tokens(), what);
        assertArrayEquals(expected.firstLogits(), r.gen.firstLogits(), 0f, what);
        DisaggregatedTest.assertSameLogprobs(expected, r.gen, what);
        sameInputLogprobs(expected.inputLogprobs(), r.pre.inputLogprobs(), what);
    }

    static void sameInputLogprobs(List<TokenLogprobs> expected, List<TokenLogprobs> actual, String what) {
        if (expected == null) {
            assertNull(actual, what);
            return;
        }
        assertEquals(expected.size(), actual.size(), what);
        for (int i = 0; i < expected.size(); i++) {
            TokenLogprobs e = expected.get(i), a = actual.get(i);
            if (e == null) {
                assertNull(a, what + ", input position " + i);
                continue;
            }
            assertEquals(Float.floatToIntBits(e.logprob()), Float.floatToIntBits(a.logprob()), what + ", input position " + i);
            assertArrayEquals(e.topTokens(), a.topTokens(), what + ", input position " + i);
            assertArrayEquals(e.topLogprobs(), a.topLogprobs(), 0f, what + ", input position " + i);
        }
    }

    private static double cachedTokens(MeterRegistry meters, String role) {
        var c = meters.find(EngineMeters.CACHED_TOKENS).tag("role", role).counter();
        return c == null ? -1 : c.count();
    }

    private static int[] join(int[] head, int[] tail) {
        int[] out = Arrays.copyOf(head, head.length + tail.length);
        System.arraycopy(tail, 0, out, head.length, tail.length);
        return out;
    }

    /**
     * Page 16, chunks of 7, a TP2 prefill and a TP1 decode. Requests in order, with the cached tokens each must report:
     * a (70 tokens) cold: 0; b (a's first 40 tokens, then its own) 32, the decode's cache hits the same 2 pages; a again
     * 64 (its 4 full pages); a's first 64 tokens (page aligned) 48, the last page is computed for the last token's
     * logits while the decode holds all 4 pages (a zero-page last chunk); c after a prefill-only request of c (which
     * filled the prefill's cache and not the decode's): 48, the cached pages sent to the decode; a with prompt
     * logprobs from position 20: 16, only the page before position 19. Every answer equals the colocated run's and the
     * cache-off prefill's.
     */
    @Test
    void aSharedPrefixIsComputedOnceAndTheAnswerIsTheColdAndColocatedOne() throws Exception {
        EngineSpec spec = new EngineSpec(DisaggregatedTest.WEIGHTS, 1, 1, 16, 64, 4, 7);
        SplittableRandom r = new SplittableRandom(21);
        int[] a = DisaggregatedTest.prompt(r, 70);
        int[] b = join(Arrays.copyOf(a, 40), Arrays.copyOfRange(DisaggregatedTest.prompt(r, 25), 1, 25));
        int[] aligned = Arrays.copyOf(a, 64);
        int[] c = DisaggregatedTest.prompt(r, 50);
        int[][] order = {a, b, a, aligned, c, a};
        int[] starts = {-1, -1, -1, -1, -1, 20};
        int[] cached = {0, 32, 64, 48, 48, 16};
        int[] kvPages = {5, 2, 1, 0, 4, 1};
        MeterRegistry meters = new SimpleMeterRegistry();
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             ColocatedEngine colocated = new ColocatedEngine(spec.withChunkTokens(256))) {
            TransferSpec t = DisaggregatedTest.transfer("tcp", registry).withMeters(meters);
            List<Generation> expected = new ArrayList<>();
            for (int i = 0; i < order.length; i++) expected.add(colocated.generate(order[i], MAX, Sampling.GREEDY, TOP, starts[i]));
            for (boolean on : new boolean[]{true, false}) {
                try (PrefillEngine p = new PrefillEngine(spec.withParallelism(2, 1), t, on); DecodeEngine d = new DecodeEngine(spec, t)) {
                    assertEquals(on, p.prefixCacheOn());
                    for (int i = 0; i < order.length; i++) {
                        String what = "cache " + (on ? "on" : "off") + ", request " + i;
                        if (order[i] == c) { // c's prompt alone first: the prefill's cache gets its pages, the decode's does not
                            PrefillEngine.Result only = p.submit(new PrefillEngine.Request(100 + i, c, Sampling.GREEDY, 45, 0, true))
                                    .get(30, TimeUnit.SECONDS);
                            assertEquals(0, only.cachedTokens(), what);
                        }
                        Run run = run(p, d, 1 + i, order[i], starts[i]);
                        sameAnswer(expected.get(i), run, what);
                        assertEquals(on ? cached[i] : 0, run.pre.cachedTokens(), what);
                        assertEquals(kvPages[i], run.pre.kvPages(), what + ": pages sent after the decode's prefix");
                    }
                    assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS));
                    assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS));
                    if (on) {
                        assertEquals(Arrays.stream(cached).sum(), cachedTokens(meters, "prefill"), 0.0);
                        assertTrue(p.cachedPages().get(10, TimeUnit.SECONDS) > 0);
                    } else {
                        assertEquals(0, p.cachedPages().get(10, TimeUnit.SECONDS));
                    }
                }
            }
        }
    }

    /**
     * Page size 1 (the README's demo): a repeated prompt is all in the decode's cache (a zero-page last chunk) and all
     * but its last token in the prefill's; a prompt sharing 20 tokens takes 20 from both. One page id names a page on
     * every shard, so the cache serves TP ranks, PP stages and MLA's replicated latents alike.
     */
    @ParameterizedTest(name = "{0} prefill TP{1} PP{2}")
    @CsvSource({"LLAMA, 2, 1", "LLAMA, 1, 2", "MLA, 2, 1"})
    void pageSizeOneSharesAllButTheLastToken(ModelVariant variant, int tp, int pp) throws Exception {
        EngineSpec spec = new EngineSpec(DisaggregatedTest.MODELS.get(variant), 1, 1, 1, 256, 4, 5);
        SplittableRandom r = new SplittableRandom(5);
        int[] a = DisaggregatedTest.prompt(r, 30);
        int[] b = join(Arrays.copyOf(a, 20), Arrays.copyOfRange(DisaggregatedTest.prompt(r, 9), 1, 9));
        int[][] order = {a, a, b};
        int[] cached = {0, 29, 20};
        int[] kvPages = {30, 0, 8};
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             ColocatedEngine colocated = new ColocatedEngine(spec);
             PrefillEngine p = new PrefillEngine(spec.withParallelism(tp, pp), DisaggregatedTest.transfer("tcp", registry));
             DecodeEngine d = new DecodeEngine(spec, DisaggregatedTest.transfer("tcp", registry))) {
            for (int i = 0; i < order.length; i++) {
                Run run = run(p, d, 1 + i, order[i], -1);
                sameAnswer(colocated.generate(order[i], MAX, Sampling.GREEDY, TOP, -1), run, "request " + i);
                assertEquals(cached[i], run.pre.cachedTokens(), "request " + i);
                assertEquals(kvPages[i], run.pre.kvPages(), "request " + i);
            }
        }
    }

    /**
     * 12 pages of 16 tokens, prompts of 60 (4 pages, 3 full): after three prompts the cache holds 9 pages and a fourth
     * prompt evicts the least recently used last page of a chain (a's third: a still hits its first two; before, a's first
     * page went and a's other two stayed cached but unreachable), then a and b each evict another chain's last page and
     * hit two of theirs, while c, used since, hits all three; a
     * burst of new prompts with every page cached or in use all finish, exact, half of them sharing c's cached pages
     * (referenced, so eviction passes them by). Without eviction the fourth one waits forever.
     */
    @Test
    void evictionUnderPressureLetsNewRequestsIn() throws Exception {
        EngineSpec spec = new EngineSpec(DisaggregatedTest.WEIGHTS, 1, 1, 16, 64, 4, 16);
        SplittableRandom r = new SplittableRandom(8);
        int[] a = DisaggregatedTest.prompt(r, 60), b = DisaggregatedTest.prompt(r, 60), c = DisaggregatedTest.prompt(r, 60);
        int[] d4 = DisaggregatedTest.prompt(r, 60);
        int[][] order = {a, b, c, d4, a, c, b};
        int[] cached = {0, 0, 0, 0, 32, 48, 32};
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             ColocatedEngine colocated = new ColocatedEngine(spec);
             PrefillEngine p = new PrefillEngine(spec.withPages(12), DisaggregatedTest.transfer("tcp", registry));
             DecodeEngine d = new DecodeEngine(spec, DisaggregatedTest.transfer("tcp", registry))) {
            for (int i = 0; i < order.length; i++) {
                Run run = run(p, d, 1 + i, order[i], -1);
                sameAnswer(colocated.generate(order[i], MAX, Sampling.GREEDY, TOP, -1), run, "request " + i);
                assertEquals(cached[i], run.pre.cachedTokens(), "request " + i);
                assertTrue(p.cachedPages().get(10, TimeUnit.SECONDS) <= 12);
            }
            List<int[]> burst = new ArrayList<>();
            List<CompletableFuture<PrefillEngine.Result>> pres = new ArrayList<>();
            List<CompletableFuture<Generation>> gens = new ArrayList<>();
            for (int i = 0; i < 6; i++) {
                int[] prompt = DisaggregatedTest.prompt(r, 40 + 4 * i);
                // Half of them start with c's first two pages, cached: referenced while the others need pages, never evicted.
                if (i % 2 == 0) System.arraycopy(c, 0, prompt, 0, 32);
                burst.add(prompt);
                pres.add(p.submit(new PrefillEngine.Request(100 + i, prompt, Sampling.GREEDY, -1, 0, false)));
                gens.add(DisaggregatedTest.decode(d, 100 + i, prompt, MAX, Sampling.GREEDY, TOP));
            }
            for (int i = 0; i < burst.size(); i++) {
                Generation g = gens.get(i).get(60, TimeUnit.SECONDS);
                pres.get(i).get(30, TimeUnit.SECONDS);
                Generation e = colocated.generate(burst.get(i), MAX, Sampling.GREEDY, TOP, -1);
                assertArrayEquals(e.tokens(), g.tokens(), "burst " + i);
                DisaggregatedTest.assertSameLogprobs(e, g, "burst " + i);
            }
            assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS));
            assertTrue(p.cachedPages().get(10, TimeUnit.SECONDS) <= 12);
        }
    }

    /**
     * A request aborted while its prompt is being computed (chunks of one token, pages of 4) adds nothing to the cache:
     * its full pages, computed or not, never become entries, so the same prompt next is computed whole and exact.
     */
    @Test
    void anAbortMidPrefillLeavesNoPageInTheCache() throws Exception {
        EngineSpec spec = new EngineSpec(DisaggregatedTest.WEIGHTS, 1, 1, 4, 128, 4, 1);
        int[] a = DisaggregatedTest.prompt(new SplittableRandom(4), 300);
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             ColocatedEngine colocated = new ColocatedEngine(spec.withChunkTokens(64));
             PrefillEngine p = new PrefillEngine(spec, DisaggregatedTest.transfer("tcp", registry));
             DecodeEngine d = new DecodeEngine(spec, DisaggregatedTest.transfer("tcp", registry))) {
            CompletableFuture<PrefillEngine.Result> pre = p.submit(new PrefillEngine.Request(1, a, Sampling.GREEDY));
            CompletableFuture<Generation> gen = DisaggregatedTest.decode(d, 1, a, MAX, Sampling.GREEDY);
            // Polled on the scheduler thread, between its passes: the abort is queued there and runs before the next chunk.
            boolean started = false;
            while (true) {
                CompletableFuture<Integer> seen = new CompletableFuture<>();
                p.execute(() -> {
                    int n = p.computedTokens(1);
                    if (n >= 12 && n < a.length - 1) p.abort(1);
                    seen.complete(n);
                });
                int n = seen.get(10, TimeUnit.SECONDS);
                if (n >= 12 && n < a.length - 1) break;
                if (n >= 0) started = true;
                else assertFalse(started, "the prompt was computed before the abort came: make it longer");
            }
            assertThrows(ExecutionException.class, () -> pre.get(30, TimeUnit.SECONDS));
            assertThrows(ExecutionException.class, () -> gen.get(30, TimeUnit.SECONDS));
            assertEquals(0, p.cachedPages().get(10, TimeUnit.SECONDS), "the aborted request's pages are not cached");
            assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS));
            Run run = run(p, d, 2, a, -1);
            assertEquals(0, run.pre.cachedTokens());
            sameAnswer(colocated.generate(a, MAX, Sampling.GREEDY, TOP, -1), run, "after the abort");
        }
    }

    /**
     * Window layers keep per-request state outside the pages (their ring): the cache is off for that variant; recurrent
     * layers' state is kept as snapshots with the cached pages, so it is on for hybrid.
     */
    @Test
    void theCacheIsOffForWindowLayers() {
        EngineSpec spec = new EngineSpec(DisaggregatedTest.WEIGHTS, 1, 1, 16, 64, 4, 16);
        assertTrue(PrefillEngine.cacheable(spec));
        assertTrue(PrefillEngine.cacheable(spec.withModel(DisaggregatedTest.MODELS.get(ModelVariant.MLA))));
        assertFalse(PrefillEngine.cacheable(spec.withModel(DisaggregatedTest.MODELS.get(ModelVariant.SWA))));
        assertTrue(PrefillEngine.cacheable(spec.withModel(DisaggregatedTest.MODELS.get(ModelVariant.HYBRID))));
    }

    /**
     * The hybrid variant (recurrent layers): a request's recurrent state is kept at its last full-page boundary before its
     * first needed position (its chunks of 7 end there once), with that page's cache entry, and a hit ends at a matching
     * page with a snapshot. a (70 tokens) cold: 0, its snapshot after page 4; b (a's first 40 tokens, then its own) 0: it
     * shares a's first two pages, neither with a snapshot; a again 64; a with prompt logprobs from position 20: 0 (only
     * page 1 is before position 19, and it has no snapshot) and it leaves one there; the same again 16; c (a's first 64
     * tokens, then its own) 64. Every answer — tokens, first token logits, output and input log probabilities — equals the
     * colocated run's and the cache-off prefill's bit for bit, on TP1, TP2 and PP2 prefills.
     */
    @ParameterizedTest(name = "hybrid prefill TP{0} PP{1}")
    @CsvSource({"1, 1", "2, 1", "1, 2"})
    void aHybridPrefixResumesFromItsRecurrentStateSnapshot(int tp, int pp) throws Exception {
        EngineSpec spec = new EngineSpec(DisaggregatedTest.MODELS.get(ModelVariant.HYBRID), 1, 1, 16, 64, 4, 7);
        SplittableRandom r = new SplittableRandom(22);
        int[] a = DisaggregatedTest.prompt(r, 70);
        int[] b = join(Arrays.copyOf(a, 40), Arrays.copyOfRange(DisaggregatedTest.prompt(r, 25), 1, 25));
        int[] c = join(Arrays.copyOf(a, 64), Arrays.copyOfRange(DisaggregatedTest.prompt(r, 11), 1, 11));
        int[][] order = {a, b, a, a, a, c};
        int[] starts = {-1, -1, -1, 20, 20, -1};
        int[] cached = {0, 0, 64, 0, 16, 64};
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             ColocatedEngine colocated = new ColocatedEngine(spec.withChunkTokens(256))) {
            TransferSpec t = DisaggregatedTest.transfer("tcp", registry);
            List<Generation> expected = new ArrayList<>();
            for (int i = 0; i < order.length; i++) expected.add(colocated.generate(order[i], MAX, Sampling.GREEDY, TOP, starts[i]));
            for (boolean on : new boolean[]{true, false}) {
                try (PrefillEngine p = new PrefillEngine(spec.withParallelism(tp, pp), t, on);
                     DecodeEngine d = new DecodeEngine(spec.withParallelism(1, pp), t)) {
                    assertEquals(on, p.prefixCacheOn());
                    for (int i = 0; i < order.length; i++) {
                        String what = "cache " + (on ? "on" : "off") + ", request " + i;
                        Run run = run(p, d, 1 + i, order[i], starts[i]);
                        sameAnswer(expected.get(i), run, what);
                        assertEquals(on ? cached[i] : 0, run.pre.cachedTokens(), what);
                    }
                    assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS));
                    assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS));
                }
            }
        }
    }
}
