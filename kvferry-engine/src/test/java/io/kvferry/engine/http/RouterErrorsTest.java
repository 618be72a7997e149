package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpServer;
import io.kvferry.engine.model.JsonSchemaAutomaton;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.engine.serving.EngineSpec;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * How the router reports what its backends answered: their client errors pass through; one failed exchange,
 * a connect that timed out or one slow health check is not an outage; a refused connection is.
 */
class RouterErrorsTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final HttpClient http = HttpClient.newBuilder().executor(Executors.newVirtualThreadPerTaskExecutor()).build();

    static HttpResponse<String> send(int port, String path, String body) throws Exception {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path));
        return http.send(body == null ? b.GET().build() : b.POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
    }

    /** A prefill that refuses a request (a client error: too few pages for this prompt) makes the router answer a 4xx with its message, not a 500. */
    @Test
    @Timeout(90)
    void aPrefillsClientErrorReachesTheClientAsA400() throws Exception {
        ModelFiles.Loaded model = ModelFiles.load(null, null);
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 64, 32);
        try (EngineStack stack = EngineStack.open(spec.withPages(4), spec, "errors-test", null);
             Router router = new Router(List.of(stack.prefillUrl()), List.of(stack.decodeUrl()), model.tokenizer(),
                     model.weights().config.seqLen(), "m", "127.0.0.1", 0)) {
            String prompt = "Once upon a time there was a little girl named Lily. She loved to play outside in the park. ".repeat(3);
            HttpResponse<String> r = send(router.port(), "/v1/completions", "{\"prompt\":\"" + prompt + "\",\"max_tokens\":5}");
            assertEquals(400, r.statusCode(), r.body());
            JsonNode e = JSON.readTree(r.body()).path("error");
            assertEquals("invalid_request_error", e.path("type").asText(), r.body());
            assertTrue(e.path("code").isNull(), "code is a string or null, as OpenAI's clients read it: " + r.body());
            assertTrue(e.path("message").asText().contains("pages"), r.body());
            // A prompt that fits still runs.
            assertEquals(200, send(router.port(), "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":3}").statusCode());
        }
    }

    /**
     * A decode that refuses a request (400: too few pages for prompt + max_tokens) is the client's answer: the
     * router aborts the prefill then, and that abort's 500 ("Aborted by AbortReq.") must not replace the 400.
     */
    @Test
    @Timeout(90)
    void aDecodesClientErrorReachesTheClientAsA400() throws Exception {
        ModelFiles.Loaded model = ModelFiles.load(null, null);
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 64, 32);
        SimpleMeterRegistry meters = new SimpleMeterRegistry();
        try (EngineStack stack = EngineStack.open(spec, spec.withPages(2), "errors-test", null);
             Router router = new Router(List.of(stack.prefillUrl()), List.of(stack.decodeUrl()), model.tokenizer(),
                     model.weights().config.seqLen(), "m", "127.0.0.1", 0, Router.Access.NONE, meters)) {
            for (int i = 0; i < 3; i++) { // the prefill's abort races the decode's answer: every time the 400
                HttpResponse<String> r = send(router.port(), "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":48}");
                assertEquals(400, r.statusCode(), r.body());
                JsonNode e = JSON.readTree(r.body()).path("error");
                assertEquals("invalid_request_error", e.path("type").asText(), r.body());
                assertEquals("the request needs 4 pages (prompt + max_tokens); this decode has 2", e.path("message").asText(), r.body());
            }
            // A request that fits still runs.
            assertEquals(200, send(router.port(), "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":3}").statusCode());
            // Each counted with its own status: the failures' status was kept where every later request of the route
            // read it (the JDK server's exchange attributes are per route), so the 200 was counted as a 400.
            assertEquals(3, requests(meters, "/v1/completions", 400, 3));
            assertEquals(1, requests(meters, "/v1/completions", 200, 1));
        }
    }

    static double requests(SimpleMeterRegistry m, String route, int status) {
        Counter c = m.find(RouterMeters.REQUESTS).tags("route", route, "status", Integer.toString(status)).counter();
        return c == null ? 0 : c.count();
    }

    /**
     * The count of a route's requests answered with {@code status}, read once it is {@code expected} or after 10 s:
     * the router counts a request when its exchange is over, which is just after its client has the whole answer.
     */
    static double requests(SimpleMeterRegistry m, String route, int status, double expected) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        double n;
        while ((n = requests(m, route, status)) != expected && System.nanoTime() < deadline) Thread.sleep(10);
        return n;
    }

    /** The stub answers /health as a healthy prefill (with a registry address) would. */
    static void answerHealthy(HttpServer stub) {
        stub.createContext("/health", ex -> {
            byte[] b = "{\"status\":\"ok\",\"bootstrap\":\"127.0.0.1:1\"}".getBytes(StandardCharsets.UTF_8);
            ex.sendResponseHeaders(200, b.length);
            ex.getResponseBody().write(b);
            ex.close();
        });
    }

    /**
     * A prompt with a character the router's tokenizer cannot encode (a vocab without the byte-fallback token it needs: here
     * of 100 pieces, bytes up to 0x60 only) is the client's fault, a 400 naming the field on each route that encodes one
     * (/v1/completions, /v1/chat/completions, /tokenize), not a 500: the tokenizer says so with an IllegalArgumentException,
     * which a route no longer answers 400 by itself.
     */
    @Test
    @Timeout(60)
    void aPromptTheTokenizerCannotEncodeIsA400NamingTheField(@TempDir Path dir) throws Exception {
        Tokenizer tokenizer = withoutHighByteTokens(dir.resolve("tokenizer.bin"));
        HttpServer stub = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        answerHealthy(stub);
        stub.start();
        String url = "http://127.0.0.1:" + stub.getAddress().getPort();
        String cannot = "cannot encode byte 0xc3: vocab of 100 has no byte-fallback token 198";
        try (Router router = new Router(List.of(url), List.of(url), tokenizer, 512, "m", "127.0.0.1", 0)) {
            for (String[] c : new String[][]{{"/v1/completions", "{\"prompt\":\"AB\u00e9\",\"max_tokens\":3}", "prompt"},
                    {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"AB\u00e9\"}],\"max_tokens\":3}", "messages"},
                    {"/generate", "{\"text\":\"AB\u00e9\",\"sampling_params\":{\"max_new_tokens\":3}}", "text"},
                    {"/tokenize", "{\"prompt\":\"AB\u00e9\"}", "prompt"}}) {
                HttpResponse<String> r = send(router.port(), c[0], c[1]);
                assertEquals(400, r.statusCode(), c[0] + " -> " + r.body());
                JsonNode e = JSON.readTree(r.body()).path("error");
                assertEquals("invalid_request_error", e.path("type").asText(), c[0] + " -> " + r.body());
                assertEquals(c[2], e.path("param").asText(), c[0] + " -> " + r.body());
                // The chat's text is its template's too: its first byte without a token (a lowercase letter's) is named.
                if (c[2].equals("messages")) assertTrue(e.path("message").asText().matches("cannot encode byte 0x[0-9a-f]{2}: vocab of 100 has.*"), r.body());
                else assertEquals(cannot, e.path("message").asText(), c[0] + " -> " + r.body());
            }
        } finally {
            stub.stop(0);
        }
    }

    /**
     * A tokenizer (written to {@code file}) of 100 pieces: llama2.c's three specials and the byte tokens of 0x00 to 0x60
     * only, so a lowercase letter or any byte past it has no byte-fallback token: its encode refuses them ("cannot encode
     * byte 0x..").
     */
    static Tokenizer withoutHighByteTokens(Path file) throws IOException {
        ByteBuffer buf = ByteBuffer.allocate(4096).order(ByteOrder.LITTLE_ENDIAN).putInt(6);
        List<String> pieces = new ArrayList<>(List.of("<unk>", "\n<s>\n", "\n</s>\n"));
        for (int b = 0; b < 0x61; b++) pieces.add(String.format("<0x%02X>", b));
        for (String piece : pieces) buf.putFloat(0f).putInt(piece.length()).put(piece.getBytes(StandardCharsets.ISO_8859_1));
        Files.write(file, Arrays.copyOf(buf.array(), buf.position()));
        return Tokenizer.load(file, pieces.size());
    }

    /**
     * A number whose exponent is past an int's ({@code 1e-2147483649}, {@code 1e9999999999999}) is no BigDecimal: Jackson reads the body's decimals as
     * BigDecimals and throws a NumberFormatException, an IllegalArgumentException that Http.handle answers 500 where no
     * route converts it. It is the client's malformed JSON: a 400 on every route that reads a body (the router's, and an
     * engine's, which reads it with the same {@link Http#readJson}), and a 400 naming the field for a schema sent as JSON
     * text ({@code guided_json}, {@code structured_outputs.json}).
     */
    @Test
    @Timeout(60)
    void aNumberNoBigDecimalHoldsIsA400NotA500() throws Exception {
        HttpServer stub = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        answerHealthy(stub);
        stub.start();
        String url = "http://127.0.0.1:" + stub.getAddress().getPort();
        try (Router router = new Router(List.of(url), List.of(url), ModelFiles.load(null, null).tokenizer(), 512, "m", "127.0.0.1", 0)) {
            for (String huge : List.of("1e9999999999999", "-1e-9999999999", "1e-2147483649", "0e99999999999999999999")) {
                for (String[] c : new String[][]{{"/v1/completions", "{\"prompt\":\"A\",\"max_tokens\":3,\"temperature\":" + huge + "}"},
                        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"A\"}],\"top_p\":" + huge + "}"},
                        {"/generate", "{\"text\":\"A\",\"sampling_params\":{\"max_new_tokens\":" + huge + "}}"},
                        {"/tokenize", "{\"prompt\":\"A\",\"x\":[" + huge + "]}"}}) {
                    HttpResponse<String> r = send(router.port(), c[0], c[1]);
                    assertEquals(400, r.statusCode(), c[0] + " " + huge + " -> " + r.body());
                    JsonNode e = JSON.readTree(r.body()).path("error");
                    assertEquals("invalid_request_error", e.path("type").asText(), r.body());
                    assertTrue(e.path("message").asText().startsWith("malformed JSON: "), r.body());
                    assertTrue(e.path("message").asText().contains(huge.substring(1)), r.body());
                }
                String schema = "\"{\\\"type\\\":\\\"number\\\",\\\"maximum\\\":" + huge + "}\"";
                for (String[] c : new String[][]{{"guided_json", "\"guided_json\":" + schema},
                        {"structured_outputs.json", "\"structured_outputs\":{\"json\":" + schema + "}"}}) {
                    HttpResponse<String> r = send(router.port(), "/v1/completions", "{\"prompt\":\"A\",\"max_tokens\":3," + c[1] + "}");
                    assertEquals(400, r.statusCode(), c[0] + " " + huge + " -> " + r.body());
                    JsonNode e = JSON.readTree(r.body()).path("error");
                    assertEquals(c[0], e.path("param").asText(), r.body());
                    assertTrue(e.path("message").asText().startsWith(c[0] + " is not valid JSON: "), r.body());
                }
            }
        } finally {
            stub.stop(0);
        }
        // An engine's body: the same reader.
        Http.BadRequest engine = assertThrows(Http.BadRequest.class,
                () -> Http.parseObject("{\"bootstrap_room\":1,\"input_ids\":[1],\"max_new_tokens\":1e-2147483649}".getBytes(StandardCharsets.UTF_8)));
        assertTrue(engine.getMessage().startsWith("malformed JSON: "), engine.getMessage());
    }

    /**
     * A schema's bound or multipleOf whose exponent is near an int's end (1e2147483647, 1e2147483648, 10e2147483648: a
     * BigDecimal's scale at Integer.MIN_VALUE or next to it) is past the 100 digits a bound may have: a 400 naming the
     * field. The digit check's {@code precision() - scale()} overflowed an int and let it through, and the automaton's
     * arithmetic then threw ArithmeticException "Underflow": a 500 (or a bound printed in full: gigabytes). A zero of such
     * an exponent is 0.
     */
    @Test
    @Timeout(60)
    void aSchemaBoundWhoseExponentOverflowsTheDigitCheckIsA400() throws Exception {
        HttpServer stub = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        answerHealthy(stub);
        stub.start();
        String url = "http://127.0.0.1:" + stub.getAddress().getPort();
        try (Router router = new Router(List.of(url), List.of(url), ModelFiles.load(null, null).tokenizer(), 512, "m", "127.0.0.1", 0)) {
            for (String huge : List.of("1e2147483647", "1e2147483648", "10e2147483648", "-1e2147483648")) {
                for (String[] c : new String[][]{
                        {"/v1/completions", "{\"prompt\":\"A\",\"guided_json\":{\"type\":\"number\",\"maximum\":" + huge + "}}", "guided_json"},
                        {"/v1/completions", "{\"prompt\":\"A\",\"guided_json\":{\"type\":\"integer\",\"exclusiveMinimum\":" + huge + "}}", "guided_json"},
                        {"/v1/completions", "{\"prompt\":\"A\",\"guided_json\":{\"type\":\"number\",\"multipleOf\":" + huge.replace("-", "") + "}}", "guided_json"},
                        {"/v1/completions", "{\"prompt\":\"A\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\","
                                + "\"schema\":{\"type\":\"number\",\"minimum\":" + huge + "}}}}", "response_format.json_schema.schema"},
                        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"A\"}],\"tools\":[{\"type\":\"function\",\"function\":"
                                + "{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\",\"maximum\":" + huge + "}}}}}]}",
                                "tools[0].function.parameters.properties.a"}}) {
                    HttpResponse<String> r = send(router.port(), c[0], c[1]);
                    assertEquals(400, r.statusCode(), c[1] + " -> " + r.body());
                    JsonNode e = JSON.readTree(r.body()).path("error");
                    assertEquals(c[2], e.path("param").asText(), r.body());
                    assertTrue(e.path("message").asText().contains("at most 100 digits before and after the point are supported"), r.body());
                }
            }
            // A zero is a bound whatever its exponent (its scale no digit of it), served as 0: not printed with two billion zeros.
            for (String zero : List.of("0e-2147483647", "0e2147483648")) {
                HttpResponse<String> r = send(router.port(), "/v1/completions", "{\"prompt\":\"A\",\"guided_json\":{\"type\":\"number\",\"minimum\":1,"
                        + "\"maximum\":" + zero + "}}");
                assertEquals(400, r.statusCode(), zero + " -> " + r.body());
                assertEquals("guided_json: the JSON schema has a range at # that no number is in: [1, 0]", JSON.readTree(r.body()).path("error").path("message").asText(),
                        r.body());
            }
        } finally {
            stub.stop(0);
        }
    }

    /**
     * A grammar of groups nested thousands deep ({@code root ::= ((((… "x" …))))}) is a 400 naming the field: the
     * grammar parser descended once per group and overflowed its stack, a StackOverflowError that dropped the
     * connection with no answer at all. Groups may nest 256 deep, as a regex's.
     */
    @Test
    @Timeout(60)
    void aGrammarOfGroupsNestedThousandsDeepIsA400() throws Exception {
        HttpServer stub = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        answerHealthy(stub);
        stub.start();
        String url = "http://127.0.0.1:" + stub.getAddress().getPort();
        try (Router router = new Router(List.of(url), List.of(url), ModelFiles.load(null, null).tokenizer(), 512, "m", "127.0.0.1", 0)) {
            String grammar = JSON.writeValueAsString("root ::= " + "(".repeat(20_000) + "\"x\"" + ")".repeat(20_000));
            for (String[] c : new String[][]{
                    {"/v1/completions", "{\"prompt\":\"A\",\"guided_grammar\":" + grammar + "}", "guided_grammar"},
                    {"/v1/completions", "{\"prompt\":\"A\",\"structured_outputs\":{\"grammar\":" + grammar + "}}", "structured_outputs.grammar"},
                    {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"A\"}],\"guided_grammar\":" + grammar + "}", "guided_grammar"}}) {
                HttpResponse<String> r = send(router.port(), c[0], c[1]);
                assertEquals(400, r.statusCode(), c[0] + " " + c[2] + " -> " + r.body());
                JsonNode e = JSON.readTree(r.body()).path("error");
                assertEquals(c[2], e.path("param").asText(), r.body());
                assertEquals(c[2] + ": the grammar has groups '(' nested deeper than 256 at line 1, column 266", e.path("message").asText(), r.body());
            }
        } finally {
            stub.stop(0);
        }
    }

    /**
     * A chain of thousands of $refs (each definition naming the next: a few bytes each, flat in the document, so Jackson's
     * nesting limit never sees it) overflowed the schema compiler's stack and the client got no answer at all. A chain
     * within the bound still compiles, to the last definition's language.
     */
    @Test
    @Timeout(60)
    void aSchemaOfThousandsOfChainedRefsIsA400() throws Exception {
        HttpServer stub = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        answerHealthy(stub);
        stub.start();
        String url = "http://127.0.0.1:" + stub.getAddress().getPort();
        try (Router router = new Router(List.of(url), List.of(url), ModelFiles.load(null, null).tokenizer(), 512, "m", "127.0.0.1", 0)) {
            for (int links : new int[]{3_000, JsonSchemaAutomaton.MAX_BUILD_DEPTH}) {
                StringBuilder defs = new StringBuilder();
                for (int i = 0; i < links; i++) defs.append("\"d").append(i).append("\":{\"$ref\":\"#/$defs/d").append(i + 1).append("\"},");
                String schema = "{\"$defs\":{" + defs + "\"d" + links + "\":{\"type\":\"integer\"}},\"$ref\":\"#/$defs/d0\"}";
                for (String[] c : new String[][]{
                        {"/v1/completions", "{\"prompt\":\"A\",\"guided_json\":" + schema + "}", "guided_json"},
                        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"A\"}],\"response_format\":{\"type\":\"json_schema\","
                                + "\"json_schema\":{\"name\":\"n\",\"schema\":" + schema + "}}}", "response_format.json_schema.schema"}}) {
                    HttpResponse<String> r = send(router.port(), c[0], c[1]);
                    assertEquals(400, r.statusCode(), links + " " + c[0] + " -> " + r.body());
                    JsonNode e = JSON.readTree(r.body()).path("error");
                    assertTrue(e.path("param").asText().startsWith(c[2] + ".$defs.d"), r.body()); // where the chain passed the bound
                    assertTrue(e.path("message").asText().contains("nests schemas over " + JsonSchemaAutomaton.MAX_BUILD_DEPTH + " deep"), r.body());
                }
            }
        } finally {
            stub.stop(0);
        }
        StringBuilder defs = new StringBuilder();
        int within = JsonSchemaAutomaton.MAX_BUILD_DEPTH - 2;
        for (int i = 0; i < within; i++) defs.append("\"d").append(i).append("\":{\"$ref\":\"#/$defs/d").append(i + 1).append("\"},");
        var a = JsonSchemaAutomaton.compile("{\"$defs\":{" + defs + "\"d" + within + "\":{\"type\":\"integer\"}},\"$ref\":\"#/$defs/d0\"}");
        assertTrue(a.run("42") && !a.run("\"x\""), "a chain of " + within + " $refs is the integers");
    }

    /**
     * A backend that fails one exchange (here it drops the connection without an answer) fails that
     * request with a 502, but stays in rotation: only a refused connection or its health checks take it out.
     */
    @Test
    @Timeout(60)
    void oneFailedExchangeDoesNotMarkTheBackendDown() throws Exception {
        HttpServer stub = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        answerHealthy(stub);
        stub.createContext("/generate", ex -> {
            throw new IllegalStateException("the stub drops this exchange"); // the JDK server closes the connection unanswered
        });
        stub.createContext("/abort", ex -> {
            ex.sendResponseHeaders(200, -1);
            ex.close();
        });
        stub.start();
        String url = "http://127.0.0.1:" + stub.getAddress().getPort();
        try (Router router = new Router(List.of(url), List.of(url), ModelFiles.load(null, null).tokenizer(), 512, "m", "127.0.0.1", 0)) {
            HttpResponse<String> r = send(router.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3}");
            assertEquals(502, r.statusCode(), r.body());
            HttpResponse<String> h = send(router.port(), "/health", null);
            assertEquals(200, h.statusCode(), "one failed exchange took a backend out of rotation: " + h.body());
            assertEquals(1, JSON.readTree(h.body()).path("healthy_decodes").asInt(), h.body());
        } finally {
            stub.stop(0);
        }
    }
    /**
     * With a limit of one request at once (a decode stub that holds its answer until released): one more,
     * with no time to wait, is answered 429 with Retry-After and never reaches a backend; with time, it waits
     * for the slot and is served once the first ends.
     */
    @Test
    @Timeout(60)
    void requestsOverTheAdmissionLimitGet429OrWaitForTheSlot() throws Exception {
        HttpServer prefill = prefillStub();
        HttpServer decode = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        answerHealthy(decode);
        AtomicInteger decodeCalls = new AtomicInteger();
        AtomicReference<CountDownLatch> entered = new AtomicReference<>(), release = new AtomicReference<>();
        decode.setExecutor(Executors.newVirtualThreadPerTaskExecutor());
        decode.createContext("/generate", ex -> {
            decodeCalls.incrementAndGet();
            ex.getRequestBody().readAllBytes();
            entered.get().countDown();
            try {
                release.get().await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            ex.sendResponseHeaders(200, 0);
            ex.getResponseBody().write("data: {\"token\":300}\n\ndata: {\"finish_reason\":\"length\"}\n\n".getBytes(StandardCharsets.UTF_8));
            ex.close();
        });
        decode.start();
        String body = "{\"prompt\":\"Hi\",\"max_tokens\":1}";
        try {
            for (Duration wait : new Duration[]{Duration.ZERO, Duration.ofSeconds(30)}) {
                decodeCalls.set(0);
                entered.set(new CountDownLatch(1));
                release.set(new CountDownLatch(1));
                SimpleMeterRegistry meters = new SimpleMeterRegistry();
                try (Router router = new Router(List.of(url(prefill)), List.of(url(decode)), ModelFiles.load(null, null).tokenizer(), 512, "m",
                        "127.0.0.1", 0, Router.Access.NONE, new Router.Admission(1, wait), meters)) {
                    Counter refused = meters.find(RouterMeters.ADMISSION_REFUSED).tags("limit", RouterMeters.LIMIT_ROUTER).counter();
                    assertNotNull(refused, "its series is there from the start");
                    assertNull(meters.find(RouterMeters.ADMISSION_REFUSED).tagKeys("tenant").counter(), "no tenant tag without tenants");
                    CompletableFuture<HttpResponse<String>> first = http.sendAsync(HttpRequest.newBuilder(URI.create("http://127.0.0.1:"
                            + router.port() + "/v1/completions")).POST(HttpRequest.BodyPublishers.ofString(body)).build(),
                            HttpResponse.BodyHandlers.ofString());
                    assertTrue(entered.get().await(30, TimeUnit.SECONDS), "the first request reached the decode");
                    if (wait.isZero()) {
                        HttpResponse<String> second = send(router.port(), "/v1/completions", body);
                        assertEquals(429, second.statusCode(), second.body());
                        assertEquals("1", second.headers().firstValue("Retry-After").orElse(null), second.body());
                        JsonNode e = JSON.readTree(second.body()).path("error");
                        assertEquals("rate_limit_error", e.path("type").asText(), second.body());
                        assertTrue(e.path("message").asText().contains("its limit of 1 requests at once (--max-concurrent-requests)"), second.body());
                        assertEquals(1, decodeCalls.get(), "the refused request reached no backend");
                        assertEquals(1, refused.count(), "counted on /metrics");
                        // A request of several choices (n) or prompts (a batch): each choice is refused, the request once.
                        HttpResponse<String> several = send(router.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":1,\"n\":3}");
                        assertEquals(429, several.statusCode(), several.body());
                        HttpResponse<String> batch = send(router.port(), "/generate", "{\"text\":[\"Hi\",\"Ho\",\"Ha\"],"
                                + "\"sampling_params\":{\"max_new_tokens\":1}}");
                        assertEquals(429, batch.statusCode(), batch.body());
                        assertEquals(1, decodeCalls.get(), "the refused requests reached no backend");
                        assertEquals(3, refused.count(), "one per request refused, as its 429 answers: not one per choice or prompt");
                        release.get().countDown();
                    } else {
                        CompletableFuture<HttpResponse<String>> second = http.sendAsync(HttpRequest.newBuilder(URI.create("http://127.0.0.1:"
                                + router.port() + "/v1/completions")).POST(HttpRequest.BodyPublishers.ofString(body)).build(),
                                HttpResponse.BodyHandlers.ofString());
                        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                        while (router.waitingForAdmission() == 0 && System.nanoTime() < deadline) Thread.sleep(2);
                        assertEquals(1, router.waitingForAdmission(), "the second waits for the slot");
                        assertEquals(1, decodeCalls.get(), "...not at the decode");
                        release.get().countDown();
                        HttpResponse<String> r = second.get(30, TimeUnit.SECONDS);
                        assertEquals(200, r.statusCode(), "served once the first ended: " + r.body());
                        assertEquals(2, decodeCalls.get());
                        assertEquals(0, refused.count(), "a request that waited and was served is not refused");
                    }
                    assertEquals(200, first.get(30, TimeUnit.SECONDS).statusCode());
                    assertEquals(200, send(router.port(), "/v1/completions", body).statusCode(), "the slot is free again");
                }
            }
        } finally {
            release.get().countDown();
            decode.stop(0);
            prefill.stop(0);
        }
    }

    /**
     * A decode that fails mid-stream: the client gets the text so far, the error as an event, then
     * {@code [DONE]}, on both routes, as vLLM and SGLang end a failed stream (clients read to it).
     */
    @Test
    @Timeout(60)
    void aStreamThatFailsMidWayEndsWithItsErrorThenDone() throws Exception {
        HttpServer prefill = prefillStub();
        HttpServer decode = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        answerHealthy(decode);
        decode.createContext("/generate", ex -> {
            ex.getResponseHeaders().add("Content-Type", "text/event-stream");
            ex.sendResponseHeaders(200, 0);
            ex.getResponseBody().write(("data: {\"token\":300}\n\n"
                    + "data: {\"error\":{\"type\":\"internal_error\",\"kind\":\"peer_lost\",\"message\":\"the decode lost its prefill\"}}\n\n")
                    .getBytes(StandardCharsets.UTF_8));
            ex.close();
        });
        decode.createContext("/abort", ex -> {
            ex.sendResponseHeaders(200, -1);
            ex.close();
        });
        decode.start();
        try (Router router = new Router(List.of(url(prefill)), List.of(url(decode)), ModelFiles.load(null, null).tokenizer(), 512, "m",
                "127.0.0.1", 0)) {
            String[][] routes = {{"/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3,\"stream\":true}"},
                {"/generate", "{\"text\":\"Hi\",\"sampling_params\":{\"max_new_tokens\":3},\"stream\":true}"}};
            for (String[] route : routes) {
                HttpResponse<String> r = send(router.port(), route[0], route[1]);
                assertEquals(200, r.statusCode(), route[0] + ": " + r.body());
                List<String> data = r.body().lines().filter(l -> l.startsWith("data: ")).map(l -> l.substring(6)).toList();
                assertTrue(data.size() >= 3, route[0] + ": " + r.body());
                assertEquals("[DONE]", data.getLast(), route[0] + ": a failed stream ends with [DONE]: " + r.body());
                JsonNode error = JSON.readTree(data.get(data.size() - 2)).path("error");
                assertTrue(error.path("message").asText().contains("the decode lost its prefill"), route[0] + ": " + r.body());
            }
        } finally {
            decode.stop(0);
            prefill.stop(0);
        }
    }

    /**
     * A prefill that fails after the decode's first token reached the client (a prefill process killed once its KV
     * landed, before its answer reached the router): the decode needs it no more, and the stream goes on to its end.
     * Before, the router aborted the decode whenever the prefill's call failed, and the client's answer ended with the
     * decode's "Aborted by AbortReq." (a clean-clone CI run of ServeCommandTest#killingAPrefill… met it).
     */
    @Test
    @Timeout(60)
    void aPrefillThatFailsAfterTheFirstTokenEndsNothing() throws Exception {
        CountDownLatch clientHasToken = new CountDownLatch(1), prefillFailed = new CountDownLatch(1), aborted = new CountDownLatch(1);
        HttpServer prefill = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        answerHealthy(prefill);
        prefill.createContext("/generate", ex -> {
            ex.getRequestBody().readAllBytes();
            try {
                clientHasToken.await(30, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            byte[] b = "{\"error\":{\"type\":\"internal_error\",\"message\":\"the prefill fell over\"}}".getBytes(StandardCharsets.UTF_8);
            ex.sendResponseHeaders(500, b.length);
            ex.getResponseBody().write(b);
            ex.close();
            prefillFailed.countDown();
        });
        prefill.createContext("/abort", ex -> {
            ex.sendResponseHeaders(200, -1);
            ex.close();
        });
        prefill.start();
        HttpServer decode = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        answerHealthy(decode);
        decode.createContext("/generate", ex -> {
            ex.getRequestBody().readAllBytes();
            ex.getResponseHeaders().add("Content-Type", "text/event-stream");
            ex.sendResponseHeaders(200, 0);
            OutputStream o = ex.getResponseBody();
            o.write("data: {\"token\":300}\n\n".getBytes(StandardCharsets.UTF_8));
            o.flush();
            boolean abortCame = false;
            try {
                prefillFailed.await(30, TimeUnit.SECONDS);
                abortCame = aborted.await(3, TimeUnit.SECONDS); // the router's abort, if it sends one, comes at once
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            o.write((abortCame ? "data: {\"error\":{\"type\":\"kv_transfer_error\",\"kind\":\"aborted\",\"message\":\"Aborted by AbortReq.\"}}\n\n"
                    : "data: {\"token\":301}\n\ndata: {\"finish_reason\":\"length\"}\n\n").getBytes(StandardCharsets.UTF_8));
            ex.close();
        });
        decode.createContext("/abort", ex -> {
            ex.getRequestBody().readAllBytes();
            aborted.countDown();
            ex.sendResponseHeaders(200, -1);
            ex.close();
        });
        decode.start();
        try (Router router = new Router(List.of(url(prefill)), List.of(url(decode)), ModelFiles.load(null, null).tokenizer(), 512, "m",
                "127.0.0.1", 0)) {
            HttpResponse<Stream<String>> r = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + router.port()
                    + "/v1/completions")).POST(HttpRequest.BodyPublishers.ofString("{\"prompt\":\"Hi\",\"max_tokens\":2,\"stream\":true}")).build(),
                    HttpResponse.BodyHandlers.ofLines());
            assertEquals(200, r.statusCode());
            List<String> data = new ArrayList<>();
            for (var it = r.body().iterator(); it.hasNext(); ) {
                String line = it.next();
                if (!line.startsWith("data: ")) continue;
                data.add(line.substring(6));
                clientHasToken.countDown(); // the client has the first token: now the prefill fails
            }
            assertEquals("[DONE]", data.getLast(), data.toString());
            assertTrue(data.stream().noneMatch(d -> d.contains("\"error\"")), "the stream went on to its end: " + data);
            assertEquals(1, aborted.getCount(), "the decode was not aborted: its KV had landed");
        } finally {
            decode.stop(0);
            prefill.stop(0);
        }
    }

    /**
     * A decode that dies mid-stream (its connection drops inside the chunked body, as when its process is
     * killed): the client of a stream gets the text so far, an error event naming the decode, then
     * {@code [DONE]}; a client that did not stream gets a 502 naming it. Before, the router's read failed
     * with an IOException the handler could only answer as a 500 after the stream had begun: the client's
     * stream just stopped, with no error and no [DONE].
     */
    @Test
    @Timeout(60)
    void aDecodeThatDiesMidStreamEndsTheStreamWithAnErrorThenDone() throws Exception {
        HttpServer prefill = prefillStub();
        HttpServer decode = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        answerHealthy(decode);
        AtomicReference<CountDownLatch> clientHasText = new AtomicReference<>(new CountDownLatch(0));
        decode.createContext("/generate", ex -> {
            ex.getResponseHeaders().add("Content-Type", "text/event-stream");
            ex.sendResponseHeaders(200, 0);
            ex.getResponseBody().write("data: {\"token\":300}\n\n".getBytes(StandardCharsets.UTF_8));
            ex.getResponseBody().flush();
            try {
                clientHasText.get().await(30, TimeUnit.SECONDS); // the drop comes mid-stream, not before the client's stream began
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            throw new IllegalStateException("the stub dies mid-stream"); // the JDK server drops the connection, no last chunk
        });
        decode.createContext("/abort", ex -> {
            ex.sendResponseHeaders(200, -1);
            ex.close();
        });
        decode.start();
        try (Router router = new Router(List.of(url(prefill)), List.of(url(decode)), ModelFiles.load(null, null).tokenizer(), 512, "m",
                "127.0.0.1", 0)) {
            String[][] routes = {{"/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3,\"stream\":true}"},
                {"/generate", "{\"text\":\"Hi\",\"sampling_params\":{\"max_new_tokens\":3},\"stream\":true}"}};
            for (String[] route : routes) {
                CountDownLatch hasText = new CountDownLatch(1);
                clientHasText.set(hasText);
                HttpResponse<InputStream> r = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + router.port() + route[0]))
                        .POST(HttpRequest.BodyPublishers.ofString(route[1])).build(), HttpResponse.BodyHandlers.ofInputStream());
                assertEquals(200, r.statusCode(), route[0]);
                List<String> data = new ArrayList<>();
                try (BufferedReader in = new BufferedReader(new InputStreamReader(r.body(), StandardCharsets.UTF_8))) {
                    for (String line; (line = in.readLine()) != null; ) {
                        if (!line.startsWith("data: ")) continue;
                        data.add(line.substring(6));
                        hasText.countDown();
                    }
                }
                assertTrue(data.size() >= 3, route[0] + ": " + data);
                assertEquals("[DONE]", data.getLast(), route[0] + ": a failed stream ends with [DONE]: " + data);
                JsonNode error = JSON.readTree(data.get(data.size() - 2)).path("error");
                assertEquals("bad_gateway", error.path("type").asText(), route[0] + ": " + data);
                assertTrue(error.path("message").asText().contains(url(decode)), route[0] + ": " + data);
            }
            clientHasText.set(new CountDownLatch(0));
            HttpResponse<String> r = send(router.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3}");
            assertEquals(502, r.statusCode(), r.body());
            assertTrue(JSON.readTree(r.body()).path("error").path("message").asText().contains(url(decode)), r.body());
        } finally {
            decode.stop(0);
            prefill.stop(0);
        }
    }

    /**
     * Engines whose stub decode streams the given tokens and then goes on generating until the room is aborted:
     * only the router's abort ends its answer, so the router's decision is tested without racing the answer's end (a
     * real decode may finish a short story before the abort arrives; ServeTest's full-stack cases can).
     */
    private record AbortWatch(HttpServer prefill, HttpServer decode, CompletableFuture<Long> room,
                              CompletableFuture<JsonNode> decodeAbort, CompletableFuture<JsonNode> prefillAbort) implements AutoCloseable {
        static AbortWatch start(int... tokens) throws IOException {
            return start("data: {\"token\":300}", tokens);
        }

        /** A decode whose request waits (for pages, its KV): only keep-alive comments, no token, until aborted. */
        static AbortWatch waiting() throws IOException {
            return start(": keep-alive");
        }

        /** @param filler the line sent every 20 ms after {@code tokens}, until the room is aborted */
        static AbortWatch start(String filler, int... tokens) throws IOException {
            AbortWatch w = new AbortWatch(HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16),
                    HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16), new CompletableFuture<>(),
                    new CompletableFuture<>(), new CompletableFuture<>());
            w.decode.setExecutor(Executors.newVirtualThreadPerTaskExecutor());
            answerHealthy(w.decode);
            w.decode.createContext("/generate", ex -> {
                w.room.complete(JSON.readTree(ex.getRequestBody()).path("bootstrap_room").asLong());
                ex.getResponseHeaders().add("Content-Type", "text/event-stream");
                ex.sendResponseHeaders(200, 0);
                try {
                    for (int t : tokens) ex.getResponseBody().write(("data: {\"token\":" + t + "}\n\n").getBytes(StandardCharsets.UTF_8));
                    ex.getResponseBody().flush();
                    // Then a token every 20 ms, as a decode generates, until the room is aborted (30 s at most): the
                    // router learns its client left from a write that fails, so it needs tokens to write.
                    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
                    while (!w.decodeAbort.isDone() && System.nanoTime() < until) {
                        ex.getResponseBody().write((filler + "\n\n").getBytes(StandardCharsets.UTF_8));
                        ex.getResponseBody().flush();
                        Thread.sleep(20);
                    }
                } catch (IOException | InterruptedException e) {
                    // the router closed the connection, or the test gave up
                }
                ex.close();
            });
            answerHealthy(w.prefill);
            w.prefill.createContext("/generate", ex -> {
                byte[] b = "{}".getBytes(StandardCharsets.UTF_8);
                ex.sendResponseHeaders(200, b.length);
                ex.getResponseBody().write(b);
                ex.close();
            });
            for (var side : List.of(Map.entry(w.decode, w.decodeAbort), Map.entry(w.prefill, w.prefillAbort))) {
                side.getKey().createContext("/abort", ex -> {
                    side.getValue().complete(JSON.readTree(ex.getRequestBody()));
                    ex.sendResponseHeaders(200, -1);
                    ex.close();
                });
            }
            w.decode.start();
            w.prefill.start();
            return w;
        }

        Router router() throws IOException {
            return new Router(List.of(url(prefill)), List.of(url(decode)), ModelFiles.load(null, null).tokenizer(), 512, "m", "127.0.0.1", 0);
        }

        /** Both engines were told to abort the room the decode was asked to run. */
        void assertAbortedOnBoth() throws Exception {
            long asked = room.get(10, TimeUnit.SECONDS);
            assertEquals(asked, decodeAbort.get(20, TimeUnit.SECONDS).path("bootstrap_room").asLong(), "the decode's abort names the room");
            assertEquals(asked, prefillAbort.get(20, TimeUnit.SECONDS).path("bootstrap_room").asLong(), "the prefill's abort names the room");
        }

        @Override
        public void close() {
            decodeAbort.complete(null);
            decode.stop(0);
            prefill.stop(0);
        }
    }

    /** A client that closes its stream mid-way: the router aborts the room on both engines, so its pages are freed now. */
    @Test
    @Timeout(60)
    void aClientThatClosesMidStreamMakesTheRouterAbortTheRoomOnBothEngines() throws Exception {
        try (AbortWatch w = AbortWatch.start(300); Router router = w.router()) {
            String body = "{\"prompt\":\"Hi\",\"max_tokens\":400,\"stream\":true}";
            try (Socket s = new Socket("127.0.0.1", router.port())) {
                s.getOutputStream().write(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                        + body.length() + "\r\n\r\n" + body).getBytes(StandardCharsets.UTF_8));
                BufferedReader in = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
                for (String line; (line = in.readLine()) != null && !line.startsWith("data: "); ) {
                    // headers and chunk sizes, up to the first event
                }
            } // closed with the stream under way
            w.assertAbortedOnBoth();
        }
    }

    /**
     * A client that closes its stream while its request waits for the first token (the decode sends only
     * keep-alives): the router passes a keep-alive on, finds the client gone and aborts the room on both engines.
     * Before, it wrote nothing until the first token, so the room ran its prefill and transfer for nobody.
     */
    @Test
    @Timeout(60)
    void aClientThatLeavesBeforeTheFirstTokenIsNoticedOnAKeepAlive() throws Exception {
        for (String route : new String[]{"/v1/completions", "/v1/chat/completions", "/generate"}) {
            String body = switch (route) {
                case "/v1/completions" -> "{\"prompt\":\"Hi\",\"max_tokens\":400,\"stream\":true}";
                case "/v1/chat/completions" -> "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":400,\"stream\":true}";
                default -> "{\"text\":\"Hi\",\"sampling_params\":{\"max_new_tokens\":400},\"stream\":true}";
            };
            try (AbortWatch w = AbortWatch.waiting(); Router router = w.router()) {
                try (Socket s = new Socket("127.0.0.1", router.port())) {
                    s.getOutputStream().write(("POST " + route + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                            + body.length() + "\r\n\r\n" + body).getBytes(StandardCharsets.UTF_8));
                    BufferedReader in = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
                    assertTrue(in.readLine().startsWith("HTTP/1.1 200"), route + ": the stream begins on the decode's keep-alive");
                    String line;
                    while ((line = in.readLine()) != null && !line.equals(": keep-alive")) {
                        assertFalse(line.startsWith("data: {\"text") || line.contains("\"token\""), route + ": no token yet, got " + line);
                    }
                    assertEquals(": keep-alive", line, route);
                } // gone before the first token
                w.assertAbortedOnBoth();
            }
        }
    }

    /** A stop string met: the client gets the text before it, and the router aborts the room on both engines instead of letting it run on. */
    @Test
    @Timeout(60)
    void aStopStringMetMakesTheRouterAbortTheRoomOnBothEngines() throws Exception {
        int[] tokens = ModelFiles.load(null, null).tokenizer().encode("Tom saw a big dog", false, false);
        try (AbortWatch w = AbortWatch.start(tokens); Router router = w.router()) {
            HttpResponse<String> r = send(router.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":400,\"stop\":\"big\"}");
            assertEquals(200, r.statusCode(), r.body());
            JsonNode choice = JSON.readTree(r.body()).path("choices").path(0);
            assertEquals("stop", choice.path("finish_reason").asText(), r.body());
            assertTrue(choice.path("text").asText().endsWith("saw a "), r.body());
            w.assertAbortedOnBoth();
        }
    }

    /**
     * A decode that hangs (a stopped process: its kernel takes the connection, nothing answers) once it has a
     * request, before its status line or after it: the request fails with a 502 naming the decode within the
     * stream-idle limit, and both engines are told to abort the room. Before, the request waited as long as the
     * decode hung (health checks take a backend out of rotation for new requests only).
     */
    @Test
    @Timeout(60)
    void aDecodeThatHangsFailsItsRequestsAtTheStreamIdleLimit() throws Exception {
        for (boolean headersFirst : new boolean[]{false, true}) {
            CountDownLatch release = new CountDownLatch(1);
            CompletableFuture<JsonNode> decodeAbort = new CompletableFuture<>();
            HttpServer decode = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
            decode.setExecutor(Executors.newVirtualThreadPerTaskExecutor());
            answerHealthy(decode);
            decode.createContext("/generate", ex -> {
                try {
                    ex.getRequestBody().readAllBytes();
                    if (headersFirst) {
                        ex.sendResponseHeaders(200, 0);
                        ex.getResponseBody().write(": keep-alive\n\n".getBytes(StandardCharsets.UTF_8));
                        ex.getResponseBody().flush();
                    }
                    release.await(); // then nothing, not even a keep-alive
                } catch (IOException | InterruptedException routerGaveUp) {
                    // the router cut the connection
                }
                ex.close();
            });
            decode.createContext("/abort", ex -> {
                decodeAbort.complete(JSON.readTree(ex.getRequestBody()));
                ex.sendResponseHeaders(200, -1);
                ex.close();
            });
            decode.start();
            HttpServer prefill = prefillStub();
            try (Router router = new Router(List.of(url(prefill)), List.of(url(decode)), ModelFiles.load(null, null).tokenizer(), 512, "m",
                    "127.0.0.1", 0, new Probing(Duration.ofHours(1), Duration.ofSeconds(2), Duration.ofSeconds(2), 3, Duration.ofSeconds(2)))) {
                for (boolean stream : new boolean[]{false, true}) {
                    HttpResponse<String> r = send(router.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3,\"stream\":" + stream + "}");
                    JsonNode error;
                    if (stream && headersFirst) { // the client's stream began on the keep-alive passed on: the failure is its last event
                        assertEquals(200, r.statusCode(), r.body());
                        List<String> data = r.body().lines().filter(l -> l.startsWith("data: ")).map(l -> l.substring(6)).toList();
                        assertEquals("[DONE]", data.getLast(), r.body());
                        error = JSON.readTree(data.get(data.size() - 2)).path("error");
                    } else {
                        assertEquals(502, r.statusCode(), r.body());
                        error = JSON.readTree(r.body()).path("error");
                    }
                    String message = error.path("message").asText();
                    assertTrue(message.contains(url(decode)) && message.contains("not even a keep-alive"), r.body());
                }
                assertTrue(decodeAbort.get(10, TimeUnit.SECONDS).path("bootstrap_room").asLong() > 0, "the hung decode is told to abort too");
            } finally {
                release.countDown();
                decode.stop(0);
                prefill.stop(0);
            }
        }
    }

    /**
     * A prompt-only request (max_tokens 0, the prefill alone) to a prefill that hangs once it has the request (its /health
     * too, as a stopped process's): no fixed limit bounds the call, the health checks do: once they take the prefill out of
     * rotation the request fails with a 502 naming it, streamed or not, and the room is aborted there. Without that bound
     * the request waited for as long as the prefill hung.
     */
    @Test
    @Timeout(60)
    void aPromptOnlyRequestToAPrefillThatHangsFailsOnceItsHealthChecksTakeItOut() throws Exception {
        CountDownLatch release = new CountDownLatch(1);
        AtomicBoolean hung = new AtomicBoolean();
        AtomicReference<CompletableFuture<JsonNode>> prefillAbort = new AtomicReference<>(new CompletableFuture<>());
        HttpServer prefill = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        prefill.setExecutor(Executors.newVirtualThreadPerTaskExecutor());
        prefill.createContext("/health", ex -> {
            try {
                if (hung.get()) release.await(); // a stopped process answers nothing
            } catch (InterruptedException ignored) {
                // the test is over
            }
            byte[] b = "{\"status\":\"ok\",\"bootstrap\":\"127.0.0.1:1\"}".getBytes(StandardCharsets.UTF_8);
            ex.sendResponseHeaders(200, b.length);
            ex.getResponseBody().write(b);
            ex.close();
        });
        prefill.createContext("/generate", ex -> {
            try {
                ex.getRequestBody().readAllBytes();
                hung.set(true);
                release.await();
            } catch (IOException | InterruptedException routerGaveUp) {
                // the router cut the connection
            }
            ex.close();
        });
        prefill.createContext("/abort", ex -> {
            prefillAbort.get().complete(JSON.readTree(ex.getRequestBody()));
            ex.sendResponseHeaders(200, -1);
            ex.close();
        });
        prefill.start();
        HttpServer decode = prefillStub();
        try (Router router = new Router(List.of(url(prefill)), List.of(url(decode)), ModelFiles.load(null, null).tokenizer(), 512, "m",
                "127.0.0.1", 0, FAST)) {
            for (boolean stream : new boolean[]{false, true}) {
                HttpResponse<String> r = send(router.port(), "/v1/completions",
                        "{\"prompt\":\"Hi\",\"max_tokens\":0,\"echo\":true,\"stream\":" + stream + "}");
                JsonNode error;
                if (r.statusCode() == 200 && stream) { // the stream began on a keep-alive: the failure is its last event
                    List<String> data = r.body().lines().filter(l -> l.startsWith("data: ")).map(l -> l.substring(6)).toList();
                    assertEquals("[DONE]", data.getLast(), r.body());
                    error = JSON.readTree(data.get(data.size() - 2)).path("error");
                } else {
                    assertEquals(502, r.statusCode(), r.body());
                    error = JSON.readTree(r.body()).path("error");
                }
                String message = error.path("message").asText();
                assertTrue(message.contains(url(prefill)) && message.contains("taken out of rotation"), r.body());
                assertTrue(prefillAbort.get().get(10, TimeUnit.SECONDS).path("bootstrap_room").asLong() > 0, "the hung prefill is told to abort");
                prefillAbort.set(new CompletableFuture<>());
                hung.set(false);
                // The prefill answers its checks again: back in rotation before the next request (10 s at most).
                for (int i = 0; i < 200 && JSON.readTree(send(router.port(), "/health", null).body()).path("healthy_prefills").asInt() != 1; i++) {
                    Thread.sleep(50);
                }
            }
        } finally {
            release.countDown();
            decode.stop(0);
            prefill.stop(0);
        }
    }

    /** A prefill whose /generate call fails (its connection dropped) while the decode reports the room aborted: the client's error names that prefill. */
    @Test
    @Timeout(60)
    void aPrefillThatFailsItsCallIsNamedInTheError() throws Exception {
        HttpServer prefill = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        answerHealthy(prefill);
        prefill.createContext("/generate", ex -> {
            throw new IllegalStateException("the stub drops the connection"); // no answer: the JDK server closes it
        });
        prefill.createContext("/abort", ex -> {
            ex.sendResponseHeaders(200, -1);
            ex.close();
        });
        prefill.start();
        HttpServer decode = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        answerHealthy(decode);
        decode.createContext("/generate", ex -> {
            ex.getRequestBody().readAllBytes();
            try {
                Thread.sleep(300); // the prefill's call fails first
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            byte[] b = "{\"error\":{\"type\":\"kv_transfer_error\",\"kind\":\"aborted\",\"message\":\"Aborted by AbortReq.\"}}"
                    .getBytes(StandardCharsets.UTF_8);
            ex.sendResponseHeaders(500, b.length);
            ex.getResponseBody().write(b);
            ex.close();
        });
        decode.createContext("/abort", ex -> {
            ex.sendResponseHeaders(200, -1);
            ex.close();
        });
        decode.start();
        try (Router router = new Router(List.of(url(prefill)), List.of(url(decode)), ModelFiles.load(null, null).tokenizer(), 512, "m",
                "127.0.0.1", 0, NO_CHECKS)) {
            HttpResponse<String> r = send(router.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3}");
            assertEquals(500, r.statusCode(), r.body());
            assertTrue(JSON.readTree(r.body()).path("error").path("message").asText().contains("prefill " + url(prefill) + " unreachable"), r.body());
        } finally {
            decode.stop(0);
            prefill.stop(0);
        }
    }

    /**
     * An abort that reaches no engine (no answer: a partition or blackhole between the router and the prefill)
     * is sent again until one is answered: sent once, the prefill's room waited for its decode until the
     * bootstrap timeout (300 s), holding its request slot. The stub prefill drops its first two /abort
     * connections unanswered and answers the third.
     */
    @Test
    @Timeout(60)
    void anAbortThatReachesNoEngineIsSentAgainUntilOneIsAnswered() throws Exception {
        AtomicInteger tries = new AtomicInteger();
        CompletableFuture<JsonNode> answered = new CompletableFuture<>();
        HttpServer prefill = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        answerHealthy(prefill);
        prefill.createContext("/generate", ex -> {
            ex.getRequestBody().readAllBytes();
            byte[] b = "{}".getBytes(StandardCharsets.UTF_8);
            ex.sendResponseHeaders(200, b.length);
            ex.getResponseBody().write(b);
            ex.close();
        });
        prefill.createContext("/abort", ex -> {
            JsonNode body = JSON.readTree(ex.getRequestBody());
            if (tries.incrementAndGet() <= 2) throw new IllegalStateException("the stub drops the connection"); // no answer
            answered.complete(body);
            ex.sendResponseHeaders(200, -1);
            ex.close();
        });
        prefill.start();
        HttpServer decode = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        answerHealthy(decode);
        decode.createContext("/generate", ex -> {
            ex.getRequestBody().readAllBytes();
            byte[] b = "{\"error\":{\"type\":\"kv_transfer_error\",\"kind\":\"prefill_unreachable\",\"message\":\"Could not fetch prefill parallel info\"}}"
                    .getBytes(StandardCharsets.UTF_8);
            ex.sendResponseHeaders(500, b.length);
            ex.getResponseBody().write(b);
            ex.close();
        });
        decode.createContext("/abort", ex -> {
            ex.sendResponseHeaders(200, -1);
            ex.close();
        });
        decode.start();
        try (Router router = new Router(List.of(url(prefill)), List.of(url(decode)), ModelFiles.load(null, null).tokenizer(), 512, "m",
                "127.0.0.1", 0, NO_CHECKS)) {
            HttpResponse<String> r = send(router.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3}");
            assertEquals(500, r.statusCode(), r.body());
            long room = answered.get(30, TimeUnit.SECONDS).path("bootstrap_room").asLong();
            assertTrue(room > 0, "the prefill is told to abort the failed room");
            assertEquals(3, tries.get(), "two tries without an answer, then the one answered");
        } finally {
            decode.stop(0);
            prefill.stop(0);
        }
    }

    /**
     * The router cut off from a prefill that its decode still reaches (a partition between their hosts): the
     * prefill's /generate and its health checks get no answer, while the decode waits for KV and sends
     * keep-alives. Once the checks take the prefill out, its calls under way fail: the decode is told to
     * abort and the client's error names the prefill. Before, the request waited for the decode's waiting
     * timeout (300 s), the decode holding its pages.
     */
    @Test
    @Timeout(60)
    void aPrefillThatStopsAnsweringFailsItsRequestsInFlightOnceItsChecksTakeItOut() throws Exception {
        CountDownLatch release = new CountDownLatch(1), decodeAborted = new CountDownLatch(1);
        AtomicBoolean partitioned = new AtomicBoolean();
        HttpServer prefill = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        prefill.setExecutor(Executors.newVirtualThreadPerTaskExecutor());
        prefill.createContext("/health", ex -> {
            try {
                if (partitioned.get()) release.await(); // no answer, as across a partition
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            byte[] b = "{\"status\":\"ok\",\"bootstrap\":\"127.0.0.1:8998\"}".getBytes(StandardCharsets.UTF_8);
            ex.sendResponseHeaders(200, b.length);
            ex.getResponseBody().write(b);
            ex.close();
        });
        prefill.createContext("/generate", ex -> {
            partitioned.set(true);
            try {
                release.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            ex.close();
        });
        prefill.createContext("/abort", ex -> {
            ex.sendResponseHeaders(200, -1);
            ex.close();
        });
        prefill.start();
        HttpServer decode = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        decode.setExecutor(Executors.newVirtualThreadPerTaskExecutor());
        answerHealthy(decode);
        decode.createContext("/generate", ex -> {
            ex.getRequestBody().readAllBytes();
            ex.getResponseHeaders().add("Content-Type", "text/event-stream");
            ex.sendResponseHeaders(200, 0);
            try {
                while (!decodeAborted.await(100, TimeUnit.MILLISECONDS)) { // waiting for KV that does not come
                    ex.getResponseBody().write(": keep-alive\n\n".getBytes(StandardCharsets.UTF_8));
                    ex.getResponseBody().flush();
                }
                ex.getResponseBody().write("data: {\"error\":{\"type\":\"kv_transfer_error\",\"kind\":\"aborted\",\"message\":\"Aborted by AbortReq.\"}}\n\n"
                        .getBytes(StandardCharsets.UTF_8));
            } catch (IOException | InterruptedException routerGone) {
                // the router left
            }
            ex.close();
        });
        decode.createContext("/abort", ex -> {
            decodeAborted.countDown();
            ex.sendResponseHeaders(200, -1);
            ex.close();
        });
        decode.start();
        try (Router router = new Router(List.of(url(prefill)), List.of(url(decode)), ModelFiles.load(null, null).tokenizer(), 512, "m",
                "127.0.0.1", 0, FAST)) {
            for (boolean stream : new boolean[]{false, true}) {
                HttpResponse<String> r = send(router.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3,\"stream\":" + stream + "}");
                JsonNode error;
                if (stream && r.statusCode() == 200) { // begun on a keep-alive (after 1 s): the failure is the last event before [DONE]
                    List<String> data = r.body().lines().filter(l -> l.startsWith("data: ")).map(l -> l.substring(6)).toList();
                    assertEquals("[DONE]", data.getLast(), r.body());
                    error = JSON.readTree(data.get(data.size() - 2)).path("error");
                } else {
                    assertEquals(500, r.statusCode(), r.body());
                    error = JSON.readTree(r.body()).path("error");
                }
                String message = error.path("message").asText();
                assertTrue(message.contains("prefill " + url(prefill) + " unreachable") && message.contains("health checks in a row"),
                        r.body());
                assertEquals("prefill_unreachable", error.path("kind").asText(), r.body());
                if (!stream) { // the prefill comes back for the second request
                    partitioned.set(false);
                    long by = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
                    while (!JSON.readTree(send(router.port(), "/health", null).body()).path("status").asText().equals("ok")) {
                        assertTrue(System.nanoTime() < by, "the prefill never came back");
                        Thread.sleep(50);
                    }
                }
            }
            assertEquals(0, decodeAborted.getCount(), "the decode was told to abort");
        } finally {
            release.countDown();
            decode.stop(0);
            prefill.stop(0);
        }
    }

    /**
     * A prefill that has never answered a health check (its connect times out: a silent link, a slow name
     * lookup) is not counted on the router's /health: it said "ok" with healthy_prefills 1 while every
     * request got "no healthy prefill instance".
     */
    @Test
    @Timeout(30)
    void aPrefillThatNeverAnsweredIsNotCountedHealthy() throws Exception {
        HttpServer decode = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        answerHealthy(decode);
        decode.start();
        List<Socket> held = new ArrayList<>();
        try (ServerSocket swamped = swampedServer(held);
             Router router = new Router(List.of("http://127.0.0.1:" + swamped.getLocalPort()), List.of(url(decode)),
                     ModelFiles.load(null, null).tokenizer(), 512, "m", "127.0.0.1", 0, NO_CHECKS)) {
            HttpResponse<String> r = send(router.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3}");
            assertEquals(503, r.statusCode(), r.body());
            HttpResponse<String> h = send(router.port(), "/health", null);
            assertEquals(503, h.statusCode(), h.body());
            assertEquals("unavailable", JSON.readTree(h.body()).path("status").asText(), h.body());
            assertEquals(0, JSON.readTree(h.body()).path("healthy_prefills").asInt(), h.body());
        } finally {
            for (Socket s : held) s.close();
            decode.stop(0);
        }
    }

    /** /health says "degraded" (200) while a role has fewer healthy backends than configured but some: requests are still served. */
    @Test
    @Timeout(30)
    void healthIsDegradedWithOneOfTwoDecodesDown() throws Exception {
        HttpServer prefill = prefillStub();
        HttpServer decode = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        answerHealthy(decode);
        decode.start();
        // Held, bound and never listening: a connect there is refused, and no server (this test's router, bound to port 0
        // next) can be given the port while it is held. A ServerSocket(0) closed at once freed it for that very bind(0).
        Socket hold = new Socket();
        hold.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
        int deadPort = hold.getLocalPort();
        try (hold; Router router = new Router(List.of(url(prefill)), List.of(url(decode), "http://127.0.0.1:" + deadPort),
                ModelFiles.load(null, null).tokenizer(), 512, "m", "127.0.0.1", 0, NO_CHECKS)) {
            HttpResponse<String> h = send(router.port(), "/health", null);
            assertEquals(200, h.statusCode(), h.body());
            assertEquals("degraded", JSON.readTree(h.body()).path("status").asText(), h.body());
            assertEquals(1, JSON.readTree(h.body()).path("healthy_decodes").asInt(), h.body());
        } finally {
            decode.stop(0);
            prefill.stop(0);
        }
    }

    /** Probe timings short enough for a test: checks every 100 ms, 300 ms each, 500 ms to connect, 3 failures in a row. */
    static final Probing FAST = new Probing(Duration.ofMillis(100), Duration.ofMillis(300), Duration.ofMillis(500), 3);
    /**
     * No periodic checks (only the constructor's): what a request meets decides alone. That one check must pass for
     * a healthy stub on a loaded machine (with no later check, a prefill whose first check timed out would never be
     * picked), so it has 5 s, to connect too.
     */
    static final Probing NO_CHECKS = new Probing(Duration.ofHours(1), Duration.ofSeconds(5), Duration.ofSeconds(5), 3);
    /** As {@link #NO_CHECKS} with a 500 ms connect, for a test that times connects. */
    static final Probing NO_CHECKS_FAST_CONNECT = new Probing(Duration.ofHours(1), Duration.ofSeconds(5), Duration.ofMillis(500), 3);

    /** A stub prefill: healthy, answers /generate and /abort with a 200. */
    /**
     * A decode whose finish event names no {@code matched} token (one older than the router) ended its answer at its last
     * token: the router says which stop that was from the token itself, BOS the model's end (a null stop_reason, SGLang's
     * matched 1) and a stop token id the request listed (its id).
     */
    @Test
    @Timeout(60)
    void aDecodeThatNamesNoMatchedTokenEndedAtItsLastToken() throws Exception {
        HttpServer prefill = prefillStub();
        HttpServer decode = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        answerHealthy(decode);
        AtomicInteger last = new AtomicInteger();
        decode.createContext("/generate", ex -> {
            ex.getRequestBody().readAllBytes();
            ex.sendResponseHeaders(200, 0);
            ex.getResponseBody().write(("data: {\"token\":300}\n\ndata: {\"token\":" + last.get() + "}\n\ndata: {\"finish_reason\":\"stop\"}\n\n")
                    .getBytes(StandardCharsets.UTF_8));
            ex.close();
        });
        decode.start();
        try (Router router = new Router(List.of(url(prefill)), List.of(url(decode)), ModelFiles.load(null, null).tokenizer(), 512, "m", "127.0.0.1", 0)) {
            last.set(1);
            JsonNode bos = JSON.readTree(send(router.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":8}").body());
            assertTrue(bos.path("choices").path(0).has("stop_reason"), bos.toString());
            assertTrue(bos.path("choices").path(0).get("stop_reason").isNull(), bos.toString());
            JsonNode g = JSON.readTree(send(router.port(), "/generate", "{\"text\":\"Hi\",\"sampling_params\":{\"max_new_tokens\":8}}").body());
            assertEquals("{\"type\":\"stop\",\"matched\":1}", g.path("meta_info").path("finish_reason").toString(), g.toString());
            last.set(301);
            JsonNode id = JSON.readTree(send(router.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":8,\"stop_token_ids\":[301]}").body());
            assertEquals(301, id.path("choices").path(0).path("stop_reason").intValue(), id.toString());
        } finally {
            decode.stop(0);
            prefill.stop(0);
        }
    }

    /** A decode stub whose /generate answers {@code status} with {@code body} (200: an event stream), and /abort 200. */
    static HttpServer decodeAnswering(int status, String body) throws Exception {
        HttpServer decode = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        answerHealthy(decode);
        decode.createContext("/generate", ex -> {
            byte[] b = body.getBytes(StandardCharsets.UTF_8);
            if (status == 200) ex.getResponseHeaders().add("Content-Type", "text/event-stream");
            ex.sendResponseHeaders(status, status == 200 ? 0 : b.length);
            ex.getResponseBody().write(b);
            ex.close();
        });
        decode.createContext("/abort", ex -> {
            ex.sendResponseHeaders(200, -1);
            ex.close();
        });
        decode.start();
        return decode;
    }

    /**
     * An engine's error names a {@code param} only for a grammar past its run-time bound ({@code sampling_params.ebnf},
     * OutputConstraint.Exceeded), and the router answers it naming the field the client sent, never the engine's text: an
     * engine's (or a hostile peer's) other {@code param} is not passed on, nor {@code sampling_params.ebnf} for a request
     * with no structured output, and a recursive JSON schema's bound names {@code sampling_params.json_schema} on
     * /generate (the client sent no ebnf) and {@code response_format} on the OpenAI routes, tool calls' {@code tools}.
     */
    @Test
    @Timeout(60)
    void anEnginesErrorParamReachesTheClientOnlyAsTheGrammarFieldItSent() throws Exception {
        HttpServer prefill = prefillStub();
        String schema = "{\\\"type\\\":\\\"object\\\"}";
        String[][] cases = {
            // {the engine's param, route, body, the param the client must get ("" none)}
            {"api_key", "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3}", ""},
            {"sampling_params.ebnf", "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3}", ""},
            {"sampling_params.ebnf", "/generate", "{\"text\":\"Hi\",\"sampling_params\":{\"max_new_tokens\":3}}", ""},
            {"sampling_params.ebnf", "/generate", "{\"text\":\"Hi\",\"sampling_params\":{\"max_new_tokens\":3,\"json_schema\":\"" + schema + "\"}}",
                    "sampling_params.json_schema"},
            {"sampling_params.ebnf", "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3,\"response_format\":{\"type\":\"json_schema\","
                    + "\"json_schema\":{\"name\":\"o\",\"schema\":{\"type\":\"object\"}}}}", "response_format"},
            {"sampling_params.ebnf", "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3,\"guided_grammar\":\"root ::= [a-z]+\"}", "guided_grammar"},
            // Tool calls whose parameters recurse are a grammar too: the client's field is tools.
            {"sampling_params.ebnf", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":3,"
                    + "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"required\"}", "tools"},
        };
        try {
            for (String[] c : cases) {
                HttpServer decode = decodeAnswering(400, "{\"error\":{\"type\":\"invalid_request_error\",\"param\":\"" + c[0]
                        + "\",\"message\":\"refused\"}}");
                try (Router router = new Router(List.of(url(prefill)), List.of(url(decode)), ModelFiles.load(null, null).tokenizer(), 512, "m",
                        "127.0.0.1", 0)) {
                    HttpResponse<String> r = send(router.port(), c[1], c[2]);
                    String what = c[0] + " on " + c[1] + " " + c[2] + ": " + r.body();
                    assertEquals(400, r.statusCode(), what);
                    JsonNode e = JSON.readTree(r.body()).path("error");
                    assertEquals("invalid_request_error", e.path("type").asText(), what);
                    assertEquals(c[3], e.path("param").asText(""), what);
                } finally {
                    decode.stop(0);
                }
            }
        } finally {
            prefill.stop(0);
        }
    }

    /**
     * A decode's error event after the request's first token is the client's 400 only for a grammar past its bound (its
     * {@code param} {@code sampling_params.ebnf}, the request constrained); another event, whatever type it claims, is
     * the decode's failure (a 500), with no {@code param} from the decode.
     */
    @Test
    @Timeout(60)
    void aDecodesErrorEventAfterTokensIsA400OnlyForAGrammarPastItsBound() throws Exception {
        HttpServer prefill = prefillStub();
        String[][] cases = {
            // {the event's param, the request's structured output, the status the client must get, its param}
            {"admin.secret", "", "500", ""},
            {"sampling_params.ebnf", "", "500", ""},
            {"sampling_params.ebnf", ",\"guided_grammar\":\"root ::= [a-z]+\"", "400", "guided_grammar"},
        };
        try {
            for (String[] c : cases) {
                HttpServer decode = decodeAnswering(200, "data: {\"token\":300}\n\ndata: {\"error\":{\"type\":\"invalid_request_error\","
                        + "\"param\":\"" + c[0] + "\",\"message\":\"past it\"}}\n\n");
                try (Router router = new Router(List.of(url(prefill)), List.of(url(decode)), ModelFiles.load(null, null).tokenizer(), 512, "m",
                        "127.0.0.1", 0)) {
                    HttpResponse<String> r = send(router.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3" + c[1] + "}");
                    String what = c[0] + " " + c[1] + ": " + r.body();
                    assertEquals(Integer.parseInt(c[2]), r.statusCode(), what);
                    JsonNode e = JSON.readTree(r.body()).path("error");
                    assertEquals(c[3], e.path("param").asText(""), what);
                    if (r.statusCode() == 500) assertEquals("internal_error", e.path("type").asText(), what);
                    assertTrue(e.path("message").asText().contains("past it"), what);
                } finally {
                    decode.stop(0);
                }
            }
        } finally {
            prefill.stop(0);
        }
    }

    static HttpServer prefillStub() throws Exception {
        HttpServer stub = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        answerHealthy(stub);
        for (String path : new String[]{"/generate", "/abort"}) {
            stub.createContext(path, ex -> {
                byte[] b = "{}".getBytes(StandardCharsets.UTF_8);
                ex.sendResponseHeaders(200, b.length);
                ex.getResponseBody().write(b);
                ex.close();
            });
        }
        stub.start();
        return stub;
    }

    /**
     * A listening socket that never accepts, its accept queue filled: a connect to it times out (the
     * kernel drops the SYN), as one to a server a burst has just swamped does. The fillers go in {@code held}.
     */
    private static ServerSocket swampedServer(List<Socket> held) throws Exception {
        ServerSocket ss = new ServerSocket(0, 1, InetAddress.getLoopbackAddress());
        for (int i = 0; i < 16; i++) {
            Socket s = new Socket();
            try {
                s.connect(new InetSocketAddress(InetAddress.getLoopbackAddress(), ss.getLocalPort()), 300);
                held.add(s);
            } catch (SocketTimeoutException full) {
                s.close();
                return ss;
            }
        }
        throw new AssertionError("the accept queue never filled");
    }

    static String url(HttpServer s) {
        return "http://127.0.0.1:" + s.getAddress().getPort();
    }

    /** The JDK's exceptions as they come: a connect that timed out is no refusal (its cause is a ConnectException all the same). */
    @Test
    @Timeout(30)
    void aConnectTimeoutIsNotARefusedConnection() throws Exception {
        HttpClient c = HttpClient.newBuilder().connectTimeout(Duration.ofMillis(200)).build();
        List<Socket> held = new ArrayList<>();
        try (ServerSocket swamped = swampedServer(held)) {
            HttpRequest req = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + swamped.getLocalPort() + "/health")).build();
            IOException timeout = assertThrows(IOException.class, () -> c.send(req, HttpResponse.BodyHandlers.discarding()));
            assertTrue(Backends.isConnectTimeout(timeout), timeout.toString());
            assertFalse(Backends.isConnectionRefused(timeout), "a connect timeout counted as a refused connection: " + timeout);
            ExecutionException async = assertThrows(ExecutionException.class, () -> c.sendAsync(req, HttpResponse.BodyHandlers.discarding()).get());
            assertTrue(Backends.isConnectTimeout(async), async.toString());
            assertFalse(Backends.isConnectionRefused(async), async.toString());
        } finally {
            for (Socket s : held) s.close();
        }
        try (Socket gone = new Socket()) { // bound, never listening: refused, and no other bind can be given the port meanwhile
            gone.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
            HttpRequest req = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + gone.getLocalPort() + "/health")).build();
            IOException refused = assertThrows(IOException.class, () -> c.send(req, HttpResponse.BodyHandlers.discarding()));
            assertTrue(Backends.isConnectionRefused(refused), refused.toString());
            assertFalse(Backends.isConnectTimeout(refused), refused.toString());
        }
    }

    /**
     * One health check that times out (a server busy with a burst) leaves the backend in rotation; three in
     * a row take it out; the next check that passes brings it back. The stub holds the check after the ones
     * under test until the router's state is read, so what is read is the result of exactly those checks.
     */
    @Test
    @Timeout(60)
    void oneSlowHealthCheckDoesNotTakeABackendOutButThreeInARowDo() throws Exception {
        AtomicInteger calls = new AtomicInteger();
        CountDownLatch atThird = new CountDownLatch(1), readThird = new CountDownLatch(1), atSeventh = new CountDownLatch(1),
                readSeventh = new CountDownLatch(1);
        HttpServer decode = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        decode.setExecutor(Executors.newVirtualThreadPerTaskExecutor());
        decode.createContext("/health", ex -> {
            int n = calls.incrementAndGet(); // 1: the constructor's check; 2: slow; 4, 5, 6: slow
            try {
                if (n == 3) {
                    atThird.countDown();
                    readThird.await();
                } else if (n == 7) {
                    atSeventh.countDown();
                    readSeventh.await();
                }
                if (n == 2 || (n >= 4 && n <= 6)) Thread.sleep(1500); // far past the 300 ms a check may take
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            byte[] b = "{\"status\":\"ok\"}".getBytes(StandardCharsets.UTF_8);
            try {
                ex.sendResponseHeaders(200, b.length);
                ex.getResponseBody().write(b);
            } catch (IOException routerGaveUp) {
                // the check timed out: nobody reads this answer
            }
            ex.close();
        });
        decode.start();
        HttpServer prefill = prefillStub();
        try (Router router = new Router(List.of(url(prefill)), List.of(url(decode)), ModelFiles.load(null, null).tokenizer(), 512, "m",
                "127.0.0.1", 0, FAST)) {
            assertTrue(atThird.await(20, TimeUnit.SECONDS), "no third health check");
            HttpResponse<String> h = send(router.port(), "/health", null);
            readThird.countDown();
            assertEquals(200, h.statusCode(), "one timed-out health check took the decode out of rotation: " + h.body());
            assertEquals(1, JSON.readTree(h.body()).path("healthy_decodes").asInt(), h.body());

            assertTrue(atSeventh.await(20, TimeUnit.SECONDS), "no seventh health check");
            h = send(router.port(), "/health", null);
            readSeventh.countDown();
            assertEquals(503, h.statusCode(), "three timed-out health checks in a row left the decode in rotation: " + h.body());
            assertEquals(0, JSON.readTree(h.body()).path("healthy_decodes").asInt(), h.body());

            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while ((h = send(router.port(), "/health", null)).statusCode() != 200 && System.nanoTime() < until) Thread.sleep(50);
            assertEquals(200, h.statusCode(), "a passing check did not bring the decode back: " + h.body());
        } finally {
            readThird.countDown();
            readSeventh.countDown();
            decode.stop(0);
            prefill.stop(0);
        }
    }

    /**
     * A decode whose accept queue is full (a connect times out): the request's connect is tried once more
     * (so the 502 comes after two connect timeouts, not one), and the decode stays in rotation, though the
     * router's own check of it at start timed out too.
     */
    @Test
    @Timeout(60)
    void aConnectTimeoutIsTriedOnceMoreThenA502AndTheBackendStaysInRotation() throws Exception {
        HttpServer prefill = prefillStub();
        List<Socket> held = new ArrayList<>();
        try (ServerSocket decode = swampedServer(held);
             Router router = new Router(List.of(url(prefill)), List.of("http://127.0.0.1:" + decode.getLocalPort()),
                     ModelFiles.load(null, null).tokenizer(), 512, "m", "127.0.0.1", 0, NO_CHECKS_FAST_CONNECT)) {
            long start = System.nanoTime();
            HttpResponse<String> r = send(router.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3}");
            long millis = (System.nanoTime() - start) / 1_000_000;
            assertEquals(502, r.statusCode(), r.body());
            assertTrue(r.body().contains("decode") && r.body().contains("timed out"), r.body());
            assertTrue(millis >= 900, "answered after " + millis + " ms: the connect (500 ms) was not tried a second time");
            HttpResponse<String> h = send(router.port(), "/health", null);
            assertEquals(200, h.statusCode(), "a connect timeout took the decode out of rotation: " + h.body());
            assertEquals(1, JSON.readTree(h.body()).path("healthy_decodes").asInt(), h.body());
        } finally {
            for (Socket s : held) s.close();
            prefill.stop(0);
        }
    }

    /** A decode that refuses the connection (nothing listens any more) is out of rotation at once, before any health check. */
    @Test
    @Timeout(60)
    void aRefusedConnectionTakesTheBackendOutAtOnce() throws Exception {
        HttpServer prefill = prefillStub();
        HttpServer decode = prefillStub(); // healthy when the router starts
        try (Router router = new Router(List.of(url(prefill)), List.of(url(decode)), ModelFiles.load(null, null).tokenizer(), 512, "m",
                "127.0.0.1", 0, NO_CHECKS)) {
            assertEquals(200, send(router.port(), "/health", null).statusCode());
            decode.stop(0);
            HttpResponse<String> r = send(router.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3}");
            assertEquals(502, r.statusCode(), r.body());
            HttpResponse<String> h = send(router.port(), "/health", null);
            assertEquals(503, h.statusCode(), "a refused connection left the decode in rotation: " + h.body());
            assertEquals(0, JSON.readTree(h.body()).path("healthy_decodes").asInt(), h.body());
            assertEquals("unavailable", JSON.readTree(h.body()).path("status").asText(), "no decode at all: " + h.body());
            r = send(router.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3}");
            assertEquals(503, r.statusCode(), r.body());
        } finally {
            prefill.stop(0);
        }
    }

    /** A backend that never answers does not hold the router's close (its shutdown hook on SIGTERM): calls in flight are cancelled. */
    @Test
    @Timeout(60)
    void closeDoesNotWaitForAHungBackend() throws Exception {
        CountDownLatch called = new CountDownLatch(1), release = new CountDownLatch(1);
        HttpServer stub = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        stub.setExecutor(Executors.newVirtualThreadPerTaskExecutor());
        answerHealthy(stub);
        stub.createContext("/generate", ex -> {
            called.countDown();
            try {
                release.await(); // hangs until the test ends
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            ex.close();
        });
        stub.start();
        String url = "http://127.0.0.1:" + stub.getAddress().getPort();
        try {
            Router router = new Router(List.of(url), List.of(url), ModelFiles.load(null, null).tokenizer(), 512, "m", "127.0.0.1", 0);
            CompletableFuture<HttpResponse<String>> pending = http.sendAsync(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + router.port()
                    + "/v1/completions")).POST(HttpRequest.BodyPublishers.ofString("{\"prompt\":\"Hi\",\"max_tokens\":3}")).build(),
                    HttpResponse.BodyHandlers.ofString());
            assertTrue(called.await(20, TimeUnit.SECONDS), "the backend was never called");
            long start = System.nanoTime();
            router.close();
            long millis = (System.nanoTime() - start) / 1_000_000;
            assertTrue(millis < 10_000, "close() waited " + millis + " ms for a hung backend");
            pending.cancel(true);
        } finally {
            release.countDown();
            stub.stop(0);
        }
    }

    /**
     * A decode whose health answer sends its headers and then stalls mid-body: that check fails at the probe
     * timeout like one that never answers (three in a row take the decode out), rather than holding the one
     * health thread, and with it every backend's checks, for as long as the decode keeps the connection open.
     */
    @Test
    @Timeout(60)
    void aHealthAnswerThatStallsMidBodyFailsItsCheckAtTheProbeTimeout() throws Exception {
        AtomicInteger calls = new AtomicInteger();
        CountDownLatch release = new CountDownLatch(1);
        HttpServer decode = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        decode.setExecutor(Executors.newVirtualThreadPerTaskExecutor());
        decode.createContext("/health", ex -> {
            byte[] b = "{\"status\":\"ok\"}".getBytes(StandardCharsets.UTF_8);
            if (calls.incrementAndGet() == 1) { // the constructor's check passes
                ex.sendResponseHeaders(200, b.length);
                ex.getResponseBody().write(b);
                ex.close();
                return;
            }
            try {
                ex.sendResponseHeaders(200, 1000); // promises 1000 bytes, sends a few, then stalls
                ex.getResponseBody().write(b);
                ex.getResponseBody().flush();
                release.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } catch (IOException routerGaveUp) {
                // the check timed out and closed the connection
            }
            ex.close();
        });
        decode.start();
        HttpServer prefill = prefillStub();
        try (Router router = new Router(List.of(url(prefill)), List.of(url(decode)), ModelFiles.load(null, null).tokenizer(), 512, "m",
                "127.0.0.1", 0, FAST)) {
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            HttpResponse<String> h;
            while ((h = send(router.port(), "/health", null)).statusCode() != 503 && System.nanoTime() < until) Thread.sleep(50);
            assertEquals(503, h.statusCode(), "health checks whose answers stalled mid-body left the decode in rotation ("
                    + calls.get() + " checks began): " + h.body());
            assertEquals(0, JSON.readTree(h.body()).path("healthy_decodes").asInt(), h.body());
        } finally {
            release.countDown();
            decode.stop(0);
            prefill.stop(0);
        }
    }

    /**
     * A decode whose answer to /generate sends more than any real one and then stalls, an error body or an
     * event line that never ends: the router read it all into memory, for as long as the decode sent, and
     * answered nothing. It now reads a bounded amount and answers the client.
     */
    @Test
    @Timeout(60)
    void aDecodeAnswerThatNeverEndsIsCutAtItsLimit() throws Exception {
        for (int status : new int[]{500, 200}) {
            CountDownLatch release = new CountDownLatch(1);
            HttpServer decode = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
            decode.setExecutor(Executors.newVirtualThreadPerTaskExecutor());
            answerHealthy(decode);
            decode.createContext("/abort", ex -> {
                ex.sendResponseHeaders(200, -1);
                ex.close();
            });
            decode.createContext("/generate", ex -> {
                try {
                    ex.getRequestBody().readAllBytes();
                    ex.sendResponseHeaders(status, 0); // chunked: no end in sight
                    OutputStream out = ex.getResponseBody();
                    if (status == 200) out.write("data: ".getBytes(StandardCharsets.US_ASCII));
                    byte[] filler = "x".repeat(64 << 10).getBytes(StandardCharsets.US_ASCII);
                    for (int i = 0; i < 32; i++) out.write(filler); // 2 MiB, no newline
                    out.flush();
                    release.await();
                } catch (IOException | InterruptedException routerGaveUp) {
                    // the router stopped reading and closed the connection
                }
                ex.close();
            });
            decode.start();
            HttpServer prefill = prefillStub();
            try (Router router = new Router(List.of(url(prefill)), List.of(url(decode)), ModelFiles.load(null, null).tokenizer(), 512, "m",
                    "127.0.0.1", 0, new Probing(Duration.ofHours(1), Duration.ofSeconds(10), Duration.ofSeconds(10), 3))) {
                HttpResponse<String> r = http.sendAsync(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + router.port() + "/v1/completions"))
                        .POST(HttpRequest.BodyPublishers.ofString("{\"prompt\":\"Hi\",\"max_tokens\":3}")).build(),
                        HttpResponse.BodyHandlers.ofString()).get(20, TimeUnit.SECONDS);
                if (status == 500) {
                    assertEquals(500, r.statusCode(), r.body().substring(0, Math.min(200, r.body().length())));
                } else {
                    assertEquals(502, r.statusCode(), r.body().substring(0, Math.min(200, r.body().length())));
                    assertTrue(r.body().contains("sent an event line of more than"), r.body());
                }
            } finally {
                release.countDown();
                decode.stop(0);
                prefill.stop(0);
            }
        }
    }

    @Test
    void aBackendThatIsNoHttpUrlIsRefusedNamingTheFlagAndTheValue() {
        String e = assertThrows(IllegalArgumentException.class, () -> Backend.parse("notaurl", true)).getMessage();
        assertTrue(e.contains("--prefill 'notaurl'") && e.contains("http://"), e);
        e = assertThrows(IllegalArgumentException.class, () -> Backend.parse("ftp://h:1", false)).getMessage();
        assertTrue(e.contains("--decode 'ftp://h:1'"), e);
        e = assertThrows(IllegalArgumentException.class, () -> Backend.parse("http://a b", false)).getMessage();
        assertTrue(e.contains("--decode 'http://a b' is not a URL"), e);
        e = assertThrows(IllegalArgumentException.class, () -> Backend.parse("http://h:70000", true)).getMessage();
        assertTrue(e.contains("--prefill 'http://h:70000': port 70000 is not in [1, 65535]"), e);
        assertEquals("http://10.0.0.1:30000", Backend.parse("http://10.0.0.1:30000/", true).toString());
    }
}
