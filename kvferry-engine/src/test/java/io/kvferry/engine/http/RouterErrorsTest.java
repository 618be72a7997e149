package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpServer;
import io.kvferry.KVFerry;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.serving.DecodeEngine;
import io.kvferry.engine.serving.EngineSpec;
import io.kvferry.engine.serving.PrefillEngine;
import io.kvferry.engine.serving.TransferSpec;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** How the router reports what its backends answered: their client errors pass through; one failed exchange is not an outage. */
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
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, "errors-test")) {
            String addr = "127.0.0.1:" + registry.port();
            try (PrefillEngine prefill = new PrefillEngine(spec.withPages(4), new TransferSpec("tcp", addr, "errors-test", "127.0.0.1"));
                 DecodeEngine decode = new DecodeEngine(spec, new TransferSpec("tcp", null, "errors-test", "127.0.0.1"));
                 PrefillServer ps = new PrefillServer(prefill, addr, "127.0.0.1", 0);
                 DecodeServer ds = new DecodeServer(decode, "127.0.0.1", 0);
                 Router router = new Router(List.of("http://127.0.0.1:" + ps.port()), List.of("http://127.0.0.1:" + ds.port()), model.tokenizer(),
                         model.weights().config.seqLen(), "m", "127.0.0.1", 0)) {
                String prompt = "Once upon a time there was a little girl named Lily. She loved to play outside in the park. ".repeat(3);
                HttpResponse<String> r = send(router.port(), "/v1/completions", "{\"prompt\":\"" + prompt + "\",\"max_tokens\":5}");
                assertEquals(400, r.statusCode(), r.body());
                JsonNode e = JSON.readTree(r.body()).path("error");
                assertEquals("invalid_request_error", e.path("type").asText(), r.body());
                assertEquals(400, e.path("code").asInt(), r.body());
                assertTrue(e.path("message").asText().contains("pages"), r.body());
                // A prompt that fits still runs.
                assertEquals(200, send(router.port(), "/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":3}").statusCode());
            }
        }
    }

    /** The stub answers /health as a healthy prefill (with a registry address) would. */
    private static void answerHealthy(HttpServer stub) {
        stub.createContext("/health", ex -> {
            byte[] b = "{\"status\":\"ok\",\"bootstrap\":\"127.0.0.1:1\"}".getBytes(StandardCharsets.UTF_8);
            ex.sendResponseHeaders(200, b.length);
            ex.getResponseBody().write(b);
            ex.close();
        });
    }

    /**
     * A backend that fails one exchange (here it drops the connection without an answer) fails that
     * request with a 502, but stays in rotation: only a connect failure or its health check takes it out.
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

    @Test
    void aBackendThatIsNoHttpUrlIsRefusedNamingTheFlagAndTheValue() {
        String e = assertThrows(IllegalArgumentException.class, () -> Router.Backend.parse("notaurl", true)).getMessage();
        assertTrue(e.contains("--prefill 'notaurl'") && e.contains("http://"), e);
        e = assertThrows(IllegalArgumentException.class, () -> Router.Backend.parse("ftp://h:1", false)).getMessage();
        assertTrue(e.contains("--decode 'ftp://h:1'"), e);
        e = assertThrows(IllegalArgumentException.class, () -> Router.Backend.parse("http://a b", false)).getMessage();
        assertTrue(e.contains("--decode 'http://a b' is not a URL"), e);
        assertEquals("http://10.0.0.1:30000", Router.Backend.parse("http://10.0.0.1:30000/", true).toString());
    }
}
