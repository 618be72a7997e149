package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.serving.EngineSpec;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static io.kvferry.engine.http.DrainTest.HTTP;
import static io.kvferry.engine.http.DrainTest.JSON;
import static io.kvferry.engine.http.DrainTest.assertHealthDraining;
import static io.kvferry.engine.http.DrainTest.assertRefusedDraining;
import static io.kvferry.engine.http.EngineStubs.answer;
import static io.kvferry.engine.http.EngineStubs.url;
import static io.kvferry.engine.http.RouterErrorsTest.NO_CHECKS;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Draining and the router ({@link Drain}, {@code serve --drain-timeout-s}). An engine that answers the router the 503 of
 * its drain took nothing of the request: the router takes it out of rotation and runs the request on another instance,
 * so a rolling restart shows its clients no error (with no periodic health checks, the 503 alone does it). A router that
 * drains refuses new requests (503 draining, /health 503) and lets those running, streams included, end.
 */
class RouterDrainTest {
    private static final String COMPLETION = "{\"prompt\":\"Once upon a time\",\"max_tokens\":12}";

    private static EngineStack engines() throws Exception {
        return EngineStack.open(new EngineSpec(ModelFiles.load(null, null).weights(), 1, 1, 16, 512, 32, 32), "drain-test");
    }

    private static Router router(List<String> prefills, List<String> decodes) throws IOException {
        ModelFiles.Loaded model = ModelFiles.load(null, null);
        return new Router(prefills, decodes, model.tokenizer(), model.weights().config.seqLen(), "m", "127.0.0.1", 0, NO_CHECKS);
    }

    /** {@code count} requests at once through the router, each answered 200 (the first alone before, to meet the drain first). */
    private static void burstSucceeds(Router router, int count) throws Exception {
        HttpResponse<String> first = RouterCalls.post(router.port(), "/v1/completions", COMPLETION);
        assertEquals(200, first.statusCode(), "the first request met the draining engine: " + first.body());
        List<CompletableFuture<HttpResponse<String>>> all = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            String body = i % 2 == 0 ? COMPLETION : "{\"prompt\":\"Hi\",\"max_tokens\":8,\"stream\":true}";
            all.add(HTTP.sendAsync(DrainTest.post(router.port(), "/v1/completions", body), HttpResponse.BodyHandlers.ofString()));
        }
        for (CompletableFuture<HttpResponse<String>> f : all) {
            HttpResponse<String> r = f.get(120, TimeUnit.SECONDS);
            assertEquals(200, r.statusCode(), r.body());
            assertFalse(r.body().contains("\"error\""), r.body());
        }
    }

    private static void assertOut(Router router, String role, String url) throws Exception {
        JsonNode w = JSON.readTree(DrainTest.get(router.port(), "/workers").body());
        for (JsonNode b : w.path(role + "s")) {
            if (b.path("url").asText().equals(url)) {
                assertFalse(b.path("healthy").asBoolean(), "the draining " + role + " is out of rotation: " + w);
                return;
            }
        }
        throw new AssertionError(url + " not listed: " + w);
    }

    /** One of two decodes drains (the first listed: a tie picks it): every request of a burst succeeds, on the other. */
    @Test
    @Timeout(240)
    void aBurstMeetingADrainingDecodeAllSucceeds() throws Exception {
        try (EngineStack a = engines(); EngineStack b = engines();
             Router router = router(List.of(a.prefillUrl()), List.of(b.decodeUrl(), a.decodeUrl()))) {
            b.decodeServer.drain().begin();
            burstSucceeds(router, 16);
            assertOut(router, "decode", b.decodeUrl());
        }
    }

    /** One of two prefills drains: the same, the decode's half of each first run aborted. */
    @Test
    @Timeout(240)
    void aBurstMeetingADrainingPrefillAllSucceeds() throws Exception {
        try (EngineStack a = engines(); EngineStack b = engines();
             Router router = router(List.of(b.prefillUrl(), a.prefillUrl()), List.of(a.decodeUrl()))) {
            b.prefillServer.drain().begin();
            burstSucceeds(router, 16);
            assertOut(router, "prefill", b.prefillUrl());
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30); // the aborted rooms' pages come back
            while (a.decode.inFlight() > 0 && System.nanoTime() < until) Thread.sleep(10);
            assertEquals(0, a.decode.inFlight(), "no decode room left waiting for a prefill that refused it");
        }
    }

    /**
     * Every decode drains (two, stubs answering the draining 503): the request runs once on each, not more, and the client
     * gets a 503 it can act on: Retry-After, and a message saying no other instance took it (not the engine's own
     * "send it to another instance", which speaks to the router).
     */
    @Test
    @Timeout(60)
    void aRequestMeetingOnlyDrainingDecodesGetsA503WithRetryAfter() throws Exception {
        AtomicInteger decodeCalls = new AtomicInteger();
        HttpServer prefill = stub(ex -> answer(ex, 200, "{}"), true);
        Route draining = ex -> {
            decodeCalls.incrementAndGet();
            ex.getRequestBody().readAllBytes();
            byte[] b = ("{\"error\":{\"type\":\"service_unavailable\",\"code\":\"draining\",\"message\":\"this decode is "
                    + "draining (shutting down): it takes no new requests; send it to another instance\"}}").getBytes(StandardCharsets.UTF_8);
            ex.sendResponseHeaders(503, b.length);
            ex.getResponseBody().write(b);
            ex.close();
        };
        HttpServer d1 = stub(draining, false), d2 = stub(draining, false);
        try (Router router = router(List.of(url(prefill)), List.of(url(d1), url(d2)))) {
            HttpResponse<String> r = RouterCalls.post(router.port(), "/v1/completions", COMPLETION);
            assertEquals(503, r.statusCode(), r.body());
            assertEquals("1", r.headers().firstValue("Retry-After").orElse(null), "a 503 the client may retry: " + r.headers().map());
            String message = JSON.readTree(r.body()).path("error").path("message").asText();
            assertTrue(message.contains("no other instance"), message);
            assertEquals(2, decodeCalls.get(), "one run on each decode, no loop");
        } finally {
            prefill.stop(0);
            d1.stop(0);
            d2.stop(0);
        }
    }

    /**
     * An engine's draining 503 puts its message in the router's log (the engine out of rotation, the request run again):
     * escaped, as other text from the wire is (LogSafe), so an engine cannot end the line and forge the next one.
     */
    @Test
    @Timeout(60)
    void aDrainingEnginesMessageCannotForgeARouterLogLine() throws Exception {
        HttpServer prefill = stub(ex -> answer(ex, 200, "{}"), true);
        Route draining = ex -> {
            ex.getRequestBody().readAllBytes();
            byte[] b = "{\"error\":{\"type\":\"service_unavailable\",\"code\":\"draining\",\"message\":\"draining\\nFORGED [main] INFO a line\"}}"
                    .getBytes(StandardCharsets.UTF_8);
            ex.sendResponseHeaders(503, b.length);
            ex.getResponseBody().write(b);
            ex.close();
        };
        HttpServer d1 = stub(draining, false), d2 = stub(draining, false);
        PrintStream err = System.err;
        ByteArrayOutputStream logged = new ByteArrayOutputStream();
        try (Router router = router(List.of(url(prefill)), List.of(url(d1), url(d2)))) {
            System.setErr(new PrintStream(logged, true, StandardCharsets.UTF_8)); // slf4j-simple writes to System.err as it is now
            HttpResponse<String> r = RouterCalls.post(router.port(), "/v1/completions", COMPLETION);
            assertEquals(503, r.statusCode(), r.body());
        } finally {
            System.setErr(err);
            prefill.stop(0);
            d1.stop(0);
            d2.stop(0);
        }
        String log = logged.toString(StandardCharsets.UTF_8);
        assertTrue(log.contains("is draining"), "the router logged the draining engine: " + log);
        assertTrue(log.lines().noneMatch(l -> l.startsWith("FORGED")), "a line forged by the engine: " + log);
    }

    /**
     * A decode's 503 whose code is not draining (an engine overloaded, e.g. its structured-output compiler busy) is a 503
     * with Retry-After (ErrorBody#failure; it was a 500 of the backend's type): no run again, and no decode out of rotation.
     */
    @Test
    @Timeout(60)
    void aDecodes503WithoutTheDrainingCodeIsNotRunAgain() throws Exception {
        AtomicInteger decodeCalls = new AtomicInteger();
        HttpServer prefill = stub(ex -> answer(ex, 200, "{}"), true);
        Route busy = ex -> {
            decodeCalls.incrementAndGet();
            ex.getRequestBody().readAllBytes();
            byte[] b = "{\"error\":{\"type\":\"service_unavailable\",\"code\":\"overloaded\",\"message\":\"busy\"}}"
                    .getBytes(StandardCharsets.UTF_8);
            ex.sendResponseHeaders(503, b.length);
            ex.getResponseBody().write(b);
            ex.close();
        };
        HttpServer d1 = stub(busy, false), d2 = stub(busy, false);
        try (Router router = router(List.of(url(prefill)), List.of(url(d1), url(d2)))) {
            HttpResponse<String> r = RouterCalls.post(router.port(), "/v1/completions", COMPLETION);
            assertEquals(503, r.statusCode(), r.body());
            assertEquals("service_unavailable", JSON.readTree(r.body()).path("error").path("type").asText(), r.body());
            assertTrue(r.headers().firstValue("Retry-After").isPresent(), r.headers().map().toString());
            assertEquals(1, decodeCalls.get(), "run once");
            JsonNode w = JSON.readTree(DrainTest.get(router.port(), "/workers").body());
            for (JsonNode b : w.path("decodes")) assertTrue(b.path("healthy").asBoolean(), "no decode taken out: " + w);
        } finally {
            prefill.stop(0);
            d1.stop(0);
            d2.stop(0);
        }
    }

    /**
     * The router drains while a stream runs through it (a stub decode holds it after its first token): /health and a new
     * request say draining, the stream then ends whole, and the drain with it.
     */
    @Test
    @Timeout(120)
    void aDrainingRouterLetsItsRunningStreamFinish() throws Exception {
        CountDownLatch release = new CountDownLatch(1);
        HttpServer prefill = stub(ex -> answer(ex, 200, "{}"), true);
        HttpServer decode = stub(ex -> {
            ex.getRequestBody().readAllBytes();
            ex.getResponseHeaders().add("Content-Type", "text/event-stream");
            ex.sendResponseHeaders(200, 0);
            OutputStream out = ex.getResponseBody();
            out.write("data: {\"token\":300}\n\n".getBytes(StandardCharsets.UTF_8));
            out.flush();
            try {
                release.await(60, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            out.write("data: {\"token\":301}\n\ndata: {\"finish_reason\":\"length\",\"tokens\":[300,301]}\n\n".getBytes(StandardCharsets.UTF_8));
            ex.close();
        }, false);
        try (Router router = router(List.of(url(prefill)), List.of(url(decode)))) {
            HttpResponse<InputStream> running = HTTP.send(DrainTest.post(router.port(), "/v1/completions",
                    "{\"prompt\":\"Hi\",\"max_tokens\":2,\"stream\":true}"), HttpResponse.BodyHandlers.ofInputStream());
            assertEquals(200, running.statusCode());
            BufferedReader in = new BufferedReader(new InputStreamReader(running.body(), StandardCharsets.UTF_8));
            List<String> events = new ArrayList<>();
            for (String line; events.isEmpty() && (line = in.readLine()) != null; ) if (line.startsWith("data: ")) events.add(line);
            assertEquals(1, router.drain().running(), "its first token came: the request runs");
            router.drain().begin();
            assertHealthDraining(router.port());
            HttpResponse<String> status = DrainTest.get(router.port(), RouterStatus.JSON_ROUTE);
            assertEquals(200, status.statusCode(), "the status page stays up while the router drains");
            assertEquals("draining", JSON.readTree(status.body()).path("status").asText(), status.body());
            assertRefusedDraining(RouterCalls.post(router.port(), "/v1/completions", COMPLETION));
            release.countDown();
            for (String line; (line = in.readLine()) != null; ) if (line.startsWith("data: ")) events.add(line);
            assertEquals("data: [DONE]", events.getLast(), events.toString());
            assertTrue(events.stream().noneMatch(e -> e.contains("\"error\"")), events.toString());
            assertEquals(0, router.drain().await(Duration.ofSeconds(30)));
        } finally {
            release.countDown();
            prefill.stop(0);
            decode.stop(0);
        }
    }

    private interface Route {
        void handle(HttpExchange ex) throws IOException;
    }

    private static HttpServer stub(Route generate, boolean prefill) throws IOException {
        HttpServer s = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        s.setExecutor(Executors.newVirtualThreadPerTaskExecutor());
        s.createContext("/health", ex -> answer(ex, 200, prefill ? "{\"status\":\"ok\",\"bootstrap\":\"127.0.0.1:1\"}" : "{\"status\":\"ok\"}"));
        s.createContext("/abort", ex -> answer(ex, 200, "{}"));
        s.createContext("/generate", generate::handle);
        s.start();
        return s;
    }

}
