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
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** docs/grafana/kvferry-router.json against a real router's scrape, after it served a completion through real engines. */
class RouterDashboardTest {
    @Test
    @Timeout(120)
    void everySeriesTheRouterDashboardQueriesIsInTheRoutersScrape() throws Exception {
        Roles.Options o = new Roles.Options(ModelFiles.load(null, null), ModelVariant.LLAMA, 1, 1, 16, 64, 8, 32, "tcp", "127.0.0.1", 0, 0,
                "router-dashboard-test");
        HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
        try (Roles.Role cluster = Roles.all(o, o, o)) {
            String base = "http://127.0.0.1:" + cluster.port();
            HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create(base + "/v1/completions")).timeout(Duration.ofSeconds(60))
                    .POST(HttpRequest.BodyPublishers.ofString("{\"prompt\":\"Once upon a time\",\"max_tokens\":4}")).build(),
                    HttpResponse.BodyHandlers.ofString());
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
            GrafanaDashboardCheck.assertEverySeriesExists(Path.of("..", "docs", "grafana", "kvferry-router.json"), List.of(scrape.body()));
        }
    }
}
