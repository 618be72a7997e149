package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpServer;
import io.kvferry.engine.model.ModelFiles;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Example;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.lifecycle.AfterContainer;
import net.jqwik.api.lifecycle.BeforeContainer;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.Executors;

import static io.kvferry.engine.http.EngineStubs.answer;
import static io.kvferry.engine.http.EngineStubs.url;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A broken or hostile engine answer (a decode's token, finish or error event, a prefill's answer: a wrong JSON type, a field
 * missing, a token id outside the vocabulary, a negative count, no JSON, a cut stream) is the request's 502 {@code bad_gateway}
 * naming the engine, with the request's id — never a 400 (the client did nothing wrong) or a 500 — and the next request on
 * the same router is served. Scripted engines answer what each case sets.
 */
class RouterBadEngineAnswerTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final HttpClient HTTP = HttpClient.newBuilder().executor(Executors.newVirtualThreadPerTaskExecutor()).build();
    static final String TOKEN = "{\"token\":300,\"logprob\":-0.5,\"top_tokens\":[301],\"top_logprobs\":[-1.0]}";
    static final String FINISH = "{\"finish_reason\":\"length\",\"tokens\":[300],\"timings\":{\"transfer_ms\":1.0,\"first_decode_ms\":1.0,\"bytes\":10}}";
    static final String PREFILL = "{\"bootstrap_room\":1,\"first_token\":300,\"compute_ms\":1.0,\"send_ms\":1.0,\"kv_pages\":1,\"cached_tokens\":0}";

    static HttpServer prefill;
    static HttpServer decode;
    static Router router;
    /** The prefill's 200 answer and the decode's events (each a {@code data:} line; the stream ends after the last). */
    static volatile String prefillBody = PREFILL;
    static volatile List<String> decodeEvents = List.of(TOKEN, FINISH);
    /** The status of the decode's and the prefill's answer (200: the events, the prefill's body). */
    static volatile int decodeStatus = 200;
    static volatile int prefillStatus = 200;

    @BeforeContainer
    static void start() throws IOException {
        prefill = stub(true);
        decode = stub(false);
        router = new Router(List.of(url(prefill)), List.of(url(decode)), ModelFiles.load(null, null).tokenizer(), 512, "m", "127.0.0.1", 0,
                Router.Access.NONE, Router.Admission.UNLIMITED, null);
    }

    @AfterContainer
    static void stop() {
        router.close();
        prefill.stop(0);
        decode.stop(0);
    }

    private static HttpServer stub(boolean isPrefill) throws IOException {
        HttpServer s = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 64);
        s.setExecutor(Executors.newVirtualThreadPerTaskExecutor());
        RouterErrorsTest.answerHealthy(s);
        s.createContext("/abort", ex -> answer(ex, 200, "{}"));
        s.createContext("/generate", ex -> {
            ex.getRequestBody().readAllBytes();
            if (isPrefill || decodeStatus != 200) {
                answer(ex, isPrefill ? prefillStatus : decodeStatus, isPrefill ? prefillBody : "<html>moved</html>");
                return;
            }
            ex.getResponseHeaders().add("Content-Type", "text/event-stream");
            ex.sendResponseHeaders(200, 0);
            try {
                StringBuilder b = new StringBuilder();
                for (String e : decodeEvents) b.append("data: ").append(e).append("\n\n");
                ex.getResponseBody().write(b.toString().getBytes(StandardCharsets.UTF_8));
            } catch (IOException gone) {
                // the router went away
            }
            ex.close();
        });
        s.start();
        return s;
    }

    static HttpResponse<String> post(String path, String body, String id) throws Exception {
        return HTTP.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + router.port() + path)).header("Content-Type", "application/json")
                .header("X-Request-Id", id).POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
    }

    /** The routes a malformed answer is read on: OpenAI's completions and chat with log probabilities, SGLang's, whole and streamed. */
    static final List<String[]> ROUTES = List.of(
            new String[]{"/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":2,\"logprobs\":1}"},
            new String[]{"/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":2,\"logprobs\":1,\"stream\":true}"},
            new String[]{"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":2,\"logprobs\":true,\"top_logprobs\":1}"},
            new String[]{"/generate", "{\"text\":\"Hi\",\"sampling_params\":{\"max_new_tokens\":2},\"return_logprob\":true,\"top_logprobs_num\":1}"},
            new String[]{"/generate", "{\"text\":\"Hi\",\"sampling_params\":{\"max_new_tokens\":2},\"return_logprob\":true,\"top_logprobs_num\":1,"
                    + "\"stream\":true}"});

    /**
     * The answer is a 502 {@code bad_gateway} naming {@code backend} and carrying the id (a stream begun: its error event of
     * that type, then [DONE]); {@code accepted}: a 200 without any error is fine too (a mutation that left a valid answer).
     */
    static void badGateway(HttpResponse<String> r, String id, HttpServer backend, boolean accepted, String what) throws IOException {
        assertEquals(id, r.headers().firstValue("X-Request-Id").orElse(null), what + ": " + r.body());
        boolean streamed = r.headers().firstValue("Content-Type").orElse("").startsWith("text/event-stream");
        JsonNode error;
        if (streamed) {
            assertEquals(200, r.statusCode(), what);
            assertTrue(r.body().endsWith("data: [DONE]\n\n"), what + ": " + r.body());
            error = r.body().lines().filter(l -> l.startsWith("data: {\"error\"")).map(l -> {
                try {
                    return JSON.readTree(l.substring(6)).get("error");
                } catch (IOException e) {
                    throw new AssertionError(e);
                }
            }).findFirst().orElse(null);
        } else {
            assertTrue(r.statusCode() == 502 || accepted && r.statusCode() == 200, what + ": " + r.statusCode() + " " + r.body());
            error = r.statusCode() == 200 ? null : JSON.readTree(r.body()).get("error");
        }
        if (error == null) {
            assertTrue(accepted, what + ": no error: " + r.body());
            return;
        }
        assertEquals("bad_gateway", error.path("type").asText(), what + ": " + r.body());
        assertTrue(error.path("message").asText().contains(url(backend)), what + ": " + r.body());
    }

    /** (a) A token event whose {@code top_tokens} is an object: a NullPointerException in its reading, a 500, before. */
    @Example
    void topTokensAsAnObjectIsA502() throws Exception {
        decodeEvents = List.of("{\"token\":300,\"logprob\":-0.5,\"top_tokens\":{\"a\":1},\"top_logprobs\":[-0.5]}", FINISH);
        try {
            HttpResponse<String> r = post("/v1/completions", ROUTES.getFirst()[1], "bad-top-1");
            assertEquals(502, r.statusCode(), r.body());
            badGateway(r, "bad-top-1", decode, false, "top_tokens an object");
            assertTrue(r.body().contains("top_tokens"), r.body());
        } finally {
            decodeEvents = List.of(TOKEN, FINISH);
        }
        assertEquals(200, post("/v1/completions", ROUTES.getFirst()[1], "after-1").statusCode());
    }

    /** (b) A token id outside the vocabulary: the tokenizer's IllegalArgumentException, a 400 to the client, before. */
    @Example
    void aTokenOutsideTheVocabularyIsA502() throws Exception {
        decodeEvents = List.of("{\"token\":99999}", FINISH);
        try {
            HttpResponse<String> r = post("/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":2}", "bad-token-1");
            assertEquals(502, r.statusCode(), r.body());
            badGateway(r, "bad-token-1", decode, false, "token 99999");
            assertTrue(r.body().contains("99999"), r.body());
        } finally {
            decodeEvents = List.of(TOKEN, FINISH);
        }
    }

    /** A prefill whose 200 is no JSON (its timings and cached tokens read at the end): a 200 without them, before. */
    @Example
    void aPrefillAnswerThatIsNoJsonIsA502() throws Exception {
        prefillBody = "<html>oops</html>";
        try {
            HttpResponse<String> r = post("/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":2}", "bad-prefill-1");
            assertEquals(502, r.statusCode(), r.body());
            badGateway(r, "bad-prefill-1", prefill, false, "prefill no JSON");
        } finally {
            prefillBody = PREFILL;
        }
    }

    /**
     * A prefill's input token log probabilities whose top token id is outside the vocabulary (a prompt-only {@code /generate}:
     * the prefill alone answers): before, passed on as it came (a 200 naming a token the model does not have; with the
     * tokens' text asked, the tokenizer's IllegalArgumentException, a 400).
     */
    @Example
    void anInputTopTokenOutsideTheVocabularyIsA502() throws Exception {
        String body = "{\"input_ids\":[1,5,6],\"sampling_params\":{\"max_new_tokens\":0},\"return_logprob\":true,\"logprob_start_len\":0,"
                + "\"top_logprobs_num\":1}";
        String meta = ",\"meta_info\":{\"input_token_logprobs\":[[null,1,null],[-0.5,5,null],[-0.6,6,null]],\"input_top_logprobs\":[null,TOP,"
                + "[[-0.6,6,null]]]}}";
        prefillBody = PREFILL.substring(0, PREFILL.length() - 1) + meta.replace("TOP", "[[-0.5,5,null]]");
        try {
            assertEquals(200, post("/generate", body, "input-ok").statusCode(), "the valid answer is served");
            prefillBody = PREFILL.substring(0, PREFILL.length() - 1) + meta.replace("TOP", "[[-0.5,99999,null]]");
            HttpResponse<String> r = post("/generate", body, "bad-input-top-1");
            assertEquals(502, r.statusCode(), r.body());
            badGateway(r, "bad-input-top-1", prefill, false, "input top token 99999");
            assertTrue(r.body().contains("input_top_logprobs[1][0]"), r.body());
        } finally {
            prefillBody = PREFILL;
        }
    }

    /**
     * An engine answering a status that is no engine's answer (a redirect, a 204: a proxy in the way, another server on the
     * port) is a 502 naming it: a 500 {@code internal_error} before.
     */
    @Example
    void anAnswerOfAStatusNoEngineGivesIsA502() throws Exception {
        for (int status : new int[]{302, 204}) {
            decodeStatus = status;
            try {
                HttpResponse<String> r = post("/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":2}", "decode-" + status);
                assertEquals(502, r.statusCode(), r.body());
                badGateway(r, "decode-" + status, decode, false, "decode HTTP " + status);
                assertTrue(r.body().contains("answered HTTP " + status), r.body());
            } finally {
                decodeStatus = 200;
            }
            prefillStatus = status;
            try {
                HttpResponse<String> r = post("/generate", "{\"input_ids\":[1,5,6],\"sampling_params\":{\"max_new_tokens\":0}}", "prefill-" + status);
                assertEquals(502, r.statusCode(), r.body());
                badGateway(r, "prefill-" + status, prefill, false, "prefill HTTP " + status);
            } finally {
                prefillStatus = 200;
            }
        }
    }

    /** One broken answer: which event (or the prefill's answer), which field, what in its place. */
    record Mutation(int target, String field, String value) {
        @Override
        public String toString() {
            return (target == 0 ? "token event" : target == 1 ? "finish event" : target == 2 ? "prefill answer" : "whole event") + " "
                    + field + " -> " + value;
        }
    }

    @Provide
    Arbitrary<Mutation> mutations() {
        Arbitrary<String> values = Arbitraries.of("\"x\"", "{}", "[]", "null", "-1", "1e40", "99999", "1.5", "true", "[{}]", "[-1]", "[\"a\"]",
                "2147483648", "-1e40", "(removed)");
        Arbitrary<Mutation> token = Arbitraries.of("token", "logprob", "top_tokens", "top_logprobs")
                .flatMap(f -> values.map(v -> new Mutation(0, f, v)));
        Arbitrary<Mutation> finish = Arbitraries.of("finish_reason", "matched", "timings", "timings.transfer_ms", "timings.bytes")
                .flatMap(f -> values.map(v -> new Mutation(1, f, v)));
        Arbitrary<Mutation> pre = Arbitraries.of("cached_tokens", "kv_pages", "compute_ms", "send_ms", "meta_info")
                .flatMap(f -> values.map(v -> new Mutation(2, f, v)));
        Arbitrary<Mutation> whole = Arbitraries.of("{", "[1]", "5", "\"token\"", "", "null", "(cut)", "(prefill no JSON)", "(error a string)",
                        "(error type a number)")
                .map(v -> new Mutation(3, "", v));
        return Arbitraries.oneOf(token, finish, pre, whole);
    }

    private static String mutated(String json, String field, String value) throws IOException {
        ObjectNode o = (ObjectNode) JSON.readTree(json);
        ObjectNode at = o;
        String name = field;
        if (field.contains(".")) {
            at = (ObjectNode) o.get(field.substring(0, field.indexOf('.')));
            name = field.substring(field.indexOf('.') + 1);
        }
        if (value.equals("(removed)")) at.remove(name);
        else at.set(name, JSON.readTree(value));
        return JSON.writeValueAsString(o);
    }

    /**
     * Any mutation of a valid engine answer (a field's JSON type or range, a field removed, the whole event replaced, the stream
     * cut) on any route is a well-formed 502 naming the engine (a stream's error event), or, where the answer stays valid (a
     * field the router does not need removed, a mutation in range), a 200; never a 400 or a 500. The next request is served.
     */
    @Property(seed = "20261207", tries = 150)
    void aMutatedEngineAnswerIsA502NeverA400Or500(@ForAll("mutations") Mutation m, @ForAll("routes") int route) throws Exception {
        HttpServer blamed = m.target() == 2 || m.value().equals("(prefill no JSON)") ? prefill : decode;
        try {
            switch (m.target()) {
                case 0 -> decodeEvents = List.of(mutated(TOKEN, m.field(), m.value()), FINISH);
                case 1 -> decodeEvents = List.of(TOKEN, mutated(FINISH, m.field(), m.value()));
                case 2 -> prefillBody = mutated(PREFILL, m.field(), m.value());
                default -> {
                    switch (m.value()) {
                        case "(cut)" -> decodeEvents = List.of(TOKEN);
                        case "(prefill no JSON)" -> prefillBody = "{\"cached_tokens\":";
                        case "(error a string)" -> decodeEvents = List.of(TOKEN, "{\"error\":\"boom\"}");
                        case "(error type a number)" -> decodeEvents = List.of(TOKEN, "{\"error\":{\"type\":5,\"message\":\"boom\"}}");
                        default -> decodeEvents = List.of(TOKEN, m.value(), FINISH);
                    }
                }
            }
            String id = "mut-" + route + "-" + Integer.toHexString(m.hashCode());
            HttpResponse<String> r = post(ROUTES.get(route)[0], ROUTES.get(route)[1], id);
            assertTrue(r.statusCode() != 400 && r.statusCode() != 500, m + " on " + ROUTES.get(route)[0] + ": " + r.statusCode() + " " + r.body());
            badGateway(r, id, blamed, true, m + " on " + ROUTES.get(route)[0]);
        } finally {
            decodeEvents = List.of(TOKEN, FINISH);
            prefillBody = PREFILL;
        }
        HttpResponse<String> after = post(ROUTES.get(route)[0], ROUTES.get(route)[1], "after");
        assertEquals(200, after.statusCode(), after.body());
        assertTrue(!after.body().contains("\"error\""), after.body());
    }

    @Provide
    Arbitrary<Integer> routes() {
        return Arbitraries.integers().between(0, ROUTES.size() - 1);
    }
}
