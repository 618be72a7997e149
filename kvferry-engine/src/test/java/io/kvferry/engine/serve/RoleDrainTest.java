package io.kvferry.engine.serve;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.ModelVariant;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@link Roles.Role#drain} of the one-process cluster ({@code serve} without {@code --role}): its router drains (then its
 * engines), so after it the router's /health and API answer 503 draining; nothing ran, so nothing is cut.
 */
class RoleDrainTest {
    private static final ObjectMapper JSON = new ObjectMapper();

    @Test
    @Timeout(120)
    void theOneProcessClustersDrainReachesItsRouter() throws Exception {
        ModelFiles.Loaded model = ModelFiles.load(null, null);
        Roles.Options o = new Roles.Options(model, ModelVariant.LLAMA, 1, 1, 16, 256, 8, 32, "tcp", "127.0.0.1", 0, 0, "role-drain");
        HttpClient http = HttpClient.newHttpClient();
        try (Roles.Role all = Roles.all(o, o, o)) {
            String base = "http://127.0.0.1:" + all.port();
            HttpRequest completion = HttpRequest.newBuilder(URI.create(base + "/v1/completions"))
                    .POST(HttpRequest.BodyPublishers.ofString("{\"prompt\":\"Once upon a time\",\"max_tokens\":4}")).build();
            assertEquals(200, http.send(completion, HttpResponse.BodyHandlers.ofString()).statusCode());
            // The client has the whole answer a moment before the router's handler leaves its drain (Drain.exit, after the
            // write): a drain begun in between meets the request, and counts it completed. Wait for it to leave first.
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (all.running() > 0 && System.nanoTime() < deadline) Thread.sleep(2);
            assertEquals(0, all.running(), "the one request left the router");
            assertEquals(0, all.drain(Duration.ofSeconds(30)), "nothing was running: nothing cut");
            HttpResponse<String> h = http.send(HttpRequest.newBuilder(URI.create(base + "/health")).build(), HttpResponse.BodyHandlers.ofString());
            assertEquals(503, h.statusCode(), h.body());
            assertEquals("draining", JSON.readTree(h.body()).path("status").asText(), h.body());
            HttpResponse<String> r = http.send(completion, HttpResponse.BodyHandlers.ofString());
            assertEquals(503, r.statusCode(), r.body());
            assertEquals("draining", JSON.readTree(r.body()).path("error").path("code").asText(), r.body());
            String metrics = http.send(HttpRequest.newBuilder(URI.create(base + "/metrics")).build(), HttpResponse.BodyHandlers.ofString()).body();
            assertTrue(metrics.contains("kvferry_draining{role=\"router\"} 1.0"), metrics);
            assertTrue(metrics.contains("kvferry_drain_requests_total{end=\"completed\",role=\"router\"} 0.0"), "the one request ended before");
            assertTrue(metrics.contains("kvferry_drain_requests_total{end=\"cut\",role=\"router\"} 0.0"), metrics);
        }
    }
}
