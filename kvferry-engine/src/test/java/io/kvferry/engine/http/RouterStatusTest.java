package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpServer;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.serving.EngineSpec;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The router's own status ({@link RouterStatus}): {@code GET /status.json} over real engines follows the requests answered (by
 * status, tokens, TTFT and end-to-end percentiles, rates), a request that fails, a backend that goes down, the tenants' names and
 * limits (never their keys) and the admission settings; over stubs that hold a request, the requests running and waiting for a
 * slot, the backend cap, the structured-output compiler and a drain; {@code GET /status} is the page; a wrong method is a 405 naming GET,
 * as the router's other routes answer.
 */
class RouterStatusTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String KEY_A = "status-tenant-a-key-0123456789";
    private static final String KEY_B = "status-tenant-b-key-0123456789";
    private static final String KEY_C = "status-tenant-c-key-0123456789";
    private static final String COMPLETION = "{\"prompt\":\"Once upon a time\",\"max_tokens\":3,\"temperature\":0}";

    private static JsonNode status(Router r) throws Exception {
        HttpResponse<String> s = EngineAuthTest.send(r.port(), "GET", RouterStatus.JSON_ROUTE, null, null);
        assertEquals(200, s.statusCode(), s.body());
        assertEquals("no-store", s.headers().firstValue("Cache-Control").orElse(null));
        return JSON.readTree(s.body());
    }

    /** Reads the document until {@code until} holds of it (20 s at most): the health thread's checks and samples are its own. */
    private static JsonNode statusOnce(Router r, Predicate<JsonNode> until) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        JsonNode doc = status(r);
        while (!until.test(doc) && System.nanoTime() < deadline) {
            Thread.sleep(50);
            doc = status(r);
        }
        assertTrue(until.test(doc), "never so: " + doc);
        return doc;
    }

    private static JsonNode backend(JsonNode doc, String url) {
        for (JsonNode b : doc.path("backends")) if (b.path("url").asText().equals(url)) return b;
        throw new AssertionError(url + " is not among the backends: " + doc);
    }

    @Test
    @Timeout(120)
    void theDocumentFollowsRequestsFailuresAndABackendGoingDown() throws Exception {
        ModelFiles.Loaded model = ModelFiles.load(null, null);
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 64, 32);
        // team-c's rate buckets read a clock that stands still: nothing refills while the test looks.
        Tenants tenants = Tenants.of(TenantsTest.file(TenantsTest.tenant("team-a", KEY_A, null),
                TenantsTest.tenant("team-b", KEY_B, "\"max_concurrent_requests\":3"),
                TenantsTest.tenant("team-c", KEY_C, "\"requests_per_minute\":2,\"tokens_per_minute\":300")), "status-test-token", () -> 0L);
        try (EngineStack stack = EngineStack.open(spec, "status-test");
             EngineStack other = EngineStack.open(spec, "status-test");
             Router router = new Router(List.of(stack.prefillUrl()), List.of(stack.decodeUrl(), other.decodeUrl()), model.tokenizer(),
                     model.weights().config.seqLen(), "stories", "127.0.0.1", 0, new Router.Access(null, null, tenants),
                     new Router.Admission(4, Duration.ofSeconds(5)), null)) {
            JsonNode doc = status(router);
            assertEquals("router", doc.path("kind").asText(), doc.toString());
            assertEquals("stories", doc.path("model").asText());
            assertEquals("ok", doc.path("status").asText(), doc.toString());
            assertEquals(3, doc.path("backends").size(), doc.toString());
            JsonNode prefill = backend(doc, stack.prefillUrl());
            assertEquals("prefill", prefill.path("role").asText());
            assertTrue(prefill.path("healthy").asBoolean(), doc.toString());
            assertEquals(stack.addr, prefill.path("bootstrap").asText(), "a prefill's registry, as learnt from its /health");
            assertEquals("ok", prefill.path("last_check").asText(), "the constructor checked each backend once: " + doc);
            assertTrue(prefill.path("last_check_age_ms").asLong(-1) >= 0, doc.toString());
            JsonNode otherDecode = backend(doc, other.decodeUrl());
            assertEquals("decode", otherDecode.path("role").asText());
            assertFalse(otherDecode.has("bootstrap"), "only a prefill has a registry: " + otherDecode);
            assertEquals(0, doc.path("requests").path("total").asLong(-1), doc.toString());
            assertEquals(0, doc.path("latency").path("e2e_ms").path("count").asInt(-1), doc.toString());
            assertEquals(4, doc.path("config").path("max_concurrent_requests").asInt(), doc.toString());
            assertEquals(5000, doc.path("config").path("queue_timeout_ms").asLong(), doc.toString());
            assertTrue(doc.path("config").path("tenants").asBoolean(), doc.toString());
            assertEquals(3, doc.path("tenants").size(), doc.toString());
            JsonNode teamA = doc.path("tenants").get(0);
            assertEquals("team-a", teamA.path("name").asText());
            assertEquals(0, teamA.path("max_concurrent_requests").asInt(-1), "no limit of its own");
            assertEquals(3, doc.path("tenants").get(1).path("max_concurrent_requests").asInt(), doc.toString());
            // No per-minute limit: 0, and no bucket to read.
            assertEquals(0, teamA.path("requests_per_minute").asInt(-1), teamA.toString());
            assertEquals(0, teamA.path("tokens_per_minute").asInt(-1), teamA.toString());
            assertTrue(teamA.path("remaining_requests").isNull() && teamA.path("remaining_tokens").isNull(), teamA.toString());
            assertEquals(0, teamA.path("rate_limited_requests").asLong(-1), teamA.toString());
            JsonNode teamC = doc.path("tenants").get(2);
            assertEquals(2, teamC.path("requests_per_minute").asInt(), teamC.toString());
            assertEquals(300, teamC.path("tokens_per_minute").asInt(), teamC.toString());
            assertEquals(2, teamC.path("remaining_requests").asLong(-1), "a bucket starts full: " + teamC);
            assertEquals(300, teamC.path("remaining_tokens").asLong(-1), teamC.toString());
            assertEquals(0, teamC.path("rate_limited_requests").asLong(-1), teamC.toString());
            assertEquals(0, teamC.path("rate_limited_tokens").asLong(-1), teamC.toString());

            // Requests that succeed: counted by status, their tokens, their TTFTs and latencies.
            for (int i = 0; i < 4; i++) {
                HttpResponse<String> r = EngineAuthTest.send(router.port(), "POST", "/v1/completions", COMPLETION, "Bearer " + KEY_A);
                assertEquals(200, r.statusCode(), r.body());
            }
            // Counted once each handler's finally ran, a moment after its client had the answer.
            doc = statusOnce(router, d -> d.path("requests").path("total").asLong() == 4);
            JsonNode req = doc.path("requests");
            assertEquals(4, req.path("total").asLong(), doc.toString());
            assertEquals(4, req.path("by_status").path("200").asLong(), doc.toString());
            assertEquals(4, req.path("by_class").path("2xx").asLong(), doc.toString());
            assertEquals(0, req.path("running").asInt(-1), "every request ended: " + doc);
            assertEquals(0, req.path("waiting").asInt(-1), doc.toString());
            assertEquals(12, doc.path("tokens").path("generated").asLong(), "3 tokens each: " + doc);
            assertTrue(doc.path("tokens").path("prompt").asLong() >= 4 * 4, doc.toString());
            for (String figure : new String[]{"ttft_ms", "e2e_ms"}) {
                JsonNode s = doc.path("latency").path(figure);
                assertEquals(4, s.path("count").asInt(), figure + ": " + doc);
                assertTrue(s.path("p50").asDouble() > 0 && s.path("p99").asDouble() >= s.path("p50").asDouble()
                        && s.path("max").asDouble() >= s.path("p99").asDouble(), figure + ": " + doc);
            }
            assertTrue(doc.path("latency").path("e2e_ms").path("p50").asDouble() >= doc.path("latency").path("ttft_ms").path("p50").asDouble(),
                    "a request's last token comes after its first: " + doc);

            // Requests that fail: a bad parameter (400) and no tenant's key (401), counted by their status; no latency of theirs.
            assertEquals(400, EngineAuthTest.send(router.port(), "POST", "/v1/completions",
                    "{\"prompt\":\"Hi\",\"max_tokens\":3,\"temperature\":-1}", "Bearer " + KEY_B).statusCode());
            assertEquals(401, EngineAuthTest.send(router.port(), "POST", "/v1/completions", COMPLETION, null).statusCode());
            doc = statusOnce(router, d -> d.path("requests").path("total").asLong() == 6);
            req = doc.path("requests");
            assertEquals(6, req.path("total").asLong(), doc.toString());
            assertEquals(1, req.path("by_status").path("400").asLong(), doc.toString());
            assertEquals(1, req.path("by_status").path("401").asLong(), doc.toString());
            assertEquals(2, req.path("by_class").path("4xx").asLong(), doc.toString());
            assertEquals(0, req.path("by_class").path("5xx").asLong(), doc.toString());
            assertEquals(4, doc.path("latency").path("e2e_ms").path("count").asInt(), "only the requests that succeeded: " + doc);
            // The rates: the health thread samples the totals each second; one after the requests counts them.
            doc = statusOnce(router, d -> d.path("rates").path("requests_per_s").asDouble() > 0);
            assertTrue(doc.path("rates").path("generated_tokens_per_s").asDouble() > 0, doc.toString());
            assertEquals(0, doc.path("rates").path("server_errors_per_s").asDouble(-1), 0, doc.toString());

            // A backend that goes down: its next health check finds nothing listening, and it leaves the rotation.
            String gone = other.decodeUrl();
            other.close();
            doc = statusOnce(router, d -> !backend(d, gone).path("healthy").asBoolean(true));
            assertEquals("degraded", doc.path("status").asText(), doc.toString());
            JsonNode down = backend(doc, gone);
            assertTrue(down.path("last_check").asText().startsWith("connection refused"), down.toString());
            // How long it has been out, on the router's clock (what a full router's add compares with its 30 s): moved on, not waited for.
            doc = statusOnce(router, d -> backend(d, gone).path("out_of_rotation_ms").isNumber());
            assertTrue(backend(doc, gone).path("out_of_rotation_ms").asLong(-1) >= 0, doc.toString());
            assertTrue(backend(doc, stack.decodeUrl()).path("out_of_rotation_ms").isNull(), "in rotation: null: " + doc);
            assertEquals(Backends.REPLACE_AFTER.toMillis(), doc.path("config").path("replace_after_ms").asLong(), doc.toString());
            long later = Backends.REPLACE_AFTER.toNanos() + TimeUnit.SECONDS.toNanos(1);
            router.backends().clock = () -> System.nanoTime() + later;
            long out = backend(status(router), gone).path("out_of_rotation_ms").asLong(-1);
            assertTrue(out >= TimeUnit.NANOSECONDS.toMillis(later), "out for " + out + " ms");
            router.backends().clock = System::nanoTime;
            assertTrue(backend(doc, stack.decodeUrl()).path("healthy").asBoolean(), "the other decode still serves: " + doc);
            assertEquals(200, EngineAuthTest.send(router.port(), "POST", "/v1/completions", COMPLETION, "Bearer " + KEY_A).statusCode());
            statusOnce(router, d -> d.path("requests").path("by_status").path("200").asLong() == 5);

            // Open as /metrics is; names the tenants as /metrics does, never their keys.
            String body = EngineAuthTest.send(router.port(), "GET", RouterStatus.JSON_ROUTE, null, null).body();
            assertFalse(body.contains(KEY_A) || body.contains(KEY_B) || body.contains(KEY_C), body);

            // A rate-limited tenant: its buckets drain as it is served, and its refusals are counted by limit.
            HttpResponse<String> last = null;
            for (int i = 0; i < 2; i++) {
                last = EngineAuthTest.send(router.port(), "POST", "/v1/completions", COMPLETION, "Bearer " + KEY_C);
                assertEquals(200, last.statusCode(), last.body());
            }
            assertEquals(429, EngineAuthTest.send(router.port(), "POST", "/v1/completions", COMPLETION, "Bearer " + KEY_C).statusCode(),
                    "a third request in the minute is over requests_per_minute 2");
            assertEquals(400, EngineAuthTest.send(router.port(), "POST", "/v1/completions",
                    "{\"prompt\":\"Once upon a time\",\"max_tokens\":400}", "Bearer " + KEY_C).statusCode(), "could never fit 300 tokens");
            teamC = status(router).path("tenants").get(2);
            assertEquals(0, teamC.path("remaining_requests").asLong(-1), teamC.toString());
            // Each of the two used its whole budget (3 tokens): nothing came back after its x-ratelimit header was set.
            long remainingTokens = Long.parseLong(last.headers().firstValue(RateLimits.REMAINING_TOKENS).orElseThrow());
            assertTrue(remainingTokens < 300 - 2 * 3, last.headers().map().toString());
            assertEquals(remainingTokens, teamC.path("remaining_tokens").asLong(-1), teamC.toString());
            assertEquals(1, teamC.path("rate_limited_requests").asLong(-1), teamC.toString());
            assertEquals(1, teamC.path("rate_limited_tokens").asLong(-1), "the 400 of tokens that never fit: " + teamC);
        }
    }

    /** A request held at the decode is running (and in its backends' in-flight counts); one more over the limit is waiting. */
    @Test
    @Timeout(60)
    void requestsRunningAndWaitingForASlotAreShown() throws Exception {
        HttpServer prefill = RouterErrorsTest.prefillStub();
        CountDownLatch entered = new CountDownLatch(1), release = new CountDownLatch(1);
        HttpServer decode = heldDecode(entered, release);
        HttpClient http = HttpClient.newBuilder().executor(Executors.newVirtualThreadPerTaskExecutor()).build();
        String body = "{\"prompt\":\"Hi\",\"max_tokens\":1}";
        List<CompletableFuture<HttpResponse<String>>> sent = new ArrayList<>();
        try (Router router = new Router(List.of(RouterErrorsTest.url(prefill)), List.of(RouterErrorsTest.url(decode)),
                ModelFiles.load(null, null).tokenizer(), 512, "m", "127.0.0.1", 0, Router.Access.NONE,
                new Router.Admission(1, Duration.ofSeconds(30)), null)) {
            HttpRequest completion = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + router.port() + "/v1/completions"))
                    .POST(HttpRequest.BodyPublishers.ofString(body)).build();
            sent.add(http.sendAsync(completion, HttpResponse.BodyHandlers.ofString()));
            assertTrue(entered.await(30, TimeUnit.SECONDS), "the first request reached the decode");
            JsonNode doc = status(router);
            assertEquals(1, doc.path("requests").path("running").asInt(), doc.toString());
            assertEquals(0, doc.path("requests").path("waiting").asInt(), doc.toString());
            assertEquals(1, backend(doc, RouterErrorsTest.url(decode)).path("in_flight").asInt(), doc.toString());

            sent.add(http.sendAsync(completion, HttpResponse.BodyHandlers.ofString()));
            doc = statusOnce(router, d -> d.path("requests").path("waiting").asInt() == 1);
            assertEquals(2, doc.path("requests").path("running").asInt(), "the router's requests, the one waiting included: " + doc);
            assertEquals(1, doc.path("config").path("max_concurrent_requests").asInt(), doc.toString());
            assertFalse(doc.has("tenants"), "a router without tenants lists none: " + doc);

            release.countDown();
            for (CompletableFuture<HttpResponse<String>> f : sent) assertEquals(200, f.get(30, TimeUnit.SECONDS).statusCode());
            // A client has its answer a moment before the router's handler counts it (its finally runs after the last byte).
            doc = statusOnce(router, d -> d.path("requests").path("by_status").path("200").asLong() == 2);
            assertEquals(0, doc.path("requests").path("running").asInt(-1), doc.toString());
            assertEquals(0, doc.path("requests").path("waiting").asInt(-1), doc.toString());
            assertEquals(2, doc.path("requests").path("by_status").path("200").asLong(), doc.toString());
            assertEquals(0, backend(doc, RouterErrorsTest.url(decode)).path("in_flight").asInt(-1), doc.toString());
        } finally {
            release.countDown();
            decode.stop(0);
            prefill.stop(0);
        }
    }

    /**
     * The {@code --max-backends} cap under config; the structured-output compiler's outcomes, compilations and mean compile
     * time; no drain section until a drain begins, then the requests it met: one held at the decode when it began, completed
     * once released.
     */
    @Test
    @Timeout(60)
    void theBackendCapTheCompilerAndADrainAreShown() throws Exception {
        HttpServer prefill = RouterErrorsTest.prefillStub();
        CountDownLatch entered = new CountDownLatch(1), release = new CountDownLatch(1);
        HttpServer decode = heldDecode(entered, release);
        HttpClient http = HttpClient.newBuilder().executor(Executors.newVirtualThreadPerTaskExecutor()).build();
        try (Router router = new Router(List.of(RouterErrorsTest.url(prefill)), List.of(RouterErrorsTest.url(decode)),
                ModelFiles.load(null, null).tokenizer(), 512, "m", "127.0.0.1", 0, Router.Access.NONE,
                new Router.Admission(0, Duration.ZERO, 7), null)) {
            JsonNode doc = status(router);
            assertEquals(7, doc.path("config").path("max_backends").asInt(), doc.toString());
            JsonNode outputs = doc.path("structured_outputs");
            for (String o : List.of("compiled", "cached", "refused", "deadline", "busy")) {
                assertEquals(0, outputs.path("outcomes").path(o).asLong(-1), o + ": " + outputs);
            }
            assertEquals(0, outputs.path("waiting").asInt(-1), outputs.toString());
            assertEquals(0, outputs.path("compiles").asLong(-1), outputs.toString());
            assertTrue(outputs.path("mean_compile_ms").isNull(), "no compilation yet: " + outputs);
            assertFalse(doc.has("drain"), "no drain began: " + doc);

            router.outputs().regex("(yes|no)");
            router.outputs().regex("(yes|no)");
            assertThrows(IllegalArgumentException.class, () -> router.outputs().regex("(unclosed"));
            outputs = status(router).path("structured_outputs");
            assertEquals(1, outputs.path("outcomes").path("compiled").asLong(), outputs.toString());
            assertEquals(1, outputs.path("outcomes").path("cached").asLong(), outputs.toString());
            assertEquals(1, outputs.path("outcomes").path("refused").asLong(), outputs.toString());
            assertEquals(router.outputs().compileCount(), outputs.path("compiles").asLong(), outputs.toString());
            assertTrue(outputs.path("mean_compile_ms").isNumber() && outputs.path("mean_compile_ms").asDouble() >= 0, outputs.toString());

            CompletableFuture<HttpResponse<String>> held = http.sendAsync(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + router.port()
                    + "/v1/completions")).POST(HttpRequest.BodyPublishers.ofString("{\"prompt\":\"Hi\",\"max_tokens\":1}")).build(),
                    HttpResponse.BodyHandlers.ofString());
            assertTrue(entered.await(30, TimeUnit.SECONDS), "the request reached the decode");
            router.drain().begin();
            doc = status(router);
            assertEquals("draining", doc.path("status").asText(), doc.toString());
            assertEquals(0, doc.path("drain").path("completed").asLong(-1), doc.toString());
            assertEquals(0, doc.path("drain").path("cut").asLong(-1), doc.toString());
            release.countDown();
            assertEquals(200, held.get(30, TimeUnit.SECONDS).statusCode());
            doc = statusOnce(router, d -> d.path("drain").path("completed").asLong() == 1);
            assertEquals(0, doc.path("drain").path("cut").asLong(-1), doc.toString());
        } finally {
            release.countDown();
            decode.stop(0);
            prefill.stop(0);
        }
    }

    /** The page and its files; a wrong method on any of them is a 405 naming GET, as on the router's other routes. */
    @Test
    @Timeout(60)
    void theRouterServesItsPageAndRefusesOtherMethods() throws Exception {
        HttpServer prefill = RouterErrorsTest.prefillStub(), decode = RouterErrorsTest.prefillStub();
        try (Router router = new Router(List.of(RouterErrorsTest.url(prefill)), List.of(RouterErrorsTest.url(decode)),
                ModelFiles.load(null, null).tokenizer(), 512, "m", "127.0.0.1", 0)) {
            HttpResponse<String> page = EngineAuthTest.send(router.port(), "GET", "/status", null, null);
            assertEquals(200, page.statusCode());
            assertTrue(page.headers().firstValue("Content-Type").orElse("").startsWith("text/html"), page.headers().toString());
            assertTrue(page.body().contains("<title>kvferry router</title>") && page.body().contains("src=\"status.js\""), page.body());
            assertTrue(page.body().indexOf("src=\"common.js\"") >= 0 && page.body().indexOf("src=\"common.js\"") < page.body().indexOf("src=\"status.js\""),
                    "the shared helpers load before the page's script: " + page.body());
            HttpResponse<String> script = EngineAuthTest.send(router.port(), "GET", "/status.js", null, null);
            assertEquals(200, script.statusCode());
            assertTrue(script.body().contains("poll(render);"), "the router's script polls its document, through common.js");
            assertFalse(script.body().contains("setTimeout"), "not a loop of its own");
            HttpResponse<String> common = EngineAuthTest.send(router.port(), "GET", "/common.js", null, null);
            assertEquals(200, common.statusCode());
            assertTrue(common.headers().firstValue("Content-Type").orElse("").startsWith("text/javascript"), common.headers().toString());
            assertTrue(common.body().contains("function fill(tableId, rows, empty)"), "the helpers the page's script uses");
            assertTrue(common.body().contains("async function poll(render)") && common.body().contains("fetch('status.json'"), "the refresh loop");
            assertEquals(200, EngineAuthTest.send(router.port(), "GET", "/status.css", null, null).statusCode());
            assertEquals(404, EngineAuthTest.send(router.port(), "GET", "/status.jsonx", null, null).statusCode(), "exact paths only");
            // HEAD on a GET route: its status and headers, no body (it was a 405 whose length made the JDK's server log a
            // warning each time: a flood of HEADs on an open route filled the log); on a POST route, a 405 naming POST.
            for (String path : new String[]{"/status", RouterStatus.JSON_ROUTE, "/common.js", "/status.js", "/status.css", "/health", "/v1/models"}) {
                HttpResponse<String> head = EngineAuthTest.send(router.port(), "HEAD", path, null, null);
                assertEquals(200, head.statusCode(), "HEAD " + path);
                assertEquals("", head.body(), "HEAD " + path);
                assertTrue(head.headers().firstValue("Content-Type").isPresent(), "HEAD " + path + ": " + head.headers());
            }
            HttpResponse<String> headOfPost = EngineAuthTest.send(router.port(), "HEAD", "/v1/completions", null, null);
            assertEquals(405, headOfPost.statusCode());
            assertEquals("POST", headOfPost.headers().firstValue("Allow").orElse(null));
            for (String path : new String[]{"/status", RouterStatus.JSON_ROUTE, "/common.js", "/status.js", "/status.css"}) {
                for (String method : new String[]{"POST", "DELETE"}) {
                    HttpResponse<String> r = EngineAuthTest.send(router.port(), method, path, method.equals("POST") ? "{}" : null, null);
                    assertEquals(405, r.statusCode(), method + " " + path + ": " + r.body());
                    assertEquals("GET, HEAD", r.headers().firstValue("Allow").orElse(null), method + " " + path);
                    JsonNode e = JSON.readTree(r.body()).path("error");
                    assertEquals(method + " " + path + " is not allowed; use GET", e.path("message").asText(), r.body());
                }
            }
        } finally {
            decode.stop(0);
            prefill.stop(0);
        }
    }

    /** A decode stub whose {@code /generate} counts {@code entered} down, then holds its answer (one token) until {@code release}. */
    private static HttpServer heldDecode(CountDownLatch entered, CountDownLatch release) throws IOException {
        HttpServer decode = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        RouterErrorsTest.answerHealthy(decode);
        decode.setExecutor(Executors.newVirtualThreadPerTaskExecutor());
        decode.createContext("/generate", ex -> {
            ex.getRequestBody().readAllBytes();
            entered.countDown();
            try {
                release.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            ex.sendResponseHeaders(200, 0);
            ex.getResponseBody().write("data: {\"token\":300}\n\ndata: {\"finish_reason\":\"length\"}\n\n".getBytes(StandardCharsets.UTF_8));
            ex.close();
        });
        decode.start();
        return decode;
    }
}
