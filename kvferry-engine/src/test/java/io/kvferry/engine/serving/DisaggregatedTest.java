package io.kvferry.engine.serving;

import io.kvferry.KVFerry;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.engine.TestModels;
import io.kvferry.engine.TestTransports;
import io.kvferry.engine.kv.KvPool;
import io.kvferry.engine.model.Model;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.ModelVariant;
import io.kvferry.engine.model.ModelWeights;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.model.SamplingRules;
import io.kvferry.engine.model.TokenLogprobs;
import io.kvferry.engine.model.Tokenizer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The proof matrix, in process: prefill and decode engines joined by kvferry produce exactly what
 * one colocated engine does (same tokens, same first-token logits, bit for bit), for every layout of
 * issue 14 over tcp, shm and ucx. The colocated reference runs at TP1: the engine's fixed-group
 * all-reduce makes TP, PP, page size and chunking invisible in the floats, so any layout must match it.
 * Every chunk size below is not a page multiple (unaligned chunked prefill throughout).
 */
class DisaggregatedTest {
    static final ModelWeights WEIGHTS = loadWeights();
    static final Map<ModelVariant, Model> MODELS = new EnumMap<>(ModelVariant.class);
    static final List<String> TRANSPORTS = List.of("tcp", "shm", "ucx");

    static {
        for (ModelVariant v : ModelVariant.values()) MODELS.put(v, Model.of(WEIGHTS, v));
    }

    private static ModelWeights loadWeights() {
        try {
            return ModelFiles.load(null, null).weights(); // stories260K when present, else random weights of its shape
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** One row of the matrix: the model variant, prefill TP×PP → decode TP×PP, page size, chunk size. */
    record Layout(String name, ModelVariant variant, int ptp, int ppp, int dtp, int dpp, int page, int chunk) {
        @Override
        public String toString() {
            return name + " [" + variant.label() + " P" + ptp + (ppp > 1 ? "xPP" + ppp : "") + "->D" + dtp + (dpp > 1 ? "xPP" + dpp : "")
                    + ", page " + page + ", chunk " + chunk + "]";
        }
    }

    static final List<Layout> LAYOUTS = List.of(
            new Layout("TP1->TP1", ModelVariant.LLAMA, 1, 1, 1, 1, 16, 23),
            new Layout("TP2->TP2", ModelVariant.LLAMA, 2, 1, 2, 1, 16, 7),
            new Layout("P2->D1", ModelVariant.LLAMA, 2, 1, 1, 1, 16, 9),
            new Layout("P1->D2", ModelVariant.LLAMA, 1, 1, 2, 1, 4, 5),
            new Layout("P4->D2", ModelVariant.LLAMA, 4, 1, 2, 1, 16, 20),
            new Layout("P1->D4", ModelVariant.LLAMA, 1, 1, 4, 1, 8, 13),
            new Layout("PP2->PP1", ModelVariant.LLAMA, 1, 2, 1, 1, 16, 9),
            new Layout("MLA P2->D1", ModelVariant.MLA, 2, 1, 1, 1, 16, 13),
            new Layout("MLA P1->D4", ModelVariant.MLA, 1, 1, 4, 1, 8, 7),
            new Layout("SWA P2->D1", ModelVariant.SWA, 2, 1, 1, 1, 4, 7),
            new Layout("SWA P1->D4", ModelVariant.SWA, 1, 1, 4, 1, 16, 11),
            new Layout("recurrent P1->D2", ModelVariant.HYBRID, 1, 1, 2, 1, 16, 5),
            new Layout("recurrent P4->D1", ModelVariant.HYBRID, 4, 1, 1, 1, 8, 19),
            new Layout("SWA P2xPP2->D1xPP2 (state per stage)", ModelVariant.SWA, 2, 2, 1, 2, 16, 9));

    static Stream<Arguments> layoutsOverTransports() {
        return LAYOUTS.stream().flatMap(l -> TRANSPORTS.stream().map(t -> Arguments.of(l, t)));
    }

    static CompletableFuture<Generation> decode(DecodeEngine d, long room, int[] prompt, int max, Sampling s) {
        return decode(d, room, prompt, max, s, -1);
    }

    /** @param topLogprobs -1: no log probabilities; else each token's with that many top ones */
    static CompletableFuture<Generation> decode(DecodeEngine d, long room, int[] prompt, int max, Sampling s, int topLogprobs) {
        CompletableFuture<Generation> out = new CompletableFuture<>();
        d.submit(new DecodeEngine.Request(room, null, prompt, max, s, new DecodeEngine.TokenSink() {
            @Override
            public void onToken(int token) {
            }

            @Override
            public void onDone(Generation g) {
                out.complete(g);
            }

            @Override
            public void onError(FailureKind kind, String message) {
                out.completeExceptionally(new IllegalStateException(message));
            }

            @Override
            public void onClientError(String param, String message) { // the client's error: its field named
                out.completeExceptionally(new IllegalArgumentException(param + ": " + message));
            }
        }, topLogprobs));
        return out;
    }

    static int[] prompt(SplittableRandom r, int len) {
        int[] p = new int[len];
        p[0] = 1;
        for (int i = 1; i < len; i++) p[i] = 3 + r.nextInt(WEIGHTS.config.vocabSize() - 3);
        return p;
    }

    static TransferSpec transfer(String transport, KVBootstrapServer registry) {
        return new TransferSpec(transport, "127.0.0.1:" + registry.port(), "engine-test", "127.0.0.1");
    }

    @ParameterizedTest(name = "{0} over {1}")
    @MethodSource("layoutsOverTransports")
    @Timeout(120)
    void disaggregatedEqualsColocatedBitForBit(Layout l, String transport) throws Exception {
        TestTransports.require(transport);
        EngineSpec base = new EngineSpec(MODELS.get(l.variant()), 1, 1, l.page(), 2048 / l.page(), 8, l.chunk());
        SplittableRandom r = new SplittableRandom(l.hashCode());
        List<int[]> prompts = new ArrayList<>();
        for (int i = 0; i < 5; i++) prompts.add(prompt(r, 1 + r.nextInt(90)));
        prompts.add(prompt(r, l.page() * 3)); // ends on a page boundary
        // Penalties, logit bias, min-p and end rules too: the prefill and the decode derive them from the tokens alone.
        SamplingRules rules = SamplingRules.of(0.7f, 0.3f, 1.2f, 0.05f, Map.of(5, 2f, 9, -3f), 3, false, new int[]{7, 11});
        Sampling[] samplings = {Sampling.GREEDY, new Sampling(0.8f, 0.9f, 77), new Sampling(0.8f, 0.9f, 78, -1, rules),
                new Sampling(0f, 1f, 0, -1, rules)};
        // Log probabilities for some requests (greedy and seeded, with and without top ones), none for the others.
        int[] tops = {-1, 5, 0, TokenLogprobs.MAX_TOP, 3, -1};
        List<Generation> expected = new ArrayList<>();
        try (ColocatedEngine c = new ColocatedEngine(base.withChunkTokens(256))) {
            for (int i = 0; i < prompts.size(); i++) expected.add(c.generate(prompts.get(i), 24, samplings[i % samplings.length], tops[i]));
        }
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test")) {
            TransferSpec t = transfer(transport, registry);
            try (PrefillEngine p = new PrefillEngine(base.withParallelism(l.ptp(), l.ppp()), t);
                 DecodeEngine d = new DecodeEngine(base.withParallelism(l.dtp(), l.dpp()), t)) {
                List<CompletableFuture<Generation>> gens = new ArrayList<>();
                List<CompletableFuture<PrefillEngine.Result>> pres = new ArrayList<>();
                for (int i = 0; i < prompts.size(); i++) {
                    long room = r.nextLong() & Long.MAX_VALUE;
                    pres.add(p.submit(new PrefillEngine.Request(room, prompts.get(i), samplings[i % samplings.length])));
                    gens.add(decode(d, room, prompts.get(i), 24, samplings[i % samplings.length], tops[i]));
                }
                for (int i = 0; i < prompts.size(); i++) {
                    Generation g = gens.get(i).get(60, TimeUnit.SECONDS);
                    pres.get(i).get(30, TimeUnit.SECONDS);
                    String what = l + " over " + transport + ", prompt " + i + " (" + prompts.get(i).length + " tokens)";
                    assertArrayEquals(expected.get(i).tokens(), g.tokens(), what);
                    assertArrayEquals(expected.get(i).firstLogits(), g.firstLogits(), what);
                    assertSameLogprobs(expected.get(i), g, what);
                    assertTrue(g.timings().bytes() > 0, what);
                }
                assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS), "prefill pages not returned");
                assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS), "decode pages not returned");
            }
        }
    }

    /**
     * The same log probabilities, bit for bit: the first token's from the prefill's aux row (its logprob, and its top ones
     * from the logits beside it), the rest the decode's; none when the request asked for none.
     */
    static void assertSameLogprobs(Generation expected, Generation g, String what) {
        if (expected.logprobs() == null) {
            assertNull(g.logprobs(), "no log probabilities asked, none computed: " + what);
            return;
        }
        assertEquals(expected.logprobs().size(), g.logprobs().size(), what);
        for (int t = 0; t < g.logprobs().size(); t++) {
            TokenLogprobs e = expected.logprobs().get(t), a = g.logprobs().get(t);
            assertEquals(e.token(), a.token(), what + ", token " + t);
            assertEquals(Float.floatToIntBits(e.logprob()), Float.floatToIntBits(a.logprob()), what + ", token " + t);
            assertArrayEquals(e.topTokens(), a.topTokens(), what + ", token " + t);
            assertArrayEquals(e.topLogprobs(), a.topLogprobs(), 0f, what + ", token " + t);
        }
    }

    /** inproc (same-JVM copies), once: it is the test transport. */
    @Test
    @Timeout(120)
    void inprocTransportToo() throws Exception {
        disaggregatedEqualsColocatedBitForBit(new Layout("P2->D1", ModelVariant.LLAMA, 2, 1, 1, 1, 16, 11), "inproc");
    }

    /** 4× more requests than the decode has pages for: they queue for pages and all finish. */
    @Test
    @Timeout(120)
    void requestsBeyondThePagesQueueAndAllFinish() throws Exception {
        EngineSpec spec = new EngineSpec(WEIGHTS, 1, 1, 16, 8, 16, 64); // 8 pages: two 60-token requests at a time
        SplittableRandom r = new SplittableRandom(5);
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             ColocatedEngine c = new ColocatedEngine(spec.withPages(64))) {
            TransferSpec t = transfer("tcp", registry);
            try (PrefillEngine p = new PrefillEngine(spec, t); DecodeEngine d = new DecodeEngine(spec, t)) {
                List<int[]> prompts = new ArrayList<>();
                List<CompletableFuture<Generation>> gens = new ArrayList<>();
                for (int i = 0; i < 8; i++) {
                    int[] pr = prompt(r, 40);
                    prompts.add(pr);
                    long room = r.nextLong() & Long.MAX_VALUE;
                    p.submit(new PrefillEngine.Request(room, pr, Sampling.GREEDY));
                    gens.add(decode(d, room, pr, 20, Sampling.GREEDY));
                }
                for (int i = 0; i < gens.size(); i++) {
                    assertArrayEquals(c.generate(prompts.get(i), 20, Sampling.GREEDY).tokens(), gens.get(i).get(60, TimeUnit.SECONDS).tokens());
                }
                assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS));
            }
        }
    }

    /**
     * A request that waits for an aux row (every row busy, pages plenty) must leave the prefix cache alone:
     * evicting frees pages, not rows. Before, each scheduling pass it waited evicted one cached page, so
     * a prompt cached before a long request came back as a full miss after it. The test checks the
     * overlap it relies on: the other request is submitted during the long one and is still waiting
     * when the long one ends.
     */
    @Test
    @Timeout(120)
    void aRequestWaitingForARowKeepsThePrefixCache() throws Exception {
        EngineSpec spec = new EngineSpec(WEIGHTS, 1, 1, 4, 256, 1, 8); // the decode: one aux row, pages for everything
        SplittableRandom r = new SplittableRandom(21);
        int[] cached = prompt(r, 18); // four whole pages, then two tokens
        int[] other = prompt(r, 3); // no whole page: adds nothing to the cache
        int[] longRunner = {1, 403, 407, 261, 378}; // "Once upon a time" on stories260K: a long story, not a quick BOS
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test")) {
            TransferSpec t = transfer("tcp", registry);
            try (PrefillEngine p = new PrefillEngine(spec.withMaxRequests(4), t); DecodeEngine d = new DecodeEngine(spec, t)) {
                long room = 100;
                p.submit(new PrefillEngine.Request(room, cached, Sampling.GREEDY));
                decode(d, room, cached, 2, Sampling.GREEDY).get(60, TimeUnit.SECONDS);
                assertEquals(4, d.cachedPages().get(10, TimeUnit.SECONDS));
                // The long request holds the only row. At its first token (on the decode's scheduler thread, so
                // while it surely runs) another request is submitted: it waits for the row until the long one ends.
                CompletableFuture<Generation> longDone = new CompletableFuture<>();
                AtomicReference<CompletableFuture<Generation>> waitingRef = new AtomicReference<>();
                AtomicBoolean waitedThroughout = new AtomicBoolean();
                long otherRoom = room + 2;
                p.submit(new PrefillEngine.Request(++room, longRunner, Sampling.GREEDY));
                d.submit(new DecodeEngine.Request(room, null, longRunner, 300, Sampling.GREEDY, new DecodeEngine.TokenSink() {
                    @Override
                    public void onToken(int token) {
                        if (waitingRef.get() != null) return;
                        p.submit(new PrefillEngine.Request(otherRoom, other, Sampling.GREEDY));
                        waitingRef.set(decode(d, otherRoom, other, 2, Sampling.GREEDY));
                    }

                    @Override
                    public void onDone(Generation g) {
                        CompletableFuture<Generation> w = waitingRef.get();
                        waitedThroughout.set(w != null && !w.isDone()); // it got no row while this one ran
                        longDone.complete(g);
                    }

                    @Override
                    public void onError(FailureKind kind, String message) {
                        longDone.completeExceptionally(new IllegalStateException(message));
                    }
                }));
                int generated = longDone.get(60, TimeUnit.SECONDS).tokens().length;
                room = otherRoom;
                // Greedy on a fixed checkpoint: the same length every run, so this checks the workload, not luck.
                assertTrue(generated >= 20, "the long request ended after " + generated + " tokens: too soon to show anything");
                assertTrue(waitedThroughout.get(), "the other request did not wait for the row while the long one ran");
                waitingRef.get().get(60, TimeUnit.SECONDS);
                // The cached prompt again: a hit on its four pages, one page to move.
                CompletableFuture<PrefillEngine.Result> again = p.submit(new PrefillEngine.Request(++room, cached, Sampling.GREEDY));
                decode(d, room, cached, 2, Sampling.GREEDY).get(60, TimeUnit.SECONDS);
                assertEquals(1, again.get(30, TimeUnit.SECONDS).kvPages(), "pages sent for the cached prompt after the wait");
                assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS));
            }
        }
    }

    /**
     * The router's /abort may overtake the room's /generate (it goes on another connection when the
     * other engine failed fast): the request that arrives after its abort fails at once as aborted
     * on both engines, instead of waiting minutes for a peer that will never come.
     */
    @Test
    @Timeout(60)
    void anAbortThatOvertakesItsRequestFailsTheRequestAtOnce() throws Exception {
        EngineSpec spec = new EngineSpec(WEIGHTS, 1, 1, 16, 64, 16, 64);
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test")) {
            TransferSpec t = transfer("tcp", registry);
            try (PrefillEngine p = new PrefillEngine(spec, t); DecodeEngine d = new DecodeEngine(spec, t)) {
                int[] pr = prompt(new SplittableRandom(11), 20);
                d.abort(41);
                p.abort(41);
                CompletableFuture<Generation> gen = decode(d, 41, pr, 8, Sampling.GREEDY);
                CompletableFuture<PrefillEngine.Result> pre = p.submit(new PrefillEngine.Request(41, pr, Sampling.GREEDY));
                ExecutionException decodeFailure = assertThrows(ExecutionException.class, () -> gen.get(10, TimeUnit.SECONDS));
                assertTrue(decodeFailure.getCause().getMessage().contains("Aborted"), decodeFailure.getCause().getMessage());
                ExecutionException prefillFailure = assertThrows(ExecutionException.class, () -> pre.get(10, TimeUnit.SECONDS));
                assertTrue(prefillFailure.getCause().getMessage().contains("Aborted"), prefillFailure.getCause().getMessage());
                // The id runs again for a later request, and nothing is held.
                p.submit(new PrefillEngine.Request(41, pr, Sampling.GREEDY));
                assertEquals(8, decode(d, 41, pr, 8, Sampling.GREEDY).get(30, TimeUnit.SECONDS).tokens().length);
                assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS));
            }
        }
    }

    /** A decode of another variant than its prefill: kvferry refuses the link at HELLO (model identities differ) and the request fails saying why. */
    @Test
    @Timeout(60)
    void mismatchedVariantsAreRefusedAtTheHandshake() throws Exception {
        EngineSpec llama = new EngineSpec(MODELS.get(ModelVariant.LLAMA), 1, 1, 16, 64, 4, 16);
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test")) {
            TransferSpec t = transfer("tcp", registry);
            try (PrefillEngine p = new PrefillEngine(llama, t);
                 DecodeEngine d = new DecodeEngine(llama.withModel(MODELS.get(ModelVariant.HYBRID)), t)) {
                int[] prompt = prompt(new SplittableRandom(1), 20);
                p.submit(new PrefillEngine.Request(7, prompt, Sampling.GREEDY));
                Exception e = assertThrows(ExecutionException.class, () -> decode(d, 7, prompt, 4, Sampling.GREEDY).get(30, TimeUnit.SECONDS));
                String why = e.getCause().getMessage();
                assertTrue(why.contains("model differs") && why.contains("/llama") && why.contains("/hybrid"), why);
                p.abort(7);
                assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS));
            }
        }
    }

    static final List<Layout> CACHE_LAYOUTS = List.of(
            new Layout("P2->D1", ModelVariant.LLAMA, 2, 1, 1, 1, 16, 10),
            new Layout("MLA P2->D1", ModelVariant.MLA, 2, 1, 1, 1, 16, 10),
            new Layout("SWA P1->D2", ModelVariant.SWA, 1, 1, 2, 1, 16, 10),
            new Layout("recurrent P2->D1", ModelVariant.HYBRID, 2, 1, 1, 1, 16, 10));

    static Stream<Arguments> cacheLayoutsOverTransports() {
        return CACHE_LAYOUTS.stream().flatMap(l -> TRANSPORTS.stream().map(t -> Arguments.of(l, t)));
    }

    /**
     * A repeated prompt prefix is served from the decode's prefix cache: fewer pages move and the tokens
     * stay exact. A page-aligned prompt seen before is all in the cache: its last chunk carries no page
     * (SGLang's zero-page last chunk: the first token in the aux row, and the window pages or recurrent
     * state of the variants), and the tokens stay exact.
     */
    @ParameterizedTest(name = "{0} over {1}")
    @MethodSource("cacheLayoutsOverTransports")
    @Timeout(120)
    void prefixCacheHitsAndZeroPageLastChunksStayExact(Layout l, String transport) throws Exception {
        TestTransports.require(transport);
        EngineSpec spec = new EngineSpec(MODELS.get(l.variant()), 1, 1, l.page(), 64, 4, l.chunk());
        SplittableRandom r = new SplittableRandom(9);
        int[] a = prompt(r, 50);
        int[] b = a.clone(); // shares a's first page (16 tokens), then differs
        for (int i = 16; i < b.length; i++) b[i] = 3 + r.nextInt(400);
        int[] aligned = prompt(r, 48); // three whole pages
        int[][] order = {a, a, b, a, aligned, aligned};
        int[] expectedPages = {4, 1, 3, 1, 3, 0};
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             ColocatedEngine c = new ColocatedEngine(spec)) {
            TransferSpec t = transfer(transport, registry);
            try (PrefillEngine p = new PrefillEngine(spec.withParallelism(l.ptp(), 1), t);
                 DecodeEngine d = new DecodeEngine(spec.withParallelism(l.dtp(), 1), t)) {
                long[] bytes = new long[order.length];
                int[] pages = new int[order.length];
                for (int i = 0; i < order.length; i++) {
                    long room = r.nextLong() & Long.MAX_VALUE;
                    CompletableFuture<PrefillEngine.Result> pre = p.submit(new PrefillEngine.Request(room, order[i], Sampling.GREEDY));
                    Generation g = decode(d, room, order[i], 12, Sampling.GREEDY).get(60, TimeUnit.SECONDS);
                    pages[i] = pre.get(30, TimeUnit.SECONDS).kvPages();
                    Generation e = c.generate(order[i], 12, Sampling.GREEDY);
                    assertArrayEquals(e.tokens(), g.tokens(), l + " over " + transport + ", request " + i);
                    assertArrayEquals(e.firstLogits(), g.firstLogits(), l + " over " + transport + ", request " + i);
                    bytes[i] = g.timings().bytes();
                }
                assertArrayEquals(expectedPages, pages, "pages sent per request: " + Arrays.toString(pages));
                assertTrue(bytes[1] < bytes[0] && bytes[2] < bytes[0] && bytes[2] > bytes[1], Arrays.toString(bytes));
                assertEquals(bytes[1], bytes[3]);
                if (transport.equals("tcp")) {
                    // What landed is measured on tcp: the zero-page request moved its aux row and state, nothing else.
                    // Every prefill rank that writes a decode rank writes the aux row (one rank for MLA's replicated KV).
                    int auxWriters = l.variant() == ModelVariant.MLA ? 1 : Math.max(1, l.ptp() / l.dtp());
                    long auxRow = KvPool.TOKEN_ROW_BYTES + 4L * WEIGHTS.config.vocabSize() + 8;
                    assertEquals(stateAndAuxBytes(spec.withParallelism(l.dtp(), 1), aligned.length) + (auxWriters - 1) * auxRow * l.dtp(),
                            bytes[5], Arrays.toString(bytes));
                }
                assertTrue(d.cachedPages().get(10, TimeUnit.SECONDS) >= 6);
                assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS));
                assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS));
            }
        }
    }

    /**
     * llama2.c's checkpoints end a story with BOS and never emit EOS (run.c stops on {@code next == 1}):
     * greedy "Once upon a time" on stories260K ends with BOS, not at max tokens, with finish_reason "stop",
     * colocated and disaggregated alike. A prompt that is the whole story (its first sampled token, the
     * prefill's, is BOS) ends at that first token.
     */
    @Test
    @Timeout(120)
    void bosEndsTheSequenceAsInLlama2c() throws Exception {
        Path dir = TestModels.requireStories();
        ModelFiles.Loaded m = ModelFiles.load(dir.resolve(ModelFiles.CHECKPOINT), null);
        EngineSpec spec = new EngineSpec(m.weights(), 1, 1, 16, 64, 2, 32);
        int[] prompt = m.tokenizer().encode("Once upon a time", true, false);
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             ColocatedEngine c = new ColocatedEngine(spec)) {
            Generation story = c.generate(prompt, 480, Sampling.GREEDY);
            int[] t = story.tokens();
            assertEquals("stop", story.finishReason(), "ran to " + t.length + " tokens");
            assertTrue(t.length < 480, "ran to " + t.length + " tokens");
            assertEquals(Tokenizer.BOS, t[t.length - 1]);
            for (int i = 0; i < t.length - 1; i++) assertFalse(Tokenizer.endsSequence(t[i]), "token " + i + " ends the sequence and it went on");
            int[] whole = Arrays.copyOf(prompt, prompt.length + t.length - 1); // the story without its closing BOS
            System.arraycopy(t, 0, whole, prompt.length, t.length - 1);
            Generation ended = c.generate(whole, 8, Sampling.GREEDY);
            assertArrayEquals(new int[]{Tokenizer.BOS}, ended.tokens());
            assertEquals("stop", ended.finishReason());
            TransferSpec tr = transfer("tcp", registry);
            try (PrefillEngine p = new PrefillEngine(spec.withParallelism(2, 1), tr); DecodeEngine d = new DecodeEngine(spec, tr)) {
                int room = 100;
                for (int[] pr : new int[][]{prompt, whole}) {
                    room++;
                    CompletableFuture<PrefillEngine.Result> pre = p.submit(new PrefillEngine.Request(room, pr, Sampling.GREEDY));
                    Generation g = decode(d, room, pr, pr == prompt ? 480 : 8, Sampling.GREEDY).get(60, TimeUnit.SECONDS);
                    assertArrayEquals(pr == prompt ? t : ended.tokens(), g.tokens());
                    assertEquals("stop", g.finishReason());
                    assertEquals(pr == prompt ? t[0] : Tokenizer.BOS, pre.get(30, TimeUnit.SECONDS).firstToken());
                }
                assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS));
            }
        }
    }

    /** Bytes of a request without KV pages on every decode shard: its aux row (once) and its state. */
    static long stateAndAuxBytes(EngineSpec decode, int promptTokens) {
        long sum = 0;
        for (int r = 0; r < decode.tp(); r++) {
            try (KvPool pool = new KvPool(decode.model(), decode.pageSize(), 1, 1, 0, decode.model().config.layers(), decode.tp(),
                    false, "bytes")) {
                sum += pool.transferBytes(0, promptTokens);
            }
        }
        return sum;
    }
}
