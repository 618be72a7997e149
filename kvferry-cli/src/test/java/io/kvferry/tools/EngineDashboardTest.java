package io.kvferry.tools;

import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.ModelVariant;
import io.kvferry.engine.serve.Roles;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * docs/grafana/kvferry.json's panels of the reference engine's scheduler gauges, drains and structured-output compilers
 * against the real scrapes of a prefill and a decode role, after they served a completion through the router. (kvferry's own series are
 * checked by BenchMetricsTest, whose processes run no engine.)
 */
class EngineDashboardTest {
    /**
     * The engines' meters: kvferry_engine_requests, kvferry_engine_kv_pages, kvferry_engine_aux_rows,
     * kvferry_engine_cached_tokens, kvferry_engine_prompt_tokens, kvferry_engine_prefix_deferrals.
     */
    static final String ENGINE_GAUGES = "kvferry_engine_";
    /** The drain's meters and the structured-output compiler's, which every serving role has (the bench has neither). */
    static final List<String> SERVING_METERS = List.of("kvferry_draining", "kvferry_drain_requests_total", "kvferry_structured_output_compiles_total",
            "kvferry_structured_output_compile_seconds_sum", "kvferry_structured_output_compile_seconds_count",
            "kvferry_structured_output_compiles_waiting");

    /** Whether a metric is the engines' to show (this test's to check), not kvferry's transfers' (BenchMetricsTest's). */
    static boolean engineSeries(String name) {
        return name.startsWith(ENGINE_GAUGES) || SERVING_METERS.contains(name);
    }

    @Test
    @Timeout(120)
    void everyEngineSeriesTheDashboardQueriesIsInTheEnginesScrapes() throws Exception {
        Roles.Options o = new Roles.Options(ModelFiles.load(null, null), ModelVariant.LLAMA, 1, 1, 16, 64, 8, 32, "tcp", "127.0.0.1", 0, 0,
                "engine-dashboard-test");
        HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
        try (Roles.Role prefill = Roles.prefill(o); Roles.Role decode = Roles.decode(o);
             Roles.Role router = Roles.router(o, List.of("http://127.0.0.1:" + prefill.port()), List.of("http://127.0.0.1:" + decode.port()))) {
            // A prompt of more than a page (16 tokens), twice: the second time the prefill serves its first page from its
            // prefix cache, so the prefix-cache panels have data to show.
            String prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";
            for (int i = 0; i < 2; i++) {
                HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + router.port() + "/v1/completions"))
                        .timeout(Duration.ofSeconds(60))
                        .POST(HttpRequest.BodyPublishers.ofString("{\"prompt\":\"" + prompt + "\",\"max_tokens\":4}")).build(),
                        HttpResponse.BodyHandlers.ofString());
                assertEquals(200, r.statusCode(), r.body());
            }
            String prefillScrape = scrape(http, prefill.port()), decodeScrape = scrape(http, decode.port());
            Path dashboard = Path.of("..", "docs", "grafana", "kvferry.json");
            assertTrue(GrafanaDashboardCheck.metricsQueried(dashboard).containsAll(SERVING_METERS),
                    "the dashboard shows the drains and the structured-output compilers: " + GrafanaDashboardCheck.metricsQueried(dashboard));
            int checked = GrafanaDashboardCheck.assertEverySeriesExists(dashboard, List.of(prefillScrape, decodeScrape),
                    EngineDashboardTest::engineSeries);
            // Requests per queue, KV pages used/cached/free, aux rows used/free, KV page usage; the prefix caches: cached and
            // prompt tokens/s, the prefill's hit ratio, cached pages per engine; the requests that waited for a shared prefix;
            // processes draining and the requests drains met; the compilers' outcomes, mean compile time and specs waiting.
            assertEquals(14, checked, "queries of the engines' meters on the dashboard");
            // The drain and structured-output panels select by role: each engine's scrape has its own role's series.
            for (String scrape : List.of(prefillScrape, decodeScrape)) {
                String role = scrape == prefillScrape ? "prefill" : "decode";
                assertTrue(scrape.contains("kvferry_draining{role=\"" + role + "\"} 0.0"), role + ": " + scrape);
                assertTrue(scrape.contains("kvferry_drain_requests_total{end=\"cut\",role=\"" + role + "\"} 0.0"), role + ": " + scrape);
                assertTrue(scrape.contains("kvferry_structured_output_compiles_waiting{role=\"" + role + "\"} 0.0"), role + ": " + scrape);
                assertTrue(scrape.contains("kvferry_structured_output_compiles_total{outcome=\"busy\",role=\"" + role + "\"} 0.0"), role + ": " + scrape);
            }
            // The shared-prefix waits panel's query (by role) has a series on both engines: each counts its own waits.
            for (String scrape : List.of(prefillScrape, decodeScrape)) {
                String role = scrape == prefillScrape ? "prefill" : "decode";
                assertTrue(scrape.contains("kvferry_engine_prefix_deferrals_total{role=\"" + role + "\"}"), role + ": " + scrape);
            }
            // The prefix-cache panels read the prefill's cached tokens, prompt tokens and cached pages, all above 0 now.
            int positive = GrafanaDashboardCheck.assertSeriesPositive(dashboard, List.of(prefillScrape),
                    title -> title.contains("prefix cache"), Map.of("role", "prefill"));
            assertEquals(5, positive, "selectors of the prefix-cache panels");
        }
    }

    private static String scrape(HttpClient http, int port) throws Exception {
        HttpResponse<String> s = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/metrics"))
                .timeout(Duration.ofSeconds(30)).build(), HttpResponse.BodyHandlers.ofString());
        assertEquals(200, s.statusCode(), s.body());
        assertTrue(s.body().contains(ENGINE_GAUGES), "the role's scrape has the engine's gauges: " + s.body());
        return s.body();
    }
}
