package io.kvferry.engine.serving;

import io.kvferry.KVFerry;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.engine.model.Sampling;
import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

/**
 * The decode hands out pages in arrival order: a request that cannot get its pages holds its place, and a
 * smaller one behind it waits too. Before, the smaller one took the pages the larger one waited for, so a
 * steady stream of small requests starved a large one until its prefill's bootstrap timeout (300 s) failed
 * it with a misleading "timed out ... in KVPoll.Bootstrapping" (a burst larger than the decode's pool).
 */
@Timeout(120)
class PreallocOrderTest {
    private final MeterRegistry meters = new SimpleMeterRegistry();

    private double queue(String q) {
        Gauge g = meters.find(EngineMeters.REQUESTS).tags("role", "decode", "queue", q).gauge();
        return g == null ? -1 : g.value();
    }

    private double usedPages() {
        Gauge g = meters.find(EngineMeters.PAGES).tags("role", "decode", "state", "used").gauge();
        return g == null ? -1 : g.value();
    }

    /** Rooms that reached WaitingForInput on the decode (kvferry records their bootstrap time then). */
    private double bootstrapped() {
        double n = 0;
        for (DistributionSummary m : meters.find("kvferry_kv_transfer_bootstrap_ms").tag("role", "decode").summaries()) n += m.count();
        return n;
    }

    private static void await(Supplier<Boolean> holds, Supplier<String> state) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!holds.get()) {
            if (System.nanoTime() > deadline) throw new AssertionError("never held; last seen: " + state.get());
            Thread.sleep(5);
        }
    }

    private String state() {
        return "prealloc " + queue("prealloc") + ", transfer " + queue("transfer") + ", used pages " + usedPages() + ", bootstrapped "
                + bootstrapped();
    }

    @Test
    void aSmallRequestDoesNotTakeThePagesALargerEarlierOneWaitsFor() throws Exception {
        EngineSpec spec = new EngineSpec(DisaggregatedTest.WEIGHTS, 1, 1, 16, 8, 4, 64); // 8 pages of 16 tokens, 4 rows
        SplittableRandom r = new SplittableRandom(8);
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test")) {
            TransferSpec t = DisaggregatedTest.transfer("tcp", registry).withMeters(meters);
            try (PrefillEngine p = new PrefillEngine(spec, t); DecodeEngine d = new DecodeEngine(spec, t)) {
                // No prefill request for any of these rooms: each stays where its pages put it.
                // Small 1: 20 + 12 tokens = 2 pages, held in the transfer queue.
                CompletableFuture<Generation> small1 = DisaggregatedTest.decode(d, 1, DisaggregatedTest.prompt(r, 20), 12, Sampling.GREEDY);
                await(() -> queue("transfer") == 1 && usedPages() == 2, this::state);
                // Large: 40 + 88 tokens = 8 pages, 6 free: it waits, ready (its room bootstrapped).
                CompletableFuture<Generation> large = DisaggregatedTest.decode(d, 2, DisaggregatedTest.prompt(r, 40), 88, Sampling.GREEDY);
                await(() -> bootstrapped() == 2 && queue("prealloc") == 1, this::state);
                // Small 2: 2 pages would fit in the 6 free ones, but the large one came first.
                CompletableFuture<Generation> small2 = DisaggregatedTest.decode(d, 3, DisaggregatedTest.prompt(r, 20), 12, Sampling.GREEDY);
                await(() -> bootstrapped() == 3, this::state);
                // A marker behind it, aborted at once: the pass that finds it failed went over small 2, ready, first.
                CompletableFuture<Generation> marker = DisaggregatedTest.decode(d, 4, DisaggregatedTest.prompt(r, 5), 1, Sampling.GREEDY);
                d.abort(4);
                assertThrows(ExecutionException.class, () -> marker.get(30, TimeUnit.SECONDS));
                assertEquals(3, d.outstanding().get(10, TimeUnit.SECONDS), "pages + rows held: small 1's only (" + state() + ")");
                assertEquals(2, queue("prealloc"), state());
                // Small 1 ends: the large one gets all 8 pages; small 2 still waits.
                d.abort(1);
                assertThrows(ExecutionException.class, () -> small1.get(30, TimeUnit.SECONDS));
                await(() -> queue("transfer") == 1 && usedPages() == 8 && queue("prealloc") == 1, this::state);
                d.abort(2);
                assertThrows(ExecutionException.class, () -> large.get(30, TimeUnit.SECONDS));
                await(() -> queue("transfer") == 1 && usedPages() == 2 && queue("prealloc") == 0, this::state); // small 2's turn
                d.abort(3);
                assertThrows(ExecutionException.class, () -> small2.get(30, TimeUnit.SECONDS));
                assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS));
            }
        }
    }
}
