package io.kvferry.ops;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.BootstrapRegistryServer;
import io.kvferry.registry.PrefillRankRegistration;
import io.kvferry.registry.RegistryException;
import io.kvferry.registry.RegistryOptions;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The cluster view's fetches of process status documents, against processes that misbehave: one that
 * stalls mid-body or sends too much is listed as down, with why, within the fetch timeout, and the page
 * (and the registry it is served on) carries on; so does a status URL no request can be made to.
 * {@code kvferry status}'s client gets the same limits.
 */
class ClusterStatusFetchTest {
    /** What the page may take at most: every fetch's deadline, plus slack for a loaded CI machine (the registry's own cut-off is 10 s). */
    private static final Duration PAGE_BOUND = ClusterStatus.FETCH_TIMEOUT.plus(ClusterStatus.FETCH_MARGIN).plusSeconds(1);

    private final HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
    private final List<AutoCloseable> closeables = new ArrayList<>();

    @AfterEach
    void close() throws Exception {
        http.shutdownNow();
        for (int i = closeables.size() - 1; i >= 0; i--) closeables.get(i).close();
    }

    private <T extends AutoCloseable> T closing(T c) {
        closeables.add(c);
        return c;
    }

    private BootstrapRegistryServer registry(RegistryOptions options) {
        return closing(BootstrapRegistryServer.start("127.0.0.1", 0, options));
    }

    private HttpResponse<String> get(String url, Duration timeout) throws Exception {
        return http.send(HttpRequest.newBuilder(URI.create(url)).timeout(timeout).GET().build(), HttpResponse.BodyHandlers.ofString());
    }

    @Test
    void aProcessThatStallsMidBodyIsListedDownWithinTheFetchTimeout() throws Exception {
        MisbehavingPeer stalled = closing(MisbehavingPeer.stallingMidBody());
        OpsServer healthy = closing(OpsServer.start("127.0.0.1", 0, Ops.newRegistry(), new ProcessStatus("decode")));
        BootstrapRegistryServer registry = registry(RegistryOptions.defaults("t"));
        ClusterStatus cluster = RegistryOps.mount(registry, Ops.newRegistry(), List.of());
        cluster.watch(stalled.statusJsonUrl());
        cluster.watch(healthy.statusJsonUrl());

        long t0 = System.nanoTime();
        HttpResponse<String> resp = get("http://127.0.0.1:" + registry.port() + "/status.json", Duration.ofSeconds(20));
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);

        assertEquals(200, resp.statusCode(), resp.body());
        assertTrue(ms < PAGE_BOUND.toMillis(), "the page took " + ms + " ms");
        JsonNode processes = StatusJson.MAPPER.readTree(resp.body()).path("processes");
        assertEquals(2, processes.size(), processes.toString());
        JsonNode down = processes.get(0);
        assertEquals(stalled.statusJsonUrl(), down.path("url").asText());
        assertFalse(down.path("ok").asBoolean(), down.toString());
        assertTrue(down.path("error").asText().contains("fetch timeout of " + ClusterStatus.FETCH_TIMEOUT.toMillis() + " ms"), down.toString());
        assertTrue(processes.get(1).path("ok").asBoolean(), "the healthy process still shows: " + processes);
    }

    /**
     * Page loads that arrive while the processes are being fetched share that fetch: a burst of loads (the page
     * is unauthenticated) opens one connection per status URL, not one per load.
     */
    @Test
    void pageLoadsDuringACollectionShareItsFetches() throws Exception {
        MisbehavingPeer stalled = closing(MisbehavingPeer.stallingMidBody());
        BootstrapRegistryServer registry = registry(RegistryOptions.defaults("t"));
        ClusterStatus cluster = new ClusterStatus(registry, List.of(stalled.statusJsonUrl()));
        int loads = 8;
        CountDownLatch go = new CountDownLatch(1);
        List<CompletableFuture<JsonNode>> pages = new ArrayList<>();
        for (int i = 0; i < loads; i++) {
            CompletableFuture<JsonNode> page = new CompletableFuture<>();
            Thread.ofVirtual().start(() -> {
                try {
                    go.await();
                    page.complete(cluster.get());
                } catch (Throwable t) {
                    page.completeExceptionally(t);
                }
            });
            pages.add(page);
        }
        go.countDown();
        for (CompletableFuture<JsonNode> page : pages) {
            JsonNode p = page.get(30, TimeUnit.SECONDS).path("processes").get(0);
            assertFalse(p.path("ok").asBoolean(), p.toString()); // each load still gets the whole answer
        }
        // Each load stalls ~1.5 s on the peer, so they overlap; only a load that came after one had ended fetches again.
        assertTrue(cluster.collections() < loads, cluster.collections() + " collections for " + loads + " loads at once");
        assertEquals(cluster.collections(), stalled.connections(), "one fetch per collection, not per load");
    }

    /**
     * A document that is JSON of kind process but not shaped as kvferry's (the page would fail on it, for every
     * process at once) is listed down naming what is wrong; the others are shown and counted.
     */
    @Test
    void aMalformedProcessDocumentIsListedDownNamingWhatIsWrong() throws Exception {
        ObjectNode good = StatusJson.process("decode", List.of(), 0);
        ObjectNode bad = good.deepCopy();
        bad.withArray("ranks").addObject().put("role", "decode").put("peers", "none");
        bad.withObject("totals").put("rooms_concluded", 5);
        OpsServer goodProcess = closing(OpsServer.start("127.0.0.1", 0, Ops.newRegistry(), () -> good));
        OpsServer badProcess = closing(OpsServer.start("127.0.0.1", 0, Ops.newRegistry(), () -> bad));
        BootstrapRegistryServer registry = registry(RegistryOptions.defaults("t"));
        ClusterStatus cluster = new ClusterStatus(registry, List.of(badProcess.statusJsonUrl(), goodProcess.statusJsonUrl()));

        JsonNode doc = cluster.get();
        JsonNode processes = doc.path("processes");
        assertFalse(processes.get(0).path("ok").asBoolean(), processes.toString());
        assertEquals("not a kvferry process status document: ranks[0].rooms_by_state is not an object",
                processes.get(0).path("error").asText());
        assertTrue(processes.get(0).path("status").isMissingNode(), "its document is not passed on");
        assertTrue(processes.get(1).path("ok").asBoolean(), processes.toString());
        assertEquals(0, doc.path("totals").path("rooms_concluded").asLong(), "only shown documents are counted");
        assertNull(StatusJson.whyNotProcess(good));
    }

    @Test
    void aProcessThatSendsMoreThanTheCapIsListedDownNamingTheCap() throws Exception {
        // A small cap: sending 4 MiB through loopback within the fetch timeout is not sure on a loaded machine.
        int cap = 64 * 1024;
        long over = cap + 1L;
        MisbehavingPeer declares = closing(MisbehavingPeer.declaring(over));
        MisbehavingPeer streams = closing(MisbehavingPeer.streaming(over));
        BootstrapRegistryServer registry = registry(RegistryOptions.defaults("t"));
        ClusterStatus cluster = new ClusterStatus(registry, List.of(declares.statusJsonUrl(), streams.statusJsonUrl()), cap);

        long t0 = System.nanoTime();
        JsonNode processes = cluster.get().path("processes");
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);

        assertTrue(ms < PAGE_BOUND.toMillis(), "the view took " + ms + " ms");
        assertEquals(2, processes.size(), processes.toString());
        for (JsonNode p : processes) {
            assertFalse(p.path("ok").asBoolean(), p.toString());
            assertTrue(p.path("error").asText().contains("limit of " + cap + " bytes"), p.toString());
        }
        assertTrue(processes.get(0).path("error").asText().contains("declares a body of " + over + " bytes"), processes.toString());
        assertTrue(processes.get(1).path("error").asText().contains("sent a body of more than"), processes.toString());
    }

    /**
     * Page loads need no authentication, so one stalled process must not let them hold the registry's
     * request slots: with a cap of 4, four page loads at once are all answered within the fetch
     * timeout, and SGLang's routes are served right after.
     */
    @Test
    void pageLoadsDuringAStallLeaveTheRegistryRoutesServed() throws Exception {
        MisbehavingPeer stalled = closing(MisbehavingPeer.stallingMidBody());
        BootstrapRegistryServer registry = registry(RegistryOptions.defaults("t").withMaxConnections(4));
        RegistryOps.mount(registry, Ops.newRegistry(), List.of()).watch(stalled.statusJsonUrl());
        String base = "http://127.0.0.1:" + registry.port();

        long t0 = System.nanoTime();
        List<CompletableFuture<HttpResponse<String>>> pages = new ArrayList<>();
        for (int i = 0; i < 4; i++) {
            pages.add(http.sendAsync(HttpRequest.newBuilder(URI.create(base + "/status.json")).GET().build(),
                    HttpResponse.BodyHandlers.ofString()));
        }
        for (CompletableFuture<HttpResponse<String>> page : pages) {
            HttpResponse<String> resp = page.get(20, TimeUnit.SECONDS);
            assertEquals(200, resp.statusCode(), resp.body());
            assertFalse(StatusJson.MAPPER.readTree(resp.body()).path("processes").get(0).path("ok").asBoolean(), resp.body());
        }
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertTrue(ms < PAGE_BOUND.toMillis(), "four page loads at once took " + ms + " ms");
        assertEquals(200, get(base + "/health", Duration.ofSeconds(2)).statusCode());
    }

    /**
     * {@code http://prefill_0:9000/status.json} (a docker-compose service name) looks like a status URL, but
     * {@link URI} finds no host in it, so no request can be made to it: the registry refuses it at
     * registration, and one watched anyway lists only that process down, with the reason (it used to make
     * every page load a 500).
     */
    @Test
    void aStatusUrlNoRequestCanBeMadeToIsRefusedAtRegistrationAndListedDownWhenWatched() throws Exception {
        String unfetchable = "http://prefill_0:9000/status.json";
        OpsServer healthy = closing(OpsServer.start("127.0.0.1", 0, Ops.newRegistry(), new ProcessStatus("prefill")));
        BootstrapRegistryServer registry = registry(RegistryOptions.defaults("t"));
        ClusterStatus cluster = RegistryOps.mount(registry, Ops.newRegistry(), List.of());
        try (BootstrapClient c = new BootstrapClient("127.0.0.1:" + registry.port(), "t")) {
            c.registerRank(rank(0, 5000, healthy.statusJsonUrl()));
            RegistryException refused = assertThrows(RegistryException.class, () -> c.registerRank(rank(1, 5001, unfetchable)));
            assertEquals(400, refused.statusCode());
            assertTrue(refused.getMessage().contains("kvferry_status_url") && refused.getMessage().contains("no host"),
                    refused.getMessage());
        }
        cluster.watch(unfetchable);

        HttpResponse<String> resp = get("http://127.0.0.1:" + registry.port() + "/status.json", Duration.ofSeconds(10));

        assertEquals(200, resp.statusCode(), resp.body());
        JsonNode processes = StatusJson.MAPPER.readTree(resp.body()).path("processes");
        assertEquals(2, processes.size(), processes.toString());
        assertTrue(processes.get(0).path("ok").asBoolean(), processes.toString());
        JsonNode down = processes.get(1);
        assertEquals(unfetchable, down.path("url").asText());
        assertFalse(down.path("ok").asBoolean(), down.toString());
        assertTrue(down.path("error").asText().startsWith("cannot fetch it: ") && down.path("error").asText().contains("no host"),
                down.toString());
    }

    private static PrefillRankRegistration rank(int tp, int port, String statusUrl) {
        return new PrefillRankRegistration(2, tp, 1, 0, 1, 0, 1, 0, 1, 0, "127.0.0.1", port, 16, "bf16", null, false, null, statusUrl);
    }

    @Test
    void kvferryStatusGivesUpOnARegistryThatStallsMidBody() throws Exception {
        MisbehavingPeer stalled = closing(MisbehavingPeer.stallingMidBody());
        Duration timeout = Duration.ofMillis(500);
        long t0 = System.nanoTime();
        StatusClient.StatusException e = assertThrows(StatusClient.StatusException.class, () -> StatusClient.fetch(stalled.address(), timeout));
        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        assertTrue(e.getMessage().contains("within " + timeout.toMillis() + " ms"), e.getMessage());
        assertTrue(ms < timeout.toMillis() + 1_500, "kvferry status took " + ms + " ms");
    }

    @Test
    void kvferryStatusRefusesADocumentOverItsCap() throws Exception {
        MisbehavingPeer huge = closing(MisbehavingPeer.declaring(StatusClient.MAX_DOCUMENT_BYTES + 1L));
        StatusClient.StatusException e = assertThrows(StatusClient.StatusException.class,
                () -> StatusClient.fetch(huge.address(), Duration.ofSeconds(5)));
        assertTrue(e.getMessage().contains("limit of " + StatusClient.MAX_DOCUMENT_BYTES + " bytes"), e.getMessage());
    }
}
