package io.kvferry.cli;

import com.sun.net.httpserver.HttpServer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A router SIGKILLed between the two halves of a request: its prefill half reached the prefill (a room waiting for its
 * decode, Bootstrapping), its decode half never reaches a decode, and nobody is left to abort the room. The prefill
 * cannot see its caller go (it answers only when the room ends); what ends the room is its bootstrap timeout
 * ({@code KVFERRY_BOOTSTRAP_TIMEOUT_MS}, 300 s by default, 10 s here (the steps from the room's arrival to the checks after the kill well within it)). Meanwhile the room holds no KV page and no aux row
 * (a prefill takes them only once the decode's metadata came), and after the timeout nothing of it is left: no request
 * in a queue, none in flight, every page free again. Real processes: a prefill and a router; the router's decode is a
 * stand-in in this JVM that takes the decode half and holds it, so the kill falls between the halves every time.
 */
class RouterKilledBetweenHalvesTest {
    private static final String TOKEN = "kill-test";

    private static Process spawn(List<String> args, Map<String, String> env) throws Exception {
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--enable-native-access=ALL-UNNAMED", "-Xmx256m", "-cp", System.getProperty("java.class.path"), "io.kvferry.cli.Main",
                "serve", "--port", "0"));
        cmd.addAll(args);
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT);
        pb.environment().put("KVFERRY_AUTH_TOKEN", TOKEN);
        pb.environment().putAll(env);
        return pb.start();
    }

    /** The value of the prefill's meter {@code name} with tag {@code tag} (its Prometheus text), or -1 without it. */
    private static double meter(HttpClient http, String url, String name, String tag) throws Exception {
        String text = http.send(HttpRequest.newBuilder(URI.create(url + "/metrics")).timeout(Duration.ofSeconds(10)).build(),
                HttpResponse.BodyHandlers.ofString()).body();
        for (String line : text.lines().toList()) {
            if (line.startsWith(name + "{") && line.contains("role=\"prefill\"") && line.contains(tag)) {
                return Double.parseDouble(line.substring(line.lastIndexOf(' ') + 1));
            }
        }
        return -1;
    }

    private static int inFlight(HttpClient http, String url) throws Exception {
        return ServeCommandTest.JSON.readTree(http.send(HttpRequest.newBuilder(URI.create(url + "/health")).timeout(Duration.ofSeconds(10)).build(),
                HttpResponse.BodyHandlers.ofString()).body()).path("in_flight").asInt(-1);
    }

    @Test
    @Timeout(180)
    void aPrefillRoomWhoseRouterDiedBeforeTheDecodeHalfEndsAtItsBootstrapTimeoutHoldingNoPage() throws Exception {
        List<Process> procs = new ArrayList<>();
        CountDownLatch decodeHalf = new CountDownLatch(1), release = new CountDownLatch(1);
        HttpServer decode = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        decode.setExecutor(Executors.newVirtualThreadPerTaskExecutor());
        decode.createContext("/health", ex -> {
            byte[] b = "{\"status\":\"ok\",\"role\":\"decode\"}".getBytes(StandardCharsets.UTF_8);
            ex.sendResponseHeaders(200, b.length);
            ex.getResponseBody().write(b);
            ex.close();
        });
        decode.createContext("/generate", ex -> { // takes the decode half and holds it: the router dies waiting for it
            try {
                ex.getRequestBody().readAllBytes();
                decodeHalf.countDown();
                release.await(120, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } finally {
                ex.close();
            }
        });
        decode.start();
        HttpClient http = HttpClient.newHttpClient();
        try {
            Process prefill = spawn(List.of("--role", "prefill", "--bootstrap-port", "0"), Map.of("KVFERRY_BOOTSTRAP_TIMEOUT_MS", "10000"));
            procs.add(prefill);
            String p = DemoCommand.awaitUrl(prefill, "prefill");
            double freeAtStart = meter(http, p, "kvferry_engine_kv_pages", "state=\"free\"");
            assertTrue(freeAtStart > 0, "the prefill's free pages: " + freeAtStart);
            Process router = spawn(List.of("--role", "router", "--prefill", p, "--decode", "http://127.0.0.1:" + decode.getAddress().getPort()), Map.of());
            procs.add(router);
            String r = DemoCommand.awaitUrl(router, "router");
            http.sendAsync(HttpRequest.newBuilder(URI.create(r + "/v1/completions")).POST(HttpRequest.BodyPublishers.ofString(
                    "{\"prompt\":\"Once upon a time\",\"max_tokens\":3}")).build(), HttpResponse.BodyHandlers.discarding()); // fails with the router
            assertTrue(decodeHalf.await(60, TimeUnit.SECONDS), "the router sent no decode half");
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (meter(http, p, "kvferry_engine_requests", "queue=\"bootstrap\"") != 1 && System.nanoTime() < until) Thread.sleep(20);
            assertEquals(1, meter(http, p, "kvferry_engine_requests", "queue=\"bootstrap\""), "the prefill half waits for its decode");

            router.destroyForcibly(); // SIGKILL: no abort is sent, the prefill's connection from the router is cut
            assertTrue(router.waitFor(30, TimeUnit.SECONDS));
            // The room is still there (nothing told the prefill), and holds no page and no aux row.
            assertEquals(1, inFlight(http, p), "the room waits on");
            assertEquals(0, meter(http, p, "kvferry_engine_kv_pages", "state=\"used\""), "a Bootstrapping room holds no page");
            assertEquals(0, meter(http, p, "kvferry_engine_aux_rows", "state=\"used\""), "nor an aux row");

            // Its bootstrap timeout (10 s here; 300 s by default, beyond this wait) ends it: nothing of it is left.
            until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (inFlight(http, p) != 0 && System.nanoTime() < until) Thread.sleep(100);
            assertEquals(0, inFlight(http, p), "the room ended at its bootstrap timeout");
            assertEquals(0, meter(http, p, "kvferry_engine_requests", "queue=\"bootstrap\""));
            assertEquals(0, meter(http, p, "kvferry_engine_kv_pages", "state=\"used\""));
            assertEquals(0, meter(http, p, "kvferry_engine_aux_rows", "state=\"used\""));
            assertEquals(freeAtStart, meter(http, p, "kvferry_engine_kv_pages", "state=\"free\""), "every page free again");
        } finally {
            release.countDown();
            decode.stop(0);
            for (Process pr : procs) {
                pr.destroy();
                if (!pr.waitFor(5, TimeUnit.SECONDS)) pr.destroyForcibly().waitFor(5, TimeUnit.SECONDS);
            }
        }
    }
}
