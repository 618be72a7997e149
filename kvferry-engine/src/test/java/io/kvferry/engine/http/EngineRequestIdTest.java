package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpServer;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.serving.EngineSpec;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Predicate;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Request ids at the engines ({@link RequestId}, {@link EngineRequests}), on a real prefill and decode of stories260K: each
 * {@code /generate} echoes the caller's {@code X-Request-Id} (or one it made), refuses a malformed one, and every line it
 * logs about a request's failure, refusal or abort names {@code request_id=ID room=N}, so one id is followed through the
 * router's, the prefill's and the decode's logs.
 */
class EngineRequestIdTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final HttpClient HTTP = HttpClient.newBuilder().executor(Executors.newVirtualThreadPerTaskExecutor()).build();
    static ModelFiles.Loaded model;
    /** A decode of 2 pages: a request of prompt + max_tokens over 32 tokens is refused there. */
    static EngineStack stack;
    static Router router;

    @BeforeAll
    static void start() throws Exception {
        model = ModelFiles.load(null, null);
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 64, 32);
        stack = EngineStack.open(spec, spec.withPages(2), "request-id-test", null);
        router = new Router(List.of(stack.prefillUrl()), List.of(stack.decodeUrl()), model.tokenizer(), model.weights().config.seqLen(),
                "m", "127.0.0.1", 0);
    }

    @AfterAll
    static void stop() {
        if (router != null) router.close();
        if (stack != null) stack.close();
    }

    static HttpResponse<String> post(String url, String body, String requestId) throws Exception {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(url)).header("Content-Type", "application/json");
        if (requestId != null) b.header("X-Request-Id", requestId);
        return HTTP.send(b.POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
    }

    /** A prefill call of the prompt alone (no decode takes its room). */
    static String prefillOnly(long room) {
        return "{\"bootstrap_room\":" + room + ",\"input_ids\":[1,2,3],\"prefill_only\":true}";
    }

    @Test
    @Timeout(60)
    void theEnginesEchoACallersIdAndMakeOneForACallerWithout() throws Exception {
        HttpResponse<String> given = post(stack.prefillUrl() + "/generate", prefillOnly(11), "direct-1");
        assertEquals(200, given.statusCode(), given.body());
        assertEquals("direct-1", given.headers().firstValue("X-Request-Id").orElse(null));
        HttpResponse<String> made = post(stack.prefillUrl() + "/generate", prefillOnly(12), null);
        assertEquals(200, made.statusCode(), made.body());
        assertTrue(made.headers().firstValue("X-Request-Id").orElse("").matches("[0-9a-f]{32}"), made.headers().toString());
        // The decode's refusal (too few pages) carries it too; a router's choice id (<id>-<index>) past 128 characters is taken.
        String longest = "x".repeat(RequestId.MAX_CHARS) + "-2147483647";
        HttpResponse<String> refused = post(stack.decodeUrl() + "/generate", "{\"bootstrap_room\":13,\"bootstrap_addr\":\"" + stack.addr
                + "\",\"input_ids\":[1,2,3],\"max_new_tokens\":100}", longest);
        assertEquals(400, refused.statusCode(), refused.body());
        assertEquals(longest, refused.headers().firstValue("X-Request-Id").orElse(null));
    }

    @Test
    @Timeout(60)
    void theEnginesRefuseAMalformedId() throws Exception {
        for (String url : new String[]{stack.prefillUrl(), stack.decodeUrl()}) {
            for (String bad : new String[]{"has space", "x".repeat(RequestId.ENGINE_MAX_CHARS + 1), "be\u0007ll"}) {
                String body = prefillOnly(21);
                String answer;
                URI u = URI.create(url);
                try (Socket s = new Socket(u.getHost(), u.getPort())) {
                    s.getOutputStream().write(("POST /generate HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nX-Request-Id: "
                            + bad + "\r\nContent-Length: " + body.length() + "\r\n\r\n" + body).getBytes(StandardCharsets.ISO_8859_1));
                    answer = new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
                }
                assertTrue(answer.startsWith("HTTP/1.1 400"), url + " " + bad + " -> " + answer);
                JsonNode e = JSON.readTree(answer.substring(answer.indexOf("\r\n\r\n") + 4)).path("error");
                assertEquals("X-Request-Id", e.path("param").asText(), answer);
            }
        }
    }

    /**
     * One id followed across the three: the decode refuses the request (too few pages) and the router aborts the room on
     * the prefill; the router's request line, the decode's refusal and the prefill's abort and failure each name the id
     * and the same room.
     */
    @Test
    @Timeout(90)
    void aFailedRequestsIdAndRoomAreInTheRoutersThePrefillsAndTheDecodesLines() throws Exception {
        String log = captured(() -> {
            HttpResponse<String> r = post("http://127.0.0.1:" + router.port() + "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":48}",
                    "trace-me-42");
            assertEquals(400, r.statusCode(), r.body());
            assertEquals("trace-me-42", r.headers().firstValue("X-Request-Id").orElse(null));
        }, l -> l.contains("role=prefill") && l.contains("request failed: request_id=trace-me-42"),
                l -> l.contains("request route=/v1/completions status=400 ") && l.contains("request_id=trace-me-42")); // the router logs after its answer
        String decodeLine = line(log, "request refused: request_id=trace-me-42 room=", "role=decode");
        Matcher m = Pattern.compile("room=(\\d+)").matcher(decodeLine);
        assertTrue(m.find(), decodeLine);
        String room = "room=" + m.group(1);
        assertTrue(decodeLine.contains("status=400") && decodeLine.contains("pages"), decodeLine);
        String prefillFailed = line(log, "request failed: request_id=trace-me-42 " + room, "role=prefill");
        assertTrue(prefillFailed.contains("kind=aborted"), prefillFailed);
        line(log, "request aborted: request_id=trace-me-42 " + room, "role=prefill by=abort");
        line(log, "request route=/v1/completions status=400 " + room + " ", "request_id=trace-me-42");
    }

    /** A direct {@code /abort} (no id of its own) is logged with the id of the request in flight on that room, and so is its failure. */
    @Test
    @Timeout(90)
    void anAbortNamesTheRequestInFlightOnItsRoom() throws Exception {
        String log = captured(() -> {
            // A prefill request whose decode never comes: it waits for its room's bootstrap until aborted.
            CompletableFuture<HttpResponse<String>> waiting = CompletableFuture.supplyAsync(() -> {
                try {
                    return post(stack.prefillUrl() + "/generate", "{\"bootstrap_room\":4242,\"input_ids\":[1,2,3]}", "waits-1");
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (stack.prefill.inFlight() == 0 && System.nanoTime() < until) Thread.sleep(10); // taken: its room is known
            assertEquals(200, post(stack.prefillUrl() + "/abort", "{\"bootstrap_room\":4242}", null).statusCode());
            HttpResponse<String> r = waiting.get(30, TimeUnit.SECONDS);
            assertEquals(500, r.statusCode(), r.body());
            assertEquals("waits-1", r.headers().firstValue("X-Request-Id").orElse(null));
        }, l -> l.contains("request failed: request_id=waits-1"));
        line(log, "request aborted: request_id=waits-1 room=4242 role=prefill by=abort", "");
        assertTrue(line(log, "request failed: request_id=waits-1 room=4242 role=prefill status=500", "").contains("kind=aborted"), log);
    }

    /**
     * An {@code /abort} of a room not in flight here is routine (the router aborts both halves when a stop string ends a
     * request, or its client leaves, after one of them is done; a client races its own end): DEBUG, not INFO. The line is
     * written before the abort's answer, so the answer says it would be there.
     */
    @Test
    @Timeout(60)
    void anAbortOfARoomNotInFlightIsNotLoggedAtInfo() throws Exception {
        String log = captured(() -> {
            HttpResponse<String> r = post(stack.prefillUrl() + "/abort", "{\"bootstrap_room\":777001}", "late-abort-1");
            assertEquals(200, r.statusCode(), r.body());
            assertEquals("late-abort-1", r.headers().firstValue("X-Request-Id").orElse(null));
        });
        assertTrue(log.lines().noneMatch(l -> l.contains("request_id=late-abort-1")), log);
    }

    /**
     * A 400 of a field, before the request's room is taken, is a {@code request refused} line naming the id, the role, the
     * field and what was wrong, the client's text escaped (one line): on a stack of its own, so no other test's refusal
     * came within the second its bound ({@link #fieldRefusalsAreLoggedAtInfoOnceASecond}) keeps to.
     */
    @Test
    @Timeout(90)
    void aRefusalOfAFieldIsLoggedWithTheRequestsId() throws Exception {
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 64, 32);
        try (EngineStack own = EngineStack.open(spec, spec, "field-refusal-test", null)) {
            String log = captured(() -> {
                HttpResponse<String> p = post(own.prefillUrl() + "/generate", "{\"bootstrap_room\":5,\"input_ids\":[1,2,3],\"return_logprob\":\"yes\"}", "bad-field-1");
                assertEquals(400, p.statusCode(), p.body());
                assertEquals("bad-field-1", p.headers().firstValue("X-Request-Id").orElse(null));
                HttpResponse<String> d = post(own.decodeUrl() + "/generate", "{\"bootstrap_room\":6,\"bootstrap_addr\":\"evil\\nrequest refused: forged\",\"input_ids\":[1]}",
                        "bad-field-2");
                assertEquals(400, d.statusCode(), d.body());
            }, l -> l.contains("request_id=bad-field-1"), l -> l.contains("request_id=bad-field-2"));
            String prefill = line(log, "request refused: request_id=bad-field-1 role=prefill status=400 param=return_logprob reason=", "");
            assertTrue(prefill.contains("return_logprob must be true or false"), prefill);
            String decode = line(log, "request refused: request_id=bad-field-2 role=decode status=400 param=- reason=", "");
            assertTrue(decode.contains("evil\\nrequest refused: forged"), "the client's newline escaped: " + decode);
            assertTrue(log.lines().noneMatch(l -> l.startsWith("request refused: forged")), log);
        }
    }

    /** Field refusals come as fast as a client sends them: one INFO line a second at most, the next one counting the others. */
    @Test
    @Timeout(30)
    void fieldRefusalsAreLoggedAtInfoOnceASecond() throws Exception {
        long[] now = {0};
        EngineRequests requests = new EngineRequests("prefill", () -> now[0]);
        String log = captured(() -> {
            requests.refusedField("flood-1", new Http.BadRequest("temperature", "temperature must be a number"));
            requests.refusedField("flood-2", new Http.BadRequest("temperature", "temperature must be a number"));
            requests.refusedField("flood-3", new Http.BadRequest("temperature", "temperature must be a number"));
            now[0] += TimeUnit.SECONDS.toNanos(1);
            requests.refusedField("flood-4", new Http.BadRequest("top_p", "top_p must be a number"));
        }, l -> l.contains("request_id=flood-4"));
        line(log, "INFO io.kvferry.engine.requests - request refused: request_id=flood-1 role=prefill status=400 param=temperature", "");
        assertTrue(!log.contains("request_id=flood-2") && !log.contains("request_id=flood-3"), "at DEBUG: " + log);
        line(log, "request refused: request_id=flood-4 role=prefill status=400 param=top_p", "(and 2 more requests refused for their fields, logged at debug)");
    }

    /**
     * An IllegalArgumentException a bug throws in an engine's route is no client's fault: a 500 internal_error, logged at
     * ERROR naming the request's id and role, with its stack trace (it was an unlogged 400 once: refusals are BadRequest).
     */
    @Test
    @Timeout(30)
    void aBugsIllegalArgumentExceptionIsA500LoggedAtError() throws Exception {
        EngineRequests requests = new EngineRequests("decode");
        HttpServer s = Http.server("127.0.0.1", 0);
        s.createContext("/generate", ex -> Http.handle(ex, requests.identified(e -> {
            e.getRequestBody().readAllBytes();
            throw new IllegalArgumentException("a bug's own argument check");
        })));
        s.start();
        try {
            AtomicReference<HttpResponse<String>> answer = new AtomicReference<>();
            String log = captured(() -> answer.set(post("http://127.0.0.1:" + s.getAddress().getPort() + "/generate", "{}", "engine-bug-1")),
                    l -> l.contains("request_id=engine-bug-1"));
            HttpResponse<String> r = answer.get();
            assertEquals(500, r.statusCode(), r.body());
            JsonNode e = JSON.readTree(r.body()).path("error");
            assertEquals("internal_error", e.path("type").asText(), r.body());
            assertEquals("a bug's own argument check", e.path("message").asText(), r.body());
            line(log, "ERROR io.kvferry.engine.requests - request failed: request_id=engine-bug-1 role=decode status=500 kind=internal_error",
                    "reason=java.lang.IllegalArgumentException: a bug's own argument check");
            assertTrue(log.contains("\tat io.kvferry.engine.http."), "with its stack trace: " + log);
        } finally {
            Http.stop(s);
        }
    }

    /** A bug every request meets: one ERROR line with its trace a second at most, the next one counting the others. */
    @Test
    @Timeout(30)
    void unexpectedExceptionsAreLoggedAtErrorOnceASecond() throws Exception {
        long[] now = {0};
        EngineRequests requests = new EngineRequests("prefill", () -> now[0]);
        String log = captured(() -> {
            for (int i = 1; i <= 3; i++) requests.unexpected("bug-" + i, new IllegalStateException("the same bug"));
            now[0] += TimeUnit.SECONDS.toNanos(1);
            requests.unexpected("bug-4", new IllegalStateException("the same bug"));
        }, l -> l.contains("request_id=bug-4"));
        line(log, "ERROR io.kvferry.engine.requests - request failed: request_id=bug-1 role=prefill status=500", "");
        assertTrue(!log.contains("request_id=bug-2") && !log.contains("request_id=bug-3"), "at DEBUG: " + log);
        line(log, "ERROR io.kvferry.engine.requests - request failed: request_id=bug-4 role=prefill status=500",
                "(and 2 more unexpected exceptions' 500s, logged at debug)");
        assertEquals(2, log.lines().filter(l -> l.equals("java.lang.IllegalStateException: the same bug")).count(), "two traces: " + log);
    }

    private interface Run {
        void run() throws Exception;
    }

    /**
     * What slf4j-simple wrote while {@code run} ran and until a line matching each of {@code awaited} came (20 s at most):
     * a process may write its line after its answer (the router's request line), so the answer alone does not say it is there.
     */
    @SafeVarargs
    private static String captured(Run run, Predicate<String>... awaited) throws Exception {
        PrintStream err = System.err;
        ByteArrayOutputStream logged = new ByteArrayOutputStream();
        System.setErr(new PrintStream(logged, true, StandardCharsets.UTF_8)); // slf4j-simple writes to System.err as it is now
        try {
            run.run();
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (!allLogged(logged.toString(StandardCharsets.UTF_8), awaited) && System.nanoTime() < until) {
                Thread.sleep(10);
            }
        } finally {
            System.setErr(err);
            err.print(logged.toString(StandardCharsets.UTF_8)); // in the test's output, whatever came of it
        }
        return logged.toString(StandardCharsets.UTF_8);
    }

    private static boolean allLogged(String log, Predicate<String>[] awaited) {
        for (Predicate<String> line : awaited) {
            if (log.lines().noneMatch(line)) return false;
        }
        return true;
    }

    /** The one log line holding {@code start} and {@code also}; fails naming the log when there is none. */
    private static String line(String log, String start, String also) throws IOException {
        return log.lines().filter(l -> l.contains(start) && l.contains(also)).findFirst()
                .orElseThrow(() -> new AssertionError("no line with '" + start + "' and '" + also + "' in:\n" + log));
    }
}
