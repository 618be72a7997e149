package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.serving.EngineSpec;
import com.sun.net.httpserver.HttpServer;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * An engine's graceful shutdown ({@link Drain}, {@code serve --drain-timeout-s}) on real engines: once draining, its
 * /health answers 503 {@code draining} and a new /generate a 503 whose code is {@code draining}, while a request it admitted
 * before runs to its end (a decode's whole stream; a prefill's forward and KV transfer, even when the request's decode
 * half comes only after the drain began); at the timeout what is left is counted as cut. Each request is held at a known
 * point by sending its two halves apart: a decode waits for its prefill's KV, a prefill for its decode.
 */
class DrainTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final HttpClient HTTP = HttpClient.newBuilder().executor(Executors.newVirtualThreadPerTaskExecutor()).build();
    static final int TOKENS = 40;

    /** A prefill and a decode of their own: a drain is for good. */
    static EngineStack engines() throws Exception {
        return EngineStack.open(new EngineSpec(ModelFiles.load(null, null).weights(), 1, 1, 16, 256, 8, 32), "drain-test");
    }

    static HttpRequest post(int port, String path, String body) {
        return HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path)).header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString(body)).build();
    }

    static HttpResponse<String> get(int port, String path) throws Exception {
        return HTTP.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path)).GET().build(), HttpResponse.BodyHandlers.ofString());
    }

    static String prefillBody(long room) {
        return "{\"bootstrap_room\":" + room + ",\"input_ids\":[1,400,500,300]}";
    }

    static String decodeBody(EngineStack stack, long room) {
        return "{\"bootstrap_room\":" + room + ",\"bootstrap_addr\":\"" + stack.addr + "\",\"input_ids\":[1,400,500,300],"
                + "\"max_new_tokens\":" + TOKENS + ",\"sampling_params\":{\"ignore_eos\":true}}";
    }

    /** A draining server's /health: 503, status draining. */
    static void assertHealthDraining(int port) throws Exception {
        HttpResponse<String> h = get(port, "/health");
        assertEquals(503, h.statusCode(), h.body());
        assertEquals("draining", JSON.readTree(h.body()).path("status").asText(), h.body());
    }

    /** A new request to a draining server: 503 with the error code draining. */
    static void assertRefusedDraining(HttpResponse<String> r) throws Exception {
        assertEquals(503, r.statusCode(), r.body());
        assertEquals("draining", JSON.readTree(r.body()).path("error").path("code").asText(), r.body());
    }

    /** A decode's stream to its end: its token events, and the finish event last (which lists every token). */
    static List<JsonNode> readStream(InputStream body) throws Exception {
        List<JsonNode> events = new ArrayList<>();
        try (BufferedReader in = new BufferedReader(new InputStreamReader(body, StandardCharsets.UTF_8))) {
            for (String line; (line = in.readLine()) != null; ) {
                if (line.startsWith("data: ")) events.add(JSON.readTree(line.substring(6)));
            }
        }
        return events;
    }

    static String text(HttpResponse<InputStream> r) {
        try (InputStream in = r.body()) {
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } catch (IOException e) {
            return e.toString();
        }
    }

    static void assertWhole(List<JsonNode> events) {
        assertFalse(events.isEmpty());
        JsonNode last = events.getLast();
        assertTrue(last.has("finish_reason"), "the stream ends with its finish event: " + last);
        assertEquals(TOKENS, last.path("tokens").size(), "every token generated: " + last);
        assertEquals(TOKENS, events.stream().filter(e -> e.has("token")).count(), "every token streamed: " + events);
    }

    /**
     * The decode admitted a request (its stream began: it waits for its prefill's KV); then it drains: /health and a new
     * request say draining, and the admitted one, its prefill run now, streams every token; then the drain is done.
     */
    @Test
    @Timeout(120)
    void aDrainingDecodeFinishesTheStreamItAdmittedAndRefusesNewOnes() throws Exception {
        EngineStack stack = engines();
        Drain drain = stack.decodeServer.drain();
        int decode = stack.decodeServer.port();
        try (stack) {
            HttpResponse<InputStream> running = HTTP.send(post(decode, "/generate", decodeBody(stack, 41)), HttpResponse.BodyHandlers.ofInputStream());
            assertEquals(200, running.statusCode(), () -> "the stream begins while the request waits for its KV: " + text(running));
            drain.begin();
            assertHealthDraining(decode);
            assertRefusedDraining(HTTP.send(post(decode, "/generate", decodeBody(stack, 42)), HttpResponse.BodyHandlers.ofString()));
            assertEquals(1, drain.running());
            HttpResponse<String> prefilled = HTTP.send(post(stack.prefillServer.port(), "/generate", prefillBody(41)),
                    HttpResponse.BodyHandlers.ofString());
            assertEquals(200, prefilled.statusCode(), prefilled.body());
            assertWhole(readStream(running.body()));
            assertEquals(0, drain.await(Duration.ofSeconds(60)), "the drain ends when its stream does");
        }
    }

    /**
     * The prefill admitted a request whose decode half has not come yet (it waits for the decode); then it drains: /health
     * and a new request say draining, and the decode half, arriving now, still gets the request's KV: the prefill serves
     * the transfers of the requests it took.
     */
    @Test
    @Timeout(120)
    void aDrainingPrefillServesTheTransferOfARequestItAdmitted() throws Exception {
        EngineStack stack = engines();
        Drain drain = stack.prefillServer.drain();
        int prefill = stack.prefillServer.port();
        try (stack) {
            CompletableFuture<HttpResponse<String>> prefilled = HTTP.sendAsync(post(prefill, "/generate", prefillBody(51)),
                    HttpResponse.BodyHandlers.ofString());
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (drain.running() == 0 && !prefilled.isDone() && System.nanoTime() < until) Thread.sleep(5); // the prefill took it
            assertEquals(1, drain.running(), () -> prefilled.isDone() ? prefilled.join().body() : "not taken");
            drain.begin();
            assertHealthDraining(prefill);
            assertRefusedDraining(HTTP.send(post(prefill, "/generate", prefillBody(52)), HttpResponse.BodyHandlers.ofString()));
            HttpResponse<InputStream> decoded = HTTP.send(post(stack.decodeServer.port(), "/generate", decodeBody(stack, 51)),
                    HttpResponse.BodyHandlers.ofInputStream());
            assertEquals(200, decoded.statusCode());
            assertWhole(readStream(decoded.body()));
            HttpResponse<String> r = prefilled.get(60, TimeUnit.SECONDS);
            assertEquals(200, r.statusCode(), r.body());
            assertEquals(0, drain.await(Duration.ofSeconds(60)));
        }
    }

    /**
     * The prefill admitted a request whose decode half never comes (the decode refused it, or drained): the router's abort
     * of the room ends it, so the prefill's drain does not wait for its bootstrap timeout.
     */
    @Test
    @Timeout(120)
    void aDrainingPrefillsRequestWhoseDecodeNeverComesEndsAtItsAbort() throws Exception {
        EngineStack stack = engines();
        Drain drain = stack.prefillServer.drain();
        int prefill = stack.prefillServer.port();
        try (stack) {
            CompletableFuture<HttpResponse<String>> prefilled = HTTP.sendAsync(post(prefill, "/generate", prefillBody(71)),
                    HttpResponse.BodyHandlers.ofString());
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (drain.running() == 0 && !prefilled.isDone() && System.nanoTime() < until) Thread.sleep(5); // the prefill took it
            assertEquals(1, drain.running(), () -> prefilled.isDone() ? prefilled.join().body() : "not taken");
            drain.begin();
            assertEquals(200, HTTP.send(post(prefill, "/abort", "{\"bootstrap_room\":71}"), HttpResponse.BodyHandlers.ofString()).statusCode());
            HttpResponse<String> r = prefilled.get(60, TimeUnit.SECONDS);
            assertNotEquals(200, r.statusCode(), r.body());
            assertEquals(0, drain.await(Duration.ofSeconds(60)), "the aborted request left the count");
        }
    }

    /** A decode's admitted stream whose client goes away (waiting for its KV): its next keep-alive finds it, and it leaves the count. */
    @Test
    @Timeout(120)
    void aDrainingDecodesStreamWhoseClientLeftLeavesTheCount() throws Exception {
        EngineStack stack = engines();
        Drain drain = stack.decodeServer.drain();
        int decode = stack.decodeServer.port();
        try (stack) {
            HttpResponse<InputStream> waiting = HTTP.send(post(decode, "/generate", decodeBody(stack, 81)), HttpResponse.BodyHandlers.ofInputStream());
            assertEquals(200, waiting.statusCode(), () -> text(waiting));
            drain.begin();
            assertEquals(1, drain.running());
            waiting.body().close(); // the client (a router) went away before the end of the stream
            assertEquals(0, drain.await(Duration.ofSeconds(60)), "the stream's end by a disconnect left the count");
            assertEquals(0, drain.running());
        }
    }

    /** A request that would run past the drain timeout (its prefill never comes) is counted as cut when the timeout ends. */
    @Test
    @Timeout(120)
    void theDrainTimeoutCountsARequestThatRunsLonger() throws Exception {
        EngineStack stack = engines();
        Drain drain = stack.decodeServer.drain();
        int decode = stack.decodeServer.port();
        try (stack) {
            HttpResponse<InputStream> waiting = HTTP.send(post(decode, "/generate", decodeBody(stack, 61)), HttpResponse.BodyHandlers.ofInputStream());
            assertEquals(200, waiting.statusCode(), () -> text(waiting));
            drain.begin();
            assertEquals(1, drain.await(Duration.ofMillis(200)), "its prefill never runs: it is still running at the timeout");
            stack.close(); // what the role's close does then: the request is cut
            List<JsonNode> events;
            try {
                events = readStream(waiting.body());
            } catch (IOException cutMidChunk) {
                events = List.of();
            }
            assertTrue(events.stream().noneMatch(e -> e.has("finish_reason")), "cut, not finished: " + events);
        }
    }

    private static double drained(SimpleMeterRegistry m, String end) {
        return m.find(Drain.REQUESTS).tags("role", "decode", "end", end).functionCounter().count();
    }

    /**
     * A drain's meters: the draining gauge, and the requests under way when it began by how they ended (completed, or cut
     * at the timeout; one ending after the cut is not counted completed; one ending before the drain is not counted).
     */
    @Test
    void aDrainCountsTheRequestsItMetByHowTheyEnded() throws Exception {
        Drain drain = new Drain("decode");
        SimpleMeterRegistry m = new SimpleMeterRegistry();
        drain.register(m);
        assertEquals(0, m.find(Drain.DRAINING).tag("role", "decode").gauge().value());
        assertEquals(0, drained(m, Drain.COMPLETED), "there from the start");
        for (int i = 0; i < 4; i++) assertTrue(drain.enter());
        drain.exit(); // before the drain: not one it met
        drain.begin();
        assertEquals(1, m.find(Drain.DRAINING).tag("role", "decode").gauge().value());
        assertFalse(drain.enter(), "refused once draining");
        drain.exit();
        assertEquals(1, drained(m, Drain.COMPLETED));
        assertEquals(2, drain.await(Duration.ZERO), "two still running at the timeout");
        assertEquals(2, drained(m, Drain.CUT));
        drain.exit(); // a cut one ending as the server closes
        assertEquals(1, drained(m, Drain.COMPLETED), "cut, not completed");
        assertEquals(1, drain.await(Duration.ZERO));
        assertEquals(2, drained(m, Drain.CUT), "a drain cuts once");
    }

    /**
     * A drained server's close lets the exchange under way end, so a request that reached it as it closed gets its 503
     * draining answer, not a reset: here one whose body is still coming when the close begins (a JDK {@code stop(0)} closed
     * its connection at once).
     */
    @Test
    @Timeout(60)
    void aRequestReachingADrainedServerAsItClosesGetsTheDrainingAnswer() throws Exception {
        HttpServer server = Http.server("127.0.0.1", 0);
        Drain drain = new Drain("decode");
        server.createContext("/generate", ex -> Http.handle(ex, drain.admitting(e -> Http.sendJson(e, 200, JSON.createObjectNode()))));
        server.start();
        ExchangeGate gate = (ExchangeGate) server.getExecutor();
        drain.begin();
        try (Socket c = new Socket("127.0.0.1", server.getAddress().getPort())) {
            OutputStream out = c.getOutputStream();
            out.write(("POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 4\r\n\r\n{}")
                    .getBytes(StandardCharsets.US_ASCII)); // half its body
            out.flush();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (gate.underWay() == 0 && System.nanoTime() < deadline) Thread.sleep(2);
            assertEquals(1, gate.underWay(), "the server is reading the request");
            // The product's grace is a second; this close gets 30 so the 503 below never races a loaded machine's
            // scheduler (the JDK's stop returns once the exchange ended, so a passing run waits no longer).
            assertTrue(Http.DRAINED_STOP_GRACE_SECONDS >= 1, "a drained close waits for the exchanges under way");
            Thread closing = Thread.ofPlatform().start(() -> Http.stop(server, drain, 30));
            // The close under way: its listener closed and waiting for the exchange (or, cutting at once, done).
            while (closing.getState() != Thread.State.TIMED_WAITING && closing.getState() != Thread.State.TERMINATED
                    && System.nanoTime() < deadline) {
                Thread.sleep(2);
            }
            String answer;
            try {
                out.write("  ".getBytes(StandardCharsets.US_ASCII)); // the rest of its body
                out.flush();
                answer = new String(c.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            } catch (IOException reset) {
                answer = reset.toString();
            }
            closing.join(TimeUnit.SECONDS.toMillis(60));
            assertFalse(closing.isAlive(), "closed");
            if (!answer.startsWith("HTTP/1.1 503")) fail("not the draining answer: " + answer);
            assertTrue(answer.contains("\"code\":\"draining\""), answer);
        }
    }
}
