package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpServer;
import io.kvferry.engine.model.CompilerSlot;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.engine.serving.EngineSpec;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * The router's tenants ({@code --tenants-file}): each key serves its tenant and no other key is let in; a tenant's
 * {@code max_concurrent_requests} turns away its own requests beyond it (429 naming its limit) while other tenants are
 * served; an isolated tenant's requests never reuse another tenant's prefix-cache pages, whatever salt they send, a shared
 * one's do; the file is checked whole (each fault named by tenant and field) and re-read when it changes; the request
 * and token meters carry the tenant.
 */
class TenantsTest {
    private static final String TOKEN = "tenants-test-cluster-token";
    private static final String KEY_A = "tenant-a-key-0123456789";
    private static final String KEY_B = "tenant-b-key-0123456789";
    private static final String KEY_C = "tenant-c-key-0123456789";
    private static final String KEY_D = "tenant-d-key-0123456789";
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final int PAGE = 16;

    @TempDir
    Path dir;

    private static ModelFiles.Loaded model;
    private static Tokenizer tokenizer;
    private static EngineStack stack;

    @BeforeAll
    static void engines() throws Exception {
        model = ModelFiles.load(null, null);
        tokenizer = model.tokenizer();
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, PAGE, 1024, 32, 32);
        stack = EngineStack.open(spec, spec, TOKEN, TOKEN);
    }

    @AfterAll
    static void stop() {
        if (stack != null) stack.close();
    }

    static String tenant(String name, String key, String more) {
        return "{\"name\":\"" + name + "\",\"key\":\"" + key + "\"" + (more == null ? "" : "," + more) + "}";
    }

    static String file(String... tenants) {
        return "{\"tenants\":[" + String.join(",", tenants) + "]}";
    }

    private Router router(Tenants tenants, SimpleMeterRegistry meters) throws Exception {
        return new Router(List.of(stack.prefillUrl()), List.of(stack.decodeUrl()), tokenizer, model.weights().config.seqLen(), "m",
                "127.0.0.1", 0, new Router.Access(TOKEN, null, tenants), meters);
    }

    private static HttpResponse<String> post(int port, String path, String body, String key) throws Exception {
        return EngineAuthTest.send(port, "POST", path, body, key == null ? null : "Bearer " + key);
    }

    private static JsonNode ok(int port, String path, String body, String key) throws Exception {
        HttpResponse<String> r = post(port, path, body, key);
        assertEquals(200, r.statusCode(), r.body());
        return JSON.readTree(r.body());
    }

    private static int cached(JsonNode answer) {
        return answer.path("usage").path("prompt_tokens_details").path("cached_tokens").intValue();
    }

    private static double count(SimpleMeterRegistry m, String route, int status, String tenant) {
        Counter c = m.find(RouterMeters.REQUESTS).tags("route", route, "status", Integer.toString(status), "tenant", tenant).counter();
        return c == null ? 0 : c.count();
    }

    /** The count once it is {@code expected} (10 s at most): the router counts a request just after its client has the answer. */
    private static double count(SimpleMeterRegistry m, String route, int status, String tenant, double expected) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        double n;
        while ((n = count(m, route, status, tenant)) != expected && System.nanoTime() < deadline) Thread.sleep(10);
        return n;
    }

    @Test
    @Timeout(120)
    void eachKeyServesItsTenantAnotherIs401AndTheMetersCarryTheTenant() throws Exception {
        SimpleMeterRegistry meters = new SimpleMeterRegistry();
        Tenants tenants = Tenants.of(file(tenant("team-a", KEY_A, null), tenant("team-b", KEY_B, "\"max_concurrent_requests\":4")), TOKEN);
        try (Router r = router(tenants, meters)) {
            String body = "{\"prompt\":\"Once upon a time\",\"max_tokens\":3,\"temperature\":0}";
            JsonNode a = ok(r.port(), "/v1/completions", body, KEY_A);
            JsonNode b = ok(r.port(), "/v1/completions", body, KEY_B);
            assertEquals(a.path("choices").path(0).path("text"), b.path("choices").path(0).path("text"));
            JsonNode g = ok(r.port(), "/generate", "{\"text\":\"Once\",\"sampling_params\":{\"max_new_tokens\":2}}", KEY_B);
            for (String wrong : new String[]{KEY_C, TOKEN, null, KEY_A + "x", KEY_A.substring(1)}) {
                EngineAuthTest.assertUnauthorized(post(r.port(), "/v1/completions", body, wrong), "needs a tenant's key", KEY_A, KEY_B, TOKEN);
            }
            EngineAuthTest.assertUnauthorized(EngineAuthTest.send(r.port(), "GET", "/v1/models", null, "Bearer " + KEY_C),
                    "needs a tenant's key", KEY_A, KEY_B);
            assertEquals(200, EngineAuthTest.send(r.port(), "GET", "/v1/models", null, "Bearer " + KEY_A).statusCode());
            assertEquals(200, EngineAuthTest.send(r.port(), "GET", "/health", null, null).statusCode(), "/health stays open");

            assertEquals(1, count(meters, "/v1/completions", 200, "team-a", 1));
            assertEquals(1, count(meters, "/v1/completions", 200, "team-b", 1));
            assertEquals(1, count(meters, "/generate", 200, "team-b", 1));
            assertEquals(5, count(meters, "/v1/completions", 401, RouterMeters.NO_TENANT, 5));
            assertEquals(1, count(meters, "/v1/models", 200, "team-a", 1));
            assertTrue(meters.find(RouterMeters.REQUESTS).meters().stream().allMatch(m -> m.getId().getTag("tenant") != null),
                    "every request series names its tenant");
            assertEquals(a.path("usage").path("prompt_tokens").intValue(),
                    meters.find(RouterMeters.PROMPT_TOKENS).tag("tenant", "team-a").counter().count());
            assertEquals(a.path("usage").path("completion_tokens").intValue(),
                    meters.find(RouterMeters.GENERATION_TOKENS).tag("tenant", "team-a").counter().count());
            assertEquals(b.path("usage").path("completion_tokens").intValue() + g.path("meta_info").path("completion_tokens").intValue(),
                    meters.find(RouterMeters.GENERATION_TOKENS).tag("tenant", "team-b").counter().count());
            Gauge running = meters.find(RouterMeters.TENANT_RUNNING).tag("tenant", "team-b").gauge();
            assertNotNull(running);
            assertNotNull(meters.find(RouterMeters.TENANT_WAITING).tag("tenant", "team-a").gauge());
        }
        // Without tenants the meters are as before: no tenant tag (dashboards and queries keep working).
        SimpleMeterRegistry plain = new SimpleMeterRegistry();
        try (Router r = router(null, plain)) {
            ok(r.port(), "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":1}", null);
            assertEquals(1, RouterErrorsTest.requests(plain, "/v1/completions", 200, 1));
            assertTrue(plain.find(RouterMeters.REQUESTS).meters().stream().allMatch(m -> m.getId().getTag("tenant") == null));
            assertTrue(plain.find(RouterMeters.PROMPT_TOKENS).meters().stream().allMatch(m -> m.getId().getTag("tenant") == null));
        }
    }

    /**
     * The router's structured-output compiler takes turns between tenants (not between addresses: every client here is
     * 127.0.0.1): each tenant's uncached specs wait in their own queue, and all are served once the compiler is free.
     */
    @Test
    @Timeout(120)
    void theCompilersTurnsAreTheTenants() throws Exception {
        Tenants tenants = Tenants.of(file(tenant("team-a", KEY_A, null), tenant("team-b", KEY_B, null)), TOKEN);
        try (Router r = router(tenants, new SimpleMeterRegistry())) {
            List<CompletableFuture<HttpResponse<String>>> sent = new ArrayList<>();
            try (CompilerSlot held = CompilerSlot.hold(r.outputs(), TimeUnit.SECONDS.toNanos(60))) {
                String[][] specs = {{KEY_A, "tenant team-a", "a[0-9]{2}"}, {KEY_A, "tenant team-a", "b[0-9]{2}"}, {KEY_B, "tenant team-b", "c[0-9]{2}"}};
                for (String[] spec : specs) {
                    int before = r.outputs().queued().getOrDefault(spec[1], 0);
                    String body = "{\"prompt\":\"Once\",\"max_tokens\":3,\"temperature\":0,\"guided_regex\":\"" + spec[2] + "\"}";
                    sent.add(CompletableFuture.supplyAsync(() -> {
                        try {
                            return post(r.port(), "/v1/completions", body, spec[0]);
                        } catch (Exception e) {
                            throw new CompletionException(e);
                        }
                    }, t -> Thread.ofPlatform().start(t)));
                    while (r.outputs().queued().getOrDefault(spec[1], 0) == before) Thread.yield(); // queued: the compiler's state
                }
                assertEquals(Map.of("tenant team-a", 2, "tenant team-b", 1), r.outputs().queued());
            }
            for (CompletableFuture<HttpResponse<String>> f : sent) {
                HttpResponse<String> answer = f.get(60, TimeUnit.SECONDS);
                assertEquals(200, answer.statusCode(), answer.body());
            }
        }
    }

    /**
     * The engines' compilers take turns between the tenants too: the router names each request's tenant to the engines
     * (X-Kvferry-Client, with the cluster token), so the prefill's compiler, held, has each tenant's specs in their own
     * queue, not all of them under the router's one address. A client's own X-Kvferry-Client (team-a's naming team-b, to
     * take its turns) reaches no engine: the router names the tenant its key opened.
     */
    @Test
    @Timeout(120)
    void theEnginesCompilersTurnsAreTheTenantsToo() throws Exception {
        Tenants tenants = Tenants.of(file(tenant("team-a", KEY_A, null), tenant("team-b", KEY_B, null)), TOKEN);
        var engine = stack.prefillServer.outputs();
        try (Router r = router(tenants, new SimpleMeterRegistry()); HttpClient client = HttpClient.newHttpClient()) {
            List<CompletableFuture<HttpResponse<String>>> sent = new ArrayList<>();
            try (CompilerSlot held = CompilerSlot.hold(engine, TimeUnit.SECONDS.toNanos(60))) {
                // The last with n = 2: each choice runs on a thread of its own, and its calls name its tenant too (two queued).
                String[][] specs = {{KEY_A, "tenant team-a", "d[0-9]{2}", "1"}, {KEY_A, "tenant team-a", "e[0-9]{2}", "1"},
                    {KEY_B, "tenant team-b", "f[0-9]{2}", "2"}};
                for (String[] spec : specs) {
                    int before = engine.queued().getOrDefault(spec[1], 0);
                    String body = "{\"prompt\":\"Once\",\"max_tokens\":3,\"n\":" + spec[3] + ",\"guided_regex\":\"" + spec[2] + "\"}";
                    int choices = Integer.parseInt(spec[3]);
                    sent.add(CompletableFuture.supplyAsync(() -> {
                        try {
                            return client.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + r.port() + "/v1/completions"))
                                    .timeout(Duration.ofSeconds(60)).header("Authorization", "Bearer " + spec[0])
                                    .header(StructuredOutputs.CLIENT_HEADER, "tenant " + (spec[0].equals(KEY_A) ? "team-b" : "team-a"))
                                    .POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
                        } catch (Exception e) {
                            throw new CompletionException(e);
                        }
                    }, t -> Thread.ofPlatform().start(t)));
                    while (engine.queued().getOrDefault(spec[1], 0) < before + choices) { // queued at the prefill: its compiler's state
                        if (sent.getLast().isDone()) fail("answered without queuing at the prefill as " + spec[1] + ": " + sent.getLast().get().body());
                        Thread.yield();
                    }
                }
                assertEquals(Map.of("tenant team-a", 2, "tenant team-b", 2), engine.queued());
            }
            for (CompletableFuture<HttpResponse<String>> f : sent) {
                HttpResponse<String> answer = f.get(60, TimeUnit.SECONDS);
                assertEquals(200, answer.statusCode(), answer.body());
            }
        }
    }

    /**
     * Isolated tenants (the default) sending the same prompt with the same {@code cache_salt} (or none) reuse only their own
     * pages: the second tenant's is computed whole, the first tenant's repeat hits; shared tenants reuse each other's.
     */
    @Test
    @Timeout(180)
    void isolatedTenantsNeverShareCachedPagesSharedOnesDo() throws Exception {
        Tenants tenants = Tenants.of(file(tenant("iso-a", KEY_A, null), tenant("iso-b", KEY_B, "\"cache_salt\":\"isolated\""),
                tenant("sh-c", KEY_C, "\"cache_salt\":\"shared\""), tenant("sh-d", KEY_D, "\"cache_salt\":\"shared\"")), TOKEN);
        try (Router r = router(tenants, null)) {
            int n = 0;
            for (String clientSalt : new String[]{"same-salt", null}) {
                String prompt = "Tom had a red ball number " + (n++) + ". He liked to throw the ball high in the sky and catch it with his hands";
                int tokens = tokenizer.encode(prompt, true, false).length;
                assertTrue(tokens > 2 * PAGE, tokens + " tokens");
                int warm = (tokens - 1) / PAGE * PAGE;
                String body = "{\"prompt\":\"" + prompt + "\",\"max_tokens\":3,\"temperature\":0"
                        + CacheSaltTest.salt(clientSalt) + "}";
                JsonNode a = ok(r.port(), "/v1/completions", body, KEY_A);
                assertEquals(0, cached(a), a.toString());
                JsonNode b = ok(r.port(), "/v1/completions", body, KEY_B);
                assertEquals(0, cached(b), "another isolated tenant reuses nothing of a's, salt " + clientSalt + ": " + b);
                assertEquals(a.path("kvferry").path("kv_pages"), b.path("kvferry").path("kv_pages"), "the decode had nothing for b either");
                JsonNode again = ok(r.port(), "/v1/completions", body, KEY_A);
                assertEquals(warm, cached(again), "a's own repeat hits, salt " + clientSalt + ": " + again);
                // Each choice of a request of several runs as the request's tenant: b's two choices hit b's pages.
                JsonNode two = ok(r.port(), "/v1/completions", body.replace("\"max_tokens\"", "\"n\":2,\"max_tokens\""), KEY_B);
                assertEquals(2 * warm, cached(two), "both choices are b's: " + two);
                assertEquals(a.path("choices").path(0).path("text"), b.path("choices").path(0).path("text"));
                assertEquals(a.path("choices").path(0).path("text"), again.path("choices").path(0).path("text"));
                // Shared tenants: the client's salt (or none) as sent, so c's pages serve d.
                String shared = body.replace("Tom had", "Sam had");
                int sharedWarm = (tokenizer.encode(prompt.replace("Tom had", "Sam had"), true, false).length - 1) / PAGE * PAGE;
                assertEquals(0, cached(ok(r.port(), "/v1/completions", shared, KEY_C)));
                JsonNode d = ok(r.port(), "/v1/completions", shared, KEY_D);
                assertEquals(sharedWarm, cached(d), "a shared tenant reuses another shared tenant's pages, salt " + clientSalt + ": " + d);
            }
            // A client's own salt still splits an isolated tenant's cache: another salt of a misses.
            String prompt = "Lily saw a big dog in the park near her house. The dog was brown and it wagged its tail at her all day";
            String body = "{\"prompt\":\"" + prompt + "\",\"max_tokens\":2,\"temperature\":0";
            ok(r.port(), "/v1/completions", body + CacheSaltTest.salt("s1") + "}", KEY_A);
            assertEquals(0, cached(ok(r.port(), "/v1/completions", body + CacheSaltTest.salt("s2") + "}", KEY_A)));
            assertTrue(cached(ok(r.port(), "/v1/completions", body + CacheSaltTest.salt("s1") + "}", KEY_A)) > 0);
            // /generate takes the tenant's salt too.
            String gen = "{\"text\":\"" + prompt + " too\",\"sampling_params\":{\"max_new_tokens\":2,\"temperature\":0}}";
            assertEquals(0, ok(r.port(), "/generate", gen, KEY_A).path("meta_info").path("cached_tokens").intValue());
            assertEquals(0, ok(r.port(), "/generate", gen, KEY_B).path("meta_info").path("cached_tokens").intValue(), "b misses a's pages");
            assertTrue(ok(r.port(), "/generate", gen, KEY_A).path("meta_info").path("cached_tokens").intValue() > 0);
        }
        assertEquals(0, stack.decode.outstanding().get(5, TimeUnit.SECONDS));
    }

    /** The salts themselves: 64 hex characters per tenant and client salt, distinct across tenants; shared passes through. */
    @Test
    void theSaltsAreTheTenantsOwnAndFitTheEnginesLimit() {
        Tenants ts = Tenants.of(file(tenant("a", KEY_A, null), tenant("b", KEY_B, null), tenant("c", KEY_C, "\"cache_salt\":\"shared\"")), TOKEN);
        Tenants.Tenant a = ts.list().get(0), b = ts.list().get(1), c = ts.list().get(2);
        String longest = "s".repeat(256);
        for (String client : new String[]{null, "x", longest}) {
            assertTrue(a.salt(client).matches("[0-9a-f]{64}"), a.salt(client));
            assertNotEquals(a.salt(client), b.salt(client));
            assertEquals(client, c.salt(client));
        }
        assertNotEquals(a.salt(null), a.salt("x"));
        assertNotEquals(a.salt("x"), a.salt("y"));
        // Derived from the cluster token: another router of the cluster gives a tenant the same salt, so its pages stay shared.
        Tenants again = Tenants.of(file(tenant("a", KEY_A, null)), TOKEN);
        assertEquals(a.salt("x"), again.list().getFirst().salt("x"));
        assertNotEquals(a.salt("x"), Tenants.of(file(tenant("a", KEY_A, null)), "another-cluster-token").list().getFirst().salt("x"));
    }

    /** A bad file is refused whole, the message naming the tenant and the field. */
    @Test
    void aBadFileIsRefusedNamingTheTenantAndTheField() throws Exception {
        String[][] bad = {
                {"[]", "must be a JSON object"},
                {"{\"tenants\":[]}", "tenants must be a non-empty array"},
                {"{\"tenants\":[{\"name\":\"a\",\"key\":\"" + KEY_A + "\"}],\"extra\":1}", "unknown field 'extra'"},
                {"{\"tenants\":[", "is not valid JSON"},
                {file(tenant("A", KEY_A, null)), "tenants[0].name must be 1 to 64 of a-z 0-9 . _ -, starting with a letter or digit, got \"A\""},
                {file(tenant("x".repeat(65), KEY_A, null)), "tenants[0].name must be 1 to 64"},
                // The request meters' tag of the requests no key opened (the 401s): a tenant of that name would be counted with them.
                {file(tenant("-", KEY_A, null)), "tenants[0].name must be 1 to 64"},
                {file("{\"key\":\"" + KEY_A + "\"}"), "tenants[0].name must be"},
                {file(tenant("a", KEY_A, null), tenant("a", KEY_B, null)), "tenants[1] (a).name is tenants[0]'s too"},
                {file(tenant("a", KEY_A, null), tenant("b", "short", null)), "tenants[1] (b).key has 5 characters; at least 16"},
                {file(tenant("a", KEY_A, null), tenant("b", KEY_A, null)), "tenants[1] (b).key is a's too: keys must be unique"},
                {file(tenant("a", TOKEN, null)), "tenants[0] (a).key is the cluster token"},
                {file(tenant("a", "with space in the key", null)), "tenants[0] (a).key must be visible ASCII"},
                {file("{\"name\":\"a\",\"key\":7}"), "tenants[0] (a).key must be a string"},
                {file(tenant("a", KEY_A, "\"max_concurrent_requests\":0")), "tenants[0] (a).max_concurrent_requests must be a whole number of at least 1"},
                {file(tenant("a", KEY_A, "\"max_concurrent_requests\":1.5")), "tenants[0] (a).max_concurrent_requests"},
                {file(tenant("a", KEY_A, "\"cache_salt\":\"private\"")), "tenants[0] (a).cache_salt must be \"isolated\" (the default) or \"shared\""},
                {file(tenant("a", KEY_A, "\"max_concurrent\":3")), "tenants[0] (a) has an unknown field 'max_concurrent'"},
                {"{\"tenants\":[{\"name\":\"a\",\"name\":\"b\",\"key\":\"" + KEY_A + "\"}]}", "is not valid JSON: Duplicate field 'name'"},
        };
        for (String[] c : bad) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Tenants.of(c[0], TOKEN), c[0]);
            assertTrue(e.getMessage().contains(c[1]), c[0] + " -> " + e.getMessage());
            assertFalse(e.getMessage().contains(KEY_A), "a key is never echoed: " + e.getMessage());
        }
        // A key written without its quotes is a JSON error, whose parser message quotes the token it could not read: the
        // key (logged at start and at every re-read). Only where it is may show.
        String unquoted = "secretKeyWithoutItsQuotes0123456789";
        for (String json : new String[]{"{\"tenants\":[{\"name\":\"a\",\"key\":" + unquoted + "}]}",
                "{\"tenants\":[{\"name\":\"a\",\"key\":\"" + KEY_A + "\"}," + unquoted + "]}"}) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Tenants.of(json, TOKEN), json);
            assertTrue(e.getMessage().contains("is not valid JSON") && e.getMessage().contains("line 1, column"), e.getMessage());
            assertFalse(e.getMessage().contains(unquoted.substring(0, 8)), "a key is never echoed: " + e.getMessage());
        }
        // From a file: the message starts with the flag and the file.
        Path f = Files.writeString(dir.resolve("tenants.json"), file(tenant("a", KEY_A, "\"max_concurrent_requests\":-1")));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Tenants.open(f, TOKEN));
        assertTrue(e.getMessage().startsWith("--tenants-file " + f + " tenants[0] (a).max_concurrent_requests must be"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> Tenants.open(dir.resolve("missing.json"), TOKEN));
        assertEquals("--tenants-file " + dir.resolve("missing.json") + " does not exist", e.getMessage());
        // Group or other read permission: a warning naming the file (the keys of every tenant are in it).
        Path g = Files.writeString(dir.resolve("ok.json"), file(tenant("a", KEY_A, null)));
        Files.setPosixFilePermissions(g, PosixFilePermissions.fromString("rw-r--r--"));
        String w = Tenants.permissionWarning(g);
        assertNotNull(w);
        assertTrue(w.contains("--tenants-file " + g + " is readable by every local user") && w.contains("chmod 600"), w);
        Files.setPosixFilePermissions(g, PosixFilePermissions.fromString("rw-r-----"));
        assertTrue(Tenants.permissionWarning(g).contains("readable by its group"));
        Files.setPosixFilePermissions(g, PosixFilePermissions.fromString("rw-------"));
        assertNull(Tenants.permissionWarning(g));
        // One API key and tenants: refused.
        Tenants ts = Tenants.of(file(tenant("a", KEY_A, null)), TOKEN);
        e = assertThrows(IllegalArgumentException.class, () -> new Router.Access(TOKEN, "an-api-key-of-its-own", ts));
        assertTrue(e.getMessage().contains("not both"), e.getMessage());
    }

    /**
     * The file re-read when its modification time changes: a new key serves, a removed one is a 401, a removed tenant's meters
     * go; an invalid new file is logged and the set before kept; the router's health thread looks at the file by itself.
     */
    @Test
    @Timeout(120)
    void aChangedFileIsReReadAnInvalidOneKeepsTheTenantsBefore() throws Exception {
        Path f = dir.resolve("tenants.json");
        Files.writeString(f, file(tenant("a", KEY_A, null), tenant("b", KEY_B, null)));
        FileTime t0 = Files.getLastModifiedTime(f);
        Tenants tenants = Tenants.open(f, TOKEN);
        SimpleMeterRegistry meters = new SimpleMeterRegistry();
        String body = "{\"prompt\":\"Once\",\"max_tokens\":1}";
        try (Router r = router(tenants, meters)) {
            ok(r.port(), "/v1/completions", body, KEY_B);
            assertEquals(401, post(r.port(), "/v1/completions", body, KEY_C).statusCode());
            assertEquals(1, count(meters, "/v1/completions", 200, "b", 1));

            Files.writeString(f, file(tenant("a", KEY_A, null), tenant("c", KEY_C, "\"max_concurrent_requests\":2")));
            Files.setLastModifiedTime(f, FileTime.fromMillis(t0.toMillis() + 10_000)); // a change whatever the clock's granularity
            tenants.reloadIfChanged();
            assertEquals(List.of("a", "c"), tenants.list().stream().map(Tenants.Tenant::name).toList());
            ok(r.port(), "/v1/completions", body, KEY_C);
            ok(r.port(), "/v1/completions", body, KEY_A);
            EngineAuthTest.assertUnauthorized(post(r.port(), "/v1/completions", body, KEY_B), "needs a tenant's key", KEY_B);
            assertNull(meters.find(RouterMeters.TENANT_RUNNING).tag("tenant", "b").gauge(), "b's meters are gone with it");
            assertEquals(0, count(meters, "/v1/completions", 200, "b"));
            assertNotNull(meters.find(RouterMeters.TENANT_RUNNING).tag("tenant", "c").gauge());
            assertEquals(1, count(meters, "/v1/completions", 200, "c", 1));

            Files.writeString(f, file(tenant("a", KEY_A, null), tenant("d", "short", null)));
            Files.setLastModifiedTime(f, FileTime.fromMillis(t0.toMillis() + 20_000));
            tenants.reloadIfChanged();
            assertEquals(List.of("a", "c"), tenants.list().stream().map(Tenants.Tenant::name).toList(), "an invalid file changes nothing");
            ok(r.port(), "/v1/completions", body, KEY_C);

            // The router's own check (every second, on its health thread) picks the next change up.
            Files.writeString(f, file(tenant("d", KEY_D, null)));
            Files.setLastModifiedTime(f, FileTime.fromMillis(t0.toMillis() + 30_000));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (!tenants.list().getFirst().name().equals("d") && System.nanoTime() < deadline) Thread.sleep(20);
            assertEquals(List.of("d"), tenants.list().stream().map(Tenants.Tenant::name).toList());
            ok(r.port(), "/v1/completions", body, KEY_D);
            assertEquals(401, post(r.port(), "/v1/completions", body, KEY_A).statusCode());
        }
    }

    /**
     * A reload registers a new tenant's meters before its key is identified (the set was swapped first: a request in that
     * gap missed its running gauge and could be counted under {@code -}), and removes a gone one's after its key no longer is.
     * The registry's own callbacks look at the set at the moment each meter comes and goes.
     */
    @Test
    @Timeout(120)
    void aReloadRegistersANewTenantsMetersBeforeItsKeyServes() throws Exception {
        Path f = dir.resolve("tenants.json");
        Files.writeString(f, file(tenant("a", KEY_A, null), tenant("b", KEY_B, null)));
        FileTime t0 = Files.getLastModifiedTime(f);
        Tenants tenants = Tenants.open(f, TOKEN);
        SimpleMeterRegistry meters = new SimpleMeterRegistry();
        List<String> seen = new CopyOnWriteArrayList<>();
        try (Router r = router(tenants, meters)) {
            meters.config().onMeterAdded(m -> {
                if (m.getId().getName().equals(RouterMeters.TENANT_RUNNING)) {
                    seen.add("added " + m.getId().getTag("tenant") + ", its key serving: " + (tenants.identify("Bearer " + KEY_C) != null));
                }
            });
            meters.config().onMeterRemoved(m -> {
                if (m.getId().getName().equals(RouterMeters.TENANT_RUNNING)) {
                    seen.add("removed " + m.getId().getTag("tenant") + ", its key serving: " + (tenants.identify("Bearer " + KEY_B) != null));
                }
            });
            Files.writeString(f, file(tenant("a", KEY_A, null), tenant("c", KEY_C, null)));
            Files.setLastModifiedTime(f, FileTime.fromMillis(t0.toMillis() + 10_000));
            tenants.reloadIfChanged();
            assertEquals(List.of("added c, its key serving: false", "removed b, its key serving: false"), seen);
            assertEquals("c", tenants.identify("Bearer " + KEY_C).name());
        }
    }

    /**
     * A request of a tenant that a reload removed while it ran ends after that tenant's meters went: it is counted under
     * {@code -} (no configured tenant), and no series of the gone tenant is made again (each would stay for good: the
     * tagged series are bounded by the file's names only if a gone name's never come back).
     */
    @Test
    void aRequestEndingAfterItsTenantWasRemovedMakesNoSeriesOfIt() {
        Tenants ts = Tenants.of(file(tenant("a", KEY_A, null), tenant("b", KEY_B, null)), TOKEN);
        Tenants.Tenant b = ts.list().get(1);
        SimpleMeterRegistry registry = new SimpleMeterRegistry();
        RouterMeters m = new RouterMeters(registry, true);
        ts.list().forEach(t -> m.tenant(t.name(), ts));
        m.started();
        m.tenantStarted("b");
        m.admissionRefused("b", RouterMeters.LIMIT_ROUTER); // b's series of the router's limit, made at its first refusal
        assertEquals(1, registry.find(RouterMeters.ADMISSION_REFUSED).tags("tenant", "b", "limit", RouterMeters.LIMIT_ROUTER).counter().count());
        m.forgetTenant("b"); // the reload, while b's request runs
        assertTrue(registry.find(RouterMeters.ADMISSION_REFUSED).tag("tenant", "b").meters().isEmpty(), "b's refusal series went with it");
        m.admissionRefused("b", RouterMeters.LIMIT_TENANT);
        m.admissionRefused("b", RouterMeters.LIMIT_ROUTER);
        assertTrue(registry.find(RouterMeters.ADMISSION_REFUSED).tag("tenant", "b").meters().isEmpty(), "no refusal series of b again");
        assertEquals(1, registry.find(RouterMeters.ADMISSION_REFUSED).tags("tenant", RouterMeters.NO_TENANT, "limit", RouterMeters.LIMIT_ROUTER)
                .counter().count(), "counted under -");
        m.succeeded(1_000, 5, 2, b);
        m.finished("/v1/completions", 200, "b");
        assertTrue(registry.find(RouterMeters.REQUESTS).tag("tenant", "b").meters().isEmpty(), "no request series of b");
        assertTrue(registry.find(RouterMeters.PROMPT_TOKENS).tag("tenant", "b").meters().isEmpty(), "no token series of b");
        assertTrue(registry.find(RouterMeters.GENERATION_TOKENS).tag("tenant", "b").meters().isEmpty(), "no token series of b");
        assertEquals(1, count(registry, "/v1/completions", 200, RouterMeters.NO_TENANT));
        assertEquals(5, registry.find(RouterMeters.PROMPT_TOKENS).tag("tenant", RouterMeters.NO_TENANT).counter().count());
        m.succeeded(1_000, 3, 1, ts.list().getFirst());
        m.finished("/v1/completions", 200, "a");
        assertEquals(1, count(registry, "/v1/completions", 200, "a"), "a tenant still there keeps its own");
        assertEquals(3, registry.find(RouterMeters.PROMPT_TOKENS).tag("tenant", "a").counter().count());
    }

    /**
     * A re-read that catches the file half written (its writer truncated it and writes the rest within the clock's tick)
     * finds it invalid; the whole file, under that same modification time, is still read at the next check.
     */
    @Test
    void aFileCaughtHalfWrittenIsReadWholeAtTheNextCheck() throws Exception {
        Path f = dir.resolve("tenants-half.json");
        Files.writeString(f, file(tenant("a", KEY_A, null)));
        FileTime t0 = Files.getLastModifiedTime(f);
        Tenants tenants = Tenants.open(f, TOKEN);
        String whole = file(tenant("a", KEY_A, null), tenant("b", KEY_B, null));
        FileTime t1 = FileTime.fromMillis(t0.toMillis() + 10_000);
        Files.writeString(f, whole.substring(0, whole.length() / 2));
        Files.setLastModifiedTime(f, t1);
        tenants.reloadIfChanged();
        assertEquals(List.of("a"), tenants.list().stream().map(Tenants.Tenant::name).toList(), "half a file changes nothing");
        Files.writeString(f, whole);
        Files.setLastModifiedTime(f, t1); // the same tick
        tenants.reloadIfChanged();
        assertEquals(List.of("a", "b"), tenants.list().stream().map(Tenants.Tenant::name).toList(), "the whole file is read");
        assertEquals("b", tenants.identify("Bearer " + KEY_B).name());
    }

    /**
     * A tenant kept by name keeps its count when a reload takes its limit away and another gives one back: its requests
     * under way (admitted under the first limit, or while it had none) still count against the new limit.
     */
    @Test
    void aTenantsCountSurvivesALimitTakenAwayAndGivenBack() throws Exception {
        Path f = dir.resolve("tenants-limit.json");
        Files.writeString(f, file(tenant("a", KEY_A, "\"max_concurrent_requests\":2")));
        FileTime t0 = Files.getLastModifiedTime(f);
        Tenants tenants = Tenants.open(f, TOKEN);
        Tenants.Tenant first = tenants.list().getFirst();
        assertTrue(Tenants.admit(first, 0), "under the limit of 2");
        Files.writeString(f, file(tenant("a", KEY_A, null)));
        Files.setLastModifiedTime(f, FileTime.fromMillis(t0.toMillis() + 10_000));
        tenants.reloadIfChanged();
        Tenants.Tenant unlimited = tenants.list().getFirst();
        assertTrue(Tenants.admit(unlimited, 0), "no limit");
        Files.writeString(f, file(tenant("a", KEY_A, "\"max_concurrent_requests\":2")));
        Files.setLastModifiedTime(f, FileTime.fromMillis(t0.toMillis() + 20_000));
        tenants.reloadIfChanged();
        Tenants.Tenant again = tenants.list().getFirst();
        assertEquals(2, tenants.inFlight("a"), "both requests under way count");
        assertFalse(Tenants.admit(again, 0), "two under way: the limit of 2 is reached");
        Tenants.release(first);
        assertTrue(Tenants.admit(again, 0), "one ended: one more is admitted");
        assertFalse(Tenants.admit(again, 0));
        Tenants.release(unlimited);
        Tenants.release(again);
        assertEquals(0, tenants.inFlight("a"));
    }

    /** A tenant's slots follow its limit across reloads; those under way keep theirs. */
    @Test
    void aTenantsSlotsFollowItsLimitAndThoseUnderWayKeepTheirs() throws Exception {
        Tenants.Slots s = new Tenants.Slots(2);
        assertTrue(s.tryAcquire());
        assertTrue(s.tryAcquire());
        s.resize(1);
        assertEquals(2, s.inFlight(), "both keep their admission");
        assertFalse(s.tryAcquire(0, TimeUnit.NANOSECONDS));
        s.release();
        assertFalse(s.tryAcquire(0, TimeUnit.NANOSECONDS), "one under way is the new limit");
        s.release();
        assertTrue(s.tryAcquire());
        s.resize(3);
        assertEquals(1, s.inFlight());
        assertTrue(s.tryAcquire());
        assertTrue(s.tryAcquire());
        assertFalse(s.tryAcquire());
    }

    /**
     * A tenant at its {@code max_concurrent_requests} (a decode stub holds its first request): the tenant's next request
     * waits the queue timeout and gets 429 naming the tenant's limit, reaching no backend, while another tenant is
     * served; with time to wait, it is served once the first ends.
     */
    @Test
    @Timeout(60)
    void aTenantAtItsLimitGets429WhileAnotherTenantIsServed() throws Exception {
        HttpServer prefill = RouterErrorsTest.prefillStub();
        HttpServer decode = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        RouterErrorsTest.answerHealthy(decode);
        AtomicInteger decodeCalls = new AtomicInteger();
        CountDownLatch entered = new CountDownLatch(1), release = new CountDownLatch(1);
        // The next call is held ({entered, release}) when armed: the first request of each part.
        AtomicReference<CountDownLatch[]> hold = new AtomicReference<>(new CountDownLatch[]{entered, release});
        decode.setExecutor(Executors.newVirtualThreadPerTaskExecutor());
        decode.createContext("/generate", ex -> {
            decodeCalls.incrementAndGet();
            ex.getRequestBody().readAllBytes();
            CountDownLatch[] h = hold.getAndSet(null);
            if (h != null) {
                h[0].countDown();
                try {
                    h[1].await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            ex.sendResponseHeaders(200, 0);
            ex.getResponseBody().write("data: {\"token\":300}\n\ndata: {\"finish_reason\":\"length\"}\n\n".getBytes(StandardCharsets.UTF_8));
            ex.close();
        });
        decode.start();
        Tenants tenants = Tenants.of(file(tenant("a", KEY_A, "\"max_concurrent_requests\":1"), tenant("b", KEY_B, "\"max_concurrent_requests\":1")),
                TOKEN);
        String body = "{\"prompt\":\"Hi\",\"max_tokens\":1}";
        SimpleMeterRegistry meters = new SimpleMeterRegistry();
        CountDownLatch entered2 = new CountDownLatch(1), release2 = new CountDownLatch(1);
        try {
            limitWithoutTimeToWait(prefill, decode, tenants, meters, body, entered, release, decodeCalls);
            // With time to wait: a's second request waits for a's slot (its waiting gauge says so), served once the first ends.
            hold.set(new CountDownLatch[]{entered2, release2});
            limitWithTimeToWait(prefill, decode, tenants, meters, body, entered2, release2, decodeCalls);
        } finally {
            release2.countDown();
            release.countDown();
            decode.stop(0);
            prefill.stop(0);
        }
    }

    private static Router limitedRouter(HttpServer prefill, HttpServer decode, Tenants tenants, SimpleMeterRegistry meters, Duration wait)
            throws Exception {
        return new Router(List.of(RouterErrorsTest.url(prefill)), List.of(RouterErrorsTest.url(decode)), tokenizer, 512, "m",
                "127.0.0.1", 0, new Router.Access(TOKEN, null, tenants), new Router.Admission(0, wait), meters);
    }

    private static void limitWithoutTimeToWait(HttpServer prefill, HttpServer decode, Tenants tenants, SimpleMeterRegistry meters, String body,
                                               CountDownLatch entered, CountDownLatch release, AtomicInteger decodeCalls) throws Exception {
        try (Router r = limitedRouter(prefill, decode, tenants, meters, Duration.ofMillis(200))) {
            CompletableFuture<HttpResponse<String>> first = async(r.port(), body, KEY_A);
            assertTrue(entered.await(30, TimeUnit.SECONDS), "a's first request reached the decode");
            HttpResponse<String> second = post(r.port(), "/v1/completions", body, KEY_A);
            assertEquals(429, second.statusCode(), second.body());
            assertEquals("1", second.headers().firstValue("Retry-After").orElse(null));
            JsonNode e = JSON.readTree(second.body()).path("error");
            assertEquals("rate_limit_error", e.path("type").asText(), second.body());
            assertTrue(e.path("message").asText().contains("tenant a is serving its limit of 1 requests at once (max_concurrent_requests "
                    + "in --tenants-file) and none ended within 200 ms"), second.body());
            assertEquals(1, decodeCalls.get(), "the refused request reached no backend");
            assertEquals(1, meters.find(RouterMeters.ADMISSION_REFUSED).tags("tenant", "a", "limit", RouterMeters.LIMIT_TENANT).counter().count(),
                    "a's refusal counted on /metrics, under a's limit");
            assertEquals(0, meters.find(RouterMeters.ADMISSION_REFUSED).tags("tenant", "b", "limit", RouterMeters.LIMIT_TENANT).counter().count());
            assertNull(meters.find(RouterMeters.ADMISSION_REFUSED).tags("limit", RouterMeters.LIMIT_ROUTER).counter(), "no router limit here");
            assertEquals(200, post(r.port(), "/v1/completions", body, KEY_B).statusCode(), "b is served while a is at its limit");
            assertEquals(1, tenants.inFlight("a"), "a's held request");
            assertEquals(0, tenants.inFlight("b"));
            // Once the 429 and b's request are counted (just after their answers), only a's held request runs.
            assertEquals(1, count(meters, "/v1/completions", 429, "a", 1));
            assertEquals(1, count(meters, "/v1/completions", 200, "b", 1));
            assertEquals(1, meters.find(RouterMeters.TENANT_RUNNING).tag("tenant", "a").gauge().value());
            assertEquals(0, meters.find(RouterMeters.TENANT_RUNNING).tag("tenant", "b").gauge().value());
            release.countDown();
            assertEquals(200, first.get(30, TimeUnit.SECONDS).statusCode());
            assertEquals(200, post(r.port(), "/v1/completions", body, KEY_A).statusCode(), "a's slot is free again");
            assertEquals(2, count(meters, "/v1/completions", 200, "a", 2));
            assertEquals(0, meters.find(RouterMeters.TENANT_RUNNING).tag("tenant", "a").gauge().value());
        }
    }

    private static void limitWithTimeToWait(HttpServer prefill, HttpServer decode, Tenants tenants, SimpleMeterRegistry meters, String body,
                                            CountDownLatch entered2, CountDownLatch release2, AtomicInteger decodeCalls) throws Exception {
        try (Router r = limitedRouter(prefill, decode, tenants, meters, Duration.ofSeconds(30))) {
            CompletableFuture<HttpResponse<String>> first = async(r.port(), body, KEY_A);
            assertTrue(entered2.await(30, TimeUnit.SECONDS), "a's first request reached the decode");
            int calls = decodeCalls.get();
            CompletableFuture<HttpResponse<String>> second = async(r.port(), body, KEY_A);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (tenants.waiting("a") == 0 && System.nanoTime() < deadline) Thread.sleep(2);
            assertEquals(1, tenants.waiting("a"), "a's second request waits for a's slot");
            assertEquals(1, meters.find(RouterMeters.TENANT_WAITING).tag("tenant", "a").gauge().value());
            assertEquals(calls, decodeCalls.get(), "...not at the decode");
            release2.countDown();
            assertEquals(200, second.get(30, TimeUnit.SECONDS).statusCode(), "served once a's first ended");
            assertEquals(200, first.get(30, TimeUnit.SECONDS).statusCode());
            assertEquals(0, tenants.waiting("a"));
        }
    }

    private static CompletableFuture<HttpResponse<String>> async(int port, String body, String key) {
        return CompletableFuture.supplyAsync(() -> {
            try {
                return post(port, "/v1/completions", body, key);
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        }, Executors.newVirtualThreadPerTaskExecutor());
    }
}
