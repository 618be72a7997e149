package io.kvferry.tools;

import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.ModelVariant;
import io.kvferry.engine.http.Router;
import io.kvferry.engine.http.Tenants;
import io.kvferry.engine.serve.Roles;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * docs/grafana/kvferry-router.json against a real router's scrape, after it served a completion through real engines: every
 * series it queries (its drain's and its structured-output compiler's among them) is there.
 */
class RouterDashboardTest {
    @Test
    @Timeout(180)
    void everySeriesTheRouterDashboardQueriesIsInTheRoutersScrape(@TempDir Path dir) throws Exception {
        Roles.Options o = new Roles.Options(ModelFiles.load(null, null), ModelVariant.LLAMA, 1, 1, 16, 64, 8, 32, "tcp", "127.0.0.1", 0, 0,
                "router-dashboard-test");
        List<String> scrapes = new ArrayList<>();
        // A router without tenants (its series untagged), and one with (the tenant panels' series).
        try (Roles.Role cluster = Roles.all(o, o, o)) {
            scrapes.add(scrapeAfterACompletion(cluster.port(), null));
        }
        Path file = Files.writeString(dir.resolve("tenants.json"),
                "{\"tenants\":[{\"name\":\"team-a\",\"key\":\"router-dashboard-tenant-key\",\"max_concurrent_requests\":4}]}");
        Tenants tenants = Tenants.open(file, o.authToken());
        try (Roles.Role cluster = Roles.all(o, o, o, null, Router.Admission.UNLIMITED, tenants)) {
            scrapes.add(scrapeAfterACompletion(cluster.port(), "router-dashboard-tenant-key"));
        }
        Path dashboard = Path.of("..", "docs", "grafana", "kvferry-router.json");
        assertTrue(GrafanaDashboardCheck.metricsQueried(dashboard).containsAll(EngineDashboardTest.SERVING_METERS),
                "the router's dashboard shows its drain and its structured-output compiler: " + GrafanaDashboardCheck.metricsQueried(dashboard));
        GrafanaDashboardCheck.assertEverySeriesExists(dashboard, scrapes);
    }

    private static String scrapeAfterACompletion(int port, String key) throws Exception {
        HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
        String base = "http://127.0.0.1:" + port;
        HttpRequest.Builder completion = HttpRequest.newBuilder(URI.create(base + "/v1/completions")).timeout(Duration.ofSeconds(60))
                .POST(HttpRequest.BodyPublishers.ofString("{\"prompt\":\"Once upon a time\",\"max_tokens\":4}"));
        if (key != null) completion.header("Authorization", "Bearer " + key);
        HttpResponse<String> r = http.send(completion.build(), HttpResponse.BodyHandlers.ofString());
        assertEquals(200, r.statusCode(), r.body());
        // The router counts a request once its exchange is over, just after its client has the answer: the request
        // counter's first series appears then, so the scrape is taken once it is there (10 s at most).
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        HttpRequest metrics = HttpRequest.newBuilder(URI.create(base + "/metrics")).timeout(Duration.ofSeconds(30)).build();
        HttpResponse<String> scrape = http.send(metrics, HttpResponse.BodyHandlers.ofString());
        while (!scrape.body().contains("kvferry_router_requests_total{") && System.nanoTime() < deadline) {
            Thread.sleep(20);
            scrape = http.send(metrics, HttpResponse.BodyHandlers.ofString());
        }
        assertEquals(200, scrape.statusCode(), scrape.body());
        return scrape.body();
    }
}
