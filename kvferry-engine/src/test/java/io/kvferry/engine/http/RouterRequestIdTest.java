package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpServer;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.metrics.WarnLimiter;
import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.distribution.DistributionStatisticConfig;
import io.micrometer.core.instrument.distribution.pause.PauseDetector;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.slf4j.event.Level;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

import static io.kvferry.engine.http.EngineStubs.answer;
import static io.kvferry.engine.http.EngineStubs.url;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Request ids at the router ({@link RequestId}): a client's {@code X-Request-Id} (or SGLang's {@code rid}) is the request's
 * id, else the router makes one; every answer of the generation routes carries it (whole, streamed, 400, 429), OpenAI's
 * {@code id} is made of it, {@code /generate}'s {@code meta_info.id} is it, and the engines are sent it on every call (a
 * choice's or batch entry's own). Stub engines record the ids they are sent.
 */
class RouterRequestIdTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final HttpClient HTTP = HttpClient.newBuilder().executor(Executors.newVirtualThreadPerTaskExecutor()).build();
    static final String COMPLETION = "{\"prompt\":\"Hi\",\"max_tokens\":2}";

    HttpServer prefill;
    HttpServer decode;
    Router router;
    /** The X-Request-Id of each /generate call the engines got (null: none sent). */
    final ConcurrentLinkedQueue<String> prefillIds = new ConcurrentLinkedQueue<>(), decodeIds = new ConcurrentLinkedQueue<>();
    /** Set: the decode holds each request (keep-alives only) until released, counting {@link #atDecode} down as one comes. */
    volatile CountDownLatch hold;
    volatile CountDownLatch atDecode = new CountDownLatch(1);
    /** The decode's one token event. */
    volatile String tokenEvent = "{\"token\":300}";

    @BeforeEach
    void start() throws IOException {
        prefill = stub(true);
        decode = stub(false);
        router = router(Router.Admission.UNLIMITED);
    }

    @AfterEach
    void stop() {
        if (hold != null) hold.countDown();
        if (router != null) router.close();
        prefill.stop(0);
        decode.stop(0);
    }

    Router router(Router.Admission admission) throws IOException {
        return new Router(List.of(url(prefill)), List.of(url(decode)), ModelFiles.load(null, null).tokenizer(), 512, "m", "127.0.0.1", 0,
                Router.Access.NONE, admission, null);
    }

    private HttpServer stub(boolean isPrefill) throws IOException {
        HttpServer s = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 64);
        s.setExecutor(Executors.newVirtualThreadPerTaskExecutor());
        RouterErrorsTest.answerHealthy(s);
        s.createContext("/abort", ex -> answer(ex, 200, "{}"));
        s.createContext("/generate", ex -> {
            ex.getRequestBody().readAllBytes();
            (isPrefill ? prefillIds : decodeIds).add(String.valueOf(ex.getRequestHeaders().getFirst("X-Request-Id")));
            if (isPrefill) {
                answer(ex, 200, "{}");
                return;
            }
            ex.getResponseHeaders().add("Content-Type", "text/event-stream");
            ex.sendResponseHeaders(200, 0);
            try {
                CountDownLatch h = hold;
                atDecode.countDown();
                while (h != null && !h.await(200, TimeUnit.MILLISECONDS)) {
                    ex.getResponseBody().write(": keep-alive\n\n".getBytes(StandardCharsets.UTF_8));
                    ex.getResponseBody().flush();
                }
                ex.getResponseBody().write(("data: " + tokenEvent + "\n\ndata: {\"finish_reason\":\"length\"}\n\n").getBytes(StandardCharsets.UTF_8));
            } catch (IOException | InterruptedException gone) {
                // the router went away
            }
            ex.close();
        });
        s.start();
        return s;
    }

    HttpResponse<String> post(String path, String body, String requestId) throws Exception {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + router.port() + path)).header("Content-Type", "application/json");
        if (requestId != null) b.header("X-Request-Id", requestId);
        return HTTP.send(b.POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
    }

    static String idOf(HttpResponse<?> r) {
        return r.headers().firstValue("X-Request-Id").orElse(null);
    }

    static List<JsonNode> events(HttpResponse<String> r) throws IOException {
        List<JsonNode> out = new ArrayList<>();
        for (String l : r.body().lines().filter(l -> l.startsWith("data: ") && !l.equals("data: [DONE]")).toList()) {
            out.add(JSON.readTree(l.substring(6)));
        }
        return out;
    }

    @Test
    @Timeout(60)
    void aClientsIdIsEchoedNamesTheAnswerAndReachesBothEngines() throws Exception {
        HttpResponse<String> r = post("/v1/completions", COMPLETION, "0f8fad5b-d9cb-469f-a165-70867728950e");
        assertEquals(200, r.statusCode(), r.body());
        assertEquals("0f8fad5b-d9cb-469f-a165-70867728950e", idOf(r));
        assertEquals("cmpl-0f8fad5b-d9cb-469f-a165-70867728950e", JSON.readTree(r.body()).path("id").asText(), r.body());
        assertEquals(List.of("0f8fad5b-d9cb-469f-a165-70867728950e"), List.copyOf(prefillIds));
        assertEquals(List.of("0f8fad5b-d9cb-469f-a165-70867728950e"), List.copyOf(decodeIds));

        HttpResponse<String> chat = post("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":2}", "chat/1");
        assertEquals(200, chat.statusCode(), chat.body());
        assertEquals("chat/1", idOf(chat));
        assertEquals("chatcmpl-chat/1", JSON.readTree(chat.body()).path("id").asText(), chat.body());
    }

    @Test
    @Timeout(60)
    void aStreamCarriesTheIdInItsHeadersAndEveryChunk() throws Exception {
        for (String path : new String[]{"/v1/completions", "/v1/chat/completions"}) {
            String body = path.equals("/v1/completions") ? "{\"prompt\":\"Hi\",\"max_tokens\":2,\"stream\":true,\"stream_options\":{\"include_usage\":true}}"
                    : "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":2,\"stream\":true}";
            HttpResponse<String> r = post(path, body, "stream-1");
            assertEquals(200, r.statusCode(), r.body());
            assertEquals("stream-1", idOf(r));
            List<JsonNode> chunks = events(r);
            assertTrue(chunks.size() >= 2, r.body());
            String prefix = path.equals("/v1/completions") ? "cmpl-" : "chatcmpl-";
            for (JsonNode c : chunks) assertEquals(prefix + "stream-1", c.path("id").asText(), c.toString());
        }
        // The header comes with the status line, before the first event: held by a decode that sends only keep-alives.
        hold = new CountDownLatch(1);
        HttpResponse<InputStream> open = HTTP.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + router.port() + "/generate"))
                .header("X-Request-Id", "early").POST(HttpRequest.BodyPublishers.ofString("{\"text\":\"Hi\",\"stream\":true}")).build(),
                HttpResponse.BodyHandlers.ofInputStream());
        assertEquals(200, open.statusCode());
        assertEquals("early", idOf(open));
        hold.countDown();
        try (InputStream in = open.body()) {
            String all = new String(in.readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(all.contains("\"id\":\"early\""), all);
        }
    }

    @Test
    @Timeout(60)
    void withoutAnIdTheRouterMakesOneForEachRequest() throws Exception {
        Set<String> seen = new HashSet<>();
        for (int i = 0; i < 5; i++) {
            HttpResponse<String> r = post("/v1/completions", COMPLETION, null);
            assertEquals(200, r.statusCode(), r.body());
            String id = idOf(r);
            assertTrue(id != null && id.matches("[0-9a-f]{32}"), "made: " + id);
            assertTrue(seen.add(id), "the same id twice: " + id);
            assertEquals("cmpl-" + id, JSON.readTree(r.body()).path("id").asText());
        }
        assertEquals(seen, Set.copyOf(decodeIds), "the engines got the ids the answers carry");
        assertEquals(seen, Set.copyOf(prefillIds));
    }

    @Test
    @Timeout(60)
    void aClientErrorAfterTheIdIsKnownCarriesIt() throws Exception {
        HttpResponse<String> r = post("/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":-1}", "bad-request-1");
        assertEquals(400, r.statusCode(), r.body());
        assertEquals("bad-request-1", idOf(r));
        HttpResponse<String> made = post("/generate", "{\"sampling_params\":[]}", null);
        assertEquals(400, made.statusCode(), made.body());
        assertTrue(idOf(made).matches("[0-9a-f]{32}"), made.headers().toString());
        assertTrue(decodeIds.isEmpty(), "nothing reached an engine");
    }

    @Test
    @Timeout(60)
    void aRequestTurnedAwayAtAdmissionCarriesItsId() throws Exception {
        router.close();
        router = router(new Router.Admission(1, Duration.ZERO));
        hold = new CountDownLatch(1);
        // The one slot held: a stream whose decode sends only keep-alives until released.
        CompletableFuture<HttpResponse<String>> first = CompletableFuture.supplyAsync(() -> {
            try {
                return post("/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":2}", "holder");
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        });
        assertTrue(atDecode.await(30, TimeUnit.SECONDS), "the first is at the decode: it holds the slot");
        HttpResponse<String> r = post("/v1/completions", COMPLETION, "turned-away");
        assertEquals(429, r.statusCode(), r.body());
        assertEquals("turned-away", idOf(r));
        hold.countDown();
        assertEquals("holder", idOf(first.get(30, TimeUnit.SECONDS)));
    }

    /** A draining router's 503 carries the request's id, and its log line (on the engines' request logger) names it. */
    @Test
    @Timeout(60)
    void aDrainsRefusalCarriesAndLogsTheId() throws Exception {
        router.drain().begin();
        PrintStream err = System.err;
        ByteArrayOutputStream logged = new ByteArrayOutputStream();
        HttpResponse<String> r;
        try {
            System.setErr(new PrintStream(logged, true, StandardCharsets.UTF_8)); // slf4j-simple writes to System.err as it is now
            r = post("/generate", "{\"text\":\"Hi\"}", "late-1");
        } finally {
            System.setErr(err);
        }
        assertEquals(503, r.statusCode(), r.body());
        assertEquals("late-1", idOf(r));
        String log = logged.toString(StandardCharsets.UTF_8);
        assertTrue(log.contains("request refused: request_id=late-1 role=router status=503 reason=draining"), log);
    }

    /**
     * A 500 of an exception the router did not expect (here its metrics backend failing as the first token is recorded: no
     * engine answer reaches an unchecked path any more, RouterBadEngineAnswerTest) carries the request's id and is logged
     * naming it, with the exception.
     */
    @Test
    @Timeout(60)
    void anUnexpectedExceptionsAnswerCarriesTheIdAndItsLineNamesIt() throws Exception {
        router.close();
        router = new Router(List.of(url(prefill)), List.of(url(decode)), ModelFiles.load(null, null).tokenizer(), 512, "m", "127.0.0.1", 0,
                Router.Access.NONE, Router.Admission.UNLIMITED, failingTtft());
        PrintStream err = System.err;
        ByteArrayOutputStream logged = new ByteArrayOutputStream();
        HttpResponse<String> r;
        try {
            System.setErr(new PrintStream(logged, true, StandardCharsets.UTF_8)); // slf4j-simple writes to System.err as it is now
            r = post("/v1/completions", COMPLETION, "boom-1");
        } finally {
            System.setErr(err);
        }
        err.print(logged.toString(StandardCharsets.UTF_8));
        assertEquals(500, r.statusCode(), r.body());
        assertEquals("internal_error", JSON.readTree(r.body()).path("error").path("type").asText(), r.body());
        assertEquals("boom-1", idOf(r));
        String log = logged.toString(StandardCharsets.UTF_8);
        String line = log.lines().filter(l -> l.contains("request failed: request_id=boom-1 ")).findFirst()
                .orElseThrow(() -> new AssertionError("no request failed line for boom-1 in:\n" + log));
        assertTrue(line.contains("ERROR") && line.contains("status=500") && line.contains("route=/v1/completions")
                && line.contains("IllegalStateException: the metrics backend failed"), line);
        assertTrue(log.contains("\tat io.kvferry.engine.http."), "with its stack trace: " + log);
    }

    /**
     * An IllegalArgumentException a bug throws mid-request is no client's fault: a 500 internal_error carrying the request's
     * id, logged at ERROR naming it with its stack trace, as any other unexpected exception (it was an unlogged 400 once:
     * client refusals are Http.BadRequest).
     */
    @Test
    @Timeout(60)
    void aBugsIllegalArgumentExceptionIsA500LoggedWithTheId() throws Exception {
        router.close();
        router = new Router(List.of(url(prefill)), List.of(url(decode)), ModelFiles.load(null, null).tokenizer(), 512, "m", "127.0.0.1", 0,
                Router.Access.NONE, Router.Admission.UNLIMITED, failingTtft(() -> new IllegalArgumentException("a bug's own argument check")));
        PrintStream err = System.err;
        ByteArrayOutputStream logged = new ByteArrayOutputStream();
        HttpResponse<String> r;
        try {
            System.setErr(new PrintStream(logged, true, StandardCharsets.UTF_8)); // slf4j-simple writes to System.err as it is now
            r = post("/v1/completions", COMPLETION, "iae-bug-1");
        } finally {
            System.setErr(err);
        }
        err.print(logged.toString(StandardCharsets.UTF_8));
        assertEquals(500, r.statusCode(), r.body());
        JsonNode e = JSON.readTree(r.body()).path("error");
        assertEquals("internal_error", e.path("type").asText(), r.body());
        assertEquals("a bug's own argument check", e.path("message").asText(), r.body());
        assertEquals("iae-bug-1", idOf(r));
        String log = logged.toString(StandardCharsets.UTF_8);
        String line = log.lines().filter(l -> l.contains("request failed: request_id=iae-bug-1 ")).findFirst()
                .orElseThrow(() -> new AssertionError("no request failed line for iae-bug-1 in:\n" + log));
        assertTrue(line.contains("ERROR") && line.contains("status=500") && line.contains("route=/v1/completions")
                && line.contains("kind=internal_error") && line.contains("IllegalArgumentException: a bug's own argument check"), line);
        assertTrue(log.contains("\tat io.kvferry.engine.http."), "with its stack trace: " + log);
    }

    /**
     * A bug every request meets logs one ERROR line with its stack trace a second at most (the clock held here): the others
     * at DEBUG, the next ERROR line saying how many were left out, its trace still after it.
     */
    @Test
    void unexpectedExceptionsAreLoggedAtErrorOnceASecond() throws Exception {
        long[] now = {0};
        WarnLimiter errors = new WarnLimiter(() -> now[0], "unexpected exceptions' 500s", Level.ERROR);
        PrintStream err = System.err;
        ByteArrayOutputStream logged = new ByteArrayOutputStream();
        try {
            System.setErr(new PrintStream(logged, true, StandardCharsets.UTF_8)); // slf4j-simple writes to System.err as it is now
            for (int i = 1; i <= 3; i++) Router.unexpected(errors, "/v1/completions", "flood-" + i, 7, new IllegalStateException("the same bug"));
            now[0] += TimeUnit.SECONDS.toNanos(1);
            Router.unexpected(errors, "/v1/completions", "flood-4", 7, new IllegalStateException("the same bug"));
        } finally {
            System.setErr(err);
        }
        String log = logged.toString(StandardCharsets.UTF_8);
        err.print(log);
        assertTrue(log.lines().anyMatch(l -> l.contains("ERROR io.kvferry.engine.http.Router - request failed: request_id=flood-1 ")), log);
        assertTrue(!log.contains("request_id=flood-2") && !log.contains("request_id=flood-3"), "at DEBUG: " + log);
        String fourth = log.lines().filter(l -> l.contains("request_id=flood-4")).findFirst().orElseThrow(() -> new AssertionError(log));
        assertTrue(fourth.contains("ERROR") && fourth.endsWith("reason=java.lang.IllegalStateException: the same bug"
                + " (and 2 more unexpected exceptions' 500s, logged at debug)"), fourth);
        assertEquals(2, log.lines().filter(l -> l.equals("java.lang.IllegalStateException: the same bug")).count(), "two traces: " + log);
    }

    /**
     * The 500's stack trace is logged only when no line of it holds a control character (else at DEBUG): every cause's
     * (a ninth's too: only 8 were read) and every suppressed exception's message; a cause cycle ends the walk.
     */
    @Test
    void aTraceIsCleanOnlyWhenEveryLineOfItIs() {
        Exception chain = new IllegalStateException("forged\nrequest failed: request_id=someone-else");
        for (int i = 0; i < 9; i++) chain = new RuntimeException("wrapper " + i, chain);
        assertFalse(Router.clean(chain), "a ninth cause's newline");
        Exception outer = new RuntimeException("outer");
        outer.addSuppressed(new IllegalStateException("a\rb"));
        assertFalse(Router.clean(outer), "a suppressed exception's carriage return");
        assertTrue(Router.clean(new RuntimeException("plain", new IllegalStateException("cause"))));
        Exception a = new RuntimeException("a"), b = new RuntimeException("b", a);
        a.initCause(b);
        assertTrue(Router.clean(a), "a cycle of causes");
    }

    /** A registry whose time-to-first-token timer throws when it records: a bug's unchecked exception mid-request. */
    static MeterRegistry failingTtft() {
        return failingTtft(() -> new IllegalStateException("the metrics backend failed"));
    }

    /** As {@link #failingTtft()}, the timer throwing {@code bug}'s exception. */
    static MeterRegistry failingTtft(Supplier<RuntimeException> bug) {
        return new SimpleMeterRegistry() {
            @Override
            protected Timer newTimer(Meter.Id id, DistributionStatisticConfig config, PauseDetector pauses) {
                Timer real = super.newTimer(id, config, pauses);
                if (!id.getName().equals(RouterMeters.TTFT)) return real;
                return (Timer) Proxy.newProxyInstance(Timer.class.getClassLoader(), new Class<?>[]{Timer.class}, (proxy, m, args) -> {
                    if (m.getName().equals("record") && args != null && args.length == 2) throw bug.get();
                    try {
                        return m.invoke(real, args);
                    } catch (InvocationTargetException e) {
                        throw e.getCause();
                    }
                });
            }
        };
    }

    @Test
    @Timeout(60)
    void aMalformedHeaderIsA400NamingIt() throws Exception {
        for (String bad : new String[]{"has space", "x".repeat(129), "tab\there", "be\u0007ll"}) {
            String answer = raw("/v1/completions", COMPLETION, bad);
            assertTrue(answer.startsWith("HTTP/1.1 400"), bad + " -> " + answer);
            JsonNode e = JSON.readTree(answer.substring(answer.indexOf("\r\n\r\n") + 4)).path("error");
            assertEquals("invalid_request_error", e.path("type").asText(), answer);
            assertEquals("X-Request-Id", e.path("param").asText(), answer);
            assertTrue(e.path("message").asText().contains("1 to 128 characters"), answer);
        }
        assertTrue(decodeIds.isEmpty(), "nothing reached an engine");
    }

    /** One request sent as bytes (the JDK's client refuses a header value with a control character), its whole answer. */
    private String raw(String path, String body, String requestId) throws IOException {
        try (Socket s = new Socket("127.0.0.1", router.port())) {
            s.getOutputStream().write(("POST " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nX-Request-Id: "
                    + requestId + "\r\nContent-Length: " + body.length() + "\r\n\r\n" + body).getBytes(StandardCharsets.ISO_8859_1));
            BufferedReader in = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
            StringBuilder b = new StringBuilder();
            for (int c; (c = in.read()) >= 0; ) b.append((char) c);
            return b.toString();
        }
    }

    @Test
    @Timeout(60)
    void severalChoicesShareTheIdAndEachEngineCallNamesItsChoice() throws Exception {
        HttpResponse<String> r = post("/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":2,\"n\":3}", "multi");
        assertEquals(200, r.statusCode(), r.body());
        assertEquals("multi", idOf(r));
        JsonNode a = JSON.readTree(r.body());
        assertEquals("cmpl-multi", a.path("id").asText());
        assertEquals(3, a.path("choices").size(), r.body());
        assertEquals(Set.of("multi-0", "multi-1", "multi-2"), Set.copyOf(decodeIds));
        assertEquals(Set.of("multi-0", "multi-1", "multi-2"), Set.copyOf(prefillIds));
    }

    @Test
    @Timeout(60)
    void generatesRidIsTheRequestsIdAndMetaInfoId() throws Exception {
        HttpResponse<String> one = post("/generate", "{\"text\":\"Hi\",\"rid\":\"sg-1\"}", null);
        assertEquals(200, one.statusCode(), one.body());
        assertEquals("sg-1", idOf(one));
        assertEquals("sg-1", JSON.readTree(one.body()).path("meta_info").path("id").asText(), one.body());
        assertEquals(List.of("sg-1"), List.copyOf(decodeIds));
        // The same id in the header and rid is one id.
        assertEquals(200, post("/generate", "{\"text\":\"Hi\",\"rid\":\"sg-2\"}", "sg-2").statusCode());
        // Without rid: the header's, or the router's.
        JsonNode byHeader = JSON.readTree(post("/generate", "{\"text\":\"Hi\"}", "sg-3").body());
        assertEquals("sg-3", byHeader.path("meta_info").path("id").asText());
        HttpResponse<String> made = post("/generate", "{\"text\":\"Hi\"}", null);
        assertEquals(idOf(made), JSON.readTree(made.body()).path("meta_info").path("id").asText());

        decodeIds.clear();
        HttpResponse<String> batch = post("/generate", "{\"text\":[\"Hi\",\"Ho\"],\"rid\":[\"b-a\",\"b-b\"]}", "whole");
        assertEquals(200, batch.statusCode(), batch.body());
        assertEquals("whole", idOf(batch));
        JsonNode all = JSON.readTree(batch.body());
        assertEquals("b-a", all.path(0).path("meta_info").path("id").asText(), batch.body());
        assertEquals("b-b", all.path(1).path("meta_info").path("id").asText(), batch.body());
        assertEquals(Set.of("b-a", "b-b"), Set.copyOf(decodeIds));

        decodeIds.clear();
        HttpResponse<String> unnamed = post("/generate", "{\"text\":[\"Hi\",\"Ho\"]}", "bw");
        assertEquals("bw-0", JSON.readTree(unnamed.body()).path(0).path("meta_info").path("id").asText(), unnamed.body());
        assertEquals("bw-1", JSON.readTree(unnamed.body()).path(1).path("meta_info").path("id").asText(), unnamed.body());
        assertEquals(Set.of("bw-0", "bw-1"), Set.copyOf(decodeIds));
    }

    /**
     * A streamed {@code /generate}: every chunk carries SGLang's {@code meta_info} with the request's {@code id} (SGLang's does;
     * only the last one did), a token's chunk {@code finish_reason} null and the tokens so far, the last one its whole fields.
     */
    @Test
    @Timeout(60)
    void everyChunkOfAStreamedGenerateCarriesMetaInfoId() throws Exception {
        HttpResponse<String> r = post("/generate", "{\"text\":\"Hi\",\"rid\":\"sg-stream\",\"stream\":true}", null);
        assertEquals(200, r.statusCode(), r.body());
        assertEquals("sg-stream", idOf(r));
        List<JsonNode> chunks = events(r);
        assertEquals(2, chunks.size(), "the stub decode's one token, then the last chunk: " + r.body());
        for (JsonNode c : chunks) assertEquals("sg-stream", c.path("meta_info").path("id").asText(null), c.toString());
        JsonNode token = chunks.getFirst().path("meta_info");
        assertTrue(token.has("finish_reason") && token.get("finish_reason").isNull(), token.toString());
        assertEquals(1, token.path("completion_tokens").asInt(), token.toString());
        JsonNode last = chunks.getLast().path("meta_info");
        assertEquals(token.path("prompt_tokens").asInt(), last.path("prompt_tokens").asInt(), r.body());
        assertEquals("length", last.path("finish_reason").path("type").asText(), r.body());
        assertEquals(1, last.path("completion_tokens").asInt(), r.body());
        // Without rid: the header's id, on every chunk too.
        List<JsonNode> byHeader = events(post("/generate", "{\"text\":\"Hi\",\"stream\":true}", "sg-stream-2"));
        for (JsonNode c : byHeader) assertEquals("sg-stream-2", c.path("meta_info").path("id").asText(null), c.toString());
    }

    /**
     * A streamed {@code /generate}'s token chunks count the tokens so far ({@code completion_tokens} 1, 2, …: with one token
     * a counter stuck at 1 passed {@link #everyChunkOfAStreamedGenerateCarriesMetaInfoId}), the last chunk all of them.
     */
    @Test
    @Timeout(60)
    void aStreamedGeneratesChunksCountTheTokensSoFar() throws Exception {
        tokenEvent = "{\"token\":300}\n\ndata: {\"token\":301}"; // two token events
        HttpResponse<String> r = post("/generate", "{\"text\":\"Hi\",\"sampling_params\":{\"max_new_tokens\":2},\"stream\":true}", "sg-count");
        assertEquals(200, r.statusCode(), r.body());
        List<JsonNode> chunks = events(r);
        assertEquals(3, chunks.size(), "two tokens, then the last chunk: " + r.body());
        for (int i = 0; i < 2; i++) {
            JsonNode meta = chunks.get(i).path("meta_info");
            assertEquals(i + 1, meta.path("completion_tokens").asInt(-1), meta.toString());
            assertTrue(meta.get("finish_reason").isNull(), meta.toString());
            assertEquals("sg-count", meta.path("id").asText(), meta.toString());
        }
        assertEquals(2, chunks.getLast().path("meta_info").path("completion_tokens").asInt(), r.body());
    }

    @Test
    @Timeout(60)
    void aFieldsErrorCarriesTheRidOfItsRequest() throws Exception {
        // rid is the request's id from the moment the body is read: a 400 of another field (read after it) carries it,
        // not an id the router made, which the client never saw.
        HttpResponse<String> r = post("/generate", "{\"text\":\"Hi\",\"rid\":\"sg-bad\",\"sampling_params\":{\"max_new_tokens\":-1}}", null);
        assertEquals(400, r.statusCode(), r.body());
        assertEquals("sampling_params.max_new_tokens", JSON.readTree(r.body()).path("error").path("param").asText(), r.body());
        assertEquals("sg-bad", idOf(r));
        HttpResponse<String> batch = post("/generate", "{\"text\":[\"Hi\",\"Ho\"],\"rid\":[\"b-1\",\"b-1\"],\"sampling_params\":{\"max_new_tokens\":-1}}", null);
        assertEquals(400, batch.statusCode(), batch.body());
        assertEquals("rid[1]", JSON.readTree(batch.body()).path("error").path("param").asText(), "the request's ids are read first: " + batch.body());
        assertTrue(decodeIds.isEmpty(), "nothing reached an engine");
    }

    @Test
    @Timeout(60)
    void aBadRidIsA400NamingIt() throws Exception {
        String[][] cases = {
                {"{\"text\":\"Hi\",\"rid\":7}", "rid"},
                {"{\"text\":\"Hi\",\"rid\":[\"a\"]}", "rid"},
                {"{\"text\":\"Hi\",\"rid\":\"has space\"}", "rid"},
                {"{\"text\":\"Hi\",\"rid\":\"" + "x".repeat(129) + "\"}", "rid"},
                {"{\"text\":[\"Hi\",\"Ho\"],\"rid\":\"one\"}", "rid"},
                {"{\"text\":[\"Hi\",\"Ho\"],\"rid\":[\"a\"]}", "rid"},
                {"{\"text\":[\"Hi\",\"Ho\"],\"rid\":[\"a\",3]}", "rid[1]"},
                {"{\"text\":[\"Hi\",\"Ho\"],\"rid\":[\"a\",\"b\\nc\"]}", "rid[1]"},
                {"{\"text\":[\"Hi\",\"Ho\"],\"rid\":[\"a\",\"a\"]}", "rid[1]"},
        };
        for (String[] c : cases) {
            HttpResponse<String> r = post("/generate", c[0], null);
            assertEquals(400, r.statusCode(), c[0] + " -> " + r.body());
            assertEquals(c[1], JSON.readTree(r.body()).path("error").path("param").asText(), c[0] + " -> " + r.body());
        }
        HttpResponse<String> differ = post("/generate", "{\"text\":\"Hi\",\"rid\":\"one\"}", "other");
        assertEquals(400, differ.statusCode(), differ.body());
        assertEquals("rid", JSON.readTree(differ.body()).path("error").path("param").asText());
        assertEquals("other", idOf(differ), "the 400 carries the id the request had when it was refused");
        assertTrue(decodeIds.isEmpty(), "nothing reached an engine");
    }
}
