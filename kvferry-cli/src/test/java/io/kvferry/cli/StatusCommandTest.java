package io.kvferry.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.ModelVariant;
import io.kvferry.engine.serve.Roles;
import io.kvferry.ops.Ops;
import io.kvferry.ops.RegistryOps;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.BootstrapRegistryServer;
import io.kvferry.registry.PrefillRankRegistration;
import io.kvferry.registry.RegistryOptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@code kvferry status} against a live registry, and {@code kvferry --set}. */
class StatusCommandTest {
    private record Run(int code, String out, String err) {}

    private static Run run(String... args) {
        ByteArrayOutputStream out = new ByteArrayOutputStream(), err = new ByteArrayOutputStream();
        PrintStream o = System.out, e = System.err;
        System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
        System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
        try {
            int code = Main.run(args);
            return new Run(code, out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8));
        } finally {
            System.setOut(o);
            System.setErr(e);
        }
    }

    @Test
    void statusShowsTheRegistrysClusterAsTablesOrJson() {
        try (BootstrapRegistryServer registry = BootstrapRegistryServer.start("127.0.0.1", 0, RegistryOptions.defaults("tok"))) {
            RegistryOps.mount(registry, Ops.newRegistry(), List.of());
            try (BootstrapClient c = new BootstrapClient("127.0.0.1:" + registry.port(), "tok")) {
                c.registerRank(new PrefillRankRegistration(1, 0, 1, 0, 1, 0, 1, 0, 1, 0, "10.1.2.3", 7000, 16, "bf16", null, false, null));
            }
            Run text = run("status", "--bootstrap", "127.0.0.1:" + registry.port());
            assertEquals(0, text.code(), text.err());
            assertTrue(text.out().contains("kvferry cluster at registry 127.0.0.1:" + registry.port()), text.out());
            assertTrue(text.out().contains("registered 1/1 (ready)"), text.out());
            assertTrue(text.out().contains("10.1.2.3:7000"), text.out());
            Run json = run("status", "--bootstrap", "127.0.0.1:" + registry.port(), "--json");
            assertEquals(0, json.code());
            assertTrue(json.out().contains("\"kind\" : \"cluster\""), json.out());
        }
        Run down = run("status", "--bootstrap", "127.0.0.1:1", "--timeout-ms", "2000");
        assertEquals(1, down.code());
        assertTrue(down.err().startsWith("kvferry status: cannot reach http://127.0.0.1:1/status.json"), down.err());
    }

    /**
     * Both engines' prefix caches on {@code kvferry status}: after a prompt of more than a page (16 tokens) sent twice,
     * the prefill's cluster view and the decode's own status document each show the engine's KV pages with some cached
     * and the prompt tokens its cache served, as its status.json says them (the prefill's prompt tokens too), its drain state
     * and its structured-output compiler; once the decode drains, its row says so.
     */
    @Test
    @Timeout(120)
    void statusShowsEachEnginesCachedPagesAndTokens() throws Exception {
        Roles.Options o = new Roles.Options(ModelFiles.load(null, null), ModelVariant.LLAMA, 1, 1, 16, 64, 8, 32, "tcp", "127.0.0.1", 0, 0,
                "status-engine-test");
        HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
        try (Roles.Role prefill = Roles.prefill(o); Roles.Role decode = Roles.decode(o);
             Roles.Role router = Roles.router(o, List.of("http://127.0.0.1:" + prefill.port()), List.of("http://127.0.0.1:" + decode.port()))) {
            String body = "{\"prompt\":\"Once upon a time, there was a little girl named Lily. She loved to play outside in the park.\","
                    + "\"max_tokens\":4}";
            for (int i = 0; i < 2; i++) {
                HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + router.port() + "/v1/completions"))
                        .POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
                assertEquals(200, r.statusCode(), r.body());
            }
            for (Roles.Role role : List.of(prefill, decode)) {
                JsonNode doc = new ObjectMapper().readTree(http.send(HttpRequest.newBuilder(
                        URI.create("http://127.0.0.1:" + role.port() + "/status.json")).build(), HttpResponse.BodyHandlers.ofString()).body());
                JsonNode e = doc.path("engine"), pages = e.path("kv_pages");
                String name = doc.path("role").asText();
                assertEquals(0, pages.path("used").asInt(-1), name + ": every request ended: " + doc);
                assertTrue(pages.path("cached").asInt() > 0, name + ": the prompt's full pages stay in its prefix cache: " + doc);
                assertEquals(64, pages.path("used").asInt() + pages.path("cached").asInt() + pages.path("free").asInt(), doc.toString());
                assertTrue(e.path("cached_tokens").asInt() > 0 && e.path("cached_tokens").asInt() % 16 == 0, name + ": " + doc);
                assertEquals(name.equals("engine-prefill"), e.has("prompt_tokens"), "only the prefill counts its prompt tokens: " + doc);
                assertEquals(0, e.path("prefix_deferrals").asInt(-1), "both engines count the requests that waited for a shared prefix"
                        + " (the prefill's to compute it, the decode's to receive it); two requests one after the other: none: " + doc);
                // The prefill's through its registry's cluster view (its own process), the decode's from its own port.
                String at = name.equals("engine-prefill") ? "127.0.0.1:" + prefill.bootstrapPort() : "127.0.0.1:" + decode.port();
                Run text = run("status", "--bootstrap", at);
                assertEquals(0, text.code(), text.err());
                String row = name + " " + doc.path("pid").asText() + " +0 +" + pages.path("cached").asInt() + " +" + pages.path("free").asInt()
                        + " +" + e.path("cached_tokens").asInt() + " +" + (e.has("prompt_tokens") ? e.path("prompt_tokens").asInt() : "-")
                        + " +" + (e.has("prefix_deferrals") ? e.path("prefix_deferrals").asInt() : "-") + " +no";
                assertTrue(Pattern.compile("(?m)^ +" + row + " *$").matcher(text.out()).find(), "a row '" + row + "' in: " + text.out());
                // Its structured-output compiler: no spec sent, so nothing compiled and no mean compile time.
                assertEquals(false, e.path("draining").asBoolean(true), doc.toString());
                JsonNode outputs = e.path("structured_outputs");
                assertEquals(0, outputs.path("outcomes").path("compiled").asInt(-1), doc.toString());
                assertTrue(outputs.path("mean_compile_ms").isNull(), doc.toString());
                String outputsRow = name + " " + doc.path("pid").asText() + " +0 +0 +0 +0 +0 +0 +-";
                assertTrue(Pattern.compile("(?m)^structured outputs .*\n(.*\n)* +" + outputsRow + " *$").matcher(text.out()).find(),
                        "a row '" + outputsRow + "' under structured outputs in: " + text.out());
            }
            // A draining decode says so, with the requests its drain met (none running: none completed, none cut).
            assertEquals(0, decode.drain(Duration.ZERO));
            JsonNode doc = new ObjectMapper().readTree(http.send(HttpRequest.newBuilder(
                    URI.create("http://127.0.0.1:" + decode.port() + "/status.json")).build(), HttpResponse.BodyHandlers.ofString()).body());
            assertTrue(doc.path("engine").path("draining").asBoolean(), doc.toString());
            assertEquals(0, doc.path("engine").path("drain").path("completed").asInt(-1), doc.toString());
            assertEquals(0, doc.path("engine").path("drain").path("cut").asInt(-1), doc.toString());
            Run text = run("status", "--bootstrap", "127.0.0.1:" + decode.port());
            assertEquals(0, text.code(), text.err());
            assertTrue(Pattern.compile("(?m)^ +engine-decode " + doc.path("pid").asText() + " .* +draining: 0 completed, 0 cut *$")
                    .matcher(text.out()).find(), text.out());
        }
    }

    /**
     * {@code kvferry status --router}: a router's own view as tables (its state, requests by status, tokens, latencies, its
     * backends with their last check) or its document as JSON; {@code --bootstrap} given a router's port recognises its document;
     * {@code --router} given an engine's port says it is not a router's; a bad address or both flags are a usage error.
     */
    @Test
    @Timeout(120)
    void statusOfARouterShowsItsBackendsRequestsAndLatencies() throws Exception {
        Roles.Options o = new Roles.Options(ModelFiles.load(null, null), ModelVariant.LLAMA, 1, 1, 16, 64, 8, 32, "tcp", "127.0.0.1", 0, 0,
                "status-router-test");
        HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();
        try (Roles.Role prefill = Roles.prefill(o); Roles.Role decode = Roles.decode(o);
             Roles.Role router = Roles.router(o, List.of("http://127.0.0.1:" + prefill.port()), List.of("http://127.0.0.1:" + decode.port()))) {
            String at = "127.0.0.1:" + router.port();
            for (String body : List.of("{\"prompt\":\"Once upon a time\",\"max_tokens\":4}", "{\"prompt\":\"Once\",\"max_tokens\":4}",
                    "{\"prompt\":\"Once\",\"max_tokens\":-1}")) {
                http.send(HttpRequest.newBuilder(URI.create("http://" + at + "/v1/completions")).POST(HttpRequest.BodyPublishers.ofString(body))
                        .build(), HttpResponse.BodyHandlers.ofString());
            }
            // The router counts a request once its handler's finally ran, a moment after the client had the answer.
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (!http.send(HttpRequest.newBuilder(URI.create("http://" + at + "/status.json")).build(), HttpResponse.BodyHandlers.ofString())
                    .body().contains("\"total\":3,") && System.nanoTime() < deadline) {
                Thread.sleep(20);
            }
            Run text = run("status", "--router", at);
            assertEquals(0, text.code(), text.err());
            String out = text.out();
            assertTrue(out.startsWith("kvferry router process " + ProcessHandle.current().pid() + " serving "), out);
            assertTrue(out.contains(": ok\n"), out);
            assertTrue(out.contains("requests: running 0  waiting 0  answered 3   by class: 2xx 2  4xx 1  5xx 0"), out);
            assertTrue(out.contains("by status: 200 2  400 1"), out);
            assertTrue(out.contains("tokens: prompt ") && out.contains("  generated 8"), out);
            assertTrue(Pattern.compile("last 60 s: TTFT p50 [0-9.]+ ms  p99 [0-9.]+ ms \\(2 requests\\)   end-to-end p50 [0-9.]+ ms  p99 [0-9.]+ ms "
                    + "\\(2 requests\\)").matcher(out).find(), out);
            assertTrue(out.contains("admission: max concurrent requests no limit  queue timeout 0 ms  tenants no  max backends 256\n"), out);
            // Its structured-output compiler: no spec sent, nothing compiled; no drain began, so no drain line.
            assertTrue(Pattern.compile("(?m)^structured outputs .*\n +compiler +compiled +cached +refused +deadline +busy +waiting +mean compile ms *\n"
                    + " +router +0 +0 +0 +0 +0 +0 +- *$").matcher(out).find(), out);
            assertTrue(!out.contains("\ndrain:"), out);
            assertTrue(Pattern.compile("(?m)^ +prefill +http://127\\.0\\.0\\.1:" + prefill.port() + " +up +0 +ok +[0-9]+ +127\\.0\\.0\\.1:"
                    + prefill.bootstrapPort() + " *$").matcher(out).find(), out);
            assertTrue(Pattern.compile("(?m)^ +decode +http://127\\.0\\.0\\.1:" + decode.port() + " +up +0 +ok +[0-9]+ +- *$").matcher(out).find(), out);
            assertTrue(!out.contains("tenants\n"), "no tenants table without --tenants-file: " + out);

            Run json = run("status", "--router", at, "--json");
            assertEquals(0, json.code(), json.err());
            JsonNode doc = new ObjectMapper().readTree(json.out());
            assertEquals("router", doc.path("kind").asText());
            assertEquals(2, doc.path("requests").path("by_status").path("200").asInt(), json.out());

            Run recognised = run("status", "--bootstrap", at);
            assertEquals(0, recognised.code(), recognised.err());
            assertTrue(recognised.out().startsWith("kvferry router process "), recognised.out());

            Run notRouter = run("status", "--router", "127.0.0.1:" + decode.port());
            assertEquals(1, notRouter.code(), notRouter.out());
            assertTrue(notRouter.err().startsWith("kvferry status: 127.0.0.1:" + decode.port() + " answered a process status document, not a "
                    + "router's"), notRouter.err());
            Run bad = run("status", "--router", "nohost");
            assertEquals(2, bad.code());
            assertTrue(bad.err().startsWith("kvferry status: --router 'nohost' is not HOST:PORT"), bad.err());
            assertEquals(2, run("status", "--router", at, "--bootstrap", at).code(), "one of the two, not both");
        }
    }

    @Test
    void setTakesAKnobByEitherNameAndRefusesAnythingElse() {
        String key = "kvferry.connectTimeoutMs";
        try {
            assertEquals(2, run("--set", "KVFERRY_CONNECT_TIMEOUT_MS=1234", "status").code(), "status still needs --bootstrap");
            assertEquals("1234", System.getProperty(key));
            Main.withSettings(new String[]{"--set=kvferry.connectTimeoutMs=99"});
            assertEquals("99", System.getProperty(key));
            Run bad = run("--set", "KVFERRY_NO_SUCH=1", "status");
            assertEquals(2, bad.code());
            assertTrue(bad.err().contains("--set KVFERRY_NO_SUCH: no such knob; one of [KVFERRY_TRANSFER_WORKERS"), bad.err());
            assertEquals(2, run("--set", "novalue", "status").code());
        } finally {
            System.clearProperty(key);
        }
        assertNull(System.getProperty(key));
    }
}
