package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.serving.EngineSpec;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Combinators;
import net.jqwik.api.Example;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.ShrinkingMode;
import net.jqwik.api.lifecycle.AfterContainer;
import net.jqwik.api.lifecycle.BeforeContainer;

import java.io.ByteArrayOutputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.IntStream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * Bad input on the HTTP surface: a valid request of each POST route (the router's OpenAI routes, /generate, /tokenize,
 * /detokenize, /workers; an engine's /abort) mutated one way at a time (a field of the wrong JSON type, null, a huge,
 * negative or non-finite number, a deep value, a key twice, an unknown key, invalid UTF-8 or a lone surrogate, a truncated
 * or empty body, a string near the body limit, another Content-Type) is answered 2xx or 4xx (a 503 only as documented, with
 * Retry-After; a 502 only by /workers, for a URL it cannot reach), a 4xx with OpenAI's error object whose {@code message}
 * says what is wrong and whose {@code param} names the mutated field where one is at fault. A normal request sent beside
 * each still gets its normal answer, and afterwards the engines hold no pages and run no request.
 * The same over {@link #richRoutes()}: bodies of every form the routes take (token-id and batch prompts, n and best_of,
 * structured outputs, tools and a history of calls, rid, a prefill's own /generate).
 * Many at once, each beside a normal request, harm none of those either. The header lies (Content-Length, chunked) are
 * {@link HttpHeaderLiesTest}'s.
 */
class HttpFuzzTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final HttpClient HTTP = HttpClient.newBuilder().executor(Executors.newVirtualThreadPerTaskExecutor()).build();
    /** Runs the normal request sent beside each bad one. */
    static final ExecutorService BESIDE = Executors.newVirtualThreadPerTaskExecutor();
    /** The cluster token: the engines' /generate and /abort and the router's POST /workers take it; every case sends it. */
    static final String TOKEN = "http-fuzz-test";
    static final String NORMAL = "{\"prompt\":\"Once upon a time\",\"max_tokens\":4,\"temperature\":0}";
    static EngineStack stack;
    static Router router;
    static String normalText;

    @BeforeContainer
    static void start() throws Exception {
        ModelFiles.Loaded model = ModelFiles.load(null, null);
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 32, 32);
        stack = EngineStack.open(spec, spec, TOKEN, TOKEN);
        router = new Router(List.of(stack.prefillUrl()), List.of(stack.decodeUrl()), model.tokenizer(), model.weights().config.seqLen(), "m",
                "127.0.0.1", 0, TOKEN);
        normalText = RouterCalls.ok(router.port(), "/v1/completions", NORMAL).path("choices").get(0).path("text").asText();
    }

    @AfterContainer
    static void stop() {
        if (router != null) router.close();
        if (stack != null) stack.close();
    }

    /**
     * Many bad requests at once, each beside a normal one: none of the bad is a 5xx (but /workers' documented 502), every
     * normal one gets its normal answer, and nothing is held afterwards.
     */
    @Example
    void manyBadRequestsAtOnceHarmNoneBesideThem() throws Exception {
        Random random = new Random(20261207);
        List<String> faults = Collections.synchronizedList(new ArrayList<>());
        for (int round = 0; round < 4; round++) {
            List<Thread> running = new ArrayList<>();
            for (int i = 0; i < 40; i++) {
                Case c = mutate(routes().get(random.nextInt(routes().size())), random.nextInt(100), random.nextInt(Integer.MAX_VALUE));
                running.add(Thread.ofVirtual().start(() -> {
                    try {
                        HttpResponse<String> r = send(c);
                        if (r.statusCode() >= 500 && !(r.statusCode() == 502 && c.route().name().equals("workers"))) {
                            faults.add(c + " -> " + r.statusCode() + " " + r.body());
                        }
                    } catch (Exception e) {
                        faults.add(c + " -> " + e);
                    }
                }));
                running.add(Thread.ofVirtual().start(() -> {
                    try {
                        HttpResponse<String> r = RouterCalls.post(router.port(), "/v1/completions", NORMAL);
                        if (r.statusCode() != 200 || !normalText.equals(JSON.readTree(r.body()).path("choices").path(0).path("text").asText())) {
                            faults.add("the normal request -> " + r.statusCode() + " " + r.body());
                        }
                    } catch (Exception e) {
                        faults.add("the normal request -> " + e);
                    }
                }));
            }
            for (Thread t : running) t.join();
        }
        assertEquals(List.of(), faults);
        assertIdle("bad requests at once");
    }

    /** Every engine page given back and no request running on either engine, within 20 s. */
    static void assertIdle(Object after) throws Exception {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        int p, d, running;
        do {
            p = stack.prefill.outstanding().get(5, TimeUnit.SECONDS);
            d = stack.decode.outstanding().get(5, TimeUnit.SECONDS);
            running = stack.prefill.inFlight() + stack.decode.inFlight();
            if (p == 0 && d == 0 && running == 0) return;
            Thread.sleep(10);
        } while (System.nanoTime() < until);
        fail("after " + after + ": prefill pages " + p + ", decode pages " + d + ", in flight " + running);
    }

    static HttpResponse<String> post(int port, String path, String body) throws Exception {
        return HTTP.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path)).header("Authorization", "Bearer " + TOKEN)
                .POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
    }

    /** The 400's error object, after asserting it is a 400. */
    static JsonNode refused(HttpResponse<String> r, String what) throws Exception {
        assertEquals(400, r.statusCode(), what + " -> " + r.body());
        return JSON.readTree(r.body()).path("error");
    }

    static HttpResponse<String> postBytes(int port, String path, byte[] body) throws Exception {
        return HTTP.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path)).header("Authorization", "Bearer " + TOKEN)
                .POST(HttpRequest.BodyPublishers.ofByteArray(body)).build(), HttpResponse.BodyHandlers.ofString());
    }

    /**
     * Text the router's tokenizer cannot encode is the client's fault: a router over this stack whose tokenizer lacks the
     * byte-fallback tokens past 0x60 ({@link RouterErrorsTest#withoutHighByteTokens}: every lowercase letter) refuses every
     * route's body with text in it (each plain and rich body of the router's routes) with a 4xx and its error object,
     * never a 5xx; the text ones with the tokenizer's 400 naming the route's field. This suite's own tokenizer has every
     * byte's token, so its cases never meet that refusal, which the tokenizer reports with an IllegalArgumentException (a
     * 500 where a route does not answer it: Http.handle's).
     */
    @Example
    void textTheRoutersTokenizerCannotEncodeIsA4xxNeverA500() throws Exception {
        Path file = Files.createTempFile("http-fuzz-tokenizer", ".bin");
        try (Router small = new Router(List.of(stack.prefillUrl()), List.of(stack.decodeUrl()), RouterErrorsTest.withoutHighByteTokens(file),
                512, "m", "127.0.0.1", 0, TOKEN)) {
            Map<String, String> fields = Map.of("completions", "prompt", "chat", "messages", "generate", "text", "tokenize", "prompt");
            List<Route> all = new ArrayList<>(routes());
            all.addAll(richRoutes());
            for (Route r : all) {
                if (r.engine() != null || r.name().equals("workers")) continue; // no text: the engines' and /workers' bodies
                HttpResponse<String> a = post(small.port(), r.path(), r.body());
                String what = r + " -> " + a.statusCode() + " " + a.body();
                assertTrue(a.statusCode() >= 400 && a.statusCode() < 500, what);
                JsonNode e = JSON.readTree(a.body()).path("error");
                assertTrue(e.path("message").isTextual() && e.path("type").isTextual() && e.has("param"), what);
                if (fields.containsKey(r.name())) {
                    assertEquals(fields.get(r.name()), e.path("param").asText(null), what);
                    assertTrue(e.path("message").asText().startsWith("cannot encode byte 0x"), what);
                }
            }
        } finally {
            Files.delete(file);
        }
        assertIdle("text the router's tokenizer cannot encode");
    }

    /** A negative room on an engine's /abort named no field: its param was null. */
    @Example
    void aNegativeRoomNamesBootstrapRoom() throws Exception {
        for (String url : List.of(stack.prefillUrl(), stack.decodeUrl())) {
            for (String path : List.of("/abort", "/generate")) {
                JsonNode e = refused(post(EngineInputTest.port(url), path, "{\"bootstrap_room\":-1,\"input_ids\":[1,2],\"bootstrap_addr\":\""
                        + stack.addr + "\",\"max_new_tokens\":2}"), url + path);
                assertEquals("bootstrap_room", e.path("param").asText(null), url + path + " -> " + e);
                assertEquals("bootstrap_room must be >= 0, got -1", e.path("message").asText(), url + path + " -> " + e);
            }
        }
    }

    /**
     * Malformed UTF-8 the JSON parser took silently (an overlong '/', a lone surrogate's bytes, a code point past U+10FFFF,
     * read as two lone surrogates) is a 400 naming the bytes and their offset, on the router and on an engine alike.
     */
    @Example
    void aBodyOfMalformedUtf8IsA400NamingTheBytes() throws Exception {
        byte[][] bad = {{(byte) 0xc0, (byte) 0xaf}, {(byte) 0xed, (byte) 0xa0, (byte) 0x80}, {(byte) 0xf4, (byte) 0x90, (byte) 0x80, (byte) 0x80}};
        String[] named = {"C0", "ED", "F4"};
        for (int i = 0; i < bad.length; i++) {
            for (String[] at : new String[][] {{"router", "/tokenize", "{\"prompt\":\"ab"}, {"router", "/v1/completions", "{\"stop\":\"x"},
                    {"decode", "/abort", "{\"x\":\""}}) {
                byte[] head = at[2].getBytes(StandardCharsets.UTF_8), tail = "\",\"prompt\":\"a\",\"bootstrap_room\":1}".getBytes(StandardCharsets.UTF_8);
                byte[] body = new byte[head.length + bad[i].length + tail.length];
                System.arraycopy(head, 0, body, 0, head.length);
                System.arraycopy(bad[i], 0, body, head.length, bad[i].length);
                System.arraycopy(tail, 0, body, head.length + bad[i].length, tail.length);
                int port = at[0].equals("router") ? router.port() : EngineInputTest.port(stack.decodeUrl());
                JsonNode e = refused(postBytes(port, at[1], body), at[1] + " " + named[i]);
                String message = e.path("message").asText();
                assertTrue(message.startsWith("the request body is not valid UTF-8: malformed bytes " + named[i]) && message.endsWith(" at byte " + head.length),
                        at[1] + " -> " + e);
            }
        }
        // A byte order mark is still no fault, and well-formed text of every length still reads.
        byte[] bom = "\uFEFF{\"prompt\":\"\u00e9\uD83D\uDE00\"}".getBytes(StandardCharsets.UTF_8);
        HttpResponse<String> ok = postBytes(router.port(), "/tokenize", bom);
        assertEquals(200, ok.statusCode(), ok.body());
    }

    /** Half a surrogate pair as a stop string could match the first half of an emoji's pair and cut the answer inside it. */
    @Example
    void aStopStringWithALoneSurrogateIsA400() throws Exception {
        String[][] cases = {{"/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":2,\"stop\":[\"a\",\"\\ud83d\"]}", "stop"},
                {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"Once\"}],\"max_tokens\":2,\"stop\":\"x\\ude00\"}", "stop"},
                {"/generate", "{\"text\":\"Once\",\"sampling_params\":{\"max_new_tokens\":2,\"stop\":\"\\ud800\"}}", "sampling_params.stop"}};
        for (String[] c : cases) {
            JsonNode e = refused(post(router.port(), c[0], c[1]), c[1]);
            assertEquals(c[2], e.path("param").asText(null), c[1] + " -> " + e);
            assertTrue(e.path("message").asText().contains("unpaired UTF-16 surrogate"), c[1] + " -> " + e);
        }
        assertIdle("the stop strings");
    }

    /**
     * Every POST route asked with another method (with the valid body, or none; /workers' own GET, HEAD and DELETE aside),
     * at a path under it or with a query: a 4xx with
     * OpenAI's error object, and a HEAD's answer has no body.
     */
    @Example
    void anotherMethodOrPathIsA4xxWithAnErrorObject() throws Exception {
        List<String> faults = new ArrayList<>();
        for (Route r : routes()) {
            for (String method : List.of("GET", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "HEAD", "FOO")) {
                // /workers: GET and HEAD list the workers, DELETE removes one (WorkersTest's)
                if (r.name().equals("workers") && List.of("GET", "HEAD", "DELETE").contains(method)) continue;
                for (String path : List.of(r.path(), r.path() + "/x", r.path() + "?stream=true")) {
                    HttpRequest.Builder b = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + r.port() + path)).timeout(Duration.ofSeconds(60))
                            .header("Authorization", "Bearer " + TOKEN);
                    b.method(method, method.equals("GET") || method.equals("HEAD") || method.equals("TRACE") ? HttpRequest.BodyPublishers.noBody()
                            : HttpRequest.BodyPublishers.ofString(r.body()));
                    HttpResponse<String> a = HTTP.send(b.build(), HttpResponse.BodyHandlers.ofString());
                    String what = method + " " + r.port() + path + " -> " + a.statusCode() + " " + a.body();
                    if (path.contains("?") && method.equals("FOO") && a.statusCode() < 300) continue;
                    if (a.statusCode() >= 500 || a.statusCode() < 400 && !(path.contains("?") && a.statusCode() == 200)) {
                        faults.add(what);
                    } else if (method.equals("HEAD")) {
                        if (!a.body().isEmpty()) faults.add(what);
                    } else if (a.statusCode() >= 400 && !JSON.readTree(a.body()).path("error").path("message").isTextual()) {
                        faults.add(what);
                    }
                }
            }
        }
        assertEquals(List.of(), faults);
        assertIdle("other methods");
    }

    /**
     * Wide values near the body limit: a field holding tens of thousands of entries (prompts, messages, stop strings,
     * logit_bias keys, tools, choices, rids, token ids) is answered as any bad request is (check), within its bound.
     */
    @Example
    void wideValuesAreRefusedOrServedAndHarmNoOther() throws Exception {
        Route completions = routes().get(0), chat = routes().get(1), generate = routes().get(2);
        String[][] wide = {
                {"completions", "prompt", "[" + "\"a\",".repeat(100_000) + "\"a\"]"},
                {"completions", "prompt", "[" + "1,".repeat(300_000) + "1]"},
                {"completions", "prompt", "[" + "[1],".repeat(100_000) + "[1]]"},
                {"completions", "stop", "[" + "\"ab\",".repeat(100_000) + "\"a\"]"},
                {"completions", "logit_bias", "{" + IntStream.range(0, 60_000).mapToObj(i -> "\"" + i + "\":1").collect(
                        Collectors.joining(",")) + "}"},
                {"chat", "messages", "[" + "{\"role\":\"user\",\"content\":\"a\"},".repeat(30_000) + "{\"role\":\"user\",\"content\":\"a\"}]"},
                {"chat", "messages", "[{\"role\":\"user\",\"content\":[" + "{\"type\":\"text\",\"text\":\"a\"},".repeat(30_000)
                        + "{\"type\":\"text\",\"text\":\"a\"}]}]"},
                {"chat", "tools", "[" + IntStream.range(0, 8_000).mapToObj(i -> "{\"type\":\"function\",\"function\":{\"name\":\"f" + i
                        + "\"}}").collect(Collectors.joining(",")) + "]"},
                {"chat", "guided_choice", "[" + IntStream.range(0, 50_000).mapToObj(i -> "\"c" + i + "\"").collect(
                        Collectors.joining(",")) + "]"},
                {"generate", "text", "[" + "\"a\",".repeat(100_000) + "\"a\"]"},
                {"generate", "sampling_params.stop_token_ids", "[" + "2,".repeat(200_000) + "2]"},
        };
        for (String[] w : wide) {
            Route r = w[0].equals("completions") ? completions : w[0].equals("chat") ? chat : generate;
            String pointer = "/" + w[1].replace('.', '/');
            check(new Case(r, replacedOrAdded(r.body(), pointer, utf8(w[2])), "application/json", w[1], "wide " + w[1]));
        }
    }

    /** As {@link #replaced}, adding the field where the body has none. */
    static byte[] replacedOrAdded(String body, String pointer, byte[] raw) throws Exception {
        JsonNode copy = JSON.readTree(body);
        String parent = pointer.substring(0, pointer.lastIndexOf('/')), last = pointer.substring(pointer.lastIndexOf('/') + 1);
        ((ObjectNode) (parent.isEmpty() ? copy : copy.at(parent))).put(last, 0);
        return replaced(JSON.writeValueAsString(copy), pointer, raw);
    }

    /** A prompt field sent as null, and no other: the 400 named the other field (text for input_ids, prompt for messages). */
    @Example
    void aPromptFieldSentAsNullIsTheOneNamed() throws Exception {
        String[][] cases = {{"/generate", "{\"input_ids\":null,\"sampling_params\":{\"max_new_tokens\":2}}", "input_ids"},
                {"/generate", "{\"text\":null}", "text"}, {"/generate", "{}", "text"},
                {"/tokenize", "{\"messages\":null}", "messages"}, {"/tokenize", "{\"prompt\":null}", "prompt"}, {"/tokenize", "{}", "prompt"}};
        for (String[] c : cases) {
            JsonNode e = refused(post(router.port(), c[0], c[1]), c[1]);
            assertEquals(c[2], e.path("param").asText(null), c[0] + " " + c[1] + " -> " + e);
        }
    }

    /** {@code stream_options.include_usage} of the wrong type was named {@code include_usage}, not from the body's top. */
    @Example
    void aBadIncludeUsageNamesStreamOptions() throws Exception {
        JsonNode e = refused(post(router.port(), "/v1/completions", "{\"prompt\":\"Once\",\"stream\":true,\"stream_options\":{\"include_usage\":\"yes\"}}"),
                "include_usage");
        assertEquals("stream_options.include_usage", e.path("param").asText(null), e.toString());
        assertEquals("stream_options.include_usage must be true or false, got \"yes\"", e.path("message").asText(), e.toString());
    }

    /** A POST route and a valid body of it. */
    record Route(String name, String path, String engine, String body) {
        int port() {
            return engine == null ? router.port() : EngineInputTest.port(engine.equals("prefill") ? stack.prefillUrl() : stack.decodeUrl());
        }

        @Override
        public String toString() {
            return name;
        }
    }

    static List<Route> routes() {
        return List.of(
                new Route("completions", "/v1/completions", null, "{\"model\":\"m\",\"prompt\":\"Once upon a time\",\"max_tokens\":4,\"temperature\":0,"
                        + "\"top_p\":1,\"seed\":7,\"n\":1,\"logprobs\":1,\"echo\":false,\"stop\":[\"\\n\\n\"],\"stream\":false,\"frequency_penalty\":0,"
                        + "\"logit_bias\":{\"1\":0},\"min_tokens\":1,\"user\":\"u\"}"),
                new Route("chat", "/v1/chat/completions", null, "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                        + "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Once upon a time\"}]}],\"max_completion_tokens\":4,"
                        + "\"temperature\":0,\"stream\":true,\"stream_options\":{\"include_usage\":true},\"logprobs\":true,\"top_logprobs\":1,"
                        + "\"presence_penalty\":0.5,\"top_k\":5}"),
                new Route("generate", "/generate", null, "{\"text\":\"Once upon a time\",\"sampling_params\":{\"max_new_tokens\":4,\"temperature\":0,"
                        + "\"top_k\":5,\"stop\":[\".\"],\"min_new_tokens\":1,\"stop_token_ids\":[2],\"repetition_penalty\":1.1},\"stream\":false,"
                        + "\"return_logprob\":true,\"top_logprobs_num\":1,\"logprob_start_len\":0}"),
                new Route("tokenize", "/tokenize", null, "{\"prompt\":\"Once upon a time\",\"add_special_tokens\":true,\"return_token_strs\":true}"),
                new Route("detokenize", "/detokenize", null, "{\"tokens\":[1,403,407]}"),
                new Route("workers", "/workers", null, "{\"url\":\"" + stack.decodeUrl() + "\",\"worker_type\":\"decode\"}"),
                new Route("prefill abort", "/abort", "prefill", "{\"bootstrap_room\":12345}"),
                new Route("decode abort", "/abort", "decode", "{\"bootstrap_room\":12346}"));
    }

    /**
     * Valid bodies of every form the generation routes take besides {@link #routes()}' plain ones: a prompt of token ids, a
     * list of prompts, a list of id lists; n with best_of, echo, logprobs; each structured output (response_format
     * json_schema, guided_regex, guided_grammar, guided_choice, /generate's sampling_params json_schema / regex / ebnf);
     * tools with tool_choice and a history of calls and tool answers; logit_bias, stream with stream_options, rid.
     */
    static List<Route> richRoutes() {
        return List.of(
                new Route("completions ids", "/v1/completions", null, "{\"prompt\":[1,403,407],\"max_tokens\":3,\"n\":2,\"best_of\":3,"
                        + "\"temperature\":0.8,\"top_p\":0.9,\"top_k\":40,\"seed\":3,\"logprobs\":2,\"echo\":true,\"logit_bias\":{\"5\":-100},"
                        + "\"presence_penalty\":0.1,\"stop\":\"zz\"}"),
                new Route("completions list", "/v1/completions", null, "{\"prompt\":[\"Once\",\"upon\"],\"max_tokens\":3,\"temperature\":0,"
                        + "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"o\",\"strict\":true,\"schema\":{\"type\":\"object\","
                        + "\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":0},\"b\":{\"type\":\"string\",\"maxLength\":4}},"
                        + "\"required\":[\"a\"]}}}}"),
                new Route("completions regex", "/v1/completions", null, "{\"prompt\":[[1,403],[1,407]],\"max_tokens\":3,\"guided_regex\":\"[a-z ]{1,8}\","
                        + "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"logprobs\":1}"),
                new Route("completions grammar", "/v1/completions", null, "{\"prompt\":\"Once\",\"max_tokens\":3,"
                        + "\"guided_grammar\":\"root ::= \\\"a\\\" root | \\\"b\\\"\",\"min_tokens\":1,\"frequency_penalty\":0.2}"),
                new Route("chat tools", "/v1/chat/completions", null, "{\"messages\":[{\"role\":\"developer\",\"content\":\"Use tools.\"},"
                        + "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Weather?\"}],\"name\":\"ann\"},"
                        + "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\","
                        + "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]},"
                        + "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"Sunny.\"}],"
                        + "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"d\",\"strict\":true,"
                        + "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"enum\":[\"Paris\",\"Rome\"]}},"
                        + "\"required\":[\"city\"]}}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},"
                        + "\"parallel_tool_calls\":false,\"max_tokens\":4,\"temperature\":0,\"n\":1,\"seed\":1,\"user\":\"u\"}"),
                new Route("chat choice", "/v1/chat/completions", null, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"Pick\"},"
                        + "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"ok\"}]},{\"role\":\"user\",\"content\":\"again\"}],"
                        + "\"guided_choice\":[\"yes\",\"no\"],\"max_completion_tokens\":4,\"stream\":true,\"logprobs\":true,\"top_logprobs\":2,"
                        + "\"stop\":[\"x\",\"y\"],\"logit_bias\":{\"7\":3.5}}"),
                new Route("generate batch", "/generate", null, "{\"text\":[\"Once\",\"upon\"],\"rid\":[\"fz-a\",\"fz-b\"],"
                        + "\"sampling_params\":{\"max_new_tokens\":3,\"temperature\":0.5,\"seed\":2,\"json_schema\":\"{\\\"type\\\":\\\"string\\\"}\"},"
                        + "\"return_logprob\":true,\"top_logprobs_num\":2}"),
                new Route("generate ids", "/generate", null, "{\"input_ids\":[1,403,407],\"rid\":\"fz-c\",\"stream\":true,"
                        + "\"sampling_params\":{\"max_new_tokens\":3,\"regex\":\"[a-z ]+\",\"logit_bias\":{\"5\":1},\"top_p\":0.5,"
                        + "\"min_p\":0.1,\"ignore_eos\":true,\"skip_special_tokens\":true}}"),
                new Route("generate ebnf", "/generate", null, "{\"text\":\"Once\",\"sampling_params\":{\"max_new_tokens\":2,"
                        + "\"ebnf\":\"root ::= [a-z]+\",\"no_stop_trim\":false,\"stop_token_ids\":[2]}}"),
                // A prefill's own /generate, as the router calls it; prefill_only: computed and answered with no decode to wait for.
                new Route("prefill generate", "/generate", "prefill", "{\"bootstrap_room\":4242,\"input_ids\":[1,403,407],\"prefill_only\":true,"
                        + "\"sampling_params\":{\"max_new_tokens\":2,\"temperature\":0.7,\"top_k\":5,\"seed\":9,\"regex\":\"[a-z]+\","
                        + "\"logit_bias\":{\"5\":-2}},\"return_logprob\":true,\"top_logprobs_num\":2,\"logprob_start_len\":0}"));
    }

    /** Every rich body as it is: a 200 (so each mutation starts from a valid request). */
    @Example
    void everyRichBodyIsServed() throws Exception {
        List<String> refused = new ArrayList<>();
        for (Route r : richRoutes()) {
            HttpResponse<String> ok = post(r.port(), r.path(), r.body());
            if (ok.statusCode() != 200) refused.add(r + " -> " + ok.statusCode() + " " + ok.body());
        }
        assertEquals(List.of(), refused);
        assertIdle("the rich bodies");
    }

    @Provide
    Arbitrary<Case> richCases() {
        return Combinators.combine(Arbitraries.of(richRoutes()), Arbitraries.integers().between(0, 99), Arbitraries.integers().between(0, Integer.MAX_VALUE))
                .as((r, kind, pick) -> {
                    try {
                        return mutate(r, kind, pick);
                    } catch (Exception e) {
                        throw new IllegalStateException(e);
                    }
                });
    }

    /** The property over the rich bodies: 400 cases of its own fixed seed (see the plain bodies' property for why fixed). */
    @Property(tries = 400, shrinking = ShrinkingMode.OFF, seed = "20261208")
    void aBadRichRequestIsRefusedNamingItsFieldAndHarmsNoOther(@ForAll("richCases") Case c) throws Exception {
        check(c);
    }

    /** Reads numbers as written (1e999999999 stays a number, not Infinity, when written back). */
    static final ObjectMapper EXACT = JsonMapper.builder().enable(DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS)
            .enable(DeserializationFeature.USE_BIG_INTEGER_FOR_INTS).build();

    /**
     * Two to four fields of {@code r}'s body changed at once, each to one of {@link #VALUES} (those JSON reads), drawn from
     * {@code pick}: fields whose checks meet (n with best_of, stream with stream_options, tools with tool_choice).
     * Its field is the fields changed, joined by {@code |}.
     */
    static Case mutateMany(Route r, int pick) throws Exception {
        Random random = new Random(pick);
        JsonNode copy = EXACT.readTree(r.body());
        List<String[]> holes = holes(copy, "", "", new ArrayList<>());
        holes.removeIf(h -> h[0].equals("prefill_only")); // as mutate's
        List<String> fields = new ArrayList<>();
        int count = 2 + random.nextInt(3);
        for (int i = 0; i < count; i++) {
            String[] hole = holes.get(random.nextInt(holes.size()));
            String parent = hole[1].substring(0, hole[1].lastIndexOf('/')), last = hole[1].substring(hole[1].lastIndexOf('/') + 1);
            JsonNode p = parent.isEmpty() ? copy : copy.at(parent);
            JsonNode v;
            try {
                v = EXACT.readTree(VALUES.get(random.nextInt(VALUES.size())));
            } catch (Exception notJson) { // NaN, Infinity: mutate's alone
                continue;
            }
            if (p instanceof ObjectNode o && o.has(last)) o.set(last, v);
            else if (p instanceof ArrayNode a && last.matches("[0-9]+") && Integer.parseInt(last) < a.size()) a.set(Integer.parseInt(last), v);
            else continue; // a field inside one changed before
            fields.add(hole[0]);
        }
        return new Case(r, EXACT.writeValueAsBytes(copy), "application/json", fields.isEmpty() ? null : String.join("|", fields), "fields " + fields);
    }

    @Provide
    Arbitrary<Case> manyFieldCases() {
        return Combinators.combine(Arbitraries.of(richRoutes()), Arbitraries.integers().between(0, Integer.MAX_VALUE)).as((r, pick) -> {
            try {
                return mutateMany(r, pick);
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
    }

    /** Several fields wrong at once: the 400 names one of them (or a field beside them they constrain). */
    @Property(tries = 300, shrinking = ShrinkingMode.OFF, seed = "20261209")
    void manyBadFieldsAtOnceAreRefusedNamingOne(@ForAll("manyFieldCases") Case c) throws Exception {
        check(c);
    }

    /** One bad request: its route, body bytes, Content-Type (null: none), and the field mutated (null: the body as a whole). */
    record Case(Route route, byte[] body, String contentType, String field, String what) {
        @Override
        public String toString() {
            String shown = new String(body, StandardCharsets.UTF_8);
            return route + " [" + what + "] " + (shown.length() > 300 ? shown.substring(0, 300) + "…(" + body.length + " bytes)" : shown);
        }
    }

    /** Raw JSON values of the wrong type, size or sign, or not JSON at all. */
    static final List<String> VALUES = List.of("null", "true", "false", "0", "-1", "1", "2", "65", "2147483647", "2147483648", "-2147483649",
            "9223372036854775807", "9223372036854775808", "-9223372036854775809", "1e308", "1e309", "-1e309", "1e-400", "0.5", "-0.0",
            "3.4028236e38", "1e999999999", "-1e999999999", "1e-999999999", "123456789012345678901234567890", "NaN", "Infinity", "-Infinity",
            "\"\"", "\"x\"", "\"\\ud800\"", "\"a\\udc00b\"", "\"a\\u0000b\"", "\"12\"", "\"true\"", "[]", "[null]", "[1,\"a\"]", "[[1,2],[3]]",
            "{}", "{\"a\":1}", "{\"type\":\"text\"}", "\"\uD83D\uDE00\u00e9\"", "\"NaN\"", "\"-1\"", "\"1e308\"", "-1e308", "1.0",
            "4294967296", "18446744073709551616", "[[]]", "[{}]", "{\"\":null}",
            // exponents past an int's range: Jackson's BigDecimal read throws a NumberFormatException (an IllegalArgumentException), not
            // a parse error, and a schema bound of them overflowed the digits check
            "1e9999999999999", "-1e-9999999999", "1e2147483648", "0e99999999999999999999");

    /** Raw bytes that are no valid UTF-8 (or UTF-8 of a lone surrogate), placed inside a string value. */
    static final List<byte[]> BAD_UTF8 = List.of(new byte[] {'"', 'a', (byte) 0xff, 'b', '"'}, new byte[] {'"', (byte) 0xc3, '"'},
            new byte[] {'"', (byte) 0xed, (byte) 0xa0, (byte) 0x80, '"'}, new byte[] {'"', (byte) 0xc0, (byte) 0xaf, '"'},
            new byte[] {'"', (byte) 0xf4, (byte) 0x90, (byte) 0x80, (byte) 0x80, '"'}, new byte[] {'"', (byte) 0xe2, (byte) 0x82, '"'});

    static String deep(String open, String close, int depth) {
        return open.repeat(depth) + "1" + close.repeat(depth);
    }

    /** Where a value can be mutated: every field of the body, nested ones with their path ({@code sampling_params.top_k}, {@code messages[1].content}). */
    static List<String[]> holes(JsonNode body, String at, String pointer, List<String[]> out) {
        if (body.isObject()) {
            for (Iterator<Map.Entry<String, JsonNode>> it = body.fields(); it.hasNext();) {
                Map.Entry<String, JsonNode> e = it.next();
                String path = at.isEmpty() ? e.getKey() : at + "." + e.getKey();
                out.add(new String[] {path, pointer + "/" + e.getKey()});
                holes(e.getValue(), path, pointer + "/" + e.getKey(), out);
            }
        } else if (body.isArray()) {
            for (int i = 0; i < body.size(); i++) {
                out.add(new String[] {at + "[" + i + "]", pointer + "/" + i});
                holes(body.get(i), at + "[" + i + "]", pointer + "/" + i, out);
            }
        }
        return out;
    }

    /** {@code body} with the value at {@code pointer} replaced by {@code raw}'s bytes. */
    static byte[] replaced(String body, String pointer, byte[] raw) throws Exception {
        JsonNode copy = JSON.readTree(body);
        String parent = pointer.substring(0, pointer.lastIndexOf('/')), last = pointer.substring(pointer.lastIndexOf('/') + 1);
        JsonNode p = parent.isEmpty() ? copy : copy.at(parent);
        if (p instanceof ObjectNode o) o.put(last, "\u0000hole\u0000");
        else ((ArrayNode) p).set(Integer.parseInt(last), "\u0000hole\u0000");
        String text = JSON.writeValueAsString(copy);
        String hole = JSON.writeValueAsString("\u0000hole\u0000");
        int at = text.indexOf(hole);
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        out.write(text.substring(0, at).getBytes(StandardCharsets.UTF_8));
        out.write(raw);
        out.write(text.substring(at + hole.length()).getBytes(StandardCharsets.UTF_8));
        return out.toByteArray();
    }

    static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    @Provide
    Arbitrary<Case> cases() {
        Arbitrary<Route> route = Arbitraries.of(routes());
        return Combinators.combine(route, Arbitraries.integers().between(0, 99), Arbitraries.integers().between(0, Integer.MAX_VALUE))
                .as((r, kind, pick) -> {
                    try {
                        return mutate(r, kind, pick);
                    } catch (Exception e) {
                        throw new IllegalStateException(e);
                    }
                });
    }

    /** One mutation of {@code r}'s body: {@code kind} chooses the sort, {@code pick} the field and value. */
    static Case mutate(Route r, int kind, int pick) throws Exception {
        String body = r.body();
        List<String[]> holes = holes(JSON.readTree(body), "", "", new ArrayList<>());
        // A prefill's /generate without prefill_only waits for its decode up to the bootstrap timeout (300 s), as designed:
        // the router always sends one; so that field stays as it is.
        holes.removeIf(h -> h[0].equals("prefill_only"));
        String[] hole = holes.get(pick % holes.size());
        String ct = "application/json";
        if (kind < 50) { // a field's value of another type or size
            String v = VALUES.get(pick / holes.size() % VALUES.size());
            return new Case(r, replaced(body, hole[1], utf8(v)), ct, hole[0], "value " + v);
        }
        if (kind < 56) { // a value nested deeper than anything reads (and deeper than the parser takes)
            int depth = new int[] {50, 900, 1100, 5000, 10_000, 100_000}[pick % 6];
            String v = pick % 8 < 4 ? deep("[", "]", depth) : deep("{\"a\":", "}", depth);
            return new Case(r, replaced(body, hole[1], utf8(v)), ct, hole[0], "depth " + depth);
        }
        if (kind < 62) { // invalid UTF-8
            byte[] v = BAD_UTF8.get(pick / holes.size() % BAD_UTF8.size());
            return new Case(r, replaced(body, hole[1], v), ct, hole[0], "bad utf-8");
        }
        if (kind < 66) { // the field left out
            JsonNode copy = JSON.readTree(body);
            String parent = hole[1].substring(0, hole[1].lastIndexOf('/')), last = hole[1].substring(hole[1].lastIndexOf('/') + 1);
            JsonNode p = parent.isEmpty() ? copy : copy.at(parent);
            if (p instanceof ObjectNode o) o.remove(last);
            else ((ArrayNode) p).remove(Integer.parseInt(last));
            return new Case(r, JSON.writeValueAsBytes(copy), ct, hole[0], "removed");
        }
        if (kind < 70) { // a key twice: the first key of the body again, with another value
            String first = JSON.readTree(body).fieldNames().next();
            String v = VALUES.get(pick % VALUES.size());
            return new Case(r, utf8(body.substring(0, body.length() - 1) + ",\"" + first + "\":" + v + "}"), ct, null, "duplicate " + first);
        }
        if (kind < 74) { // an unknown key, at the top or in a nested object
            String v = VALUES.get(pick % VALUES.size());
            return new Case(r, utf8("{\"zz_unknown\":" + v + "," + body.substring(1)), ct, null, "unknown key");
        }
        if (kind < 80) { // the body cut short
            int at = pick % body.length();
            return new Case(r, utf8(body.substring(0, at)), ct, null, "truncated at " + at);
        }
        if (kind < 84) { // another Content-Type, or none
            String other = new String[] {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", null,
                    "application/json; charset=latin1"}[pick % 5];
            return new Case(r, utf8(body), other, null, "content-type " + other);
        }
        if (kind < 88) { // not an object
            String v = new String[] {"", " ", "null", "[]", "[" + body + "]", "\"x\"", "1", body + body, body + "]", "\uFEFF" + body,
                    "{", "}", "{\"a\"}", "{,}"}[pick % 14];
            return new Case(r, utf8(v), ct, null, "body " + (v.length() > 20 ? v.substring(0, 20) : v));
        }
        if (kind < 94) { // a string near the body limit (a little under or over it)
            int size = Http.MAX_BODY_BYTES - body.length() - 64 + (pick % 3 == 0 ? 200 : 0);
            String v = pick % 2 == 0 ? "\"" + "a".repeat(size) + "\"" : "\"" + "é".repeat(size / 2) + "\"";
            return new Case(r, replaced(body, hole[1], utf8(v)), ct, hole[0], "long string");
        }
        // a number with many digits, where numbers go
        String v = pick % 2 == 0 ? "1" + "0".repeat(2000 + pick % 5000) : "0." + "0".repeat(2000) + "1";
        return new Case(r, replaced(body, hole[1], utf8(v)), ct, hole[0], "long number");
    }

    static HttpResponse<String> send(Case c) throws Exception {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + c.route().port() + c.route().path()))
                .timeout(Duration.ofSeconds(60)).header("Authorization", "Bearer " + TOKEN).POST(HttpRequest.BodyPublishers.ofByteArray(c.body()));
        if (c.contentType() != null) b.header("Content-Type", c.contentType());
        return HTTP.send(b.build(), HttpResponse.BodyHandlers.ofString());
    }

    /** The first name of a field's path: {@code sampling_params} of {@code sampling_params.top_k}, {@code messages} of {@code messages[1].role}. */
    static String root(String path) {
        int dot = path.indexOf('.'), bracket = path.indexOf('[');
        int end = dot < 0 ? bracket : bracket < 0 ? dot : Math.min(dot, bracket);
        return end < 0 ? path : path.substring(0, end);
    }

    /**
     * The property over 500 cases of a fixed seed: the same cases every run, so a build fails only for a change of its
     * own (a seed drawn per run, against a whole serving stack, could find a new case in any CI run and fail a build that
     * changed nothing). To explore, run it with another seed (or none: jqwik then draws one and prints it); a case found
     * that way becomes an {@code @Example} of its own, or the fixed seed moves to one that holds it.
     */
    @Property(tries = 500, shrinking = ShrinkingMode.OFF, seed = "20261207")
    void aBadRequestIsRefusedNamingItsFieldAndHarmsNoOther(@ForAll("cases") Case c) throws Exception {
        check(c);
    }

    /** The property of one case: thrown as an AssertionError naming the case when it does not hold. */
    static void check(Case c) throws Exception {
        CompletableFuture<HttpResponse<String>> beside = CompletableFuture.supplyAsync(() -> {
            try {
                return RouterCalls.post(router.port(), "/v1/completions", NORMAL);
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        }, BESIDE);
        HttpResponse<String> r = send(c);
        int s = r.statusCode();
        boolean documented5xx = s == 503 && r.headers().firstValue("Retry-After").isPresent()
                || s == 502 && c.route().name().equals("workers");
        assertTrue(s >= 200 && s < 300 || s >= 400 && s < 500 || documented5xx, c + " -> " + s + " " + r.body());
        if (s >= 400) {
            JsonNode error = JSON.readTree(r.body()).path("error");
            assertTrue(error.path("message").isTextual() && !error.path("message").asText().isBlank(), c + " -> " + r.body());
            assertTrue(error.path("type").isTextual(), c + " -> " + r.body());
            assertTrue(error.has("param") && (error.get("param").isNull() || error.get("param").isTextual()), c + " -> " + r.body());
            String message = error.path("message").asText();
            boolean bodyLevel = message.startsWith("malformed JSON") || message.startsWith("request body over") || message.startsWith("empty request body")
                    || message.startsWith("the request body is not valid UTF-8");
            if (s == 400 && c.field() != null && !bodyLevel) {
                // The field at fault is the one mutated, named from the body's top (sampling_params.top_k, messages[1].role).
                assertTrue(error.path("param").isTextual(), "a 400 of a field names it: " + c + " -> " + r.body());
                // Or a field the mutated one constrains: logprobs false, and top_logprobs is the field that asks too much.
                String named = root(error.path("param").asText());
                // Or, for a field left out, one it could have been sent instead of, the message naming both (text or input_ids).
                // Several changed at once (a|b): any of them.
                boolean ok = JSON.readTree(c.body()).has(named);
                for (String field : c.field().split("\\|")) ok |= named.equals(root(field)) || message.contains(root(field));
                assertTrue(ok, "a 400 of a field names it: " + c + " -> " + r.body());
            }
        } else if (r.headers().firstValue("Content-Type").orElse("").startsWith("text/event-stream")) {
            List<String> lines = r.body().lines().filter(l -> l.startsWith("data: ")).toList();
            assertEquals("data: [DONE]", lines.getLast(), c + " -> " + r.body());
        } else {
            assertNotNull(JSON.readTree(r.body()), c + " -> " + r.body());
        }
        HttpResponse<String> normal = beside.get(60, TimeUnit.SECONDS);
        assertEquals(200, normal.statusCode(), c + ": the request beside it -> " + normal.body());
        assertEquals(normalText, JSON.readTree(normal.body()).path("choices").get(0).path("text").asText(), c + ": the request beside it");
        assertIdle(c);
    }
}
