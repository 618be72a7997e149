package io.kvferry.engine.serving;

import io.kvferry.KVFerry;
import io.kvferry.api.FailureKind;
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

import java.util.Arrays;
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
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * In-flight prefix sharing on the decode: a request that shares full pages beyond the decode's cache with a request whose
 * KV is being received waits for that transfer, then takes the pages that landed as a hit and asks the prefill only for
 * the rest, so a burst on a new prefix moves it over the transfer once. The prefill's chunks are held
 * ({@link PrefillEngine#holdChunks}) while the requests arrive, so the first request's transfer is under way (metadata
 * sent, nothing landed) when the others come: who waits is decided, not raced; every state is read on the decode's
 * scheduler thread between its passes (no sleeps). Answers equal the colocated run's token for token.
 */
@Timeout(120)
class DecodeSharedPrefixTest {
    private static final int MAX = 8;
    private static final int TOP = 2;
    /** Page 16, 64 pages, 8 requests, chunks of 16 tokens. */
    private static final EngineSpec SPEC = new EngineSpec(DisaggregatedTest.WEIGHTS, 1, 1, 16, 64, 8, 16);

    /** A request through prefill and decode: the prefill's result and the decode's generation, both pending. */
    private record Pd(CompletableFuture<PrefillEngine.Result> pre, CompletableFuture<Generation> gen) {
    }

    private static Pd submit(PrefillEngine p, DecodeEngine d, long room, int[] prompt, String salt) {
        return submit(p, d, null, room, prompt, salt);
    }

    /** @param bootstrapAddr the prefill's registry (null: the decode's own) */
    private static Pd submit(PrefillEngine p, DecodeEngine d, String bootstrapAddr, long room, int[] prompt, String salt) {
        var pre = p.submit(new PrefillEngine.Request(room, prompt, Sampling.GREEDY, -1, 0, false, salt));
        CompletableFuture<Generation> gen = new CompletableFuture<>();
        d.submit(new DecodeEngine.Request(room, bootstrapAddr, prompt, MAX, Sampling.GREEDY, new DecodeEngine.TokenSink() {
            @Override
            public void onToken(int token) {
            }

            @Override
            public void onDone(Generation g) {
                gen.complete(g);
            }

            @Override
            public void onError(FailureKind kind, String message) {
                gen.completeExceptionally(new IllegalStateException(kind + ": " + message));
            }
        }, TOP, salt));
        return new Pd(pre, gen);
    }

    /** The value {@code s} reads on the decode's scheduler thread, between two passes. */
    private static <T> T onScheduler(DecodeEngine d, Supplier<T> s) throws Exception {
        CompletableFuture<T> out = new CompletableFuture<>();
        d.execute(() -> out.complete(s.get()));
        return out.get(10, TimeUnit.SECONDS);
    }

    /** Until {@code state} holds on the decode's scheduler thread (read between passes; at most 30 s, then the test fails). */
    private static void await(DecodeEngine d, BooleanSupplier state, String what) throws Exception {
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!onScheduler(d, state::getAsBoolean)) {
            if (System.nanoTime() > end) fail("never: " + what);
            Thread.onSpinWait();
        }
    }

    private static double deferrals(MeterRegistry meters) {
        var c = meters.find(EngineMeters.PREFIX_DEFERRALS).tag("role", "decode").counter();
        return c == null ? -1 : c.count();
    }

    /** Prompt tokens the decode took from its cache (not received). */
    private static double decodeCached(MeterRegistry meters) {
        var c = meters.find(EngineMeters.CACHED_TOKENS).tag("role", "decode").counter();
        return c == null ? -1 : c.count();
    }

    /** {@code head}, then {@code tail} without its BOS. */
    private static int[] join(int[] head, int[] tail) {
        int[] out = Arrays.copyOf(head, head.length + tail.length - 1);
        System.arraycopy(tail, 1, out, head.length, tail.length - 1);
        return out;
    }

    private static Generation sameAnswer(ColocatedEngine colocated, int[] prompt, Pd pd, String what) throws Exception {
        Generation e = colocated.generate(prompt, MAX, Sampling.GREEDY, TOP, -1), g = pd.gen.get(60, TimeUnit.SECONDS);
        // The prefill's half too: it ends (its pages released) once its sender sees the decode's Success, which may come
        // after the decode generated every token; a test that then counts the prefill's pages must not overtake it.
        pd.pre.get(60, TimeUnit.SECONDS);
        assertArrayEquals(e.tokens(), g.tokens(), what);
        assertArrayEquals(e.firstLogits(), g.firstLogits(), 0f, what);
        DisaggregatedTest.assertSameLogprobs(e, g, what);
        return g;
    }

    /**
     * A burst of four prompts on a new 80-token prefix (5 pages; the first three have no full page past it): the first one's transfer is under way when the others
     * come; they wait for it (the decode's deferral counter counts 3) and then take its pages from the decode's cache: the
     * decode's cached tokens are 80, 80 and 48 (the one that shares only the prefix's first 3 pages), and each of them
     * received fewer bytes than the first one; the two that share the whole prefix exactly the bytes that the same prompt
     * receives when the decode's cache holds its prefix (sent again afterwards): the prefix moved once. Each answer equals the colocated run's token for token,
     * on a TP1, TP2 and PP2 decode (and TP1 decodes of the swa and hybrid variants, whose window pages and recurrent state
     * are sent whole besides the pages); nothing is left held.
     */
    @ParameterizedTest(name = "{0} decode TP{1} PP{2}")
    @CsvSource({"LLAMA, 1, 1", "LLAMA, 2, 1", "LLAMA, 1, 2", "SWA, 1, 1", "HYBRID, 1, 1"})
    void aBurstOnANewPrefixReceivesItOnce(ModelVariant variant, int tp, int pp) throws Exception {
        EngineSpec spec = new EngineSpec(DisaggregatedTest.MODELS.get(variant), 1, 1, 16, 64, 8, 16);
        SplittableRandom r = new SplittableRandom(41);
        int[] shared = DisaggregatedTest.prompt(r, 80);
        int[][] prompts = {join(shared, DisaggregatedTest.prompt(r, 12)), join(shared, DisaggregatedTest.prompt(r, 9)),
                join(shared, DisaggregatedTest.prompt(r, 16)), join(Arrays.copyOf(shared, 50), DisaggregatedTest.prompt(r, 30))};
        int[] decodeCached = {0, 80, 80, 48};
        MeterRegistry meters = new SimpleMeterRegistry();
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             ColocatedEngine colocated = new ColocatedEngine(spec)) {
            TransferSpec t = DisaggregatedTest.transfer("tcp", registry).withMeters(meters);
            try (PrefillEngine p = new PrefillEngine(spec.withParallelism(1, pp), t, false);
                 DecodeEngine d = new DecodeEngine(spec.withParallelism(tp, pp), t)) {
                p.holdChunks = true;
                Pd[] pds = new Pd[prompts.length];
                pds[0] = submit(p, d, 1, prompts[0], null);
                await(d, () -> d.inTransfer(1), "request 1's transfer under way");
                for (int i = 1; i < prompts.length; i++) pds[i] = submit(p, d, 1 + i, prompts[i], null);
                for (int i = 1; i < prompts.length; i++) {
                    long room = 1 + i;
                    await(d, () -> d.waitingForSharedPrefix(room), "request " + room + " waits for request 1's pages");
                }
                assertEquals(3, deferrals(meters), 0.0);
                assertEquals(0, decodeCached(meters), 0.0);
                p.holdChunks = false;
                Generation[] g = new Generation[prompts.length];
                double cachedSoFar = 0;
                for (int i = 0; i < prompts.length; i++) {
                    g[i] = sameAnswer(colocated, prompts[i], pds[i], "request " + (1 + i));
                    cachedSoFar += decodeCached[i];
                }
                assertEquals(cachedSoFar, decodeCached(meters), 0.0, "the decode's cached tokens: 80 + 80 + 48");
                assertEquals(3, deferrals(meters), 0.0, "each request counted once, however many passes it waited");
                for (int i = 1; i < 3; i++) {
                    // The same prompt again, its prefix in the decode's cache now: it receives what the waiting request did.
                    Pd again = submit(p, d, 11 + i, prompts[i], null);
                    Generation a = sameAnswer(colocated, prompts[i], again, "request " + (1 + i) + " again");
                    assertEquals(a.timings().bytes(), g[i].timings().bytes(), "request " + (1 + i) + " received the pages after its hit only");
                }
                for (int i = 1; i < prompts.length; i++) {
                    assertTrue(g[i].timings().bytes() < g[0].timings().bytes(), "request " + (1 + i) + ": " + g[i].timings().bytes()
                            + " B, the first " + g[0].timings().bytes() + " B");
                }
                assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS));
                assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS));
            }
        }
    }

    /**
     * A request aborted while it waits ends at once and holds nothing (the decode's outstanding pages and rows are the
     * first request's alone); the first then finishes exact, and nothing is left.
     */
    @Test
    void anAbortWhileWaitingHoldsNothing() throws Exception {
        SplittableRandom r = new SplittableRandom(42);
        int[] shared = DisaggregatedTest.prompt(r, 48);
        int[] a = join(shared, DisaggregatedTest.prompt(r, 10)), b = join(shared, DisaggregatedTest.prompt(r, 14));
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             ColocatedEngine colocated = new ColocatedEngine(SPEC);
             PrefillEngine p = new PrefillEngine(SPEC, DisaggregatedTest.transfer("tcp", registry), false);
             DecodeEngine d = new DecodeEngine(SPEC, DisaggregatedTest.transfer("tcp", registry))) {
            p.holdChunks = true;
            Pd first = submit(p, d, 1, a, null);
            await(d, () -> d.inTransfer(1), "request 1's transfer under way");
            int held = d.outstanding().get(10, TimeUnit.SECONDS);
            Pd waiting = submit(p, d, 2, b, null);
            await(d, () -> d.waitingForSharedPrefix(2), "request 2 waits");
            assertEquals(held, d.outstanding().get(10, TimeUnit.SECONDS), "the waiting request holds no page or row");
            d.abort(2);
            p.abort(2);
            assertThrows(ExecutionException.class, () -> waiting.gen.get(30, TimeUnit.SECONDS));
            assertThrows(ExecutionException.class, () -> waiting.pre.get(30, TimeUnit.SECONDS));
            assertEquals(held, d.outstanding().get(10, TimeUnit.SECONDS), "the aborted request holds no page or row");
            assertFalse(onScheduler(d, () -> d.waitingForSharedPrefix(2)));
            p.holdChunks = false;
            sameAnswer(colocated, a, first, "request 1");
            assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS));
            assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS));
        }
    }

    /**
     * The request waited for ends before its KV landed: aborted on the decode, or failed by its prefill (its aux row names
     * another room: kvferry's bootstrap_room check fails the room; its first token outside the vocabulary: the KV landed
     * but the decode's check fails it, and nothing of it joins the cache). The waiting request then looks the cache up
     * again (nothing), receives its whole prompt itself and is exact; a third request on the prefix then hits its pages
     * on the decode.
     */
    @ParameterizedTest(name = "request 1 {0}")
    @ValueSource(strings = {"aborted", "another room's row", "a first token past the vocabulary"})
    void whenTheRequestWaitedForEndsTheWaitingOneReceivesItself(String how) throws Exception {
        SplittableRandom r = new SplittableRandom(43);
        int[] shared = DisaggregatedTest.prompt(r, 64);
        int[] a = join(shared, DisaggregatedTest.prompt(r, 10)), b = join(shared, DisaggregatedTest.prompt(r, 6));
        int[] c = join(shared, DisaggregatedTest.prompt(r, 3));
        int vocab = DisaggregatedTest.WEIGHTS.config.vocabSize();
        MeterRegistry meters = new SimpleMeterRegistry();
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             ColocatedEngine colocated = new ColocatedEngine(SPEC)) {
            TransferSpec t = DisaggregatedTest.transfer("tcp", registry).withMeters(meters);
            try (PrefillEngine p = new PrefillEngine(SPEC, t, false); DecodeEngine d = new DecodeEngine(SPEC, t)) {
                p.holdChunks = true;
                switch (how) {
                    case "another room's row" -> p.auxRowTamper = (pool, row, room) -> {
                        if (room == 1) pool.writeFirstToken(row, 5, 0f, a.length, new float[vocab], room + 100);
                    };
                    case "a first token past the vocabulary" -> p.auxRowTamper = (pool, row, room) -> {
                        if (room == 1) pool.writeFirstToken(row, vocab + 7, 0f, a.length, new float[vocab], room);
                    };
                    default -> {
                    }
                }
                Pd first = submit(p, d, 1, a, null);
                await(d, () -> d.inTransfer(1), "request 1's transfer under way");
                Pd second = submit(p, d, 2, b, null);
                await(d, () -> d.waitingForSharedPrefix(2), "request 2 waits");
                if (how.equals("aborted")) {
                    d.abort(1);
                    p.abort(1);
                    assertThrows(ExecutionException.class, () -> first.gen.get(30, TimeUnit.SECONDS));
                    await(d, () -> d.inTransfer(2), "request 2's transfer under way, from its first token");
                }
                p.holdChunks = false;
                if (!how.equals("aborted")) assertThrows(ExecutionException.class, () -> first.gen.get(30, TimeUnit.SECONDS));
                sameAnswer(colocated, b, second, "request 2");
                assertEquals(0, decodeCached(meters), 0.0, "request 2 received its whole prompt");
                assertEquals(1, deferrals(meters), 0.0);
                Pd third = submit(p, d, 3, c, null);
                sameAnswer(colocated, c, third, "request 3");
                assertEquals(64, decodeCached(meters), 0.0, "request 3 took request 2's prefix pages");
                assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS));
                assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS));
            }
        }
    }

    /**
     * Requests under another cache salt share nothing on the decode, so they do not wait (both receive the prefix); one
     * under the first's salt waits and hits.
     */
    @Test
    void anotherCacheSaltDoesNotWait() throws Exception {
        SplittableRandom r = new SplittableRandom(44);
        int[] shared = DisaggregatedTest.prompt(r, 48);
        int[] a = join(shared, DisaggregatedTest.prompt(r, 10)), b = join(shared, DisaggregatedTest.prompt(r, 7));
        int[] c = join(shared, DisaggregatedTest.prompt(r, 5));
        MeterRegistry meters = new SimpleMeterRegistry();
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             ColocatedEngine colocated = new ColocatedEngine(SPEC)) {
            TransferSpec t = DisaggregatedTest.transfer("tcp", registry).withMeters(meters);
            try (PrefillEngine p = new PrefillEngine(SPEC, t, false); DecodeEngine d = new DecodeEngine(SPEC, t)) {
                p.holdChunks = true;
                Pd first = submit(p, d, 1, a, "tenant-a");
                await(d, () -> d.inTransfer(1), "request 1's transfer under way");
                Pd other = submit(p, d, 2, b, "tenant-b");
                await(d, () -> d.inTransfer(2), "request 2 (another salt) in transfer while request 1 is");
                Pd same = submit(p, d, 3, c, "tenant-a");
                await(d, () -> d.waitingForSharedPrefix(3), "request 3 (the same salt) waits");
                p.holdChunks = false;
                sameAnswer(colocated, a, first, "request 1");
                sameAnswer(colocated, b, other, "request 2");
                sameAnswer(colocated, c, same, "request 3");
                assertEquals(48, decodeCached(meters), 0.0, "request 3 alone took cached pages");
                assertEquals(1, deferrals(meters), 0.0);
                assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS));
            }
        }
    }

    /**
     * The same page-aligned prompt twice (64 tokens, 4 full pages), the second while the first's transfer is under way: it
     * waits, then holds its whole prompt from the first's landed pages, so the prefill sends it no page, only the state and
     * the aux row (decode_prefix_len = the prompt); exact, on a TP2 llama decode and TP1 hybrid and swa decodes (whose
     * recurrent state and window pages the prefill still computes and sends whole).
     */
    @ParameterizedTest(name = "{0} decode TP{1}")
    @CsvSource({"LLAMA, 2", "HYBRID, 1", "SWA, 1"})
    void aWaitingRequestMayTakeItsWholePromptFromALandedOne(ModelVariant variant, int tp) throws Exception {
        EngineSpec spec = new EngineSpec(DisaggregatedTest.MODELS.get(variant), 1, 1, 16, 64, 8, 16);
        int[] prompt = DisaggregatedTest.prompt(new SplittableRandom(46), 64);
        MeterRegistry meters = new SimpleMeterRegistry();
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             ColocatedEngine colocated = new ColocatedEngine(spec)) {
            TransferSpec t = DisaggregatedTest.transfer("tcp", registry).withMeters(meters);
            try (PrefillEngine p = new PrefillEngine(spec, t, false); DecodeEngine d = new DecodeEngine(spec.withParallelism(tp, 1), t)) {
                p.holdChunks = true;
                Pd first = submit(p, d, 1, prompt, null);
                await(d, () -> d.inTransfer(1), "request 1's transfer under way");
                Pd second = submit(p, d, 2, prompt, null);
                await(d, () -> d.waitingForSharedPrefix(2), "request 2 waits");
                p.holdChunks = false;
                Generation a = sameAnswer(colocated, prompt, first, "request 1"), b = sameAnswer(colocated, prompt, second, "request 2");
                assertEquals(64, decodeCached(meters), 0.0, "request 2 held its whole prompt");
                assertEquals(0, second.pre.get(10, TimeUnit.SECONDS).kvPages(), "the prefill sent request 2 no page");
                assertTrue(b.timings().bytes() < a.timings().bytes());
                assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS));
                assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS));
            }
        }
    }

    /**
     * The transfer waited for hangs (its prefill holds its chunks, as a stuck prefill would; the decode's waiting timeout,
     * 300 s, is far off): the waiting request, whose own prefill (another one) is sound, stops waiting after half the
     * bootstrap timeout and receives its prompt itself, so its prefill, which fails a room still Bootstrapping (no
     * metadata from the decode) after the bootstrap timeout, never fails it for the other's hang; it is exact. Before, it
     * waited until the hung transfer ended, and its prefill failed it first (bootstrap_timeout). The bootstrap timeout is
     * 8 s here (the knob, as every engine of the test reads it), so the wait lasts 4 s (ample to see it wait, and 4 s
     * left for its metadata, on a loaded machine).
     */
    @Test
    void aWaitOnAHungTransferEndsBeforeTheWaitingRequestsBootstrapTimeout() throws Exception {
        SplittableRandom r = new SplittableRandom(45);
        int[] shared = DisaggregatedTest.prompt(r, 48);
        int[] a = join(shared, DisaggregatedTest.prompt(r, 10)), b = join(shared, DisaggregatedTest.prompt(r, 6));
        MeterRegistry meters = new SimpleMeterRegistry();
        String before = System.getProperty("kvferry.bootstrapTimeoutMs");
        System.setProperty("kvferry.bootstrapTimeoutMs", "8000");
        try (KVBootstrapServer hung = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             KVBootstrapServer sound = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             ColocatedEngine colocated = new ColocatedEngine(SPEC);
             PrefillEngine stuck = new PrefillEngine(SPEC, DisaggregatedTest.transfer("tcp", hung), false);
             PrefillEngine p = new PrefillEngine(SPEC, DisaggregatedTest.transfer("tcp", sound), false);
             DecodeEngine d = new DecodeEngine(SPEC, DisaggregatedTest.transfer("tcp", hung).withMeters(meters))) {
            restore(before);
            stuck.holdChunks = true;
            Pd first = submit(stuck, d, 1, a, null);
            await(d, () -> d.inTransfer(1), "request 1's transfer under way");
            Pd waiting = submit(p, d, "127.0.0.1:" + sound.port(), 2, b, null);
            await(d, () -> d.waitingForSharedPrefix(2), "request 2 waits for request 1's pages");
            sameAnswer(colocated, b, waiting, "request 2, request 1 still hung");
            assertEquals(2, waiting.pre.get(30, TimeUnit.SECONDS).room(), "request 2's prefill succeeded");
            assertTrue(onScheduler(d, () -> d.inTransfer(1)), "request 1 still hung");
            assertEquals(1, deferrals(meters), 0.0);
            assertEquals(0, decodeCached(meters), 0.0, "request 2 received its whole prompt");
            stuck.holdChunks = false;
            sameAnswer(colocated, a, first, "request 1");
            assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS));
        } finally {
            restore(before);
        }
    }

    private static void restore(String bootstrapTimeoutMs) {
        if (bootstrapTimeoutMs == null) System.clearProperty("kvferry.bootstrapTimeoutMs");
        else System.setProperty("kvferry.bootstrapTimeoutMs", bootstrapTimeoutMs);
    }
}
