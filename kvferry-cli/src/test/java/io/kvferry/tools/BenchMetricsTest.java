package io.kvferry.tools;

import io.kvferry.bench.BenchResult;
import io.kvferry.bench.BenchRunner;
import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.ModelShape;
import io.kvferry.testkit.Workload;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@code /metrics} scraped from the role processes while a bench runs, and their final scrapes
 * ({@code --metrics-dump}) checked against the bench's own figures: bytes, requests, and the failures
 * {@code --failure-prob} injected, counted by kind. The Grafana dashboard's every series is in the scrapes.
 */
@Timeout(300)
class BenchMetricsTest {
    private static final Pattern SAMPLE = Pattern.compile("^([a-z_:][a-z0-9_:]*)(\\{([^}]*)})? (\\S+)$");
    private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

    /** One sample line of a scrape. */
    record Sample(String name, Map<String, String> labels, double value) {}

    static List<Sample> parse(String scrape) {
        List<Sample> out = new ArrayList<>();
        for (String line : scrape.split("\n")) {
            if (line.startsWith("#") || line.isBlank()) continue;
            Matcher m = SAMPLE.matcher(line);
            assertTrue(m.matches(), "not a Prometheus sample line: " + line);
            Map<String, String> labels = new HashMap<>();
            if (m.group(3) != null && !m.group(3).isEmpty()) {
                for (String kv : m.group(3).split(",(?=[a-z_]+=\")")) {
                    int eq = kv.indexOf('=');
                    labels.put(kv.substring(0, eq), kv.substring(eq + 2, kv.length() - 1));
                }
            }
            out.add(new Sample(m.group(1), labels, Double.parseDouble(m.group(4))));
        }
        return out;
    }

    static double sum(List<Sample> samples, String name, Map<String, String> match) {
        double s = 0;
        for (Sample x : samples) {
            if (!x.name.equals(name)) continue;
            boolean ok = true;
            for (Map.Entry<String, String> e : match.entrySet()) ok &= e.getValue().equals(x.labels.get(e.getKey()));
            if (ok) s += x.value;
        }
        return s;
    }

    private String get(String url) throws Exception {
        HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create(url)).timeout(Duration.ofSeconds(30)).GET().build(),
                HttpResponse.BodyHandlers.ofString());
        assertEquals(200, r.statusCode(), url);
        return r.body();
    }

    /** The body, or null when the process is gone (it finished its share and exited). */
    private String tryGet(String url, ProgressLines log) throws Exception {
        long t = System.nanoTime();
        try {
            return get(url);
        } catch (IOException e) {
            log.stream().println("[test] " + url + " after " + (System.nanoTime() - t) / 1_000_000 + " ms: " + e);
            return null;
        }
    }

    @Test
    void rolesAreScrapedWhileTheBenchRunsAndTheirFinalCountsMatchItsFigures(@TempDir Path dir) throws Exception {
        // Separate processes, injected failures on both sides, a slow decode so the run lasts long enough to be watched.
        Workload w = new Workload(100, 200, 16, 64, 2, 4, 11, 0);
        BenchConfig config = new BenchConfig(ModelShape.preset("tiny"), w, "tcp", 1, 1, 1, 1, 1, false, 1, "t0ken", 1, 0, 0)
                .withFaults(new BenchConfig.Faults(0, 100, 0.1));
        Path dump = dir.resolve("metrics.prom");
        ProgressLines progress = new ProgressLines();
        // Its own thread: the common pool (one thread on two cores) is left to the HTTP clients.
        ExecutorService runner = Executors.newSingleThreadExecutor();
        Future<BenchResult> run = runner.submit(() -> {
            try {
                return new BenchRunner(config, progress.stream()).withMetricsDump(dump).runWithoutBaselines(true);
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
        String decodeLine = progress.await(l -> l.startsWith("[bench] decode process: "), 120);
        assertNotNull(decodeLine, "the decode process announced its endpoint: " + progress.all());
        String decodeUrl = ProgressLines.after(decodeLine, "[bench] decode process: ").replace("/status", "");
        String prefillLine = progress.await(l -> l.startsWith("[bench] prefill process: "), 120);
        assertNotNull(prefillLine, "the prefill process announced its endpoint: " + progress.all());
        String prefillUrl = ProgressLines.after(prefillLine, "[bench] prefill process: ").replace("/status", "");
        Set<String> liveScrapes = new LinkedHashSet<>();
        int decodeScrapes = 0, prefillScrapes = 0;
        boolean sawRoomsTracked = false;
        while (!run.isDone()) {
            String d = tryGet(decodeUrl + "/metrics", progress);
            if (d != null) {
                decodeScrapes++;
                liveScrapes.add(d);
                List<Sample> ds = parse(d);
                // Any state: with a 100 ms slow decode a room is in flight (waiting_for_input, transferring) only
                // for the few ms between its admission and its landing, so scrapes could miss every one of
                // those windows; the room the driver is verifying stays tracked (success) until it is
                // cleared. The per-state values are checked in-process (RankTelemetryTest, ManagerMetricsTest).
                sawRoomsTracked |= sum(ds, "kvferry_rooms", Map.of("role", "decode")) > 0;
            }
            String p = tryGet(prefillUrl + "/metrics", progress);
            if (p != null) {
                prefillScrapes++;
                liveScrapes.add(p);
            }
            Thread.sleep(20); // a poll interval, not a correctness wait
        }
        assertTrue(decodeScrapes > 0 && prefillScrapes > 0, "scraped the decode " + decodeScrapes + " and the prefill "
                + prefillScrapes + " times during the run; " + String.join("\n", progress.all()));
        assertTrue(sawRoomsTracked, "a scrape of the decode process during the run saw the rooms it tracks");
        BenchResult r = run.get();
        runner.shutdown();
        assertTrue(r.failed() > 0 && r.succeeded() > 0, r.toString());
        assertEquals(0, r.corrupted());
        assertEquals(dump.toAbsolutePath().toString(), r.metricsDump());

        String text = Files.readString(dump);
        assertTrue(text.contains("# ---- prefill process") && text.contains("# ---- decode process")
                && text.contains("# ---- bench process (registry)"), "every role's final scrape is in the dump");
        List<Sample> all = parse(text);
        Map<String, String> prefill = Map.of("role", "prefill"), decode = Map.of("role", "decode");
        // Bytes: what the prefill's data paths moved, as the bench measured it.
        assertEquals(r.datapathBytes(), (long) sum(all, "kvferry_datapath_bytes_total", prefill));
        // Requests: every room that succeeded on the decode was measured once.
        assertEquals(r.succeeded(), (long) sum(all, "kvferry_kv_transfer_latency_ms_count", decode));
        // Failures: the decode saw every injected one (its own, and the prefill's through STATUS) as kind "injected".
        double failedOnDecode = sum(all, "kvferry_num_transfer_failed_reqs_total", decode)
                + sum(all, "kvferry_num_bootstrap_failed_reqs_total", decode);
        assertEquals(r.failed(), (long) failedOnDecode, text);
        assertEquals(failedOnDecode, sum(all, "kvferry_num_transfer_failed_reqs_total", Map.of("role", "decode", "kind", "injected"))
                + sum(all, "kvferry_num_bootstrap_failed_reqs_total", Map.of("role", "decode", "kind", "injected")));
        // The prefill counts its own injections as injected and the decode's (an abort) as aborted.
        assertTrue(sum(all, "kvferry_num_transfer_failed_reqs_total", Map.of("role", "prefill", "kind", "injected"))
                + sum(all, "kvferry_num_transfer_failed_reqs_total", Map.of("role", "prefill", "kind", "aborted")) > 0, text);
        assertEquals(1.0, sum(all, "kvferry_registry_ranks_registered", Map.of()));

        List<String> scrapes = new ArrayList<>(liveScrapes);
        scrapes.add(text);
        // kvferry's series; the reference engine's own gauges, drains and compilers (the bench runs no engine) are EngineDashboardTest's.
        GrafanaDashboardCheck.assertEverySeriesExists(Path.of("..", "docs", "grafana", "kvferry.json"), scrapes,
                name -> !EngineDashboardTest.engineSeries(name));
    }
}
