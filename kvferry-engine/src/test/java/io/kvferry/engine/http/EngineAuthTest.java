package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.engine.model.CompilerSlot;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.serving.EngineSpec;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * An engine started with the cluster token takes /generate and /abort only with it (anyone who reached
 * its port could abort any room, or point a decode at any registry); /health stays open; a router given
 * the token serves completions through such engines.
 */
class EngineAuthTest {
    private static final String TOKEN = "engine-auth-test-token";
    static final ObjectMapper JSON = new ObjectMapper();
    static final HttpClient http = HttpClient.newBuilder().executor(Executors.newVirtualThreadPerTaskExecutor()).build();

    static HttpResponse<String> send(int port, String method, String path, String body, String authorization) throws Exception {
        // Bounded: a request the engine took (no check) waits for a decode that never comes.
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path)).timeout(Duration.ofSeconds(20));
        if (authorization != null) b.header("Authorization", authorization);
        b.method(method, body == null ? HttpRequest.BodyPublishers.noBody() : HttpRequest.BodyPublishers.ofString(body));
        return http.send(b.build(), HttpResponse.BodyHandlers.ofString());
    }

    private static void assertRefused(HttpResponse<String> r) throws Exception {
        assertUnauthorized(r, "needs the cluster token", TOKEN);
    }

    /** A 401 naming its scheme and saying what the route {@code needs}, echoing none of the {@code secrets}. */
    static void assertUnauthorized(HttpResponse<String> r, String needs, String... secrets) throws Exception {
        assertEquals(401, r.statusCode(), r.body());
        assertEquals("Bearer realm=\"kvferry\"", r.headers().firstValue("WWW-Authenticate").orElse(null), r.body());
        JsonNode e = JSON.readTree(r.body()).path("error");
        assertEquals("authentication_error", e.path("type").asText(), r.body());
        assertTrue(e.path("message").asText().contains(needs), r.body());
        for (String secret : secrets) assertFalse(r.body().contains(secret), "a secret is never echoed: " + r.body());
    }

    @Test
    @Timeout(60)
    void theEnginesActOnlyForTheClusterTokenAndTheRouterCarriesIt() throws Exception {
        ModelFiles.Loaded model = ModelFiles.load(null, null);
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 64, 32);
        try (EngineStack stack = EngineStack.open(spec, spec, TOKEN, TOKEN)) {
            String generate = "{\"bootstrap_room\":11,\"bootstrap_addr\":\"" + stack.addr + "\",\"input_ids\":[1,2,3],\"max_new_tokens\":2}";
            for (int port : new int[]{stack.prefillServer.port(), stack.decodeServer.port()}) {
                assertRefused(send(port, "POST", "/generate", generate, null));
                assertRefused(send(port, "POST", "/generate", generate, "Bearer not-the-token"));
                assertRefused(send(port, "POST", "/generate", generate, TOKEN)); // no scheme
                assertRefused(send(port, "POST", "/abort", "{\"bootstrap_room\":11}", null));
                assertEquals(200, send(port, "POST", "/abort", "{\"bootstrap_room\":11}", "Bearer " + TOKEN).statusCode());
                assertEquals(200, send(port, "GET", "/health", null, null).statusCode(), "health stays open");
                // A negative room, which the registry refuses, is the client's error on an engine too.
                HttpResponse<String> negative = send(port, "POST", "/generate", generate.replace("\"bootstrap_room\":11", "\"bootstrap_room\":-11"),
                        "Bearer " + TOKEN);
                assertEquals(400, negative.statusCode(), negative.body());
                assertTrue(negative.body().contains("bootstrap_room must be >= 0, got -11"), negative.body());
                assertEquals(400, send(port, "POST", "/abort", "{\"bootstrap_room\":-1}", "Bearer " + TOKEN).statusCode());
            }
            assertEquals(0, stack.prefill.inFlight());
            assertEquals(0, stack.decode.inFlight());
            try (Router router = new Router(List.of(stack.prefillUrl()), List.of(stack.decodeUrl()),
                    model.tokenizer(), model.weights().config.seqLen(), "m", "127.0.0.1", 0, TOKEN)) {
                HttpResponse<String> r = send(router.port(), "POST", "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":3}",
                        null);
                assertEquals(200, r.statusCode(), r.body());
                assertFalse(JSON.readTree(r.body()).path("choices").path(0).path("text").asText().isEmpty(), r.body());
            }
        }
    }

    /**
     * An engine's structured-output compiler queues a request by the client the router names in X-Kvferry-Client only
     * where the request carries the cluster token: a caller without it is refused before anything is compiled, and an
     * engine without a token (anyone may call it) queues by the caller's address whatever the header says, as one with it
     * does for a header longer than {@link StructuredOutputs#CLIENT_HEADER_MAX}.
     */
    @Test
    @Timeout(120)
    void theEnginesBelieveTheClientHeaderOnlyWithTheClusterToken() throws Exception {
        ModelFiles.Loaded model = ModelFiles.load(null, null);
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 64, 32);
        try (EngineStack tokened = EngineStack.open(spec, spec, TOKEN, TOKEN); EngineStack open = EngineStack.open(spec, TOKEN)) {
            OutputConstraint.Compiler c = tokened.prefillServer.outputs();
            List<CompletableFuture<HttpResponse<String>>> sent = new ArrayList<>();
            try (CompilerSlot held = CompilerSlot.hold(c, TimeUnit.SECONDS.toNanos(60))) {
                HttpResponse<String> forged = generate(tokened.prefillServer.port(), 21, "x[0-9]{2}", null, "tenant forged");
                assertRefused(forged);
                assertEquals(Map.of(), c.queued(), "nothing compiled for a caller without the token");
                sent.add(queued(c, tokened.prefillServer.port(), 22, "y[0-9]{2}", "Bearer " + TOKEN, "tenant team-a", "tenant team-a"));
                sent.add(queued(c, tokened.prefillServer.port(), 23, "z[0-9]{2}", "Bearer " + TOKEN, "tenant team-b", "tenant team-b"));
                assertEquals(Map.of("tenant team-a", 1, "tenant team-b", 1), c.queued());
                // Longer than CLIENT_HEADER_MAX (or not printable ASCII): not believed even with the token, the caller's address.
                String tooLong = "tenant " + "x".repeat(StructuredOutputs.CLIENT_HEADER_MAX);
                sent.add(queued(c, tokened.prefillServer.port(), 25, "v[0-9]{2}", "Bearer " + TOKEN, tooLong, "address 127.0.0.1"));
                assertEquals(Map.of("tenant team-a", 1, "tenant team-b", 1, "address 127.0.0.1", 1), c.queued());
            }
            OutputConstraint.Compiler anyone = open.prefillServer.outputs();
            try (CompilerSlot held = CompilerSlot.hold(anyone, TimeUnit.SECONDS.toNanos(60))) {
                sent.add(queued(anyone, open.prefillServer.port(), 24, "w[0-9]{2}", null, "tenant forged", "address 127.0.0.1"));
                assertEquals(Map.of("address 127.0.0.1", 1), anyone.queued(), "no token on the engine: the header is not believed");
            }
            for (CompletableFuture<HttpResponse<String>> f : sent) {
                HttpResponse<String> r = f.get(60, TimeUnit.SECONDS);
                assertEquals(200, r.statusCode(), r.body());
            }
        }
    }

    /** A prefill-only /generate constrained by {@code regex}, its client named {@code client} (null: no header). */
    private static HttpResponse<String> generate(int port, long room, String regex, String authorization, String client) throws Exception {
        String body = "{\"bootstrap_room\":" + room + ",\"input_ids\":[1,2,3],\"prefill_only\":true,\"sampling_params\":{\"regex\":\""
                + regex + "\"}}";
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/generate")).timeout(Duration.ofSeconds(60));
        if (authorization != null) b.header("Authorization", authorization);
        if (client != null) b.header(StructuredOutputs.CLIENT_HEADER, client);
        return http.send(b.POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
    }

    /** {@link #generate} sent from another thread, returned once {@code c} has it queued as {@code expected}'s. */
    private static CompletableFuture<HttpResponse<String>> queued(OutputConstraint.Compiler c, int port, long room, String regex,
            String authorization, String client, String expected) {
        int before = c.queued().getOrDefault(expected, 0);
        CompletableFuture<HttpResponse<String>> f = CompletableFuture.supplyAsync(() -> {
            try {
                return generate(port, room, regex, authorization, client);
            } catch (Exception e) {
                throw new CompletionException(e);
            }
        }, t -> Thread.ofPlatform().start(t));
        while (c.queued().getOrDefault(expected, 0) == before) { // queued: the compiler's state, not a time
            if (f.isDone()) return f; // answered without queuing: the caller's assertions say how
            Thread.yield();
        }
        return f;
    }
}
