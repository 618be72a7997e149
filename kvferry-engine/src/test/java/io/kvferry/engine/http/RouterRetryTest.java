package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.sun.net.httpserver.HttpServer;
import io.kvferry.engine.model.ModelFiles;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import static io.kvferry.engine.http.EngineStubs.answer;
import static io.kvferry.engine.http.EngineStubs.url;
import static io.kvferry.engine.http.RouterErrorsTest.JSON;
import static io.kvferry.engine.http.RouterErrorsTest.NO_CHECKS;
import static io.kvferry.engine.http.RouterErrorsTest.send;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

/**
 * A request that meets a backend gone since its last health check (its connection refused: nothing of the request
 * started there) runs again on the other instances, so the client never sees the dead one while another serves. The
 * stubs make the decode answer only for a room the live prefill was asked to run, as a real decode needs the prefill's
 * KV: a request whose prefill refused its connection gets no token from the decode, only the abort the router sends it.
 * With no periodic health checks (only the router's first), what a request meets decides alone.
 */
class RouterRetryTest {
    /** Stub engines: prefills that remember the rooms they were asked for, decodes that stream once their room's prefill has it. */
    private static final class Stubs implements AutoCloseable {
        final Set<Long> prefilled = ConcurrentHashMap.newKeySet(), aborted = ConcurrentHashMap.newKeySet();
        final List<HttpServer> servers = new ArrayList<>();

        HttpServer prefill() throws IOException {
            HttpServer s = server();
            s.createContext("/generate", ex -> {
                JsonNode req = JSON.readTree(ex.getRequestBody());
                prefilled.add(req.path("bootstrap_room").asLong());
                answer(ex, 200, "{}");
            });
            s.start();
            return s;
        }

        HttpServer decode() throws IOException {
            HttpServer s = server();
            s.createContext("/generate", ex -> {
                long room = JSON.readTree(ex.getRequestBody()).path("bootstrap_room").asLong();
                ex.getResponseHeaders().add("Content-Type", "text/event-stream");
                ex.sendResponseHeaders(200, 0);
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
                String event = "data: {\"error\":{\"type\":\"kv_transfer_error\",\"kind\":\"waiting_timeout\",\"message\":\"no KV came\"}}\n\n";
                try {
                    while (System.nanoTime() < until) {
                        if (prefilled.contains(room)) {
                            event = "data: {\"token\":300}\n\ndata: {\"finish_reason\":\"length\"}\n\n";
                            break;
                        }
                        if (aborted.contains(room)) {
                            event = "data: {\"error\":{\"type\":\"kv_transfer_error\",\"kind\":\"aborted\",\"message\":\"room aborted\"}}\n\n";
                            break;
                        }
                        Thread.sleep(5);
                    }
                    ex.getResponseBody().write(event.getBytes(StandardCharsets.UTF_8));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                ex.close();
            });
            s.start();
            return s;
        }

        private HttpServer server() throws IOException {
            HttpServer s = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
            s.setExecutor(Executors.newVirtualThreadPerTaskExecutor());
            s.createContext("/health", ex -> answer(ex, 200, "{\"status\":\"ok\",\"bootstrap\":\"127.0.0.1:1\"}"));
            s.createContext("/abort", ex -> {
                aborted.add(JSON.readTree(ex.getRequestBody()).path("bootstrap_room").asLong());
                answer(ex, 200, "{}");
            });
            servers.add(s);
            return s;
        }

        @Override
        public void close() {
            for (HttpServer s : servers) s.stop(0);
        }
    }

    private static Router router(List<HttpServer> prefills, List<HttpServer> decodes) throws IOException {
        return new Router(prefills.stream().map(RouterErrorsTest::url).toList(), decodes.stream().map(RouterErrorsTest::url).toList(),
                ModelFiles.load(null, null).tokenizer(), 512, "m", "127.0.0.1", 0, NO_CHECKS);
    }

    private static void assertOut(Router router, String role, String gone) throws Exception {
        JsonNode h = JSON.readTree(send(router.port(), "/workers", null).body());
        for (JsonNode w : h.path(role + "s")) {
            if (w.path("url").asText().equals(gone)) {
                assertFalse(w.path("healthy").asBoolean(), "the " + role + " that refused its connection is out of rotation: " + h);
                return;
            }
        }
        throw new AssertionError(gone + " not listed: " + h);
    }

    /** Every backend's in_flight on GET /workers reads 0 once the requests ended (the first run's counts released too). */
    private static void assertNothingInFlight(Router router) throws Exception {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20); // a prefill call's count drops when its answer is read
        while (true) {
            JsonNode h = JSON.readTree(send(router.port(), "/workers", null).body());
            long held = 0;
            for (JsonNode w : h.path("prefills")) held += w.path("in_flight").asLong();
            for (JsonNode w : h.path("decodes")) held += w.path("in_flight").asLong();
            if (held == 0) return;
            if (System.nanoTime() > until) throw new AssertionError("in_flight left after the requests ended: " + h);
            Thread.sleep(10);
        }
    }

    /** The first prefill (the one picked: a tie goes to the first) is gone: the request runs on the second. */
    @Test
    @Timeout(60)
    void aRequestMeetingAPrefillGoneSinceItsLastCheckRunsOnTheOther() throws Exception {
        try (Stubs stubs = new Stubs()) {
            HttpServer gone = stubs.prefill(), live = stubs.prefill(), decode = stubs.decode();
            try (Router router = router(List.of(gone, live), List.of(decode))) {
                assertEquals(200, send(router.port(), "/health", null).statusCode());
                gone.stop(0);
                HttpResponse<String> r = send(router.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3}");
                assertEquals(200, r.statusCode(), "a prefill gone since its check failed the request though another served: " + r.body());
                assertOut(router, "prefill", url(gone));
                assertNothingInFlight(router);
            }
        }
    }

    /** A prompt-only request (the prefill alone) the same way. */
    @Test
    @Timeout(60)
    void aPromptOnlyRequestMeetingAPrefillGoneSinceItsLastCheckRunsOnTheOther() throws Exception {
        try (Stubs stubs = new Stubs()) {
            HttpServer gone = stubs.prefill(), live = stubs.prefill(), decode = stubs.decode();
            try (Router router = router(List.of(gone, live), List.of(decode))) {
                assertEquals(200, send(router.port(), "/health", null).statusCode());
                gone.stop(0);
                HttpResponse<String> r = send(router.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":0,\"echo\":true}");
                assertEquals(200, r.statusCode(), r.body());
                assertOut(router, "prefill", url(gone));
                assertNothingInFlight(router);
            }
        }
    }

    /** The first decode is gone: the prefill's room is aborted, and the request runs again (a new room) on the second decode. */
    @Test
    @Timeout(60)
    void aRequestMeetingADecodeGoneSinceItsLastCheckRunsOnTheOther() throws Exception {
        try (Stubs stubs = new Stubs()) {
            HttpServer prefill = stubs.prefill(), gone = stubs.decode(), live = stubs.decode();
            try (Router router = router(List.of(prefill), List.of(gone, live))) {
                assertEquals(200, send(router.port(), "/health", null).statusCode());
                gone.stop(0);
                HttpResponse<String> r = send(router.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3,\"stream\":true}");
                assertEquals(200, r.statusCode(), r.body());
                assertFalse(r.body().contains("\"error\""), "the stream carries no error: " + r.body());
                assertOut(router, "decode", url(gone));
                assertNothingInFlight(router);
                assertEquals(2, stubs.prefilled.size(), "the prefill was asked twice, a room each run: " + stubs.prefilled);
                long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20); // the abort is a call of its own, answered apart
                while (stubs.aborted.stream().noneMatch(stubs.prefilled::contains) && System.nanoTime() < until) Thread.sleep(10);
                assertEquals(1, stubs.aborted.stream().filter(stubs.prefilled::contains).count(),
                        "the first run's room was aborted on the prefill: " + stubs.aborted);
            }
        }
    }

    /** With no other instance, the refusal is the answer (no run again on the same one): a 502 naming the decode. */
    @Test
    @Timeout(60)
    void withNoOtherInstanceTheRefusalIsTheAnswer() throws Exception {
        try (Stubs stubs = new Stubs()) {
            HttpServer prefill = stubs.prefill(), gone = stubs.decode();
            try (Router router = router(List.of(prefill), List.of(gone))) {
                assertEquals(200, send(router.port(), "/health", null).statusCode());
                gone.stop(0);
                HttpResponse<String> r = send(router.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3}");
                assertEquals(502, r.statusCode(), r.body());
                // The prefill's call may reach its stub after the answer: its in_flight reads 0 once it was answered.
                assertNothingInFlight(router);
                assertEquals(1, stubs.prefilled.size(), "one run: " + stubs.prefilled);
            }
        }
    }

    /**
     * Several choices, streamed, meeting a prefill gone: each choice is a request of its own and runs again alone (best_of's
     * samples are such choices too); the stream carries no error, each choice ends once, and nothing stays counted in flight.
     */
    @Test
    @Timeout(60)
    void severalChoicesMeetingAPrefillGoneEachRunAgain() throws Exception {
        try (Stubs stubs = new Stubs()) {
            HttpServer gone = stubs.prefill(), live = stubs.prefill(), decode = stubs.decode();
            try (Router router = router(List.of(gone, live), List.of(decode))) {
                assertEquals(200, send(router.port(), "/health", null).statusCode());
                gone.stop(0);
                HttpResponse<String> r = send(router.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3,\"n\":3,\"stream\":true}");
                assertEquals(200, r.statusCode(), r.body());
                assertFalse(r.body().contains("\"error\""), "the stream carries no error: " + r.body());
                for (int i = 0; i < 3; i++) {
                    String index = "\"index\":" + i + ",";
                    assertEquals(1, r.body().lines().filter(l -> l.contains(index) && l.contains("\"finish_reason\":\"length\"")).count(),
                            "choice " + i + " ends once: " + r.body());
                }
                assertNothingInFlight(router);
            }
        }
    }
}
