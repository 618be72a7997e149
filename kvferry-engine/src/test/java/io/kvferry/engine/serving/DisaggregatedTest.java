package io.kvferry.engine.serving;

import io.kvferry.KVFerry;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.engine.model.LlamaConfig;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.ModelWeights;
import io.kvferry.engine.model.Sampling;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Prefill and decode engines joined by kvferry produce exactly what one colocated engine does. */
class DisaggregatedTest {
    static final ModelWeights WEIGHTS = loadWeights();

    private static ModelWeights loadWeights() {
        try {
            return ModelFiles.load(null, null).weights(); // stories260K when present, else random weights of its shape
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    static CompletableFuture<Generation> decode(DecodeEngine d, long room, int[] prompt, int max, Sampling s) {
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
        }));
        return out;
    }

    static int[] prompt(SplittableRandom r, int len) {
        int[] p = new int[len];
        p[0] = 1;
        for (int i = 1; i < len; i++) p[i] = 3 + r.nextInt(WEIGHTS.config.vocabSize() - 3);
        return p;
    }

    @ParameterizedTest(name = "{0}: prefill tp{1} pp{2} -> decode tp{3} pp{4}, page {5}, chunk {6}")
    @CsvSource({
            "tcp, 1, 1, 1, 1, 16, 256",
            "tcp, 2, 1, 1, 1, 16, 7",
            "tcp, 1, 1, 2, 1, 4, 5",
            "tcp, 4, 1, 2, 1, 16, 20",
            "tcp, 1, 1, 4, 1, 8, 256",
            "tcp, 2, 1, 2, 1, 16, 16",
            "tcp, 1, 2, 1, 1, 16, 9",
            "inproc, 2, 1, 1, 1, 16, 256",
            "shm, 2, 1, 4, 1, 16, 13",
    })
    @Timeout(120)
    void disaggregatedEqualsColocatedBitForBit(String transport, int ptp, int ppp, int dtp, int dpp, int page, int chunk)
            throws Exception {
        EngineSpec base = new EngineSpec(WEIGHTS, 1, 1, page, 2048 / page, 8, chunk);
        SplittableRandom r = new SplittableRandom(ptp * 100 + dtp * 10 + page);
        List<int[]> prompts = new ArrayList<>();
        for (int i = 0; i < 6; i++) prompts.add(prompt(r, 1 + r.nextInt(90)));
        prompts.add(prompt(r, page * 3)); // ends on a page boundary
        Sampling[] samplings = {Sampling.GREEDY, new Sampling(0.8f, 0.9f, 77)};
        List<Generation> expected = new ArrayList<>();
        try (ColocatedEngine c = new ColocatedEngine(base.withChunkTokens(256))) {
            for (int i = 0; i < prompts.size(); i++) expected.add(c.generate(prompts.get(i), 24, samplings[i % 2]));
        }
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test")) {
            TransferSpec t = new TransferSpec(transport, "127.0.0.1:" + registry.port(), "engine-test", "127.0.0.1");
            try (PrefillEngine p = new PrefillEngine(base.withParallelism(ptp, ppp), t);
                 DecodeEngine d = new DecodeEngine(base.withParallelism(dtp, dpp), t)) {
                List<CompletableFuture<Generation>> gens = new ArrayList<>();
                List<CompletableFuture<PrefillEngine.Result>> pres = new ArrayList<>();
                for (int i = 0; i < prompts.size(); i++) {
                    long room = r.nextLong() & Long.MAX_VALUE;
                    pres.add(p.submit(new PrefillEngine.Request(room, prompts.get(i), samplings[i % 2])));
                    gens.add(decode(d, room, prompts.get(i), 24, samplings[i % 2]));
                }
                for (int i = 0; i < prompts.size(); i++) {
                    Generation g = gens.get(i).get(60, TimeUnit.SECONDS);
                    pres.get(i).get(30, TimeUnit.SECONDS);
                    String what = "prompt " + i + " (" + prompts.get(i).length + " tokens)";
                    assertArrayEquals(expected.get(i).tokens(), g.tokens(), what);
                    assertArrayEquals(expected.get(i).firstLogits(), g.firstLogits(), what);
                    assertTrue(g.timings().bytes() > 0, what);
                }
                assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS), "prefill pages not returned");
                assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS), "decode pages not returned");
            }
        }
    }

    /** 4× more requests than the decode has pages for: they queue for pages and all finish. */
    @Test
    @Timeout(120)
    void requestsBeyondThePagesQueueAndAllFinish() throws Exception {
        EngineSpec spec = new EngineSpec(WEIGHTS, 1, 1, 16, 8, 16, 64); // 8 pages: two 60-token requests at a time
        SplittableRandom r = new SplittableRandom(5);
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "t");
             ColocatedEngine c = new ColocatedEngine(spec.withPages(64))) {
            TransferSpec t = new TransferSpec("tcp", "127.0.0.1:" + registry.port(), "t", "127.0.0.1");
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

    /** A repeated prompt prefix is served from the decode's prefix cache: fewer bytes move, the tokens stay exact. */
    @ParameterizedTest(name = "{0}: prefill tp{1} -> decode tp{2}")
    @CsvSource({"tcp, 1, 1", "tcp, 2, 1", "shm, 1, 2"})
    @Timeout(120)
    void aDecodePrefixCacheHitMovesLessAndStaysExact(String transport, int ptp, int dtp) throws Exception {
        EngineSpec spec = new EngineSpec(WEIGHTS, 1, 1, 16, 64, 4, 10);
        SplittableRandom r = new SplittableRandom(9);
        int[] a = prompt(r, 50);
        int[] b = a.clone(); // shares a's first page (16 tokens), then differs
        for (int i = 16; i < b.length; i++) b[i] = 3 + r.nextInt(400);
        int[][] order = {a, a, b, a};
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "t");
             ColocatedEngine c = new ColocatedEngine(spec)) {
            TransferSpec t = new TransferSpec(transport, "127.0.0.1:" + registry.port(), "t", "127.0.0.1");
            try (PrefillEngine p = new PrefillEngine(spec.withParallelism(ptp, 1), t); DecodeEngine d = new DecodeEngine(spec.withParallelism(dtp, 1), t)) {
                long[] bytes = new long[order.length];
                for (int i = 0; i < order.length; i++) {
                    long room = r.nextLong() & Long.MAX_VALUE;
                    p.submit(new PrefillEngine.Request(room, order[i], Sampling.GREEDY));
                    Generation g = decode(d, room, order[i], 12, Sampling.GREEDY).get(60, TimeUnit.SECONDS);
                    Generation e = c.generate(order[i], 12, Sampling.GREEDY);
                    assertArrayEquals(e.tokens(), g.tokens(), "request " + i);
                    assertArrayEquals(e.firstLogits(), g.firstLogits(), "request " + i);
                    bytes[i] = g.timings().bytes();
                }
                assertTrue(bytes[1] < bytes[0], "a repeated prompt moved " + bytes[1] + " bytes, the first time " + bytes[0]);
                assertTrue(bytes[2] < bytes[0] && bytes[2] > bytes[1], "a shared 1-page prefix: " + Arrays.toString(bytes));
                assertEquals(bytes[1], bytes[3]);
                assertTrue(d.cachedPages().get(10, TimeUnit.SECONDS) >= 3);
                assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS));
                assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS));
            }
        }
    }

    static LlamaConfig shape() {
        return WEIGHTS.config;
    }
}
