package io.kvferry.engine.serving;

import io.kvferry.KVFerry;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.engine.model.Sampling;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.Map;
import java.util.SplittableRandom;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The engines' gauges tell an operator what their schedulers hold: requests per queue, KV pages used,
 * cached and free, aux rows. Before, an engine's /metrics had kvferry's transfer meters only, so after
 * clients went away in bulk or a peer failed nobody could see whether the rooms had ended and the pages
 * had come back (only /health's in_flight, which says nothing of pages).
 */
@Timeout(120)
class EngineMetersTest {
    private final MeterRegistry meters = new SimpleMeterRegistry();

    private double gauge(String name, String role, String key, String value) {
        Gauge g = meters.find(name).tags("role", role, key, value).gauge();
        if (g == null) throw new AssertionError("no gauge " + name + "{role=" + role + "," + key + "=" + value + "}");
        return g.value();
    }

    /** Every engine gauge of {@code role}, as name{tag}=value (for the messages). */
    private Map<String, Double> all(String role) {
        Map<String, Double> out = new TreeMap<>();
        for (Gauge g : meters.find(EngineMeters.REQUESTS).tag("role", role).gauges()) out.put("requests{" + g.getId().getTag("queue") + "}", g.value());
        for (Gauge g : meters.find(EngineMeters.PAGES).tag("role", role).gauges()) out.put("pages{" + g.getId().getTag("state") + "}", g.value());
        for (Gauge g : meters.find(EngineMeters.ROWS).tag("role", role).gauges()) out.put("rows{" + g.getId().getTag("state") + "}", g.value());
        return out;
    }

    /** Waits for the scheduler to publish what {@code holds} expects (it publishes after every pass). */
    private static void await(Supplier<Boolean> holds, Supplier<String> state) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!holds.get()) {
            if (System.nanoTime() > deadline) throw new AssertionError("never held; last seen: " + state.get());
            Thread.sleep(5);
        }
    }

    private boolean decodeIs(int prealloc, int transfer, int running, int used, int cached, int rowsUsed) {
        return gauge(EngineMeters.REQUESTS, "decode", "queue", "prealloc") == prealloc
                && gauge(EngineMeters.REQUESTS, "decode", "queue", "transfer") == transfer
                && gauge(EngineMeters.REQUESTS, "decode", "queue", "running") == running
                && gauge(EngineMeters.REQUESTS, "decode", "queue", "releasing") == 0
                && gauge(EngineMeters.PAGES, "decode", "state", "used") == used
                && gauge(EngineMeters.PAGES, "decode", "state", "cached") == cached
                && gauge(EngineMeters.PAGES, "decode", "state", "free") == 8 - used - cached
                && gauge(EngineMeters.ROWS, "decode", "state", "used") == rowsUsed
                && gauge(EngineMeters.ROWS, "decode", "state", "free") == 4 - rowsUsed;
    }

    private boolean prefillIs(int bootstrap, int used) {
        return gauge(EngineMeters.REQUESTS, "prefill", "queue", "bootstrap") == bootstrap
                && gauge(EngineMeters.REQUESTS, "prefill", "queue", "forward") == 0
                && gauge(EngineMeters.REQUESTS, "prefill", "queue", "inflight") == 0
                && gauge(EngineMeters.PAGES, "prefill", "state", "used") == used
                && gauge(EngineMeters.ROWS, "prefill", "state", "used") == used;
    }

    /**
     * A decode request whose prefill never comes holds its pages in the transfer queue; one that needs more
     * pages than are left waits in the prealloc queue; aborting the first hands its pages to the second; once
     * the second's prefill runs and it finishes, every queue is empty and every page is free or cached.
     * A prefill request whose decode never comes waits in the bootstrap queue until aborted.
     */
    @Test
    void queuesPagesAndRowsAreVisibleAndComeBackToIdle() throws Exception {
        EngineSpec spec = new EngineSpec(DisaggregatedTest.WEIGHTS, 1, 1, 16, 8, 4, 64); // 8 pages of 16 tokens, 4 rows
        SplittableRandom r = new SplittableRandom(3);
        int[] a = DisaggregatedTest.prompt(r, 40), b = DisaggregatedTest.prompt(r, 40);
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test")) {
            TransferSpec t = DisaggregatedTest.transfer("tcp", registry).withMeters(meters);
            try (PrefillEngine p = new PrefillEngine(spec, t); DecodeEngine d = new DecodeEngine(spec, t)) {
                assertTrue(decodeIs(0, 0, 0, 0, 0, 0), all("decode").toString());
                assertTrue(prefillIs(0, 0), all("prefill").toString());
                // A: 40 + 20 tokens = 4 pages; no prefill request of its room, so it stays in the transfer queue.
                CompletableFuture<Generation> genA = DisaggregatedTest.decode(d, 1, a, 20, Sampling.GREEDY);
                await(() -> decodeIs(0, 1, 0, 4, 0, 1), () -> all("decode").toString());
                // B: 40 + 60 tokens = 7 pages, 4 free: it waits for pages.
                CompletableFuture<Generation> genB = DisaggregatedTest.decode(d, 2, b, 60, Sampling.GREEDY);
                await(() -> decodeIs(1, 1, 0, 4, 0, 1), () -> all("decode").toString());
                // A prefill request whose decode never asks: the bootstrap queue.
                CompletableFuture<PrefillEngine.Result> lonely = p.submit(new PrefillEngine.Request(3, a, Sampling.GREEDY));
                await(() -> prefillIs(1, 0), () -> all("prefill").toString());

                d.abort(1);
                assertThrows(ExecutionException.class, () -> genA.get(30, TimeUnit.SECONDS));
                await(() -> decodeIs(0, 1, 0, 7, 0, 1), () -> all("decode").toString()); // B got A's pages
                p.abort(3);
                assertThrows(ExecutionException.class, () -> lonely.get(30, TimeUnit.SECONDS));
                await(() -> prefillIs(0, 0), () -> all("prefill").toString());

                p.submit(new PrefillEngine.Request(2, b, Sampling.GREEDY));
                assertTrue(genB.get(60, TimeUnit.SECONDS).tokens().length > 0);
                // Idle: B's two full prompt pages stay in both prefix caches, nothing else is held.
                await(() -> decodeIs(0, 0, 0, 0, 2, 0), () -> all("decode").toString());
                await(() -> prefillIs(0, 0), () -> all("prefill").toString());
                assertEquals(2, gauge(EngineMeters.PAGES, "prefill", "state", "cached"), all("prefill").toString());
                assertEquals(6, gauge(EngineMeters.PAGES, "prefill", "state", "free"), all("prefill").toString());
                assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS));
                assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS));
                // B again: both caches serve its two full pages (32 tokens), each engine counts them.
                p.submit(new PrefillEngine.Request(4, b, Sampling.GREEDY));
                assertTrue(DisaggregatedTest.decode(d, 4, b, 4, Sampling.GREEDY).get(60, TimeUnit.SECONDS).tokens().length > 0);
                assertEquals(32, meters.find(EngineMeters.CACHED_TOKENS).tag("role", "prefill").counter().count(), 0.0);
                assertEquals(32, meters.find(EngineMeters.CACHED_TOKENS).tag("role", "decode").counter().count(), 0.0);
                // The prefill took B twice (40 tokens each; the lonely request never got its pages): 32 of 80 from its cache.
                assertEquals(80, meters.find(EngineMeters.PROMPT_TOKENS).tag("role", "prefill").counter().count(), 0.0);
                assertEquals(null, meters.find(EngineMeters.PROMPT_TOKENS).tag("role", "decode").counter(), "the decode counts none");
            }
            assertTrue(decodeIs(0, 0, 0, 0, 2, 0), all("decode").toString());
            assertTrue(prefillIs(0, 0), all("prefill").toString());
        }
    }
}
