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
import java.util.List;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
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
}
