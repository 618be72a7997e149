package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.serving.EngineSpec;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The router's own access and meters, over real engines: with an API key its serving routes answer only
 * a client that sends it (the cluster token is not it), /health and /metrics stay open; every request is
 * counted by route and status (a client gone first as 499), and TTFT, latency and tokens are recorded
 * for those that succeed.
 */
class RouterAccessTest {
    private static final String TOKEN = "router-access-test-cluster-token";
    private static final String KEY = "router-access-test-api-key";
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String CHAT = "{\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time\"}],\"max_tokens\":3,\"temperature\":0}";

    private static ModelFiles.Loaded model;
    private static EngineStack stack;

    @BeforeAll
    static void engines() throws Exception {
        model = ModelFiles.load(null, null);
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 64, 32);
        stack = EngineStack.open(spec, spec, TOKEN, TOKEN); // the engines take the cluster token, which the router sends
    }

    @AfterAll
    static void stop() {
        if (stack != null) stack.close();
    }

    private static Router router(String apiKey, SimpleMeterRegistry meters) throws Exception {
        return new Router(List.of(stack.prefillUrl()), List.of(stack.decodeUrl()),
                model.tokenizer(), model.weights().config.seqLen(), "m", "127.0.0.1", 0, new Router.Access(TOKEN, apiKey), meters);
    }

    private static HttpResponse<String> send(int port, String method, String path, String body, String authorization) throws Exception {
        return EngineAuthTest.send(port, method, path, body, authorization);
    }

    private static void assertRefused(HttpResponse<String> r) throws Exception {
        EngineAuthTest.assertUnauthorized(r, "needs the router's API key", KEY, TOKEN);
    }

    private static double requests(SimpleMeterRegistry m, String route, int status) {
        return RouterErrorsTest.requests(m, route, status);
    }

    /** {@link RouterErrorsTest#requests(SimpleMeterRegistry, String, int, double)}: read once it is {@code expected} (10 s at most). */
    private static double requests(SimpleMeterRegistry m, String route, int status, double expected) throws InterruptedException {
        return RouterErrorsTest.requests(m, route, status, expected);
    }

    @Test
    @Timeout(90)
    void withAnApiKeyTheServingRoutesAnswerOnlyAClientThatSendsIt() throws Exception {
        SimpleMeterRegistry meters = new SimpleMeterRegistry();
        try (Router router = router(KEY, meters)) {
            int port = router.port();
            String completion = "{\"prompt\":\"Once upon a time\",\"max_tokens\":3,\"temperature\":0}";
            for (String authorization : new String[]{null, "Bearer wrong-key", KEY, "Bearer " + TOKEN}) { // KEY alone: no scheme
                assertRefused(send(port, "POST", "/v1/completions", completion, authorization));
                assertRefused(send(port, "POST", "/generate", "{\"text\":\"Once\",\"sampling_params\":{\"max_new_tokens\":2}}", authorization));
                assertRefused(send(port, "GET", "/v1/models", null, authorization));
                assertRefused(send(port, "GET", "/v1/models/m", null, authorization));
                assertRefused(send(port, "POST", "/v1/chat/completions", CHAT, authorization));
                assertRefused(send(port, "POST", "/tokenize", "{\"prompt\":\"Once\"}", authorization));
                assertRefused(send(port, "POST", "/detokenize", "{\"tokens\":[1,403]}", authorization));
            }
            assertEquals(0, stack.prefill.inFlight(), "a refused request reached no engine");
            assertEquals(0, stack.decode.inFlight());
            assertEquals(200, send(port, "GET", "/health", null, null).statusCode(), "/health stays open (load balancers probe it)");

            HttpResponse<String> ok = send(port, "POST", "/v1/completions", completion, "Bearer " + KEY);
            assertEquals(200, ok.statusCode(), ok.body());
            assertFalse(JSON.readTree(ok.body()).path("choices").path(0).path("text").asText().isEmpty(), ok.body());
            assertEquals(200, send(port, "GET", "/v1/models", null, "bearer " + KEY).statusCode(), "the scheme is case-insensitive");
            HttpResponse<String> generate = send(port, "POST", "/generate", "{\"text\":\"Once\",\"sampling_params\":{\"max_new_tokens\":2}}",
                    "Bearer " + KEY);
            assertEquals(200, generate.statusCode(), generate.body());
            assertEquals(200, send(port, "POST", "/tokenize", "{\"prompt\":\"Once\"}", "Bearer " + KEY).statusCode());
            assertEquals(200, send(port, "POST", "/detokenize", "{\"tokens\":[1,403]}", "Bearer " + KEY).statusCode());
            assertEquals(4, requests(meters, "/tokenize", 401, 4));

            assertEquals(4, requests(meters, "/v1/completions", 401, 4));
            assertEquals(4, requests(meters, "/generate", 401, 4));
            assertEquals(4, requests(meters, "/v1/models", 401, 4));
            assertEquals(4, requests(meters, "/v1/models/{model}", 401, 4), "one label for every model's path");
            assertEquals(4, requests(meters, "/v1/chat/completions", 401, 4));
            assertEquals(1, requests(meters, "/v1/completions", 200, 1));
            HttpResponse<String> chat = send(port, "POST", "/v1/chat/completions", CHAT, "Bearer " + KEY);
            assertEquals(200, chat.statusCode(), chat.body());
            assertEquals(1, requests(meters, "/v1/chat/completions", 200, 1));
        }
    }

    @Test
    void theApiKeyMustDifferFromTheClusterToken() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> new Router.Access(TOKEN, " " + TOKEN + " "));
        assertTrue(e.getMessage().contains("must differ from the cluster token"), e.getMessage());
        assertFalse(e.getMessage().contains(TOKEN), "the token is never echoed");
        assertFalse(new Router.Access(TOKEN, KEY).toString().contains(KEY), "nor printed");
    }

    @Test
    @Timeout(90)
    void everyRequestIsCountedByStatusAndTheServedOnesTimed() throws Exception {
        SimpleMeterRegistry meters = new SimpleMeterRegistry();
        try (Router router = router(null, meters)) {
            int port = router.port();
            assertEquals(1.0, meters.find(RouterMeters.BACKEND_UP).tags("role", "prefill").gauge().value());
            assertEquals(1.0, meters.find(RouterMeters.BACKEND_UP).tags("role", "decode").gauge().value());

            HttpResponse<String> ok = send(port, "POST", "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":5,\"temperature\":0}",
                    null);
            assertEquals(200, ok.statusCode(), ok.body());
            JsonNode usage = JSON.readTree(ok.body()).path("usage");
            HttpResponse<String> bad = send(port, "POST", "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":0}", null);
            assertEquals(400, bad.statusCode(), bad.body());
            HttpResponse<String> wrongMethod = send(port, "GET", "/generate", null, null);
            assertEquals(405, wrongMethod.statusCode(), wrongMethod.body());

            HttpResponse<String> chat = send(port, "POST", "/v1/chat/completions", CHAT, null);
            assertEquals(200, chat.statusCode(), chat.body());
            JsonNode chatUsage = JSON.readTree(chat.body()).path("usage");
            HttpResponse<String> badChat = send(port, "POST", "/v1/chat/completions", "{\"messages\":[],\"max_tokens\":3}", null);
            assertEquals(400, badChat.statusCode(), badChat.body());

            assertEquals(1, requests(meters, "/v1/completions", 200, 1));
            assertEquals(1, requests(meters, "/v1/completions", 400, 1));
            assertEquals(1, requests(meters, "/v1/chat/completions", 200, 1), "a chat is counted under its own route");
            assertEquals(1, requests(meters, "/v1/chat/completions", 400, 1));
            assertEquals(1, requests(meters, "/generate", 405, 1));
            Timer ttft = meters.find(RouterMeters.TTFT).timer();
            Timer e2e = meters.find(RouterMeters.E2E).timer();
            assertNotNull(ttft);
            assertEquals(2, ttft.count(), "only the requests that produced a token have a TTFT (the completion and the chat)");
            assertEquals(2, e2e.count());
            assertTrue(ttft.totalTime(TimeUnit.NANOSECONDS) <= e2e.totalTime(TimeUnit.NANOSECONDS));
            assertEquals(usage.path("prompt_tokens").asDouble() + chatUsage.path("prompt_tokens").asDouble(),
                    meters.find(RouterMeters.PROMPT_TOKENS).counter().count());
            assertEquals(usage.path("completion_tokens").asDouble() + chatUsage.path("completion_tokens").asDouble(),
                    meters.find(RouterMeters.GENERATION_TOKENS).counter().count());

            // A client that goes away while its stream is being written: counted as 499, not as served.
            try (Socket s = new Socket("127.0.0.1", port)) {
                byte[] body = "{\"prompt\":\"Once upon a time\",\"max_tokens\":400,\"temperature\":0,\"stream\":true}".getBytes(StandardCharsets.UTF_8);
                OutputStream out = s.getOutputStream();
                out.write(("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " + body.length
                        + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
                out.write(body);
                out.flush();
                InputStream in = s.getInputStream();
                assertTrue(in.read() >= 0, "the stream began"); // the headers of the 200, then tokens
            } // closed mid-stream
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            while (requests(meters, "/v1/completions", RouterMeters.CLIENT_CLOSED) == 0 && System.nanoTime() < deadline) Thread.sleep(20);
            assertEquals(1, requests(meters, "/v1/completions", RouterMeters.CLIENT_CLOSED, 1), "the client that went away");
            assertEquals(1, requests(meters, "/v1/completions", 200, 1), "...is not counted as served");
            Gauge running = meters.find(RouterMeters.RUNNING).gauge();
            assertEquals(0.0, running.value(), "every request was counted out");
        }
    }
}
