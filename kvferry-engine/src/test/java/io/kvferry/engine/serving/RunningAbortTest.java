package io.kvferry.engine.serving;

import io.kvferry.KVFerry;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.engine.model.ModelVariant;
import io.kvferry.engine.model.Sampling;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static io.kvferry.engine.serving.DisaggregatedTest.MODELS;
import static io.kvferry.engine.serving.DisaggregatedTest.prompt;
import static io.kvferry.engine.serving.DisaggregatedTest.transfer;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * An abort of a request that is generating (the router's, when its client left or a stop string was met)
 * ends it at the next step: it fails as aborted, is counted, and its pages come back. The abort is sent
 * from the first token's callback, so it is queued before the request could run to its end: no race with
 * the length of the story (ServeTest's full-stack cases, which go through HTTP, can meet a story that ends first).
 */
class RunningAbortTest {
    @Test
    @Timeout(60)
    void anAbortOfAGeneratingRequestEndsItAtTheNextStepAndFreesItsPages() throws Exception {
        EngineSpec spec = new EngineSpec(MODELS.get(ModelVariant.LLAMA), 1, 1, 16, 64, 4, 16);
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test")) {
            TransferSpec t = transfer("tcp", registry);
            try (PrefillEngine p = new PrefillEngine(spec, t); DecodeEngine d = new DecodeEngine(spec, t)) {
                int[] pr = prompt(new SplittableRandom(5), 20);
                long room = 77;
                long abortedBefore = d.abortedRequests();
                AtomicInteger tokens = new AtomicInteger();
                CompletableFuture<String> ended = new CompletableFuture<>();
                d.submit(new DecodeEngine.Request(room, null, pr, 400, Sampling.GREEDY, new DecodeEngine.TokenSink() {
                    @Override
                    public void onToken(int token) {
                        if (tokens.getAndIncrement() == 0) d.abort(room); // runs on the scheduler, before its next step
                    }

                    @Override
                    public void onDone(Generation g) {
                        ended.complete("done with " + g.tokens().length + " tokens (" + g.finishReason() + ")");
                    }

                    @Override
                    public void onError(FailureKind kind, String message) {
                        ended.complete(kind + ": " + message);
                    }
                }));
                p.submit(new PrefillEngine.Request(room, pr, Sampling.GREEDY)).get(30, TimeUnit.SECONDS);
                assertEquals("ABORTED: Aborted by AbortReq.", ended.get(30, TimeUnit.SECONDS));
                assertTrue(tokens.get() <= 2, "tokens after the abort: " + tokens.get());
                assertEquals(abortedBefore + 1, d.abortedRequests());
                assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS), "the aborted request's pages came back");
                assertEquals(0, d.inFlight());
            }
        }
    }
}
