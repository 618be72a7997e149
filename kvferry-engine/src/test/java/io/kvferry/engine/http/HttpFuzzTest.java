package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.serving.EngineSpec;
import net.jqwik.api.Example;
import net.jqwik.api.lifecycle.AfterContainer;
import net.jqwik.api.lifecycle.BeforeContainer;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * Bad input on the HTTP surface, case by case, each refused with a 400 that names what is wrong: a router with a prefill
 * and a decode in this JVM, on the real checkpoint.
 */
class HttpFuzzTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final HttpClient HTTP = HttpClient.newBuilder().executor(Executors.newVirtualThreadPerTaskExecutor()).build();
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

    /** Every engine page given back and the router running nothing, within 20 s. */
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

    static HttpResponse<String> postBytes(int port, String path, byte[] body) throws Exception {
        return HTTP.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path)).header("Authorization", "Bearer " + TOKEN)
                .POST(HttpRequest.BodyPublishers.ofByteArray(body)).build(), HttpResponse.BodyHandlers.ofString());
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

    /** {@code stream_options.include_usage} of the wrong type was named {@code include_usage}, not from the body's top. */
    @Example
    void aBadIncludeUsageNamesStreamOptions() throws Exception {
        JsonNode e = refused(post(router.port(), "/v1/completions", "{\"prompt\":\"Once\",\"stream\":true,\"stream_options\":{\"include_usage\":\"yes\"}}"),
                "include_usage");
        assertEquals("stream_options.include_usage", e.path("param").asText(null), e.toString());
        assertEquals("stream_options.include_usage must be true or false, got \"yes\"", e.path("message").asText(), e.toString());
    }
}
