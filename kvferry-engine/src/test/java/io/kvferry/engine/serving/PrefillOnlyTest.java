package io.kvferry.engine.serving;

import io.kvferry.KVFerry;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.api.KVTransferException;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.model.TokenLogprobs;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

/**
 * A prefill-only request (the prompt's input token log probabilities, {@code max_tokens} 0): no decode takes its room,
 * so the prefill opens no senders and waits for none; it computes the prompt in chunks, answers with the colocated run's
 * input logprobs and frees its pages. An abort before it runs fails it as an abort.
 */
@Timeout(120)
class PrefillOnlyTest {
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
                var expected = c.generate(prompt, 0, Sampling.GREEDY, 3, start).inputLogprobs();
                assertEquals(prompt.length - start, r.inputLogprobs().size());
                for (int i = 0; i < expected.size(); i++) {
                    TokenLogprobs e = expected.get(i), a = r.inputLogprobs().get(i);
                    if (start + i == 0) {
                        assertNull(a);
                        continue;
                    }
                    assertEquals(prompt[start + i], a.token());
                    assertEquals(e.logprob(), a.logprob(), 0f, "position " + (start + i));
                    assertArrayEquals(e.topTokens(), a.topTokens());
                    assertArrayEquals(e.topLogprobs(), a.topLogprobs(), 0f);
                }
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
