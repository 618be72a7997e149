package io.kvferry.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.tools.TransportSuiteTest;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.ModelVariant;
import io.kvferry.engine.serve.Roles;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.net.InetAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** kvferry demo and kvferry serve with prefill and decode as separate JVMs. */
class ServeCommandTest {
    static final ObjectMapper JSON = new ObjectMapper();

    /**
     * The proof matrix across processes (prefill and decode JVMs, the router in the demo's): each
     * variant once, with a TP change. The rows with page size 1 send their prompt twice: the second time
     * the whole prompt is in the decode's prefix cache, so its last chunk carries no KV page (the aux row,
     * and the variant's state), and the tokens still match the colocated run.
     */
    @ParameterizedTest(name = "{0} {1}: prefill tp{2} pp{3} -> decode tp{4}, page {5}")
    @CsvSource({"llama, tcp, 4, 1, 2, 16", "llama, shm, 1, 1, 4, 16", "llama, ucx, 2, 1, 1, 16", "llama, tcp, 1, 2, 1, 16",
            "mla, ucx, 2, 1, 1, 1", "swa, shm, 2, 1, 1, 16", "hybrid, tcp, 1, 1, 2, 1"})
    @Timeout(180)
    void demoOverSeparateProcessesMatchesColocated(String variant, String transport, int ptp, int ppp, int dtp, int page)
            throws Exception {
        TransportSuiteTest.requireTransportForOtherTests(transport);
        // Prompts whose greedy answers run past 24 tokens in every variant here (a story ends at BOS: mla's seeded
        // layers end "Once upon a time" after two tokens), so each request makes 24 tokens.
        String opening = "The little cat was sad because", second = page == 1 ? opening : "Once upon a time";
        BenchCommandTest.Run r = BenchCommandTest.run("demo", "--processes", "--model-variant", variant, "--transport", transport,
                "--prefill-tp", "" + ptp, "--prefill-pp", "" + ppp, "--decode-tp", "" + dtp, "--page-size", "" + page,
                "--max-tokens", "24", "--chunk-tokens", "5", "--prompt", opening, "--prompt", second, "--json");
        assertEquals(0, r.code(), r.out());
        JsonNode j = BenchCommandTest.lastJson(r.out());
        assertEquals(2, j.path("succeeded").asInt(), r.out());
        assertTrue(j.path("matches_colocated").asBoolean(), r.out());
        assertEquals(48, j.path("tokens").asInt(), r.out());
        assertEquals(transport, j.path("transport").asText());
        assertEquals(variant, j.path("model_variant").asText());
        JsonNode first = j.path("per_request").path(0), again = j.path("per_request").path(1);
        assertTrue(first.path("kv_pages").asInt() > 0, r.out());
        if (page == 1) {
            assertEquals(0, again.path("kv_pages").asInt(), "a repeated page-aligned prompt is a zero-page last chunk: " + r.out());
            assertTrue(again.path("bytes").asLong() < first.path("bytes").asLong(), r.out());
            // The prefill's prefix cache (on for hybrid too, with its recurrent state snapshot) served all but the last token
            // the second time.
            assertTrue(again.path("cached_tokens").asInt() > 0, "the prefill's cached tokens: " + r.out());
        }
    }

    /**
     * A prompt sent twice with --page-size 2: the second time the prefill takes its full pages before the last token from
     * its prefix cache, and the demo says so (per_request's cached_tokens, from the router's usage, and "N prompt tokens
     * from the prefill's cache" on screen); with --prefill-cache off it computes every token, and the demo says nothing.
     */
    @ParameterizedTest(name = "--prefill-cache {0}")
    @ValueSource(strings = {"on", "off"})
    @Timeout(60)
    void demoSaysThePromptTokensFromThePrefillsCache(String cache) throws Exception {
        BenchCommandTest.Run r = BenchCommandTest.run("demo", "--prefill-cache", cache, "--page-size", "2", "--max-tokens", "2",
                "--prompt", "Once upon a time", "--prompt", "Once upon a time", "--json");
        assertEquals(0, r.code(), r.out());
        JsonNode j = BenchCommandTest.lastJson(r.out());
        JsonNode first = j.path("per_request").path(0), again = j.path("per_request").path(1);
        assertEquals(0, first.path("cached_tokens").asInt(-1), "nothing is cached before the first request: " + r.out());
        assertTrue(again.has("cached_tokens"), r.out());
        if (cache.equals("on")) {
            int cached = again.path("cached_tokens").asInt();
            assertTrue(cached > 0 && cached % 2 == 0, "whole pages of the repeated prompt come from the cache: " + r.out());
            assertTrue(r.out().contains("; " + cached + " prompt tokens from the prefill's cache"), r.out());
            assertEquals(1, r.out().split("prompt tokens from the prefill's cache", -1).length - 1, "only the repeat says it: " + r.out());
        } else {
            assertEquals(0, again.path("cached_tokens").asInt(-1), r.out());
            assertTrue(!r.out().contains("from the prefill's cache"), r.out());
        }
        assertTrue(j.path("matches_colocated").asBoolean(), r.out());
    }

    /**
     * demo --load with --shared-prefix-tokens: every load prompt starts with the same story of about 40 tokens, sent alone
     * first; with the prefill's cache on, each load request takes the prefix's whole pages from it (the load's
     * cached_tokens, summed from the answers' usage), with --prefill-cache off none; every answer equals the colocated run's.
     */
    @ParameterizedTest(name = "--prefill-cache {0}")
    @ValueSource(strings = {"on", "off"})
    @Timeout(60)
    void demoLoadWithASharedPrefixTakesItFromThePrefillsCache(String cache) throws Exception {
        int load = 4, page = 4;
        BenchCommandTest.Run r = BenchCommandTest.run("demo", "--prefill-cache", cache, "--page-size", Integer.toString(page),
                "--max-tokens", "2", "--prompt", "Once upon a time", "--load", Integer.toString(load), "--shared-prefix-tokens", "40",
                "--json");
        assertEquals(0, r.code(), r.out());
        JsonNode l = BenchCommandTest.lastJson(r.out()).path("load");
        assertEquals(load, l.path("succeeded").asInt(), r.out());
        assertEquals(load, l.path("matches_colocated").asInt(), r.out());
        int prefix = l.path("shared_prefix_tokens").asInt();
        assertTrue(prefix > 30 && prefix <= 40, "about 40 tokens, never more: " + r.out());
        long prompt = l.path("prompt_tokens").asLong(), cached = l.path("cached_tokens").asLong(-1);
        assertTrue(prompt > (long) load * prefix, "each prompt is the prefix and its own opening: " + r.out());
        if (cache.equals("on")) {
            // The prefix's whole pages, less at most the one where the prefix's last word may encode otherwise before the opening.
            int pages = prefix / page;
            assertTrue(cached >= (long) load * (pages - 1) * page && cached <= (long) load * pages * page && cached % page == 0,
                    "whole pages of the shared prefix come from the cache: " + r.out());
        } else {
            assertEquals(0, cached, r.out());
        }
    }

    /**
     * demo --load --shared-prefix-cold: the prefix is not sent first, so no cache holds it when the burst comes; the prefill
     * computes it for the first request it takes, and the others, whether they come while it is computed (they wait for
     * its pages) or after, take its whole pages: the load's cached tokens are at least three requests' worth of the
     * prefix's pages (more where two openings start alike; before, each request taken before the first one ended computed
     * the prefix again). Every answer equals the colocated run's.
     */
    @Test
    @Timeout(60)
    void demoLoadOnAColdSharedPrefixComputesItOnce() throws Exception {
        int load = 4, page = 4;
        BenchCommandTest.Run r = BenchCommandTest.run("demo", "--page-size", Integer.toString(page), "--max-tokens", "2", "--prompt",
                "Once upon a time", "--load", Integer.toString(load), "--shared-prefix-tokens", "40", "--shared-prefix-cold", "--json");
        assertEquals(0, r.code(), r.out());
        assertTrue(r.out().contains("not sent first: no cache holds it"), r.out());
        JsonNode l = BenchCommandTest.lastJson(r.out()).path("load");
        assertEquals(load, l.path("matches_colocated").asInt(), r.out());
        assertTrue(l.path("shared_prefix_cold").asBoolean(), r.out());
        int pages = l.path("shared_prefix_tokens").asInt() / page;
        long cached = l.path("cached_tokens").asLong(-1);
        // The prefix's whole pages, less at most the one where its last word may encode otherwise before the opening; the
        // first request's prompt is all computed.
        long prompt = l.path("prompt_tokens").asLong();
        assertTrue(cached >= (long) (load - 1) * (pages - 1) * page && cached < prompt - prompt / load && cached % page == 0,
                "all but the first request take the prefix's whole pages: " + r.out());
    }

    /** demo --help's --json named 7 of the JSON line's keys (no model, transport, model_variant, per_request). */
    @Test
    @Timeout(60)
    void demoJsonHelpNamesEveryKeyOfTheLine() throws Exception {
        BenchCommandTest.Run r = BenchCommandTest.run("demo", "--max-tokens", "2", "--prompt", "Once upon a time", "--json");
        assertEquals(0, r.code(), r.out());
        String help = String.join(" ", new CommandLine(new Main()).getSubcommands().get("demo").getCommandSpec().findOption("--json")
                .description());
        List<String> keys = new ArrayList<>();
        BenchCommandTest.lastJson(r.out()).fieldNames().forEachRemaining(keys::add);
        BenchCommandTest.lastJson(r.out()).path("per_request").path(0).fieldNames().forEachRemaining(keys::add);
        for (String k : keys) assertTrue(help.contains(k), k + " is not in demo --json's help: " + help);
    }

    @Test
    @Timeout(60)
    void serveRefusesMissingPieces() {
        assertEquals(2, BenchCommandTest.run("serve", "--role", "bogus").code());
        assertEquals(2, BenchCommandTest.run("serve", "--role", "router").code());
        PrintStream err = System.err;
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        System.setErr(new PrintStream(buf, true, StandardCharsets.UTF_8));
        int code;
        try {
            code = Main.run("demo", "--model-variant", "mamba2");
        } finally {
            System.setErr(err);
        }
        String said = buf.toString(StandardCharsets.UTF_8);
        assertEquals(2, code, said);
        assertTrue(said.contains("unknown model variant 'mamba2'; use one of llama, mla, swa, hybrid"), said);
    }

    /** A prefill bound to every address publishes none its peers can reach: refused at once, naming --advertise-host. */
    @Test
    @Timeout(60)
    void aPrefillOnTheWildcardNeedsAnAdvertisedHost() {
        PrintStream err = System.err;
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        System.setErr(new PrintStream(buf, true, StandardCharsets.UTF_8));
        int wildcard, blank, decode;
        try {
            wildcard = Main.run("serve", "--role", "prefill", "--host", "0.0.0.0", "--port", "0", "--bootstrap-port", "0");
            blank = Main.run("serve", "--role", "prefill", "--host", "::", "--advertise-host", "::", "--port", "0");
            decode = Main.run("serve", "--role", "decode", "--advertise-host", "10.0.0.1", "--port", "0");
        } finally {
            System.setErr(err);
        }
        String said = buf.toString(StandardCharsets.UTF_8);
        assertEquals(List.of(2, 2, 2), List.of(wildcard, blank, decode), said);
        assertTrue(said.contains("kvferry serve --role prefill: --host 0.0.0.0 binds every address, and a decode on another host "
                + "cannot connect to it: give --advertise-host"), said);
        assertTrue(said.contains("--advertise-host '::' must be an address the decodes and the router can connect to"), said);
        assertTrue(said.contains("--advertise-host is not used by --role decode; it is for --role prefill"), said);
    }

    /** --register-with and --register-as: refused in modes that run no engine, as no URL, or where the router could not reach the engine. */
    @Test
    @Timeout(60)
    void registrationFlagsAreCheckedBeforeAnythingStarts() {
        PrintStream err = System.err;
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        System.setErr(new PrintStream(buf, true, StandardCharsets.UTF_8));
        List<Integer> codes;
        try {
            codes = List.of(
                    Main.run("serve", "--role", "router", "--register-with", "http://10.0.0.9:8000", "--prefill", "http://p:1", "--decode", "http://d:1"),
                    Main.run("serve", "--role", "decode", "--register-as", "http://10.0.0.2:30001", "--port", "0"),
                    Main.run("serve", "--role", "decode", "--register-with", "10.0.0.9:8000", "--port", "0"),
                    Main.run("serve", "--role", "decode", "--register-with", "http://10.0.0.9", "--port", "0"),
                    Main.run("serve", "--role", "decode", "--register-with", "http://10.0.0.9:8000", "--register-as", "http://0.0.0.0:30001",
                            "--port", "0"),
                    Main.run("serve", "--role", "decode", "--host", "0.0.0.0", "--register-with", "http://10.0.0.9:8000", "--port", "0"));
        } finally {
            System.setErr(err);
        }
        String said = buf.toString(StandardCharsets.UTF_8);
        assertEquals(List.of(2, 2, 2, 2, 2, 2), codes, said);
        assertTrue(said.contains("--register-with is not used by --role router; it is for --role prefill and --role decode"), said);
        assertTrue(said.contains("--register-as is used only with --register-with"), said);
        assertTrue(said.contains("--register-with '10.0.0.9:8000' must be an http:// URL with a host and a port"), said);
        assertTrue(said.contains("--register-with 'http://10.0.0.9' must be an http:// URL with a host and a port"), said);
        assertTrue(said.contains("--register-as 'http://0.0.0.0:30001' names a wildcard address"), said);
        assertTrue(said.contains("this engine binds 0.0.0.0 (every address), which is no URL the router can reach it at: give --register-as"), said);
    }

    /**
     * A decode process started with {@code --register-with} joins a running router (its /workers lists it and requests
     * are served through it alone once the router's first decode is taken out), and leaves it when it is stopped (SIGTERM).
     */
    @Test
    @Timeout(180)
    void aDecodeProcessJoinsTheRouterItRegistersWithAndLeavesItAtItsStop() throws Exception {
        List<Process> procs = new ArrayList<>();
        Roles.Role router = null;
        try {
            Process prefill = spawnRole("prefill", List.of()), decode = spawnRole("decode", List.of());
            procs.addAll(List.of(prefill, decode));
            String p = DemoCommand.awaitUrl(prefill, "prefill"), d = DemoCommand.awaitUrl(decode, "decode");
            ModelFiles.Loaded model = ModelFiles.load(null, null);
            router = Roles.router(new Roles.Options(model, ModelVariant.LLAMA, 1, 1, 16, 64, 8, 64, "tcp", "127.0.0.1", 0, 0, "kill-test"),
                    List.of(p), List.of(d));
            String base = "http://127.0.0.1:" + router.port();
            Process joiner = spawnRole("decode", List.of("--register-with", base));
            procs.add(joiner);
            // Its stdout names its URL, then says when the router took it (the registration's own log line is INFO, hidden).
            // Read on a thread of its own: a blocked readLine ignores the test's timeout, so the wait is bounded here.
            BufferedReader said = new BufferedReader(new InputStreamReader(joiner.getInputStream(), StandardCharsets.UTF_8));
            CompletableFuture<String> joined = new CompletableFuture<>();
            Thread.ofVirtual().start(() -> {
                try {
                    String url = null;
                    for (String line; (line = said.readLine()) != null; ) {
                        if (line.contains("listening on http://")) url = line.substring(line.indexOf("listening on ") + "listening on ".length()).trim();
                        if (url != null && line.contains("kvferry serve: in the router at " + base + " as decode " + url)) joined.complete(url);
                    }
                } catch (IOException ignored) {
                    // it ended
                }
                joined.complete(null);
            });
            String j;
            try {
                j = joined.get(60, TimeUnit.SECONDS);
            } catch (TimeoutException e) {
                j = null;
            }
            assertNotNull(j, "the decode's stdout did not say the router took it");
            HttpClient http = HttpClient.newHttpClient();
            HttpRequest workers = HttpRequest.newBuilder(URI.create(base + "/workers")).build();
            JsonNode listed = awaitDecodes(http, workers, 2);
            assertEquals(j, listed.path("decodes").get(1).path("url").asText(), listed.toString());

            HttpResponse<String> out = http.send(HttpRequest.newBuilder(URI.create(base + "/workers?url=" + d)).header("Authorization",
                    "Bearer kill-test").DELETE().build(), HttpResponse.BodyHandlers.ofString());
            assertEquals(200, out.statusCode(), out.body());
            HttpResponse<String> served = http.send(HttpRequest.newBuilder(URI.create(base + "/v1/completions")).POST(HttpRequest.BodyPublishers
                    .ofString("{\"prompt\":\"Once upon a time\",\"max_tokens\":3}")).build(), HttpResponse.BodyHandlers.ofString());
            assertEquals(200, served.statusCode(), "served through the decode that joined: " + served.body());

            joiner.destroy(); // SIGTERM: its shutdown hook takes it out of the router before its servers close
            assertTrue(joiner.waitFor(30, TimeUnit.SECONDS), "the decode did not stop");
            assertEquals(0, awaitDecodes(http, workers, 0).path("decodes").size());
        } finally {
            if (router != null) router.close();
            for (Process p : procs) {
                p.destroy();
                if (!p.waitFor(5, TimeUnit.SECONDS)) p.destroyForcibly().waitFor(5, TimeUnit.SECONDS);
            }
        }
    }

    /** The router's /workers once it lists {@code n} decodes (30 s at most; then as it is). */
    private static JsonNode awaitDecodes(HttpClient http, HttpRequest workers, int n) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        JsonNode w;
        while ((w = JSON.readTree(http.send(workers, HttpResponse.BodyHandlers.ofString()).body())).path("decodes").size() != n
                && System.nanoTime() < deadline) {
            Thread.sleep(50);
        }
        assertEquals(n, w.path("decodes").size(), w.toString());
        return w;
    }

    /** demo --processes on every address: its prefill process is given loopback to advertise (it is refused a wildcard). */
    @Test
    @Timeout(120)
    void demoOverSeparateProcessesOnTheWildcard() throws Exception {
        BenchCommandTest.Run r = BenchCommandTest.run("demo", "--processes", "--host", "0.0.0.0", "--max-tokens", "4", "--prompt",
                "Once upon a time", "--json");
        assertEquals(0, r.code(), r.out());
        assertEquals(1, BenchCommandTest.lastJson(r.out()).path("succeeded").asInt(), r.out());
    }

    /** A host name that resolves here to loopback (Debian maps the machine's own name to 127.0.1.1) is warned about; others are not. */
    @Test
    void aHostNameThatResolvesToLoopbackIsWarnedAbout() throws Exception {
        String w = ServeCommand.loopbackNameWarning("prefill-host", InetAddress.getByAddress("prefill-host", new byte[]{127, 0, 1, 1}));
        assertTrue(w != null && w.contains("--host prefill-host resolves to 127.0.1.1 on this host, a loopback address"), w);
        assertNull(ServeCommand.loopbackNameWarning("prefill-host", InetAddress.getByAddress("prefill-host", new byte[]{10, 0, 0, 1})));
        assertNull(ServeCommand.loopbackNameWarning("localhost", InetAddress.getByAddress("localhost", new byte[]{127, 0, 0, 1})));
        assertNull(ServeCommand.loopbackNameWarning("10.0.0.1", null), "a literal is not resolved");
    }

    static Process spawnRole(String role, List<String> extra) throws Exception {
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--enable-native-access=ALL-UNNAMED", "-Xmx256m", "-cp", System.getProperty("java.class.path"), "io.kvferry.cli.Main",
                "serve", "--role", role, "--port", "0"));
        if (role.equals("prefill")) cmd.addAll(List.of("--bootstrap-port", "0"));
        cmd.addAll(extra);
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT);
        pb.environment().put("KVFERRY_AUTH_TOKEN", "kill-test");
        return pb.start();
    }

    /**
     * {@code serve} as its own process, its router's API key from KVFERRY_API_KEY: a client without the key
     * gets a 401, with it a completion, and the router's /metrics counts both, as its request log
     * ({@code --log-requests}) tells both, the served one with its room.
     */
    @Test
    @Timeout(120)
    void aServeProcessTakesItsRoutersApiKeyFromTheEnvironment(@TempDir Path dir) throws Exception {
        List<String> cmd = List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(), "--enable-native-access=ALL-UNNAMED",
                "-Xmx256m", "-cp", System.getProperty("java.class.path"), "io.kvferry.cli.Main", "serve", "--port", "0", "--bootstrap-port", "0", "--log-requests");
        Path log = dir.resolve("serve.err");
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectError(log.toFile());
        pb.environment().put("KVFERRY_API_KEY", "serve-test-api-key");
        pb.environment().remove("KVFERRY_AUTH_TOKEN");
        Process serve = pb.start();
        try {
            String base = DemoCommand.awaitUrl(serve, "serve");
            HttpClient http = HttpClient.newHttpClient();
            HttpRequest.Builder completion = HttpRequest.newBuilder(URI.create(base + "/v1/completions")).timeout(Duration.ofSeconds(60))
                    .POST(HttpRequest.BodyPublishers.ofString("{\"prompt\":\"Once upon a time\",\"max_tokens\":3}"));
            HttpResponse<String> refused = http.send(completion.build(), HttpResponse.BodyHandlers.ofString());
            assertEquals(401, refused.statusCode(), refused.body());
            HttpResponse<String> served = http.send(completion.header("Authorization", "Bearer serve-test-api-key").build(),
                    HttpResponse.BodyHandlers.ofString());
            assertEquals(200, served.statusCode(), served.body());
            // The router counts and logs a request once its exchange is over, just after its client has the answer: wait for the 200.
            String served200 = "kvferry_router_requests_total{route=\"/v1/completions\",status=\"200\"} 1.0";
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            String scrape;
            while (!(scrape = http.send(HttpRequest.newBuilder(URI.create(base + "/metrics")).build(), HttpResponse.BodyHandlers.ofString()).body())
                    .contains(served200) && System.nanoTime() < deadline) {
                Thread.sleep(20);
            }
            assertTrue(scrape.contains("kvferry_router_requests_total{route=\"/v1/completions\",status=\"401\"} 1.0"), scrape);
            assertTrue(scrape.contains(served200), scrape);
            String room = JSON.readTree(served.body()).path("kvferry").path("bootstrap_room").asText();
            List<String> lines = Files.readAllLines(log); // logged before it was counted
            assertTrue(lines.stream().anyMatch(l -> l.contains("request route=/v1/completions status=401 room=- ")), String.join("\n", lines));
            assertTrue(lines.stream().anyMatch(l -> l.contains("request route=/v1/completions status=200 room=" + room + " prompt_tokens=5 "
                    + "completion_tokens=3 ")), String.join("\n", lines));
        } finally {
            serve.destroy();
            if (!serve.waitFor(10, TimeUnit.SECONDS)) serve.destroyForcibly().waitFor(5, TimeUnit.SECONDS);
        }
    }

    /**
     * {@code serve --tenants-file} as its own process: each tenant's key serves, another key is a 401, the request
     * counters carry the tenant and the request log names it.
     */
    @Test
    @Timeout(120)
    void aServeProcessServesTheTenantsOfItsFile(@TempDir Path dir) throws Exception {
        Path tenants = Files.writeString(dir.resolve("tenants.json"), "{\"tenants\":[{\"name\":\"team-a\",\"key\":\"team-a-key-0123456789\","
                + "\"requests_per_minute\":60},"
                + "{\"name\":\"team-b\",\"key\":\"team-b-key-0123456789\",\"max_concurrent_requests\":2,\"cache_salt\":\"shared\"}]}");
        Files.setPosixFilePermissions(tenants, PosixFilePermissions.fromString("rw-------"));
        List<String> cmd = List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(), "--enable-native-access=ALL-UNNAMED",
                "-Xmx256m", "-cp", System.getProperty("java.class.path"), "io.kvferry.cli.Main", "serve", "--port", "0", "--bootstrap-port", "0",
                "--log-requests", "--tenants-file", tenants.toString());
        Path log = dir.resolve("serve.err");
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectError(log.toFile());
        pb.environment().remove("KVFERRY_API_KEY");
        pb.environment().remove("KVFERRY_AUTH_TOKEN");
        Process serve = pb.start();
        try {
            String base = DemoCommand.awaitUrl(serve, "serve");
            HttpClient http = HttpClient.newHttpClient();
            HttpRequest.Builder completion = HttpRequest.newBuilder(URI.create(base + "/v1/completions")).timeout(Duration.ofSeconds(60))
                    .POST(HttpRequest.BodyPublishers.ofString("{\"prompt\":\"Once upon a time\",\"max_tokens\":3}"));
            HttpResponse<String> refused = http.send(completion.copy().header("Authorization", "Bearer team-c-key-0123456789").build(),
                    HttpResponse.BodyHandlers.ofString());
            assertEquals(401, refused.statusCode(), refused.body());
            for (String t : new String[]{"team-a", "team-b"}) {
                HttpResponse<String> served = http.send(completion.copy().header("Authorization", "Bearer " + t + "-key-0123456789").build(),
                        HttpResponse.BodyHandlers.ofString());
                assertEquals(200, served.statusCode(), served.body());
                // team-a's requests_per_minute: OpenAI's headers on its answer (team-b has no per-minute limit: none).
                assertEquals(t.equals("team-a") ? "60" : null, served.headers().firstValue("x-ratelimit-limit-requests").orElse(null));
                assertEquals(t.equals("team-a") ? "59" : null, served.headers().firstValue("x-ratelimit-remaining-requests").orElse(null));
            }
            String servedB = "kvferry_router_requests_total{route=\"/v1/completions\",status=\"200\",tenant=\"team-b\"} 1.0";
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            String scrape;
            while (!(scrape = http.send(HttpRequest.newBuilder(URI.create(base + "/metrics")).build(), HttpResponse.BodyHandlers.ofString()).body())
                    .contains(servedB) && System.nanoTime() < deadline) {
                Thread.sleep(20);
            }
            assertTrue(scrape.contains("kvferry_router_requests_total{route=\"/v1/completions\",status=\"401\",tenant=\"-\"} 1.0"), scrape);
            assertTrue(scrape.contains("kvferry_router_requests_total{route=\"/v1/completions\",status=\"200\",tenant=\"team-a\"} 1.0"), scrape);
            assertTrue(scrape.contains(servedB), scrape);
            assertTrue(scrape.contains("kvferry_router_tenant_requests_running{tenant=\"team-a\"}"), scrape);
            assertTrue(scrape.contains("kvferry_router_rate_limited_total{limit=\"requests\",tenant=\"team-a\"} 0.0"), scrape);
            List<String> lines = Files.readAllLines(log);
            assertTrue(lines.stream().anyMatch(l -> l.contains("request route=/v1/completions status=200 ") && l.endsWith(" tenant=team-b")),
                    String.join("\n", lines));
        } finally {
            serve.destroy();
            if (!serve.waitFor(10, TimeUnit.SECONDS)) serve.destroyForcibly().waitFor(5, TimeUnit.SECONDS);
        }
    }

    /**
     * A prefill process killed while requests wait on it: each of its requests ends with an HTTP 500 naming the failure,
     * seen by the connections' loss (within 9 s: never the 10 s heartbeat timeout), and the router goes on serving
     * through the other prefill.
     */
    @Test
    @Timeout(180)
    void killingAPrefillFailsItsRequestsFastAndTheRouterServesOn() throws Exception {
        List<Process> procs = new ArrayList<>();
        // Two slots per prefill and long prompts in 16-token chunks: requests queue on the prefills.
        List<String> slow = List.of("--pages", "64", "--max-requests", "2", "--chunk-tokens", "16");
        Roles.Role router = null;
        try {
            Process victim = spawnRole("prefill", slow), survivor = spawnRole("prefill", slow);
            Process decode = spawnRole("decode", List.of());
            procs.addAll(List.of(decode, victim, survivor));
            String v = DemoCommand.awaitUrl(victim, "prefill"), s = DemoCommand.awaitUrl(survivor, "prefill");
            String d = DemoCommand.awaitUrl(decode, "decode");
            ModelFiles.Loaded model = ModelFiles.load(null, null);
            router = Roles.router(new Roles.Options(model, ModelVariant.LLAMA, 1, 1, 16, 64, 8, 64, "tcp", "127.0.0.1", 0, 0, "kill-test"), List.of(v, s), List.of(d));
            String url = "http://127.0.0.1:" + router.port() + "/v1/completions";
            HttpClient http = HttpClient.newBuilder().executor(Executors.newVirtualThreadPerTaskExecutor()).build();
            String prompt = "Once upon a time there was a little girl. ".repeat(30);
            ExecutorService exec = Executors.newVirtualThreadPerTaskExecutor();
            record Outcome(int status, String body, long endNanos) {
            }
            List<Future<Outcome>> futures = new ArrayList<>();
            for (int i = 0; i < 40; i++) {
                futures.add(exec.submit(() -> {
                    HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create(url)).POST(HttpRequest.BodyPublishers.ofString(
                            "{\"prompt\":\"" + prompt + "\",\"max_tokens\":4,\"temperature\":0}")).build(), HttpResponse.BodyHandlers.ofString());
                    return new Outcome(r.statusCode(), r.body(), System.nanoTime());
                }));
            }
            // Strike once requests are moving: the first answer came back.
            long strikeBy = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (futures.stream().noneMatch(Future::isDone) && System.nanoTime() < strikeBy) Thread.sleep(5);
            long killedAt = System.nanoTime();
            victim.destroyForcibly();
            int failed = 0;
            for (Future<Outcome> f : futures) {
                Outcome o = f.get(30, TimeUnit.SECONDS);
                if (o.status() == 200) continue;
                failed++;
                assertEquals(500, o.status(), o.body());
                String msg = JSON.readTree(o.body()).path("error").path("message").asText();
                assertTrue(!msg.isBlank(), o.body());
                String kind = JSON.readTree(o.body()).path("error").path("kind").asText();
                // Ended by the connections' loss, not by the 10 s heartbeat timeout (nor a later one): its kind says which.
                assertTrue(Set.of("peer_lost", "prefill_unreachable", "transfer_error").contains(kind),
                        "a lost prefill is a typed transfer failure, seen by its connections' loss: " + o.body());
                // A bound for "not left to a timeout", under the heartbeat's 10 s. It was 3 s: 40 requests failing at
                // once across four JVMs on a loaded 2-core machine can take longer to come back (a heartbeat_timeout,
                // once allowed above, could never have met it).
                double after = (o.endNanos() - killedAt) / 1e9;
                assertTrue(after < 9.0, "a request of the killed prefill ended " + after + " s after the kill: " + msg);
            }
            assertTrue(failed > 0, "the kill hit no request (all 40 were done before it)");
            // New requests go to the surviving prefill.
            for (int i = 0; i < 5; i++) {
                HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create(url)).POST(HttpRequest.BodyPublishers.ofString(
                        "{\"prompt\":\"One day\",\"max_tokens\":4,\"temperature\":0}")).build(), HttpResponse.BodyHandlers.ofString());
                assertEquals(200, r.statusCode(), r.body());
            }
            exec.shutdown();
        } finally {
            if (router != null) router.close();
            for (Process p : procs) {
                p.destroy();
                if (!p.waitFor(5, TimeUnit.SECONDS)) p.destroyForcibly().waitFor(5, TimeUnit.SECONDS);
            }
        }
    }
}
