package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpServer;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.serve.WorkerRegistration;
import io.kvferry.engine.serve.WorkerRegistration.Reassertion;
import io.kvferry.engine.serving.EngineSpec;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The router's {@code /workers}, over real engines (two prefill/decode pairs): a backend added serves, one
 * removed gets no new request and leaves the metrics, changes need the cluster token, and every bad change
 * is refused naming what was wrong; an engine role registers itself through it ({@link WorkerRegistration}).
 */
class RouterWorkersTest {
    private static final String TOKEN = "router-workers-test-cluster-token";
    private static final String KEY = "router-workers-test-api-key";
    private static final String BEARER = "Bearer " + TOKEN;
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String COMPLETION = "{\"prompt\":\"Once upon a time\",\"max_tokens\":3,\"temperature\":0}";

    private static ModelFiles.Loaded model;
    private static EngineStack first;
    private static EngineStack second;

    @BeforeAll
    static void engines() throws Exception {
        model = ModelFiles.load(null, null);
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 64, 32);
        first = EngineStack.open(spec, spec, TOKEN, TOKEN);
        second = EngineStack.open(spec, spec, TOKEN, TOKEN);
    }

    @AfterAll
    static void stop() {
        if (second != null) second.close();
        if (first != null) first.close();
    }

    private static Router router(Router.Access access, SimpleMeterRegistry meters) throws Exception {
        return new Router(List.of(first.prefillUrl()), List.of(first.decodeUrl()), model.tokenizer(), model.weights().config.seqLen(), "m",
                "127.0.0.1", 0, access, meters);
    }

    private static HttpResponse<String> send(Router r, String method, String path, String body, String authorization) throws Exception {
        return EngineAuthTest.send(r.port(), method, path, body, authorization);
    }

    private static String add(String url, String type) {
        return "{\"url\":\"" + url + "\",\"worker_type\":\"" + type + "\"}";
    }

    private static String removal(String url) {
        return Router.WORKERS_ROUTE + "?url=" + URLEncoder.encode(url, StandardCharsets.UTF_8);
    }

    private static JsonNode error(HttpResponse<String> r, int status) throws Exception {
        assertEquals(status, r.statusCode(), r.body());
        return JSON.readTree(r.body()).path("error");
    }

    private static boolean hasBackendGauge(SimpleMeterRegistry m, String url) {
        return m.find(RouterMeters.BACKEND_UP).tag("backend", url).gauge() != null;
    }

    /**
     * --max-backends: an add to a router holding its limit is refused (403, code max_backends, naming the limit) before
     * any health check, and nothing changes; once one leaves, an add fits again. A router given more URLs than its limit
     * does not start.
     */
    @Test
    @Timeout(120)
    void aRouterAtItsMaxBackendsRefusesAnAddNamingTheLimit() throws Exception {
        SimpleMeterRegistry meters = new SimpleMeterRegistry();
        try (Router router = new Router(List.of(first.prefillUrl()), List.of(first.decodeUrl()), model.tokenizer(),
                model.weights().config.seqLen(), "m", "127.0.0.1", 0, new Router.Access(TOKEN, null),
                new Router.Admission(0, Duration.ZERO, 3), meters)) {
            assertEquals(200, send(router, "POST", Router.WORKERS_ROUTE, add(second.decodeUrl(), "decode"), BEARER).statusCode(), "3 of 3");
            HttpResponse<String> full = send(router, "POST", Router.WORKERS_ROUTE, add(second.prefillUrl(), "prefill"), BEARER);
            JsonNode e = error(full, 403);
            assertEquals("max_backends", e.path("code").asText(), full.body());
            assertEquals("url", e.path("param").asText(), full.body());
            assertTrue(e.path("message").asText().contains("this router holds its limit of 3 backends (--max-backends)"), full.body());
            assertFalse(hasBackendGauge(meters, second.prefillUrl()));
            JsonNode list = JSON.readTree(send(router, "GET", Router.WORKERS_ROUTE, null, null).body());
            assertEquals(1, list.path("prefills").size(), list.toString());
            assertEquals(2, list.path("decodes").size(), list.toString());
            assertEquals(200, send(router, "DELETE", removal(second.decodeUrl()), null, BEARER).statusCode());
            assertEquals(200, send(router, "POST", Router.WORKERS_ROUTE, add(second.prefillUrl(), "prefill"), BEARER).statusCode(),
                    "fits again once one left");
        }
        IllegalArgumentException tooMany = assertThrows(IllegalArgumentException.class, () -> new Router(List.of(first.prefillUrl()),
                List.of(first.decodeUrl(), second.decodeUrl()), model.tokenizer(), model.weights().config.seqLen(), "m", "127.0.0.1", 0,
                Router.Access.NONE, new Router.Admission(0, Duration.ZERO, 2), null));
        assertEquals("the router is given 3 backends, more than its limit of 2 (--max-backends)", tooMany.getMessage());
        assertThrows(IllegalArgumentException.class, () -> new Router.Admission(0, Duration.ZERO, 1));
        assertEquals(Router.Admission.DEFAULT_MAX_BACKENDS, Router.Admission.UNLIMITED.maxBackends());
    }

    /**
     * A stand-in decode added at run time (POST /workers): a server whose /health answers as a decode's, stopped once the
     * router has it, so nothing listens at its URL; returned once the router's health checks have it out of rotation.
     */
    private static String addedThenGone(Router router) throws Exception {
        HttpServer fake = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        fake.createContext("/health", ex -> {
            byte[] b = "{\"status\":\"ok\",\"role\":\"decode\"}".getBytes(StandardCharsets.UTF_8);
            ex.getResponseHeaders().set("Content-Type", "application/json");
            ex.sendResponseHeaders(200, b.length);
            ex.getResponseBody().write(b);
            ex.close();
        });
        fake.start();
        String url = "http://127.0.0.1:" + fake.getAddress().getPort();
        try {
            HttpResponse<String> added = send(router, "POST", Router.WORKERS_ROUTE, add(url, "decode"), BEARER);
            assertEquals(200, added.statusCode(), added.body());
            assertEquals("added", JSON.readTree(added.body()).path("origin").asText(), added.body());
        } finally {
            fake.stop(0);
        }
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!outOfRotation(router, url) && System.nanoTime() < until) Thread.sleep(20); // the health thread's next round
        assertTrue(outOfRotation(router, url), "out of rotation: " + workers(router));
        return url;
    }

    private static boolean outOfRotation(Router router, String url) throws Exception {
        for (JsonNode d : workers(router).path("decodes")) {
            if (d.path("url").asText().equals(url)) return d.path("out_of_rotation_ms").isNumber();
        }
        return false;
    }

    /**
     * A full router's add takes the place of the backend of its role added at run time out of rotation the longest, once
     * that has been out for {@link Backends#REPLACE_AFTER} (a SIGKILLed engine in a rolling update: its replacement
     * registers while it is still in the pool), never of one in rotation or of the other role, and not before: then the 403
     * as before. The dead decode (added, then nothing listens at its port) is out from the router's next check; the
     * router's clock is moved on, not waited for.
     */
    @Test
    @Timeout(120)
    void aFullRoutersAddReplacesABackendOutOfRotationLongEnough() throws Exception {
        SimpleMeterRegistry meters = new SimpleMeterRegistry();
        try (Router router = new Router(List.of(first.prefillUrl()), List.of(first.decodeUrl()), model.tokenizer(),
                model.weights().config.seqLen(), "m", "127.0.0.1", 0, new Router.Access(TOKEN, null),
                new Router.Admission(0, Duration.ZERO, 3), meters)) {
            String dead = addedThenGone(router);
            assertFalse(workers(router).path("decodes").get(1).path("healthy").asBoolean(), workers(router).toString());
            assertTrue(workers(router).path("decodes").get(0).path("out_of_rotation_ms").isNull(), "in rotation: " + workers(router));
            assertEquals("command_line", workers(router).path("decodes").get(0).path("origin").asText(), workers(router).toString());
            assertEquals("added", workers(router).path("decodes").get(1).path("origin").asText(), workers(router).toString());
            JsonNode early = error(send(router, "POST", Router.WORKERS_ROUTE, add(second.decodeUrl(), "decode"), BEARER), 403);
            assertEquals("max_backends", early.path("code").asText(), early.toString());
            assertTrue(early.path("message").asText().contains("none of its decodes added at run time has been out of rotation for 30 s"), early.toString());
            assertTrue(early.path("message").asText().matches(".* \\(decode " + dead + " has been out for [0-9]+ s\\); remove one first .*"),
                    "how long the one out the longest has been: " + early);
            long later = Backends.REPLACE_AFTER.toNanos() + TimeUnit.SECONDS.toNanos(1);
            router.backends().clock = () -> System.nanoTime() + later;
            JsonNode otherRole = error(send(router, "POST", Router.WORKERS_ROUTE, add(second.prefillUrl(), "prefill"), BEARER), 403);
            assertEquals("max_backends", otherRole.path("code").asText(), "no prefill is out of rotation: " + otherRole);
            HttpResponse<String> replaced = send(router, "POST", Router.WORKERS_ROUTE, add(second.decodeUrl(), "decode"), BEARER);
            assertEquals(200, replaced.statusCode(), replaced.body());
            JsonNode w = workers(router);
            assertEquals(2, w.path("decodes").size(), w.toString());
            assertEquals(first.decodeUrl(), w.path("decodes").get(0).path("url").asText(), "the one in rotation stays: " + w);
            assertEquals(second.decodeUrl(), w.path("decodes").get(1).path("url").asText(), w.toString());
            assertFalse(hasBackendGauge(meters, dead), "the replaced backend's meters go with it");
            assertTrue(hasBackendGauge(meters, second.decodeUrl()));
            JsonNode none = error(send(router, "POST", Router.WORKERS_ROUTE, add(dead, "decode"), BEARER), 403);
            assertEquals("max_backends", none.path("code").asText(), "every decode serves: nothing to replace: " + none);
        }
    }

    /**
     * A backend given on the router's command line is configuration: at a full router it is never replaced, however long it
     * has been out of rotation (an engine that takes over 30 s to boot, or is down for maintenance: nothing would add it back,
     * as a registered engine's re-assertions do theirs). The add is the 403 max_backends naming it as given at start and kept,
     * and how to remove it; once removed (DELETE /workers), the add fits. /workers and /status.json say which is which.
     */
    @Test
    @Timeout(120)
    void aFullRouterNeverReplacesABackendGivenOnItsCommandLine() throws Exception {
        // Held, bound and never listening: a connect there is refused, and no server (this test's router, bound to port 0
        // next) can be given the port while it is held. A ServerSocket(0) closed at once freed it for that very bind(0).
        Socket hold = new Socket();
        hold.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
        String dead = "http://127.0.0.1:" + hold.getLocalPort();
        try (hold; Router router = new Router(List.of(first.prefillUrl()), List.of(first.decodeUrl(), dead), model.tokenizer(),
                model.weights().config.seqLen(), "m", "127.0.0.1", 0, new Router.Access(TOKEN, null),
                new Router.Admission(0, Duration.ZERO, 3), new SimpleMeterRegistry())) {
            assertTrue(workers(router).path("decodes").get(1).path("out_of_rotation_ms").isNumber(), "out since the constructor's check: " + workers(router));
            assertEquals("command_line", workers(router).path("decodes").get(1).path("origin").asText(), workers(router).toString());
            JsonNode status = JSON.readTree(send(router, "GET", "/status.json", null, null).body());
            for (JsonNode b : status.path("backends")) assertEquals("command_line", b.path("origin").asText(), status.toString());
            long later = Backends.REPLACE_AFTER.toNanos() + TimeUnit.HOURS.toNanos(1);
            router.backends().clock = () -> System.nanoTime() + later;
            JsonNode kept = error(send(router, "POST", Router.WORKERS_ROUTE, add(second.decodeUrl(), "decode"), BEARER), 403);
            assertEquals("max_backends", kept.path("code").asText(), kept.toString());
            assertTrue(kept.path("message").asText().matches(".*none of its decodes added at run time has been out of rotation for 30 s; decode " + dead
                    + ", out of rotation for [0-9]+ s, was given at start \\(--decode\\) and is kept: a backend of the router's command line is "
                    + "never replaced \\(remove it with DELETE /workers\\?url=" + dead + "&worker_type=decode\\); remove one first .*"), kept.toString());
            JsonNode w = workers(router);
            assertEquals(2, w.path("decodes").size(), w.toString());
            assertEquals(dead, w.path("decodes").get(1).path("url").asText(), "kept: " + w);
            assertEquals(200, send(router, "DELETE", removal(dead) + "&worker_type=decode", null, BEARER).statusCode());
            HttpResponse<String> added = send(router, "POST", Router.WORKERS_ROUTE, add(second.decodeUrl(), "decode"), BEARER);
            assertEquals(200, added.statusCode(), "fits once the operator removed it: " + added.body());
            assertEquals("added", JSON.readTree(added.body()).path("origin").asText(), added.body());
        }
    }

    /**
     * Two adds racing for the one place a dead decode frees at a full router: the replacement's check and swap are one step
     * on the health thread, so exactly one takes it (200), the other gets the 403 max_backends, and the router holds its
     * limit, never more. Two URLs of one live decode (127.0.0.1 and localhost: two backends to the router). Started
     * together on a latch, whichever wins: the outcome is the same.
     */
    @Test
    @Timeout(120)
    void racingAddsToAFullRouterReplaceTheDeadBackendOnce() throws Exception {
        try (Router router = new Router(List.of(first.prefillUrl()), List.of(first.decodeUrl()), model.tokenizer(),
                model.weights().config.seqLen(), "m", "127.0.0.1", 0, new Router.Access(TOKEN, null),
                new Router.Admission(0, Duration.ZERO, 3), new SimpleMeterRegistry())) {
            addedThenGone(router);
            long later = Backends.REPLACE_AFTER.toNanos() + TimeUnit.SECONDS.toNanos(1);
            router.backends().clock = () -> System.nanoTime() + later;
            String[] urls = {second.decodeUrl(), second.decodeUrl().replace("127.0.0.1", "localhost")};
            CountDownLatch go = new CountDownLatch(1);
            List<CompletableFuture<HttpResponse<String>>> adds = new ArrayList<>();
            for (String u : urls) {
                adds.add(CompletableFuture.supplyAsync(() -> {
                    try {
                        go.await();
                        return send(router, "POST", Router.WORKERS_ROUTE, add(u, "decode"), BEARER);
                    } catch (Exception e) {
                        throw new CompletionException(e);
                    }
                }, t -> Thread.ofPlatform().start(t)));
            }
            go.countDown();
            List<Integer> statuses = new ArrayList<>();
            for (var f : adds) statuses.add(f.get(60, TimeUnit.SECONDS).statusCode());
            statuses.sort(null);
            assertEquals(List.of(200, 403), statuses, "one takes the dead decode's place, the other finds the router full");
            JsonNode w = workers(router);
            assertEquals(2, w.path("decodes").size(), w.toString());
            assertEquals(first.decodeUrl(), w.path("decodes").get(0).path("url").asText(), w.toString());
            assertTrue(List.of(urls).contains(w.path("decodes").get(1).path("url").asText()), w.toString());
        }
    }

    /**
     * A backend's time out of rotation (what the replacement at --max-backends reads) starts at the first health check that
     * finds it out, stays while it is out, and starts again after a check that finds it serving: a backend that flaps keeps
     * its place, its clock never adding up the times it was out.
     */
    @Test
    void aBackendsTimeOutOfRotationStartsAgainAfterItServed() {
        Backend b = new Backend("http://127.0.0.1:1", false, null);
        b.rotation(100);
        assertFalse(b.outOfRotation, "serving");
        b.healthy = false;
        b.rotation(200);
        b.rotation(300);
        assertTrue(b.outOfRotation);
        assertEquals(200, b.outSinceNanos, "out since its first check out");
        b.healthy = true;
        b.rotation(400);
        assertFalse(b.outOfRotation, "back: its clock stops");
        b.healthy = false;
        b.rotation(500);
        assertEquals(500, b.outSinceNanos, "out again: from then, not from 200");
    }

    @Test
    @Timeout(120)
    void aDecodeAddedServesAndOneRemovedGetsNoMore() throws Exception {
        SimpleMeterRegistry meters = new SimpleMeterRegistry();
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 64, 32);
        try (Router router = router(new Router.Access(TOKEN, KEY), meters)) {
            try (EngineStack extra = EngineStack.open(spec, spec, TOKEN, TOKEN)) {
                HttpResponse<String> added = send(router, "POST", Router.WORKERS_ROUTE, add(extra.decodeUrl(), "decode"), BEARER);
                assertEquals(200, added.statusCode(), added.body());
                JsonNode w = JSON.readTree(added.body());
                assertEquals(extra.decodeUrl(), w.path("url").asText());
                assertEquals("decode", w.path("worker_type").asText());
                assertTrue(w.path("healthy").asBoolean(), added.body());
                assertTrue(hasBackendGauge(meters, extra.decodeUrl()));

                JsonNode list = JSON.readTree(send(router, "GET", Router.WORKERS_ROUTE, null, null).body()); // open, as /metrics
                assertEquals(1, list.path("prefills").size(), list.toString());
                assertEquals(first.addr, list.path("prefills").get(0).path("bootstrap").asText());
                assertEquals(2, list.path("decodes").size(), list.toString());

                HttpResponse<String> removed = send(router, "DELETE", removal(first.decodeUrl()), null, BEARER);
                assertEquals(200, removed.statusCode(), removed.body());
                assertEquals(first.decodeUrl(), JSON.readTree(removed.body()).path("url").asText());
                assertFalse(hasBackendGauge(meters, first.decodeUrl()), "a removed backend's gauges go with it");
                list = JSON.readTree(send(router, "GET", Router.WORKERS_ROUTE, null, null).body());
                assertEquals(1, list.path("decodes").size(), list.toString());
                assertEquals(extra.decodeUrl(), list.path("decodes").get(0).path("url").asText());
                completions(router); // through the added decode, the only one left

                assertEquals(200, send(router, "POST", Router.WORKERS_ROUTE, add(first.decodeUrl(), "decode"), BEARER).statusCode(),
                        "a removed backend may come back");
                assertEquals(200, send(router, "DELETE", removal(extra.decodeUrl()), null, BEARER).statusCode());
            }
            // The removed decode is closed now: a request the router still sent there would fail.
            completions(router);

            assertEquals(200, send(router, "DELETE", removal(first.decodeUrl()), null, BEARER).statusCode());
            JsonNode none = error(send(router, "POST", "/v1/completions", COMPLETION, "Bearer " + KEY), 503);
            assertTrue(none.path("message").asText().contains("no healthy decode"), none.toString());
            HttpResponse<String> health = send(router, "GET", "/health", null, null);
            assertEquals(503, health.statusCode(), health.body());
            assertEquals("unavailable", JSON.readTree(health.body()).path("status").asText());
        }
    }

    private static void completions(Router router) throws Exception {
        for (int i = 0; i < 3; i++) {
            HttpResponse<String> r = send(router, "POST", "/v1/completions", COMPLETION, "Bearer " + KEY);
            assertEquals(200, r.statusCode(), r.body());
            assertEquals(3, JSON.readTree(r.body()).path("usage").path("completion_tokens").asInt(), r.body());
        }
    }

    @Test
    @Timeout(60)
    void changesNeedTheClusterTokenAndARouterWithoutOneRefusesThem() throws Exception {
        try (Router router = router(new Router.Access(TOKEN, KEY), null)) {
            String body = add(second.prefillUrl(), "prefill");
            EngineAuthTest.assertUnauthorized(send(router, "POST", Router.WORKERS_ROUTE, body, null), "needs the cluster token", TOKEN);
            EngineAuthTest.assertUnauthorized(send(router, "POST", Router.WORKERS_ROUTE, body, "Bearer " + KEY), "needs the cluster token", TOKEN);
            EngineAuthTest.assertUnauthorized(send(router, "DELETE", removal(first.decodeUrl()), null, "Bearer " + KEY),
                    "needs the cluster token", TOKEN);
            assertEquals(1, JSON.readTree(send(router, "GET", Router.WORKERS_ROUTE, null, null).body()).path("prefills").size(),
                    "nothing was added");
            assertEquals(1, JSON.readTree(send(router, "GET", Router.WORKERS_ROUTE, null, null).body()).path("decodes").size(),
                    "nothing was removed");
        }
        try (Router open = router(Router.Access.NONE, null)) {
            JsonNode e = error(send(open, "POST", Router.WORKERS_ROUTE, add(second.prefillUrl(), "prefill"), BEARER), 403);
            assertTrue(e.path("message").asText().contains("KVFERRY_AUTH_TOKEN"), e.toString());
            assertEquals(403, send(open, "DELETE", removal(first.decodeUrl()), null, BEARER).statusCode());
            assertEquals(1, JSON.readTree(send(open, "GET", Router.WORKERS_ROUTE, null, null).body()).path("prefills").size());
        }
    }

    @Test
    void aBackendGivenTwiceInARoleIsRefusedAtStart() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> new Router(
                List.of(first.prefillUrl()), List.of(first.decodeUrl(), first.decodeUrl() + "/"), model.tokenizer(), 512, "m", "127.0.0.1", 0));
        assertEquals("--decode " + first.decodeUrl() + " is given twice (as " + first.decodeUrl() + " and " + first.decodeUrl() + "/): give each "
                + "decode once", e.getMessage());
        // Refused as given twice, not as more than --max-backends (2: one decode counted twice).
        e = assertThrows(IllegalArgumentException.class, () -> new Router(List.of(first.prefillUrl()), List.of(first.decodeUrl(), first.decodeUrl()),
                model.tokenizer(), 512, "m", "127.0.0.1", 0, Router.Access.NONE, new Router.Admission(0, Duration.ZERO, 2), null));
        assertEquals("--decode " + first.decodeUrl() + " is given twice: give each decode once", e.getMessage());
    }

    @Test
    @Timeout(60)
    void badChangesAreRefusedNamingWhatWasWrong() throws Exception {
        // Held, bound and never listening: a connect there is refused, and no server (this test's own, bound to port 0
        // next) can be given the port while it is held. A ServerSocket(0) closed at once freed it: the next bind(0)
        // could take it, about once in 7,000 binds, and then the "dead" peer answered.
        Socket hold = new Socket();
        hold.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
        int deadPort = hold.getLocalPort();
        try (hold; Router router = router(new Router.Access(TOKEN, null), null)) {
            String workers = Router.WORKERS_ROUTE;
            assertEquals("worker_type", error(send(router, "POST", workers, add(second.decodeUrl(), "both"), BEARER), 400).path("param").asText());
            assertEquals("url", error(send(router, "POST", workers, add("ftp://h:1", "decode"), BEARER), 400).path("param").asText());
            assertEquals("url", error(send(router, "POST", workers, "{\"worker_type\":\"decode\"}", BEARER), 400).path("param").asText());
            assertEquals(400, send(router, "POST", workers, "[1]", BEARER).statusCode());
            assertEquals(400, send(router, "POST", workers, "{nope", BEARER).statusCode());

            JsonNode dup = error(send(router, "POST", workers, add(first.decodeUrl() + "/", "decode"), BEARER), 409);
            assertTrue(dup.path("message").asText().contains("already"), dup.toString());

            JsonNode dead = error(send(router, "POST", workers, add("http://127.0.0.1:" + deadPort, "decode"), BEARER), 502);
            assertTrue(dead.path("message").asText().contains("was not added"), dead.toString());
            // An engine added in the other role than its /health names: before, a prefill added as a decode was sent decode
            // calls, and a request's second choice met "bootstrap_room ... is already in flight on this prefill".
            JsonNode notPrefill = error(send(router, "POST", workers, add(second.decodeUrl(), "prefill"), BEARER), 502);
            assertTrue(notPrefill.path("message").asText().contains("is a decode engine, listed as a prefill"), notPrefill.toString());
            JsonNode notDecode = error(send(router, "POST", workers, add(second.prefillUrl(), "decode"), BEARER), 502);
            assertTrue(notDecode.path("message").asText().contains("is a prefill engine, listed as a decode"), notDecode.toString());

            // One URL in both roles (a stub whose /health names no role and a registry answers as both): a removal must say which.
            HttpServer both = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
            both.createContext("/health", ex -> {
                byte[] b = "{\"status\":\"ok\",\"bootstrap\":\"127.0.0.1:1\"}".getBytes(StandardCharsets.UTF_8);
                ex.sendResponseHeaders(200, b.length);
                ex.getResponseBody().write(b);
                ex.close();
            });
            both.start();
            String bothUrl = "http://127.0.0.1:" + both.getAddress().getPort();
            try {
                assertEquals(200, send(router, "POST", workers, add(bothUrl, "prefill"), BEARER).statusCode());
                assertEquals(200, send(router, "POST", workers, add(bothUrl, "decode"), BEARER).statusCode());
                JsonNode which = error(send(router, "DELETE", removal(bothUrl), null, BEARER), 400);
                assertEquals("worker_type", which.path("param").asText(), which.toString());
                assertEquals(200, send(router, "DELETE", removal(bothUrl) + "&worker_type=decode", null, BEARER).statusCode());
                assertEquals(404, send(router, "DELETE", removal(bothUrl) + "&worker_type=decode", null, BEARER).statusCode());
                assertEquals("worker_type", error(send(router, "DELETE", removal(bothUrl) + "&worker_type=x", null, BEARER), 400)
                        .path("param").asText());
                assertEquals(200, send(router, "DELETE", removal(bothUrl) + "&worker_type=prefill", null, BEARER).statusCode());
            } finally {
                both.stop(0);
            }

            JsonNode unknown = error(send(router, "DELETE", removal(second.decodeUrl()), null, BEARER), 404);
            assertEquals("url", unknown.path("param").asText());
            assertEquals("url", error(send(router, "DELETE", workers, null, BEARER), 400).path("param").asText());
            HttpResponse<String> put = send(router, "PUT", workers, "{}", BEARER);
            assertEquals(405, put.statusCode(), put.body());
            assertEquals("GET, HEAD, POST, DELETE", put.headers().firstValue("Allow").orElse(null));
            HttpResponse<String> head = send(router, "HEAD", workers, null, null); // a GET route answers HEAD, as the router's others
            assertEquals(200, head.statusCode(), head.body());
            assertEquals("", head.body());
            assertNull(JSON.readTree(send(router, "GET", workers + "x", null, null).body()).get("prefills"), "only the route itself");

            JsonNode list = JSON.readTree(send(router, "GET", workers, null, null).body());
            assertEquals(1, list.path("prefills").size(), list.toString());
            assertEquals(1, list.path("decodes").size(), list.toString());
            assertNotNull(list.path("decodes").get(0).get("in_flight"));
        }
    }

    /** An engine listed at start in the other role than its /health names serves nothing in that role (its checks fail, naming why). */
    @Test
    @Timeout(60)
    void anEngineListedInTheOtherRoleIsNotInRotation() throws Exception {
        try (Router router = new Router(List.of(first.prefillUrl()), List.of(first.prefillUrl()), model.tokenizer(),
                model.weights().config.seqLen(), "m", "127.0.0.1", 0, new Router.Access(TOKEN, null), null)) {
            // The first check runs in the constructor; on a loaded machine it may time out, and a later one (every second) decides.
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            JsonNode list = workers(router);
            while (list.path("decodes").get(0).path("healthy").asBoolean() && System.nanoTime() < until) {
                Thread.sleep(50);
                list = workers(router);
            }
            assertFalse(list.path("decodes").get(0).path("healthy").asBoolean(), "a prefill listed as a decode is in rotation: " + list);
            HttpResponse<String> r = send(router, "POST", "/v1/completions", COMPLETION, null);
            assertEquals(503, r.statusCode(), r.body());
        }
    }

    // An engine role's registration with a router (serve --register-with, WorkerRegistration): it is added once the
    // router takes it, even a router that starts after it, and removed when it stops; a refusal ends the attempts at
    // once, a router that never comes ends them when the retry time has passed.

    private static URI url(Router r) {
        return URI.create("http://127.0.0.1:" + r.port());
    }

    private static JsonNode workers(Router r) throws Exception {
        return JSON.readTree(send(r, "GET", Router.WORKERS_ROUTE, null, null).body());
    }

    /** A router with {@code first}'s pair on {@code port} (0: any), taking the cluster token. */
    private static Router router(int port) throws Exception {
        return new Router(List.of(first.prefillUrl()), List.of(first.decodeUrl()), model.tokenizer(), model.weights().config.seqLen(), "m",
                "127.0.0.1", port, new Router.Access(TOKEN, null), null);
    }

    private static String message(ExecutionException e) {
        return e.getCause().getMessage();
    }

    @Test
    @Timeout(60)
    void anEngineIsAddedOnceTheRouterTakesItAndRemovedWhenItStops() throws Exception {
        try (Router router = router(0)) {
            try (WorkerRegistration reg = new WorkerRegistration(url(router), second.prefillUrl(), "prefill", TOKEN)) {
                reg.registered().get(30, TimeUnit.SECONDS);
                JsonNode w = workers(router);
                assertEquals(2, w.path("prefills").size(), w.toString());
                assertEquals(second.prefillUrl(), w.path("prefills").get(1).path("url").asText());
                assertEquals(second.addr, w.path("prefills").get(1).path("bootstrap").asText());
            }
            JsonNode w = workers(router);
            assertEquals(1, w.path("prefills").size(), "removed when it stopped: " + w);
            assertEquals(first.prefillUrl(), w.path("prefills").get(0).path("url").asText());
        }
    }

    /**
     * An engine started before its router (nothing listens on the port it names): its first try fails, one WARN says it tries
     * again on its schedule (here every second), and once the router starts on that port it takes the engine (one INFO), which
     * then serves a request through it. Before, each retry logged an INFO line, and the tries ended after 60 s.
     */
    @Test
    @Timeout(60)
    void anEngineStartedBeforeItsRouterIsTakenOnceTheRouterStartsAndServesThroughIt() throws Exception {
        // Nothing listens on the port until the router starts: it is held (bound, never listening) till then, so the
        // registration's tries are refused and no other bind, nor a try's own ephemeral port, can be given it. Freed by a
        // closed ServerSocket(0) instead, it was open to any bind(0) for the seconds before the router's. What is left is
        // the microseconds between the release and the router's bind, in this thread.
        Socket hold = new Socket();
        hold.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
        int port = hold.getLocalPort();
        URI at = URI.create("http://127.0.0.1:" + port);
        String warned = "WARN" + REG_LOG + "the router at " + at + "/workers did not take decode " + second.decodeUrl() + " yet (";
        StringBuilder log = new StringBuilder();
        ByteArrayOutputStream said = new ByteArrayOutputStream();
        PrintStream err = System.err;
        System.setErr(new PrintStream(said, true, StandardCharsets.UTF_8));
        try (hold; WorkerRegistration reg = new WorkerRegistration(at, second.decodeUrl(), "decode", TOKEN, Duration.ofSeconds(1))) {
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (!said.toString(StandardCharsets.UTF_8).contains(warned) && System.nanoTime() < until) Thread.sleep(20); // a poll: the log copy is not free on 2 cores
            assertTrue(said.toString(StandardCharsets.UTF_8).contains(warned), "the first try failed, one WARN: " + said);
            assertFalse(reg.registered().isDone(), "registered with no router");
            hold.close();
            try (Router router = router(port)) {
                reg.registered().get(30, TimeUnit.SECONDS);
                JsonNode w = workers(router);
                assertEquals(2, w.path("decodes").size(), w.toString());
                assertEquals(second.decodeUrl(), w.path("decodes").get(1).path("url").asText());
                // Served through it: the flags' decode taken out, the registered one is the only decode.
                assertEquals(200, send(router, "DELETE", removal(first.decodeUrl()), null, BEARER).statusCode());
                HttpResponse<String> r = send(router, "POST", "/v1/completions", COMPLETION, null);
                assertEquals(200, r.statusCode(), r.body());
                assertEquals(Reassertion.HELD, reassert(reg), "and in it from then on");
            }
        } finally {
            System.setErr(err);
            log.append(said.toString(StandardCharsets.UTF_8));
            err.print(log);
        }
        List<String> lines = log.toString().lines().filter(l -> l.contains(REG_LOG) && !l.contains("remove")).toList(); // not the stop's
        assertEquals(2, lines.size(), log.toString());
        assertTrue(lines.get(0).contains(warned) && lines.get(0).contains("ConnectException"), lines.get(0));
        assertTrue(lines.get(1).contains("INFO" + REG_LOG + "registered with the router at " + at + "/workers as decode " + second.decodeUrl()
                + " (try "), lines.get(1));
    }

    @Test
    @Timeout(60)
    void aRefusalEndsTheAttemptsAtOnce() throws Exception {
        try (Router router = router(0)) {
            // A wrong token: asked again, the answer would be the same. An hour of retries would outlast the test's timeout.
            try (WorkerRegistration reg = new WorkerRegistration(url(router), second.decodeUrl(), "decode", "not-" + TOKEN)) {
                String why = message(assertThrows(ExecutionException.class, () -> reg.registered().get(30, TimeUnit.SECONDS)));
                assertTrue(why.contains("HTTP 401"), why);
            }
            // A bad URL: the router refuses it as such.
            try (WorkerRegistration reg = new WorkerRegistration(url(router), "ftp://127.0.0.1:1", "decode", TOKEN)) {
                String why = message(assertThrows(ExecutionException.class, () -> reg.registered().get(30, TimeUnit.SECONDS)));
                assertTrue(why.contains("HTTP 400"), why);
            }
            assertEquals(1, workers(router).path("decodes").size(), "nothing was added");
        }
    }

    /** A router at its --max-backends that has the engine already (a restart) answers 409, counted as in. */
    @Test
    @Timeout(60)
    void aFullRouterStillTakesAnEngineItHas() throws Exception {
        try (Router router = new Router(List.of(first.prefillUrl()), List.of(first.decodeUrl()), model.tokenizer(), model.weights().config.seqLen(),
                "m", "127.0.0.1", 0, new Router.Access(TOKEN, null), new Router.Admission(0, Duration.ZERO, 2), null)) {
            try (WorkerRegistration reg = new WorkerRegistration(url(router), first.decodeUrl(), "decode", TOKEN)) {
                reg.registered().get(30, TimeUnit.SECONDS);
            }
            assertEquals(0, workers(router).path("decodes").size(), "the one it had, removed when it stopped");
            assertEquals(1, workers(router).path("prefills").size());
        }
    }

    /**
     * A rolling update against a router at its --max-backends: the new engine registers while the old one is still in, is
     * refused (403 max_backends) and keeps trying; once the old one leaves (DELETE /workers) the new one gets in at its next
     * try. Before, that first 403 ended its attempts, and the new engine never served. The engine registers through a
     * pass-through in front of the router that counts the refusals, so the removal comes only after one.
     */
    @Test
    @Timeout(60)
    void aFullRouterTakesARegisteringEngineOnceABackendLeaves() throws Exception {
        try (Router router = new Router(List.of(first.prefillUrl()), List.of(first.decodeUrl()), model.tokenizer(), model.weights().config.seqLen(),
                "m", "127.0.0.1", 0, new Router.Access(TOKEN, null), new Router.Admission(0, Duration.ZERO, 2), null)) {
            AtomicInteger refusedFull = new AtomicInteger();
            HttpServer front = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
            front.createContext(Router.WORKERS_ROUTE, ex -> {
                try {
                    String body = new String(ex.getRequestBody().readAllBytes(), StandardCharsets.UTF_8);
                    HttpResponse<String> r = EngineAuthTest.send(router.port(), ex.getRequestMethod(), ex.getRequestURI().toString(),
                            body.isEmpty() ? null : body, ex.getRequestHeaders().getFirst("Authorization"));
                    if (r.statusCode() == 403 && "max_backends".equals(JSON.readTree(r.body()).path("error").path("code").asText())) {
                        refusedFull.incrementAndGet();
                    }
                    byte[] b = r.body().getBytes(StandardCharsets.UTF_8);
                    ex.getResponseHeaders().set("Content-Type", "application/json");
                    ex.sendResponseHeaders(r.statusCode(), b.length == 0 ? -1 : b.length);
                    if (b.length > 0) ex.getResponseBody().write(b);
                } catch (Exception e) {
                    ex.sendResponseHeaders(599, -1);
                } finally {
                    ex.close();
                }
            });
            front.start();
            try (WorkerRegistration reg = new WorkerRegistration(URI.create("http://127.0.0.1:" + front.getAddress().getPort()),
                    second.decodeUrl(), "decode", TOKEN)) {
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
                while (refusedFull.get() == 0 && !reg.registered().isDone() && System.nanoTime() < until) {
                    Thread.sleep(20);
                }
                assertTrue(refusedFull.get() > 0, "the full router refused the new engine: " + refusedFull.get());
                assertFalse(reg.registered().isCompletedExceptionally(), "a 403 max_backends ended the attempts: "
                        + (reg.registered().isDone() ? message(assertThrows(ExecutionException.class, () -> reg.registered().get())) : ""));
                assertEquals(200, send(router, "DELETE", removal(first.decodeUrl()), null, BEARER).statusCode(), "the old one leaves");
                reg.registered().get(30, TimeUnit.SECONDS);
                JsonNode w = workers(router);
                assertEquals(1, w.path("decodes").size(), w.toString());
                assertEquals(second.decodeUrl(), w.path("decodes").get(0).path("url").asText(), w.toString());
            } finally {
                front.stop(0);
            }
            assertEquals(0, workers(router).path("decodes").size(), "removed when it stopped");
        }
    }

    /** A router that has the engine already (its flags name it, or the engine restarted): registered, and removed at its stop. */
    @Test
    @Timeout(60)
    void aRouterThatHasTheEngineAlreadyCountsAsTakingIt() throws Exception {
        try (Router router = router(0)) {
            try (WorkerRegistration reg = new WorkerRegistration(url(router), first.decodeUrl(), "decode", TOKEN)) {
                reg.registered().get(30, TimeUnit.SECONDS);
                assertEquals(1, workers(router).path("decodes").size());
            }
            assertEquals(0, workers(router).path("decodes").size(), "removed when it stopped");
        }
    }

    /**
     * A first registration answered 503, then 429, then 408 (a proxy in front of a router that is starting, or overloaded)
     * is tried again each time, as a re-assertion is, and lands once the router answers: one WARN, one INFO. Before, the 429
     * ended the attempts as a 4xx, with an ERROR.
     */
    @Test
    @Timeout(60)
    void aFirstRegistrationAnswered5xxOr429Or408IsTriedAgainUntilItLands() throws Exception {
        try (Router router = router(0)) {
            int[] script = {503, 429, 408};
            AtomicInteger posts = new AtomicInteger();
            String busy = "{\"error\":{\"message\":\"try later\",\"type\":\"service_unavailable\",\"code\":null}}";
            HttpServer front = scriptedFront(router, script, new String[] {busy, busy, busy}, posts);
            StringBuilder log = new StringBuilder();
            URI at = URI.create("http://127.0.0.1:" + front.getAddress().getPort());
            try {
                logged(log, () -> {
                    try (WorkerRegistration reg = new WorkerRegistration(at, second.decodeUrl(), "decode", TOKEN, Duration.ofSeconds(1))) {
                        reg.registered().get(30, TimeUnit.SECONDS);
                        assertTrue(posts.get() >= script.length + 1, "each refusal tried again: " + posts.get());
                        assertEquals(2, workers(router).path("decodes").size());
                    }
                    return null;
                });
            } finally {
                front.stop(0);
            }
            List<String> lines = log.toString().lines().filter(l -> l.contains(REG_LOG)).toList();
            assertEquals(3, lines.size(), log.toString()); // the WARN, the INFO, and the removal at the stop
            assertTrue(lines.get(0).contains("WARN" + REG_LOG + "the router at " + at + "/workers did not take decode " + second.decodeUrl()
                    + " yet (HTTP 503: "), lines.get(0));
            assertTrue(lines.get(1).contains("INFO" + REG_LOG + "registered with the router at " + at + "/workers as decode " + second.decodeUrl()
                    + " (try 4)"), lines.get(1));
        }
    }

    // Once in, an engine re-asserts its entry (every 5 s by default): the tests below give an hour, so only their
    // reassertNow() calls, each answered with what the router said, make re-assertions.

    /**
     * A first registration whose failure changes kind during a long outage (a router answering 503 while it starts, then
     * full: 403 max_backends) says so: one WARN for each kind (unreachable, 5xx/408/429, full), not only for the first, so
     * the log names what the engine waits for now (a full router needs a backend to leave, or a higher limit). Before, the
     * full router's refusals after a 503 were DEBUG only: the log said "HTTP 503" for as long as the router stayed full.
     * Repeats of a kind are still silent, and it lands at its fifth try (one INFO).
     */
    @Test
    @Timeout(60)
    void aFirstRegistrationWhoseFailureChangesKindWarnsOncePerKind() throws Exception {
        try (Router router = router(0)) {
            String full = "{\"error\":{\"message\":\"this router holds its limit\",\"type\":\"invalid_request_error\",\"code\":\""
                    + Router.BACKENDS_FULL_CODE + "\"}}";
            String busy = "{\"error\":{\"message\":\"try later\",\"type\":\"service_unavailable\",\"code\":null}}";
            int[] statuses = {503, 503, 403, 403};
            String[] bodies = {busy, busy, full, full};
            AtomicInteger posts = new AtomicInteger();
            HttpServer front = scriptedFront(router, statuses, bodies, posts);
            StringBuilder log = new StringBuilder();
            URI at = URI.create("http://127.0.0.1:" + front.getAddress().getPort());
            try {
                logged(log, () -> {
                    try (WorkerRegistration reg = new WorkerRegistration(at, second.decodeUrl(), "decode", TOKEN, Duration.ofSeconds(1))) {
                        reg.registered().get(30, TimeUnit.SECONDS);
                    }
                    return null;
                });
            } finally {
                front.stop(0);
            }
            String warned = "WARN" + REG_LOG + "the router at " + at + "/workers did not take decode " + second.decodeUrl() + " yet (";
            List<String> lines = log.toString().lines().filter(l -> l.contains(REG_LOG) && !l.contains("remove")).toList(); // not the stop's
            assertEquals(3, lines.size(), log.toString());
            assertTrue(lines.get(0).contains(warned + "HTTP 503: "), lines.get(0));
            assertTrue(lines.get(1).contains(warned + "it is full (403 max_backends, its --max-backends): HTTP 403: "), lines.get(1));
            assertTrue(lines.get(2).contains("INFO" + REG_LOG + "registered with the router at " + at + "/workers as decode " + second.decodeUrl()
                    + " (try 5)"), lines.get(2));
        }
    }

    /**
     * An engine stopped (SIGTERM: close()) while its first registration is still being tried (the router answers 503, the next
     * try an hour away): close() ends the tries at once, their thread with them (no re-assertion is left to ask for), sends no
     * DELETE (the router never took it), and registered() fails naming the stop.
     */
    @Test
    @Timeout(60)
    void aStopDuringTheFirstRegistrationsRetriesEndsThemAndRemovesNothing() throws Exception {
        AtomicInteger posts = new AtomicInteger(), deletes = new AtomicInteger();
        HttpServer front = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        front.createContext(Router.WORKERS_ROUTE, ex -> {
            ex.getRequestBody().readAllBytes();
            (("POST".equals(ex.getRequestMethod())) ? posts : deletes).incrementAndGet();
            ex.sendResponseHeaders(503, -1);
            ex.close();
        });
        front.start();
        try {
            WorkerRegistration reg = new WorkerRegistration(URI.create("http://127.0.0.1:" + front.getAddress().getPort()), second.decodeUrl(),
                    "decode", TOKEN, NO_TICKS);
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (posts.get() == 0 && System.nanoTime() < until) Thread.sleep(20);
            assertEquals(1, posts.get(), "the first try");
            reg.close();
            String why = message(assertThrows(ExecutionException.class, () -> reg.registered().get(30, TimeUnit.SECONDS)));
            assertTrue(why.contains("stopped before the router at"), why);
            assertTrue(reg.reassertNow().isCompletedExceptionally(), "the tries' thread ended with close()");
            assertEquals(1, posts.get(), "no try after the stop");
            assertEquals(0, deletes.get(), "nothing to remove: the router never took it");
        } finally {
            front.stop(0);
        }
    }

    private static final Duration NO_TICKS = Duration.ofHours(1);
    private static final String REG_LOG = " io.kvferry.engine.serve.WorkerRegistration - ";

    /**
     * A pass-through in front of the router's /workers whose first POSTs are answered by the script (status i with body i),
     * each later request passed to the router with the caller's Authorization; {@code posts} counts the POSTs. Started.
     */
    private static HttpServer scriptedFront(Router router, int[] statuses, String[] bodies, AtomicInteger posts) throws IOException {
        HttpServer front = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        front.createContext(Router.WORKERS_ROUTE, ex -> {
            try {
                String body = new String(ex.getRequestBody().readAllBytes(), StandardCharsets.UTF_8);
                int n = "POST".equals(ex.getRequestMethod()) ? posts.getAndIncrement() : statuses.length;
                if (n < statuses.length) {
                    byte[] b = bodies[n].getBytes(StandardCharsets.UTF_8);
                    ex.sendResponseHeaders(statuses[n], b.length);
                    ex.getResponseBody().write(b);
                    return;
                }
                HttpResponse<String> r = EngineAuthTest.send(router.port(), ex.getRequestMethod(), ex.getRequestURI().toString(),
                        body.isEmpty() ? null : body, ex.getRequestHeaders().getFirst("Authorization"));
                byte[] b = r.body().getBytes(StandardCharsets.UTF_8);
                ex.sendResponseHeaders(r.statusCode(), b.length == 0 ? -1 : b.length);
                if (b.length > 0) ex.getResponseBody().write(b);
            } catch (Exception e) {
                ex.sendResponseHeaders(599, -1);
            } finally {
                ex.close();
            }
        });
        front.start();
        return front;
    }

    /** What {@code body} logs (slf4j-simple writes to System.err as it is when a line is logged), then its result. */
    private static <T> T logged(StringBuilder log, Callable<T> body) throws Exception {
        PrintStream err = System.err;
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        System.setErr(new PrintStream(buf, true, StandardCharsets.UTF_8));
        try {
            return body.call();
        } finally {
            System.setErr(err);
            log.append(buf.toString(StandardCharsets.UTF_8));
            err.print(buf.toString(StandardCharsets.UTF_8));
        }
    }

    private static Reassertion reassert(WorkerRegistration reg) throws Exception {
        return reg.reassertNow().get(30, TimeUnit.SECONDS);
    }

    /**
     * A router that restarts (a new one on the same address) has only the backends of its flags: the engine registered
     * with the old one is in the new one's pool after its next re-assertion (200, one INFO line), and requests are served
     * through it; the re-assertions while no router answers log one WARN line for them all, the 409s nothing. Before, it
     * stayed out for good.
     */
    @Test
    @Timeout(120)
    void aRestartedRouterGetsTheEngineBackAtTheNextTick() throws Exception {
        int port;
        WorkerRegistration reg;
        StringBuilder log = new StringBuilder();
        try (Router before = router(0)) {
            port = before.port();
            reg = new WorkerRegistration(url(before), second.decodeUrl(), "decode", TOKEN, NO_TICKS);
            reg.registered().get(30, TimeUnit.SECONDS);
            assertEquals(Reassertion.HELD, logged(log, () -> reassert(reg)), "the router has it: 409");
        }
        assertFalse(log.toString().contains(REG_LOG), "a 409 logs nothing: " + log);
        // While no router listens: each tick fails, one WARN line for them all.
        assertEquals(Reassertion.FAILING, logged(log, () -> reassert(reg)));
        assertEquals(Reassertion.FAILING, logged(log, () -> reassert(reg)));
        assertEquals(1, log.toString().lines().filter(l -> l.contains("WARN" + REG_LOG + "re-asserting decode " + second.decodeUrl()
                + " with the router at ") && l.contains("fails (")).count(), log.toString());
        assertEquals(1, log.toString().lines().filter(l -> l.contains(REG_LOG)).count(), "the second failure logs nothing: " + log);
        try (Router after = router(port); reg) {
            assertEquals(1, workers(after).path("decodes").size(), "the new router has its flags' decode only");
            assertEquals(Reassertion.RE_REGISTERED, logged(log, () -> reassert(reg)));
            assertTrue(log.toString().contains("INFO" + REG_LOG + "re-registered with the router at " + url(after) + "/workers as decode "
                    + second.decodeUrl() + " (it had forgotten this engine)"), log.toString());
            JsonNode w = workers(after);
            assertEquals(2, w.path("decodes").size(), w.toString());
            assertEquals(second.decodeUrl(), w.path("decodes").get(1).path("url").asText(), w.toString());
            // Served through it: the flags' decode taken out, the re-registered one is the only decode.
            assertEquals(200, send(after, "DELETE", removal(first.decodeUrl()), null, BEARER).statusCode());
            HttpResponse<String> r = send(after, "POST", "/v1/completions", COMPLETION, null);
            assertEquals(200, r.statusCode(), r.body());
            assertEquals(Reassertion.HELD, reassert(reg), "and in it from then on");
        }
    }

    /**
     * A router that removed the engine (DELETE /workers, as it would be after a replacement) takes it back at its next
     * re-assertion; an engine the router no longer has at its stop is told 404, which is INFO (nothing was left to
     * remove), not a WARN.
     */
    @Test
    @Timeout(120)
    void aRouterThatRemovedTheEngineGetsItBackAndAStopItNoLongerHasIsNoWarning() throws Exception {
        try (Router router = router(0)) {
            try (WorkerRegistration reg = new WorkerRegistration(url(router), second.prefillUrl(), "prefill", TOKEN, NO_TICKS)) {
                reg.registered().get(30, TimeUnit.SECONDS);
                assertEquals(200, send(router, "DELETE", removal(second.prefillUrl()), null, BEARER).statusCode());
                assertEquals(1, workers(router).path("prefills").size());
                assertEquals(Reassertion.RE_REGISTERED, reassert(reg));
                JsonNode w = workers(router);
                assertEquals(2, w.path("prefills").size(), w.toString());
                assertEquals(second.addr, w.path("prefills").get(1).path("bootstrap").asText(), w.toString());
            }
            assertEquals(1, workers(router).path("prefills").size(), "removed when it stopped");
            StringBuilder log = new StringBuilder();
            WorkerRegistration reg = new WorkerRegistration(url(router), second.prefillUrl(), "prefill", TOKEN, NO_TICKS);
            reg.registered().get(30, TimeUnit.SECONDS);
            assertEquals(200, send(router, "DELETE", removal(second.prefillUrl()), null, BEARER).statusCode());
            logged(log, () -> {
                reg.close();
                return null;
            });
            String said = log.toString();
            assertTrue(said.contains("INFO" + REG_LOG + "the router at " + url(router) + "/workers no longer had prefill " + second.prefillUrl()
                    + " (it had forgotten or replaced it): nothing to remove"), said);
            assertFalse(said.contains("WARN" + REG_LOG), said);
            assertThrows(ExecutionException.class, () -> reg.reassertNow().get(30, TimeUnit.SECONDS), "no re-assertions after close");
        }
    }

    /**
     * A re-assertion refused with a 4xx other than a full router's (here 401: the router restarted with another cluster
     * token) ends them with an ERROR naming it: asking again would change nothing.
     */
    @Test
    @Timeout(120)
    void aRefusedReassertionEndsThem() throws Exception {
        int port;
        WorkerRegistration reg;
        try (Router before = router(0)) {
            port = before.port();
            reg = new WorkerRegistration(url(before), second.decodeUrl(), "decode", TOKEN, NO_TICKS);
            reg.registered().get(30, TimeUnit.SECONDS);
        }
        StringBuilder log = new StringBuilder();
        try (Router other = new Router(List.of(first.prefillUrl()), List.of(first.decodeUrl()), model.tokenizer(), model.weights().config.seqLen(),
                "m", "127.0.0.1", port, new Router.Access("another-" + TOKEN, null), null); reg) {
            assertEquals(Reassertion.STOPPED, logged(log, () -> reassert(reg)));
            assertTrue(log.toString().contains("ERROR" + REG_LOG + "stopped re-asserting decode " + second.decodeUrl() + " with the router at "
                    + url(other) + "/workers: HTTP 401"), log.toString());
            String why = message(assertThrows(ExecutionException.class, () -> reg.reassertNow().get(30, TimeUnit.SECONDS)));
            assertTrue(why.contains("no re-assertions: the router at " + url(other) + "/workers refused it: HTTP 401"), why);
            assertEquals(1, workers(other).path("decodes").size(), "not added");
        }
    }

    /**
     * A full router that no longer has the engine (it was replaced, and the replacement holds the place): each
     * re-assertion gets the 403 max_backends, logged once, and the engine is taken back once there is room.
     */
    @Test
    @Timeout(120)
    void aFullRouterThatLostTheEngineTakesItBackOnceThereIsRoom() throws Exception {
        try (Router router = new Router(List.of(first.prefillUrl()), List.of(first.decodeUrl()), model.tokenizer(), model.weights().config.seqLen(),
                "m", "127.0.0.1", 0, new Router.Access(TOKEN, null), new Router.Admission(0, Duration.ZERO, 3), null);
             WorkerRegistration reg = new WorkerRegistration(url(router), second.decodeUrl(), "decode", TOKEN, NO_TICKS)) {
            reg.registered().get(30, TimeUnit.SECONDS);
            assertEquals(200, send(router, "DELETE", removal(second.decodeUrl()), null, BEARER).statusCode());
            assertEquals(200, send(router, "POST", Router.WORKERS_ROUTE, add(second.prefillUrl(), "prefill"), BEARER).statusCode(), "3 of 3");
            StringBuilder log = new StringBuilder();
            assertEquals(Reassertion.FULL, logged(log, () -> reassert(reg)));
            assertEquals(Reassertion.FULL, logged(log, () -> reassert(reg)));
            assertEquals(1, log.toString().lines().filter(l -> l.contains(REG_LOG)).count(), log.toString());
            assertTrue(log.toString().contains("WARN" + REG_LOG + "the router at " + url(router) + "/workers no longer has decode " + second.decodeUrl()
                    + " and is full (403 max_backends"), log.toString());
            assertEquals(200, send(router, "DELETE", removal(second.prefillUrl()), null, BEARER).statusCode(), "room again");
            assertEquals(Reassertion.RE_REGISTERED, reassert(reg));
            assertEquals(2, workers(router).path("decodes").size());
        }
    }

    /**
     * A router down for a while that comes back with the engine (its flags name it): the failing re-assertions log one
     * WARN, the first 409 after them one INFO, and the ones after that nothing.
     */
    @Test
    @Timeout(120)
    void aRouterThatComesBackWithTheEngineLogsOneWarnAndOneInfo() throws Exception {
        int port;
        WorkerRegistration reg;
        try (Router before = router(0)) {
            port = before.port();
            reg = new WorkerRegistration(url(before), first.decodeUrl(), "decode", TOKEN, NO_TICKS);
            reg.registered().get(30, TimeUnit.SECONDS);
        }
        StringBuilder log = new StringBuilder();
        assertEquals(Reassertion.FAILING, logged(log, () -> reassert(reg)));
        assertEquals(Reassertion.FAILING, logged(log, () -> reassert(reg)));
        try (Router after = router(port); reg) {
            assertEquals(Reassertion.HELD, logged(log, () -> reassert(reg)));
            assertEquals(Reassertion.HELD, logged(log, () -> reassert(reg)));
            List<String> lines = log.toString().lines().filter(l -> l.contains(REG_LOG)).toList();
            assertEquals(2, lines.size(), log.toString());
            assertTrue(lines.get(0).contains("WARN" + REG_LOG + "re-asserting decode " + first.decodeUrl()), lines.get(0));
            assertTrue(lines.get(1).contains("INFO" + REG_LOG + "the router at " + url(after) + "/workers answers again (it has decode "
                    + first.decodeUrl() + ")"), lines.get(1));
        }
    }

    /**
     * An engine stopping while a re-assertion is in flight lets it end before its DELETE: cut, its POST still reached the
     * router and re-added the engine after the DELETE, which met nothing (404), leaving a dead engine in the pool. A
     * pass-through in front of the router holds the POST until close() is waiting for it (or, cut, has sent its DELETE).
     */
    @Test
    @Timeout(120)
    void aStopLetsAReassertionInFlightEndBeforeItsRemoval() throws Exception {
        try (Router router = router(0)) {
            CountDownLatch gotPost = new CountDownLatch(1), release = new CountDownLatch(1);
            AtomicInteger deletes = new AtomicInteger();
            AtomicBoolean hold = new AtomicBoolean();
            HttpServer front = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
            front.setExecutor(Executors.newVirtualThreadPerTaskExecutor()); // a DELETE is answered while a POST is held
            front.createContext(Router.WORKERS_ROUTE, ex -> {
                try {
                    String body = new String(ex.getRequestBody().readAllBytes(), StandardCharsets.UTF_8);
                    if ("DELETE".equals(ex.getRequestMethod())) deletes.incrementAndGet();
                    if ("POST".equals(ex.getRequestMethod()) && hold.get()) {
                        gotPost.countDown();
                        assertTrue(release.await(60, TimeUnit.SECONDS));
                    }
                    HttpResponse<String> r = EngineAuthTest.send(router.port(), ex.getRequestMethod(), ex.getRequestURI().toString(),
                            body.isEmpty() ? null : body, ex.getRequestHeaders().getFirst("Authorization"));
                    byte[] b = r.body().getBytes(StandardCharsets.UTF_8);
                    ex.sendResponseHeaders(r.statusCode(), b.length == 0 ? -1 : b.length);
                    if (b.length > 0) ex.getResponseBody().write(b);
                } catch (Exception e) {
                    ex.sendResponseHeaders(599, -1);
                } finally {
                    ex.close();
                }
            });
            front.start();
            try {
                WorkerRegistration reg = new WorkerRegistration(URI.create("http://127.0.0.1:" + front.getAddress().getPort()), second.decodeUrl(),
                        "decode", TOKEN, NO_TICKS);
                reg.registered().get(30, TimeUnit.SECONDS);
                assertEquals(200, send(router, "DELETE", removal(second.decodeUrl()), null, BEARER).statusCode(), "the router lost it");
                hold.set(true);
                CompletableFuture<Reassertion> inFlight = reg.reassertNow();
                assertTrue(gotPost.await(30, TimeUnit.SECONDS));
                Thread stopping = Thread.ofPlatform().start(reg::close);
                // Until close() waits for the POST (in its condition's awaitNanos), or has sent its DELETE without; bounded, so a
                // JDK whose wait has another frame name lets the POST go later instead of hanging (the order checked below holds).
                long giveUp = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                while (deletes.get() == 0 && System.nanoTime() < giveUp
                        && Arrays.stream(stopping.getStackTrace()).noneMatch(f -> f.getMethodName().equals("awaitNanos"))) {
                    Thread.onSpinWait();
                }
                release.countDown();
                stopping.join(30_000);
                assertFalse(stopping.isAlive());
                assertEquals(Reassertion.RE_REGISTERED, inFlight.get(30, TimeUnit.SECONDS), "the re-assertion in flight ended");
                assertEquals(1, deletes.get());
                JsonNode w = workers(router);
                assertEquals(1, w.path("decodes").size(), "the removal came after the re-add: " + w);
            } finally {
                front.stop(0);
            }
        }
    }
}
