package io.kvferry.engine.serving;

import io.kvferry.KVFerry;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.engine.model.ModelVariant;
import io.kvferry.engine.model.Sampling;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.function.Supplier;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * In-batch prefix sharing on the prefill (SGLang's in-batch prefix caching check): a request that shares full pages beyond
 * the cache with a request being computed waits for that request's pages and takes them as a hit, so a burst with one new
 * prefix computes it once. The engine's chunks are held ({@link PrefillEngine#holdChunks}) while the requests arrive, so
 * which request is computed first and who waits is decided, not raced; every state is read on the scheduler thread
 * between its passes (no sleeps). Answers equal the colocated run's bit for bit. The decode's own in-flight sharing
 * ({@code DecodeSharedPrefixTest}) is off here: with it, the one decode would hold the burst's later requests until the
 * first one's KV landed (its prefix then in the prefill's cache too), so they would reach the prefill one after the other;
 * requests from several decodes, or from a decode that holds the prefix already, reach it together as here.
 */
@Timeout(120)
class PrefillSharedPrefixTest {
    private static final int MAX = 8;
    private static final int TOP = 2;
    /** Page 16, 64 pages, 8 requests, chunks of 16 tokens. */
    private static final EngineSpec SPEC = new EngineSpec(DisaggregatedTest.WEIGHTS, 1, 1, 16, 64, 8, 16);

    /** A request through prefill and decode: the prefill's result and the decode's generation, both pending. */
    private record Pd(CompletableFuture<PrefillEngine.Result> pre, CompletableFuture<Generation> gen) {
    }

    private static Pd submit(PrefillEngine p, DecodeEngine d, long room, int[] prompt, String salt) {
        var pre = p.submit(new PrefillEngine.Request(room, prompt, Sampling.GREEDY, -1, 0, false, salt));
        return new Pd(pre, DisaggregatedTest.decode(d, room, prompt, MAX, Sampling.GREEDY, TOP));
    }

    /** The value {@code s} reads on the prefill's scheduler thread, between two passes. */
    private static <T> T onScheduler(PrefillEngine p, Supplier<T> s) throws Exception {
        CompletableFuture<T> out = new CompletableFuture<>();
        p.execute(() -> out.complete(s.get()));
        return out.get(10, TimeUnit.SECONDS);
    }

    /** Until {@code state} holds on the scheduler thread (read between passes; at most 30 s, then the test fails). */
    private static void await(PrefillEngine p, BooleanSupplier state, String what) throws Exception {
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!onScheduler(p, state::getAsBoolean)) {
            if (System.nanoTime() > end) fail("never: " + what);
            Thread.onSpinWait();
        }
    }

    private static double deferrals(MeterRegistry meters) {
        var c = meters.find(EngineMeters.PREFIX_DEFERRALS).tag("role", "prefill").counter();
        return c == null ? -1 : c.count();
    }

    /** {@code head}, then {@code tail} without its BOS. */
    private static int[] join(int[] head, int[] tail) {
        int[] out = Arrays.copyOf(head, head.length + tail.length - 1);
        System.arraycopy(tail, 1, out, head.length, tail.length - 1);
        return out;
    }

    private static void sameAnswer(ColocatedEngine colocated, int[] prompt, Pd pd, String what) throws Exception {
        Generation e = colocated.generate(prompt, MAX, Sampling.GREEDY, TOP, -1), g = pd.gen.get(60, TimeUnit.SECONDS);
        // The prefill's half too: it ends (its pages released) once its sender sees the decode's Success, which may come
        // after the decode generated every token; a test that then counts the prefill's pages must not overtake it.
        pd.pre.get(60, TimeUnit.SECONDS);
        assertArrayEquals(e.tokens(), g.tokens(), what);
        assertArrayEquals(e.firstLogits(), g.firstLogits(), 0f, what);
        DisaggregatedTest.assertSameLogprobs(e, g, what);
    }

    /**
     * A burst of four prompts on a new 80-token prefix (5 pages): the first is computed; the others, arriving while it is,
     * wait for it (the deferral counter counts 3) and then take its pages: cached tokens 0, 80, 80, and 48 for the one
     * that shares only the prefix's first 3 pages (then its own). Each answer equals the colocated run's bit for bit, on
     * a TP1 and a TP2 prefill; nothing is left held.
     */
    @ParameterizedTest(name = "prefill TP{0}")
    @ValueSource(ints = {1, 2})
    void aBurstOnANewPrefixComputesItOnce(int tp) throws Exception {
        SplittableRandom r = new SplittableRandom(31);
        int[] shared = DisaggregatedTest.prompt(r, 80);
        int[][] prompts = {join(shared, DisaggregatedTest.prompt(r, 12)), join(shared, DisaggregatedTest.prompt(r, 9)),
                join(shared, DisaggregatedTest.prompt(r, 20)), join(Arrays.copyOf(shared, 50), DisaggregatedTest.prompt(r, 30))};
        int[] cached = {0, 80, 80, 48};
        MeterRegistry meters = new SimpleMeterRegistry();
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             ColocatedEngine colocated = new ColocatedEngine(SPEC)) {
            TransferSpec t = DisaggregatedTest.transfer("tcp", registry).withMeters(meters);
            try (PrefillEngine p = new PrefillEngine(SPEC.withParallelism(tp, 1), t); DecodeEngine d = new DecodeEngine(SPEC, t)) {
                d.sharesInFlightPrefixes = false;
                p.holdChunks = true;
                Pd[] pds = new Pd[prompts.length];
                pds[0] = submit(p, d, 1, prompts[0], null);
                await(p, () -> p.computedTokens(1) == 0, "request 1 admitted");
                for (int i = 1; i < prompts.length; i++) pds[i] = submit(p, d, 1 + i, prompts[i], null);
                for (int i = 1; i < prompts.length; i++) {
                    long room = 1 + i;
                    await(p, () -> p.waitingForSharedPrefix(room), "request " + room + " waits for request 1's pages");
                }
                assertEquals(3, deferrals(meters), 0.0);
                p.holdChunks = false;
                for (int i = 0; i < prompts.length; i++) {
                    sameAnswer(colocated, prompts[i], pds[i], "request " + (1 + i));
                    assertEquals(cached[i], pds[i].pre.get(30, TimeUnit.SECONDS).cachedTokens(), "request " + (1 + i));
                }
                assertEquals(3, deferrals(meters), 0.0, "each request counted once, however many passes it waited");
                assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS));
                assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS));
            }
        }
    }

    /**
     * The hybrid variant: a hit ends at a page whose entry keeps a recurrent state snapshot, and the request computed keeps
     * one only at its own last full-page boundary before its last token (page 5 here, the end of the 80-token prefix): the
     * two requests that share those 5 pages wait and take them (cached tokens 80), the one sharing only 3 pages does not
     * wait (nothing it could take) and computes its prompt; answers equal the colocated run's bit for bit.
     */
    @Test
    void aHybridBurstWaitsOnlyForPagesWithAStateSnapshot() throws Exception {
        EngineSpec spec = new EngineSpec(DisaggregatedTest.MODELS.get(ModelVariant.HYBRID), 1, 1, 16, 64, 8, 16);
        SplittableRandom r = new SplittableRandom(36);
        int[] shared = DisaggregatedTest.prompt(r, 80);
        int[][] prompts = {join(shared, DisaggregatedTest.prompt(r, 12)), join(shared, DisaggregatedTest.prompt(r, 9)),
                join(shared, DisaggregatedTest.prompt(r, 20)), join(Arrays.copyOf(shared, 50), DisaggregatedTest.prompt(r, 30))};
        int[] cached = {0, 80, 80, 0};
        MeterRegistry meters = new SimpleMeterRegistry();
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             ColocatedEngine colocated = new ColocatedEngine(spec)) {
            TransferSpec t = DisaggregatedTest.transfer("tcp", registry).withMeters(meters);
            try (PrefillEngine p = new PrefillEngine(spec, t); DecodeEngine d = new DecodeEngine(spec, t)) {
                d.sharesInFlightPrefixes = false;
                p.holdChunks = true;
                Pd[] pds = new Pd[prompts.length];
                pds[0] = submit(p, d, 1, prompts[0], null);
                await(p, () -> p.computedTokens(1) == 0, "request 1 admitted");
                for (int i = 1; i < prompts.length; i++) pds[i] = submit(p, d, 1 + i, prompts[i], null);
                await(p, () -> p.waitingForSharedPrefix(2), "request 2 waits");
                await(p, () -> p.waitingForSharedPrefix(3), "request 3 waits");
                await(p, () -> p.computedTokens(4) == 0, "request 4 admitted: no page it shares will keep a snapshot");
                p.holdChunks = false;
                for (int i = 0; i < prompts.length; i++) {
                    Generation e = colocated.generate(prompts[i], MAX, Sampling.GREEDY, TOP, -1), g = pds[i].gen.get(60, TimeUnit.SECONDS);
                    assertArrayEquals(e.tokens(), g.tokens(), "request " + (1 + i));
                    assertArrayEquals(e.firstLogits(), g.firstLogits(), 0f, "request " + (1 + i));
                    DisaggregatedTest.assertSameLogprobs(e, g, "request " + (1 + i));
                    assertEquals(cached[i], pds[i].pre.get(30, TimeUnit.SECONDS).cachedTokens(), "request " + (1 + i));
                }
                assertEquals(2, deferrals(meters), 0.0);
                assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS));
            }
        }
    }

    /**
     * The hybrid variant on a TP2 and a PP2 prefill (every shard's state snapshot), chunks of 7 tokens (not a page's
     * multiple: the chunk that reaches the snapshot page ends there): of a burst on a new 80-token prefix, the request
     * sharing its snapshot page waits and hits 80; one asking prompt logprobs from token 40 (it may take 2 pages only,
     * fewer than the snapshot's 5), a prompt shorter than a page and one under another salt do not wait and compute theirs.
     * Answers and prompt logprobs equal the colocated run's bit for bit; nothing is left held.
     */
    @ParameterizedTest(name = "prefill TP{0} PP{1}")
    @CsvSource({"2, 1", "1, 2"})
    void aHybridBurstOnShardedPrefillsWithLogprobsAndShortPrompts(int tp, int pp) throws Exception {
        EngineSpec spec = new EngineSpec(DisaggregatedTest.MODELS.get(ModelVariant.HYBRID), 1, 1, 16, 64, 8, 7);
        SplittableRandom r = new SplittableRandom(37);
        int[] shared = DisaggregatedTest.prompt(r, 80);
        int[][] prompts = {join(shared, DisaggregatedTest.prompt(r, 12)), join(shared, DisaggregatedTest.prompt(r, 9)),
                join(shared, DisaggregatedTest.prompt(r, 20)), DisaggregatedTest.prompt(r, 10), join(shared, DisaggregatedTest.prompt(r, 30))};
        int[] starts = {-1, -1, 40, -1, -1};
        String[] salts = {null, null, null, null, "another"};
        int[] cached = {0, 80, 0, 0, 0};
        MeterRegistry meters = new SimpleMeterRegistry();
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             ColocatedEngine colocated = new ColocatedEngine(spec.withChunkTokens(256))) {
            TransferSpec t = DisaggregatedTest.transfer("tcp", registry).withMeters(meters);
            try (PrefillEngine p = new PrefillEngine(spec.withParallelism(tp, pp), t); DecodeEngine d = new DecodeEngine(spec.withParallelism(1, pp), t)) {
                d.sharesInFlightPrefixes = false;
                p.holdChunks = true;
                List<CompletableFuture<PrefillEngine.Result>> pre = new ArrayList<>();
                List<CompletableFuture<Generation>> gen = new ArrayList<>();
                for (int i = 0; i < prompts.length; i++) {
                    long room = 1 + i;
                    pre.add(p.submit(new PrefillEngine.Request(room, prompts[i], Sampling.GREEDY, starts[i], TOP, false, salts[i])));
                    gen.add(DisaggregatedTest.decode(d, room, prompts[i], MAX, Sampling.GREEDY, TOP));
                    if (i == 0) await(p, () -> p.computedTokens(1) == 0, "request 1 admitted");
                }
                await(p, () -> p.waitingForSharedPrefix(2), "request 2 waits");
                for (long room = 3; room <= prompts.length; room++) {
                    long at = room;
                    await(p, () -> p.computedTokens(at) == 0, "request " + at + " admitted");
                }
                p.holdChunks = false;
                for (int i = 0; i < prompts.length; i++) {
                    String what = "request " + (1 + i);
                    Generation e = colocated.generate(prompts[i], MAX, Sampling.GREEDY, TOP, starts[i]), g = gen.get(i).get(60, TimeUnit.SECONDS);
                    PrefillEngine.Result res = pre.get(i).get(30, TimeUnit.SECONDS);
                    assertArrayEquals(e.tokens(), g.tokens(), what);
                    assertArrayEquals(e.firstLogits(), g.firstLogits(), 0f, what);
                    DisaggregatedTest.assertSameLogprobs(e, g, what);
                    PrefillCacheTest.sameInputLogprobs(e.inputLogprobs(), res.inputLogprobs(), what);
                    assertEquals(cached[i], res.cachedTokens(), what);
                }
                assertEquals(1, deferrals(meters), 0.0);
                assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS));
                assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS));
            }
        }
    }

    /**
     * A request aborted while it waits for another's pages ends at once and holds nothing (the engine's outstanding pages
     * and rows are the computed request's alone); the other then finishes exact, and nothing is left.
     */
    @Test
    void anAbortWhileWaitingHoldsNothing() throws Exception {
        SplittableRandom r = new SplittableRandom(32);
        int[] shared = DisaggregatedTest.prompt(r, 48);
        int[] a = join(shared, DisaggregatedTest.prompt(r, 10)), b = join(shared, DisaggregatedTest.prompt(r, 14));
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             ColocatedEngine colocated = new ColocatedEngine(SPEC);
             PrefillEngine p = new PrefillEngine(SPEC, DisaggregatedTest.transfer("tcp", registry));
             DecodeEngine d = new DecodeEngine(SPEC, DisaggregatedTest.transfer("tcp", registry))) {
            d.sharesInFlightPrefixes = false;
            p.holdChunks = true;
            Pd first = submit(p, d, 1, a, null);
            await(p, () -> p.computedTokens(1) == 0, "request 1 admitted");
            int held = p.outstanding().get(10, TimeUnit.SECONDS);
            Pd waiting = submit(p, d, 2, b, null);
            await(p, () -> p.waitingForSharedPrefix(2), "request 2 waits");
            p.abort(2);
            assertThrows(ExecutionException.class, () -> waiting.pre.get(30, TimeUnit.SECONDS));
            assertThrows(ExecutionException.class, () -> waiting.gen.get(30, TimeUnit.SECONDS));
            assertEquals(held, p.outstanding().get(10, TimeUnit.SECONDS), "the aborted request holds no page or row");
            assertFalse(onScheduler(p, () -> p.waitingForSharedPrefix(2)));
            p.holdChunks = false;
            sameAnswer(colocated, a, first, "request 1");
            assertEquals(0, first.pre.get(30, TimeUnit.SECONDS).cachedTokens());
            assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS));
        }
    }

    /**
     * The request waited for is aborted: the waiting one is admitted on the next pass and computes the prefix itself
     * (from token 0, cached tokens 0), exact; a third request on the prefix then hits its pages.
     */
    @Test
    void whenTheRequestWaitedForIsAbortedTheWaitingOneComputesItself() throws Exception {
        SplittableRandom r = new SplittableRandom(33);
        int[] shared = DisaggregatedTest.prompt(r, 64);
        int[] a = join(shared, DisaggregatedTest.prompt(r, 10)), b = join(shared, DisaggregatedTest.prompt(r, 6));
        int[] c = join(shared, DisaggregatedTest.prompt(r, 3));
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             ColocatedEngine colocated = new ColocatedEngine(SPEC);
             PrefillEngine p = new PrefillEngine(SPEC, DisaggregatedTest.transfer("tcp", registry));
             DecodeEngine d = new DecodeEngine(SPEC, DisaggregatedTest.transfer("tcp", registry))) {
            d.sharesInFlightPrefixes = false;
            p.holdChunks = true;
            Pd first = submit(p, d, 1, a, null);
            await(p, () -> p.computedTokens(1) == 0, "request 1 admitted");
            Pd second = submit(p, d, 2, b, null);
            await(p, () -> p.waitingForSharedPrefix(2), "request 2 waits");
            p.abort(1);
            assertThrows(ExecutionException.class, () -> first.pre.get(30, TimeUnit.SECONDS));
            await(p, () -> p.computedTokens(2) == 0, "request 2 admitted, to compute from its first token");
            p.holdChunks = false;
            sameAnswer(colocated, b, second, "request 2");
            assertEquals(0, second.pre.get(30, TimeUnit.SECONDS).cachedTokens());
            Pd third = submit(p, d, 3, c, null);
            sameAnswer(colocated, c, third, "request 3");
            assertEquals(64, third.pre.get(30, TimeUnit.SECONDS).cachedTokens());
            assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS));
        }
    }

    /**
     * Requests under another cache salt share nothing, so they do not wait (admitted while the first is computed: both
     * compute the prefix); one under the first's salt waits and hits.
     */
    @Test
    void anotherCacheSaltDoesNotWait() throws Exception {
        SplittableRandom r = new SplittableRandom(34);
        int[] shared = DisaggregatedTest.prompt(r, 48);
        int[] a = join(shared, DisaggregatedTest.prompt(r, 10)), b = join(shared, DisaggregatedTest.prompt(r, 7));
        int[] c = join(shared, DisaggregatedTest.prompt(r, 5));
        MeterRegistry meters = new SimpleMeterRegistry();
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             ColocatedEngine colocated = new ColocatedEngine(SPEC)) {
            TransferSpec t = DisaggregatedTest.transfer("tcp", registry).withMeters(meters);
            try (PrefillEngine p = new PrefillEngine(SPEC, t); DecodeEngine d = new DecodeEngine(SPEC, t)) {
                d.sharesInFlightPrefixes = false;
                p.holdChunks = true;
                Pd first = submit(p, d, 1, a, "tenant-a");
                await(p, () -> p.computedTokens(1) == 0, "request 1 admitted");
                Pd other = submit(p, d, 2, b, "tenant-b");
                await(p, () -> p.computedTokens(2) == 0, "request 2 (another salt) admitted while request 1 is computed");
                Pd same = submit(p, d, 3, c, "tenant-a");
                await(p, () -> p.waitingForSharedPrefix(3), "request 3 (the same salt) waits");
                p.holdChunks = false;
                sameAnswer(colocated, a, first, "request 1");
                sameAnswer(colocated, b, other, "request 2");
                sameAnswer(colocated, c, same, "request 3");
                assertEquals(0, first.pre.get(30, TimeUnit.SECONDS).cachedTokens());
                assertEquals(0, other.pre.get(30, TimeUnit.SECONDS).cachedTokens());
                assertEquals(48, same.pre.get(30, TimeUnit.SECONDS).cachedTokens());
                assertEquals(1, deferrals(meters), 0.0);
                assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS));
            }
        }
    }

    /** With the prefill's cache off nothing waits: a request on the same prefix is admitted at once and computes it. */
    @Test
    void withTheCacheOffNothingWaits() throws Exception {
        SplittableRandom r = new SplittableRandom(35);
        int[] shared = DisaggregatedTest.prompt(r, 48);
        int[] a = join(shared, DisaggregatedTest.prompt(r, 10)), b = join(shared, DisaggregatedTest.prompt(r, 7));
        MeterRegistry meters = new SimpleMeterRegistry();
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             ColocatedEngine colocated = new ColocatedEngine(SPEC)) {
            TransferSpec t = DisaggregatedTest.transfer("tcp", registry).withMeters(meters);
            try (PrefillEngine p = new PrefillEngine(SPEC, t, false); DecodeEngine d = new DecodeEngine(SPEC, t)) {
                d.sharesInFlightPrefixes = false;
                p.holdChunks = true;
                Pd first = submit(p, d, 1, a, null);
                await(p, () -> p.computedTokens(1) == 0, "request 1 admitted");
                Pd second = submit(p, d, 2, b, null);
                await(p, () -> p.computedTokens(2) == 0, "request 2 admitted while request 1 is computed");
                p.holdChunks = false;
                sameAnswer(colocated, a, first, "request 1");
                sameAnswer(colocated, b, second, "request 2");
                assertEquals(0, first.pre.get(30, TimeUnit.SECONDS).cachedTokens());
                assertEquals(0, second.pre.get(30, TimeUnit.SECONDS).cachedTokens());
                assertEquals(0, deferrals(meters), 0.0);
                assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS));
            }
        }
    }
}
