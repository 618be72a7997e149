package io.kvferry.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A rolling restart across processes: a prefill, two decodes and a router, each its own {@code serve} JVM. One decode
 * gets SIGTERM ({@link Process#destroy}) while requests run on it: it drains (its requests run to their end, new ones
 * it refuses with the 503 the router re-runs elsewhere), says so on its stdout, and exits within its drain timeout;
 * every request succeeds.
 */
class ServeDrainProcessTest {
    static final ObjectMapper JSON = new ObjectMapper();

    /**
     * A started role: its process and the file its stdout goes to (not a pipe: {@link Process#destroy} closes the parent's
     * end of those, and the drain's lines come after it).
     */
    record Started(Process process, Path out) {
        List<String> said() throws IOException {
            return Files.readAllLines(out, StandardCharsets.UTF_8);
        }

        String awaitUrl() throws Exception {
            long by = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (true) {
                for (String line : said()) {
                    int i = line.indexOf("listening on http://");
                    if (i >= 0) return line.substring(i + "listening on ".length()).trim();
                }
                assertTrue(process.isAlive() && System.nanoTime() < by, "pid " + process.pid() + " did not listen: " + said());
                Thread.sleep(20);
            }
        }
    }

    @Test
    @Timeout(300)
    void aDecodeStoppedWithSigtermDrainsAndEveryRequestSucceeds(@TempDir Path dir) throws Exception {
        List<Started> all = new ArrayList<>();
        try {
            Started prefill = start(dir, all, "prefill", List.of());
            Started victim = start(dir, all, "decode", List.of("--drain-timeout-s", "60"));
            Started survivor = start(dir, all, "decode", List.of());
            String p = prefill.awaitUrl(), v = victim.awaitUrl(), s = survivor.awaitUrl();
            Started router = start(dir, all, "router", List.of("--prefill", p, "--decode", v, "--decode", s));
            String url = router.awaitUrl() + "/v1/completions";
            HttpClient http = HttpClient.newBuilder().executor(Executors.newVirtualThreadPerTaskExecutor()).build();
            awaitServing(http, url);
            List<CompletableFuture<HttpResponse<String>>> requests = new ArrayList<>();
            for (int i = 0; i < 24; i++) {
                String body = "{\"prompt\":\"Once upon a time\",\"max_tokens\":250,\"ignore_eos\":true" + (i % 2 == 0 ? ",\"stream\":true}" : "}");
                requests.add(http.sendAsync(HttpRequest.newBuilder(URI.create(url)).POST(HttpRequest.BodyPublishers.ofString(body)).build(),
                        HttpResponse.BodyHandlers.ofString()));
            }
            // Strike once the victim runs requests (its /health counts them), then send more while it drains.
            HttpRequest health = HttpRequest.newBuilder(URI.create(v + "/health")).build();
            long by = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
            while (JSON.readTree(http.send(health, HttpResponse.BodyHandlers.ofString()).body()).path("in_flight").asInt() == 0) {
                assertTrue(System.nanoTime() < by, "the victim decode never ran a request");
                Thread.sleep(5);
            }
            victim.process().destroy(); // SIGTERM
            for (int i = 0; i < 8; i++) {
                requests.add(http.sendAsync(HttpRequest.newBuilder(URI.create(url)).POST(HttpRequest.BodyPublishers.ofString(
                        "{\"prompt\":\"One day\",\"max_tokens\":20}")).build(), HttpResponse.BodyHandlers.ofString()));
            }
            for (CompletableFuture<HttpResponse<String>> f : requests) {
                HttpResponse<String> r = f.get(180, TimeUnit.SECONDS);
                assertEquals(200, r.statusCode(), r.body());
                assertTrue(!r.body().contains("\"error\""), "a stream that ended in an error: " + r.body());
            }
            assertTrue(victim.process().waitFor(90, TimeUnit.SECONDS), "the drained decode did not exit within its drain timeout");
            assertTrue(victim.said().stream().anyMatch(l -> l.startsWith("kvferry serve: stopping: draining the decode")), victim.said().toString());
            assertTrue(victim.said().stream().anyMatch(l -> l.startsWith("kvferry serve: drained in ")), victim.said().toString());
        } finally {
            for (Started st : all) {
                Process pr = st.process();
                pr.destroy();
                if (!pr.waitFor(10, TimeUnit.SECONDS)) pr.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            }
        }
    }

    /** {@code serve --role role} as its own JVM, as {@link ServeCommandTest#spawnRole} starts one, its stdout to a file. */
    private static Started start(Path dir, List<Started> all, String role, List<String> extra) throws Exception {
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--enable-native-access=ALL-UNNAMED", "-Xmx256m", "-cp", System.getProperty("java.class.path"), "io.kvferry.cli.Main",
                "serve", "--role", role, "--port", "0"));
        if (role.equals("prefill")) cmd.addAll(List.of("--bootstrap-port", "0"));
        cmd.addAll(extra);
        Path out = dir.resolve(role + "-" + all.size() + ".out");
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT).redirectOutput(out.toFile());
        pb.environment().put("KVFERRY_AUTH_TOKEN", "drain-test");
        Started s = new Started(pb.start(), out);
        all.add(s);
        return s;
    }

    /** The router serves once its first health checks found the backends (it starts checking at once). */
    private static void awaitServing(HttpClient http, String url) throws Exception {
        long by = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (true) {
            HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create(url)).POST(HttpRequest.BodyPublishers.ofString(
                    "{\"prompt\":\"Hi\",\"max_tokens\":2}")).build(), HttpResponse.BodyHandlers.ofString());
            if (r.statusCode() == 200) return;
            assertTrue(System.nanoTime() < by, "the router never served: " + r.body());
            Thread.sleep(50);
        }
    }
}
