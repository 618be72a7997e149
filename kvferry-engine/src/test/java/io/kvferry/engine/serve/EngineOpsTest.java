package io.kvferry.engine.serve;

import com.fasterxml.jackson.databind.JsonNode;
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
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The engine roles serve /metrics and /status.json on their HTTP ports; the prefill role's registry serves the cluster page. */
@Timeout(120)
class EngineOpsTest {
    private final HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();

    private HttpResponse<String> send(HttpRequest.Builder b) throws Exception {
        return http.send(b.timeout(Duration.ofSeconds(30)).build(), HttpResponse.BodyHandlers.ofString());
    }

    /** The scrape at {@code url} once it holds every one of {@code lines} (30 s at most; then the last scrape, to fail on). */
    private String metricsOnce(String url, String... lines) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        String m = get(url);
        while (!Arrays.stream(lines).allMatch(m::contains) && System.nanoTime() < deadline) {
            Thread.sleep(20); // a poll interval
            m = get(url);
        }
        return m;
    }

    private String get(String url) throws Exception {
        HttpResponse<String> r = send(HttpRequest.newBuilder(URI.create(url)).GET());
        assertEquals(200, r.statusCode(), url + ": " + r.body());
        return r.body();
    }

    /**
     * A state variant with different PP sizes on its prefill and decode cannot serve one request (kvferry
     * refuses the pair at HELLO): the embedded cluster refuses to start, naming why, instead of listening
     * and answering every request with a 500.
     */
    @Test
    void anEmbeddedStateVariantWithDifferentPpSizesIsRefusedAtStart() throws Exception {
        ModelFiles.Loaded model = ModelFiles.load(null, null);
        for (ModelVariant v : List.of(ModelVariant.SWA, ModelVariant.HYBRID)) {
            Roles.Options o = new Roles.Options(model, v, 1, 1, 16, 64, 4, 32, "tcp", "127.0.0.1", 0, 0, "pp-test");
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> {
                try (Roles.Role started = Roles.all(o, o.withParallelism(1, 2), o)) {
                    assertTrue(started.port() > 0);
                }
            });
            assertTrue(e.getMessage().contains("the prefill's PP (2) must equal the decode's (1)"), e.getMessage());
        }
    }

    @Test
    void eachRoleServesItsMetricsAndStatusAndTheRegistryTheCluster() throws Exception {
        ModelFiles.Loaded model = ModelFiles.load(null, null);
        // The prefill's registry binds port 0 and the role says which it got: a port taken from a ServerSocket(0) closed at
        // once was free for any other bind(0) until the registry's own.
        Roles.Options o = new Roles.Options(model, ModelVariant.LLAMA, 1, 1, 16, 256, 8, 32, "tcp", "127.0.0.1", 0, 0, "ops-test");
        try (Roles.Role prefill = Roles.prefill(o); Roles.Role decode = Roles.decode(o.withPorts(0, 0));
             Roles.Role router = Roles.router(o, List.of("http://127.0.0.1:" + prefill.port()), List.of("http://127.0.0.1:" + decode.port()))) {
            HttpResponse<String> done = send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + router.port() + "/v1/completions"))
                    .POST(HttpRequest.BodyPublishers.ofString("{\"prompt\":\"Once upon a time\",\"max_tokens\":4,\"temperature\":0}")));
            assertEquals(200, done.statusCode(), done.body());
            // Each engine records its room's meters and frees its request on its own threads, which may run just after
            // the client has its answer (the prefill's latency once its last status went out; the decode's pages once
            // its last chunk did): read once the request has ended on both, not right after the answer.
            String prefillLatency = "kvferry_kv_transfer_latency_ms_count{cp_rank=\"0\",dp_rank=\"0\",pp_rank=\"0\",role=\"prefill\","
                    + "tp_rank=\"0\",transport=\"tcp\"} 1";
            String prefillDone = "kvferry_engine_requests{queue=\"inflight\",role=\"prefill\"} 0.0";
            String decodeDone = "kvferry_engine_kv_pages{role=\"decode\",state=\"free\"} 256.0";
            String pm = metricsOnce("http://127.0.0.1:" + prefill.port() + "/metrics", prefillLatency, prefillDone);
            assertTrue(pm.contains(prefillLatency), pm);
            String dm = metricsOnce("http://127.0.0.1:" + decode.port() + "/metrics", "kvferry_kv_transfer_latency_ms_count{cp_rank=\"0\"",
                    decodeDone);
            assertTrue(dm.contains("kvferry_kv_transfer_latency_ms_count{cp_rank=\"0\",dp_rank=\"0\",pp_rank=\"0\",role=\"decode\","), dm);
            // The engines' own gauges: the request ended, so no queue holds it and no page is used (its prompt fits no full page to cache).
            assertTrue(dm.contains("kvferry_engine_requests{queue=\"running\",role=\"decode\"} 0.0"), dm);
            assertTrue(dm.contains("kvferry_engine_kv_pages{role=\"decode\",state=\"used\"} 0.0"), dm);
            assertTrue(dm.contains(decodeDone), dm);
            assertTrue(pm.contains(prefillDone), pm);
            assertTrue(pm.contains("kvferry_engine_kv_pages{role=\"prefill\",state=\"free\"} 256.0"), pm);
            // The prefill's prefix cache: on, the prompt too short for a full page to reuse; its counter and pages are there.
            assertTrue(pm.contains("kvferry_engine_kv_pages{role=\"prefill\",state=\"cached\"} 0.0"), pm);
            assertTrue(pm.contains("kvferry_engine_cached_tokens_total{role=\"prefill\"} 0.0"), pm);
            assertEquals("on", new ObjectMapper().readTree(get("http://127.0.0.1:" + prefill.port() + "/health")).path("prefix_cache").asText());
            try (Roles.Role off = Roles.prefill(o.withPorts(0, 0).withPrefillCache(false))) {
                assertEquals("off", new ObjectMapper().readTree(get("http://127.0.0.1:" + off.port() + "/health")).path("prefix_cache").asText());
            }
            JsonNode ds = new ObjectMapper().readTree(get("http://127.0.0.1:" + decode.port() + "/status.json"));
            assertEquals("engine-decode", ds.path("role").asText());
            assertEquals(1, ds.path("ranks").get(0).path("rooms_concluded").asInt());
            JsonNode cluster = new ObjectMapper().readTree(get("http://127.0.0.1:" + prefill.bootstrapPort() + "/status.json"));
            assertEquals("cluster", cluster.path("kind").asText());
            assertEquals(1, cluster.path("prefill_ranks").size());
            assertEquals("local", cluster.path("processes").get(0).path("url").asText());
            assertEquals("engine-prefill", cluster.path("processes").get(0).path("status").path("role").asText());
            // Each process's structured-output compiler on its /metrics: the router's and each engine's compiled the spec once.
            HttpResponse<String> constrained = send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + router.port() + "/v1/completions"))
                    .POST(HttpRequest.BodyPublishers.ofString("{\"prompt\":\"Once\",\"max_tokens\":4,\"guided_regex\":\"(yes|no)\"}")));
            assertEquals(200, constrained.statusCode(), constrained.body());
            // Each tagged with its role, as kvferry_draining{role}: a dashboard splits them by role.
            String[] roles = {"prefill", "decode", "router"};
            int[] ports = {prefill.port(), decode.port(), router.port()};
            for (int i = 0; i < ports.length; i++) {
                String m = get("http://127.0.0.1:" + ports[i] + "/metrics"), role = roles[i];
                assertTrue(m.contains("kvferry_structured_output_compiles_total{outcome=\"compiled\",role=\"" + role + "\"} 1.0"), m);
                assertTrue(m.contains("kvferry_structured_output_compiles_total{outcome=\"busy\",role=\"" + role + "\"} 0.0"), m);
                assertTrue(m.contains("kvferry_structured_output_compile_seconds_count{role=\"" + role + "\"} 1"), m);
                assertTrue(m.contains("kvferry_structured_output_compiles_waiting{role=\"" + role + "\"} 0.0"), m);
            }
            assertEquals(404, send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + prefill.bootstrapPort() + "/metrics")).GET()).statusCode(),
                    "the prefill role's metrics are on its engine port only: one scrape target per process");
        }
    }
}
