package io.kvferry.engine.serving;

import io.kvferry.KVFerry;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.api.KVManager;
import io.kvferry.engine.model.Sampling;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * The prefill hands out pages in arrival order: a ready request (the decode sent its metadata) that cannot
 * get its pages holds its place, and a smaller ready one behind it waits too. Before, the smaller one took
 * the pages the larger one waited for, so a steady stream of small prompts starved a large one until a
 * timeout failed it (the decode's side of the same fix is {@link PreallocOrderTest}).
 */
@Timeout(120)
class PrefillOrderTest {
    private final MeterRegistry meters = new SimpleMeterRegistry();

    private double gauge(String name, String tag, String value) {
        Gauge g = meters.find(name).tags("role", "prefill", tag, value).gauge();
        return g == null ? -1 : g.value();
    }

    /** Rooms every prefill rank holds ready: the decode's metadata came, the scheduler has not taken them yet. */
    private static int ready(PrefillEngine p) {
        int n = Integer.MAX_VALUE;
        for (KVManager m : p.kvManagers()) n = Math.min(n, m.inspect().roomsByState().getOrDefault("WaitingForInput", 0));
        return n;
    }

    @Test
    void aSmallPromptDoesNotTakeThePagesALargerEarlierOneWaitsFor() throws Exception {
        // The prefill: 8 pages of 16 tokens. The decode has room for all three requests at once.
        EngineSpec prefillSpec = new EngineSpec(DisaggregatedTest.WEIGHTS, 1, 1, 16, 8, 4, 16);
        EngineSpec decodeSpec = new EngineSpec(DisaggregatedTest.WEIGHTS, 1, 1, 16, 64, 8, 64);
        SplittableRandom r = new SplittableRandom(11);
        int[] first = DisaggregatedTest.prompt(r, 64); // 4 pages
        int[] large = DisaggregatedTest.prompt(r, 128); // 8 pages: all of them
        int[] small = DisaggregatedTest.prompt(r, 20); // 2 pages: they fit beside the first one's 4
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "engine-test")) {
            TransferSpec t = DisaggregatedTest.transfer("tcp", registry);
            try (PrefillEngine p = new PrefillEngine(prefillSpec, t.withMeters(meters)); DecodeEngine d = new DecodeEngine(decodeSpec, t)) {
                // Each prefill request, as it ends (on the scheduler thread, after its pages were freed and the
                // gauges published): the requests still waiting for pages and the pages still used.
                List<String> ended = Collections.synchronizedList(new ArrayList<>());
                List<CompletableFuture<PrefillEngine.Result>> prefills = new ArrayList<>();
                int[][] prompts = {first, large, small};
                for (int i = 0; i < prompts.length; i++) {
                    long room = i + 1;
                    prefills.add(p.submit(new PrefillEngine.Request(room, prompts[i], Sampling.GREEDY)).whenComplete((res, e) -> ended.add(
                            "room " + room + (e != null ? " failed: " + e : "") + ": waiting " + gauge(EngineMeters.REQUESTS, "queue", "bootstrap")
                                    + ", used pages " + gauge(EngineMeters.PAGES, "state", "used"))));
                }
                // The scheduler holds until all three are ready, so its next pass finds them so, in arrival order:
                // the first gets 4 pages; the large one cannot get 8; the small one could get 2 but must wait.
                CompletableFuture<Integer> gate = new CompletableFuture<>();
                p.execute(() -> {
                    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                    int n;
                    while ((n = ready(p)) < 3 && System.nanoTime() < deadline) LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(1));
                    gate.complete(n);
                });
                List<CompletableFuture<Generation>> decodes = new ArrayList<>();
                for (int i = 0; i < prompts.length; i++) decodes.add(DisaggregatedTest.decode(d, i + 1, prompts[i], 4, Sampling.GREEDY));
                assertEquals(3, gate.get(60, TimeUnit.SECONDS), "rooms ready on the prefill");
                for (CompletableFuture<PrefillEngine.Result> f : prefills) f.get(60, TimeUnit.SECONDS);
                for (CompletableFuture<Generation> g : decodes) g.get(60, TimeUnit.SECONDS);
                assertEquals(List.of("room 1: waiting 2.0, used pages 0.0", // the large and the small one wait for it
                        "room 2: waiting 1.0, used pages 0.0", // then the large one had all 8 pages; the small one waited
                        "room 3: waiting 0.0, used pages 0.0"), ended);
                assertEquals(0, p.outstanding().get(10, TimeUnit.SECONDS));
                assertEquals(0, d.outstanding().get(10, TimeUnit.SECONDS));
            }
        }
    }
}
