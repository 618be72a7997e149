package io.kvferry.engine.serving;

import io.kvferry.KVFerry;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.api.KVTransferException;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.model.TokenLogprobs;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

/**
 * A prefill-only request (the prompt's input token log probabilities, {@code max_tokens} 0): no decode takes its room,
 * so the prefill opens no senders and waits for none; it computes the prompt in chunks, answers with the colocated run's
 * input logprobs and frees its pages. An abort before it runs fails it as an abort. Over every layout and model variant,
 * a PD request's input logprobs are the colocated run's too.
 */
@Timeout(120)
class PrefillOnlyTest {
    /**
     * Every layout and model variant of {@link DisaggregatedTest} (MLA, sliding window, recurrent, PP2), over TCP: a PD
     * request with input logprobs gets the colocated run's (one big chunk, TP1) and the same output tokens, and a
     * prefill-only one the same input logprobs.
     */
    @ParameterizedTest(name = "{0}")
    @MethodSource("layouts")
    void inputLogprobsAreTheColocatedRunsOverEveryLayout(DisaggregatedTest.Layout l) throws Exception {
        EngineSpec base = new EngineSpec(DisaggregatedTest.MODELS.get(l.variant()), 1, 1, l.page(), 2048 / l.page(), 8, l.chunk());
        SplittableRandom r = new SplittableRandom(l.hashCode());
        int[][] prompts = {DisaggregatedTest.prompt(r, 1 + r.nextInt(90)), DisaggregatedTest.prompt(r, l.page() * 3), DisaggregatedTest.prompt(r, 2)};
        int[] starts = {0, l.chunk() + 1, 1};
        try (ColocatedEngine c = new ColocatedEngine(base.withChunkTokens(256));
             KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             PrefillEngine p = new PrefillEngine(base.withParallelism(l.ptp(), l.ppp()), DisaggregatedTest.transfer("tcp", registry));
             DecodeEngine d = new DecodeEngine(base.withParallelism(l.dtp(), l.dpp()), DisaggregatedTest.transfer("tcp", registry))) {
            for (int i = 0; i < prompts.length; i++) {
                int start = Math.min(starts[i], prompts[i].length - 1);
                Generation expected = c.generate(prompts[i], 6, Sampling.GREEDY, 4, start);
                long room = r.nextLong() & Long.MAX_VALUE;
                CompletableFuture<PrefillEngine.Result> pre = p.submit(new PrefillEngine.Request(room, prompts[i], Sampling.GREEDY, start, 4, false));
                Generation g = DisaggregatedTest.decode(d, room, prompts[i], 6, Sampling.GREEDY, -1).get(60, TimeUnit.SECONDS);
                assertArrayEquals(expected.tokens(), g.tokens(), l + ", prompt " + i);
                sameInputLogprobs(expected.inputLogprobs(), pre.get(60, TimeUnit.SECONDS).inputLogprobs(), prompts[i], start, l + ", prompt " + i);
                PrefillEngine.Result alone = p.submit(new PrefillEngine.Request(room + 1, prompts[i], Sampling.GREEDY, start, 4, true))
                        .get(60, TimeUnit.SECONDS);
                sameInputLogprobs(expected.inputLogprobs(), alone.inputLogprobs(), prompts[i], start, l + ", prompt " + i + ", prefill-only");
            }
        }
    }

    static Stream<DisaggregatedTest.Layout> layouts() {
        return DisaggregatedTest.LAYOUTS.stream();
    }

    static void sameInputLogprobs(List<TokenLogprobs> expected, List<TokenLogprobs> actual, int[] prompt, int start, String what) {
        assertEquals(prompt.length - start, actual.size(), what);
        assertEquals(expected.size(), actual.size(), what);
        for (int i = 0; i < expected.size(); i++) {
            TokenLogprobs e = expected.get(i), a = actual.get(i);
            if (start + i == 0) {
                assertNull(a, what);
                continue;
            }
            String at = what + ", position " + (start + i);
            assertEquals(prompt[start + i], a.token(), at);
            assertEquals(e.logprob(), a.logprob(), 0f, at);
            assertArrayEquals(e.topTokens(), a.topTokens(), at);
            assertArrayEquals(e.topLogprobs(), a.topLogprobs(), 0f, at);
        }
    }

    @Test
    void aPrefillOnlyRequestEndsWithNoDecodeAndGivesTheColocatedRunsInputLogprobs() throws Exception {
        EngineSpec spec = new EngineSpec(DisaggregatedTest.WEIGHTS, 2, 1, 16, 16, 4, 8);
        int[] prompt = DisaggregatedTest.prompt(new SplittableRandom(5), 50); // 7 chunks of 8
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             PrefillEngine p = new PrefillEngine(spec, DisaggregatedTest.transfer("tcp", registry));
             ColocatedEngine c = new ColocatedEngine(new EngineSpec(DisaggregatedTest.WEIGHTS, 1, 1, 16, 16, 1, 1024))) {
            for (int start : new int[]{0, 9, 49}) {
                PrefillEngine.Result r = p.submit(new PrefillEngine.Request(7 + start, prompt, Sampling.GREEDY, start, 3, true))
                        .get(60, TimeUnit.SECONDS); // without prefill_only it waits for a decode that never comes
                assertEquals(-1, r.firstToken());
                assertEquals(0, r.kvPages());
                sameInputLogprobs(c.generate(prompt, 0, Sampling.GREEDY, 3, start).inputLogprobs(), r.inputLogprobs(), prompt, start, "start " + start);
                assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS), "its pages and row are freed");
            }
            // Aborted while queued (the scheduler runs the submit and the abort before its next pass).
            CountDownLatch hold = new CountDownLatch(1);
            p.execute(() -> {
                try {
                    hold.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            CompletableFuture<PrefillEngine.Result> aborted = p.submit(new PrefillEngine.Request(99, prompt, Sampling.GREEDY, 0, 0, true));
            p.abort(99);
            hold.countDown();
            ExecutionException e = assertThrows(ExecutionException.class, () -> aborted.get(60, TimeUnit.SECONDS));
            assertEquals(FailureKind.ABORTED, assertInstanceOf(KVTransferException.class, e.getCause()).kind());
            assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS));
        }
    }
}
