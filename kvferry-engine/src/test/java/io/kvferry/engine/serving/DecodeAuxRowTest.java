package io.kvferry.engine.serving;

import io.kvferry.KVFerry;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.engine.model.Sampling;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The aux row is the prefill's word on its first token; a prefill is authenticated, not infallible. A first token
 * outside the vocabulary fails that request alone (kind integrity, the message naming the token) and the decode serves
 * on: before, the token indexed the logits on the decode's scheduler thread, and the exception there ended every request
 * of the engine. A row naming another room kvferry fails itself (its bootstrap_room check), alike.
 */
@Timeout(120)
class DecodeAuxRowTest {
    private record Ended(Generation gen, FailureKind kind, String message) {
    }

    private static CompletableFuture<Ended> decode(DecodeEngine d, long room, int[] prompt) {
        CompletableFuture<Ended> out = new CompletableFuture<>();
        d.submit(new DecodeEngine.Request(room, null, prompt, 6, Sampling.GREEDY, new DecodeEngine.TokenSink() {
            @Override
            public void onToken(int token) {
            }

            @Override
            public void onDone(Generation g) {
                out.complete(new Ended(g, null, null));
            }

            @Override
            public void onError(FailureKind kind, String message) {
                out.complete(new Ended(null, kind, message));
            }
        }, -1));
        return out;
    }

    @Test
    void aBadFirstTokenOrAnotherRoomsRowFailsThatRequestAloneAndTheDecodeServesOn() throws Exception {
        EngineSpec spec = new EngineSpec(DisaggregatedTest.WEIGHTS, 1, 1, 16, 64, 4, 256);
        int vocab = DisaggregatedTest.WEIGHTS.config.vocabSize();
        int[] prompt = DisaggregatedTest.prompt(new SplittableRandom(5), 40);
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test");
             ColocatedEngine colocated = new ColocatedEngine(spec)) {
            TransferSpec t = DisaggregatedTest.transfer("tcp", registry);
            int[] expected = colocated.generate(prompt, 6, Sampling.GREEDY).tokens();
            try (PrefillEngine p = new PrefillEngine(spec, t, false); DecodeEngine d = new DecodeEngine(spec, t)) {
                record Case(String name, PrefillEngine.AuxRowTamper tamper, String says) {
                }
                Case[] broken = {
                    new Case("a first token past the vocabulary", (pool, row, room) -> pool.writeFirstToken(row, vocab + 7, 0f,
                            prompt.length, new float[vocab], room), "first token " + (vocab + 7) + " is outside the vocabulary"),
                    new Case("a negative first token", (pool, row, room) -> pool.writeFirstToken(row, -1, 0f, prompt.length,
                            new float[vocab], room), "first token -1 is outside the vocabulary"),
                    new Case("another room's row", (pool, row, room) -> pool.writeFirstToken(row, 5, 0f, prompt.length,
                            new float[vocab], room + 1), "bootstrap_room mismatch"),
                };
                long room = 1;
                for (Case c : broken) {
                    p.auxRowTamper = c.tamper();
                    CompletableFuture<PrefillEngine.Result> pre = p.submit(new PrefillEngine.Request(room, prompt, Sampling.GREEDY));
                    Ended e = decode(d, room, prompt).get(60, TimeUnit.SECONDS);
                    assertEquals(FailureKind.INTEGRITY, e.kind(), c.name() + ": " + e);
                    assertTrue(e.message().contains(c.says()) && e.message().contains(String.valueOf(room)), c.name() + ": " + e.message());
                    pre.handle((r, x) -> r).get(30, TimeUnit.SECONDS); // the prefill's end (its room failed too where kvferry judged it)
                    room++;
                    // The decode serves on: the next request, with a sound row, is the colocated answer.
                    p.auxRowTamper = null;
                    CompletableFuture<PrefillEngine.Result> ok = p.submit(new PrefillEngine.Request(room, prompt, Sampling.GREEDY));
                    Ended good = decode(d, room, prompt).get(60, TimeUnit.SECONDS);
                    assertEquals(null, good.kind(), c.name() + ", the request after: " + good);
                    assertArrayEquals(expected, good.gen().tokens(), c.name());
                    ok.get(30, TimeUnit.SECONDS);
                    room++;
                }
                assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS), "the failed requests' pages were returned");
                assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS));
            }
        }
    }
}
