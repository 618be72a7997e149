package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpServer;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.engine.serving.EngineSpec;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.net.InetSocketAddress;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.FileTime;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import static io.kvferry.engine.http.TenantsTest.file;
import static io.kvferry.engine.http.TenantsTest.tenant;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A tenant's {@code requests_per_minute} and {@code tokens_per_minute} on the router, on a clock of the test's own: a request
 * over one is a 429 {@code rate_limit_error} with the {@code Retry-After} its bucket's refill gives, reaching no engine; one
 * whose tokens could never fit is a 400; answers carry the {@code x-ratelimit-*} headers; the unused completion budget is
 * given back when a request ends; a reload keeps an unchanged limit's bucket and a changed one's fraction in use.
 */
class TenantRateLimitsTest {
    private static final String TOKEN = "rate-limits-test-cluster-token";
    private static final String KEY_A = "tenant-a-key-0123456789";
    private static final String KEY_B = "tenant-b-key-0123456789";
    private static final String KEY_C = "tenant-c-key-0123456789";
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final long SECOND = TimeUnit.SECONDS.toNanos(1);
    /** The stubs' router's context. */
    private static final int CONTEXT = 512;

    @TempDir
    Path dir;

    private static ModelFiles.Loaded model;
    private static Tokenizer tokenizer;

    @BeforeAll
    static void load() throws Exception {
        model = ModelFiles.load(null, null);
        tokenizer = model.tokenizer();
    }

    /** A prefill stub and a decode stub whose every /generate streams one token, counting its calls. */
    private static final class Stubs implements AutoCloseable {
        final HttpServer prefill;
        final HttpServer decode;
        final AtomicInteger decodeCalls = new AtomicInteger();

        Stubs() throws Exception {
            prefill = RouterErrorsTest.prefillStub();
            decode = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
            RouterErrorsTest.answerHealthy(decode);
            decode.createContext("/generate", ex -> {
                decodeCalls.incrementAndGet();
                ex.getRequestBody().readAllBytes();
                ex.sendResponseHeaders(200, 0);
                ex.getResponseBody().write("data: {\"token\":300}\n\ndata: {\"finish_reason\":\"length\"}\n\n".getBytes(StandardCharsets.UTF_8));
                ex.close();
            });
            decode.start();
        }

        Router router(Tenants tenants, SimpleMeterRegistry meters) throws Exception {
            return new Router(List.of(RouterErrorsTest.url(prefill)), List.of(RouterErrorsTest.url(decode)), tokenizer, CONTEXT, "m",
                    "127.0.0.1", 0, new Router.Access(TOKEN, null, tenants), new Router.Admission(0, Duration.ZERO), meters);
        }

        @Override
        public void close() {
            decode.stop(0);
            prefill.stop(0);
        }
    }

    private static HttpResponse<String> post(int port, String path, String body, String key) throws Exception {
        return EngineAuthTest.send(port, "POST", path, body, "Bearer " + key);
    }

    private static String header(HttpResponse<String> r, String name) {
        return r.headers().firstValue(name).orElse(null);
    }

    private static double rateLimited(SimpleMeterRegistry m, String tenant, String limit) {
        Counter c = m.find(RouterMeters.RATE_LIMITED).tags("tenant", tenant, "limit", limit).counter();
        return c == null ? -1 : c.count();
    }

    /** Once {@code n} requests of {@code tenant} are counted with {@code status} (just after their answers: their refunds are in). */
    private static void counted(SimpleMeterRegistry m, String route, int status, String tenant, double n) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        Counter c;
        while (((c = m.find(RouterMeters.REQUESTS).tags("route", route, "status", Integer.toString(status), "tenant", tenant).counter()) == null
                || c.count() != n) && System.nanoTime() < deadline) {
            Thread.sleep(5);
        }
        assertNotNull(c, route + " " + status + " " + tenant);
        assertEquals(n, c.count(), route + " " + status + " " + tenant);
    }

    private static Tenants.Tenant named(Tenants ts, String name) {
        return ts.list().stream().filter(t -> t.name().equals(name)).findFirst().orElseThrow();
    }

    @Test
    @Timeout(60)
    void overItsRequestsPerMinuteATenantGets429WithRetryAfterAndReachesNoEngine() throws Exception {
        AtomicLong clock = new AtomicLong(7 * SECOND);
        Tenants tenants = Tenants.of(file(tenant("a", KEY_A, "\"requests_per_minute\":2"), tenant("b", KEY_B, null)), TOKEN, clock::get);
        SimpleMeterRegistry meters = new SimpleMeterRegistry();
        String body = "{\"prompt\":\"Hi\",\"max_tokens\":1}";
        try (Stubs s = new Stubs(); Router r = s.router(tenants, meters)) {
            HttpResponse<String> first = post(r.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":1,\"stream\":true}", KEY_A);
            assertEquals(200, first.statusCode(), first.body());
            assertEquals("2", header(first, RateLimits.LIMIT_REQUESTS), "a stream's answer carries them too");
            assertEquals("1", header(first, RateLimits.REMAINING_REQUESTS));
            assertEquals("30s", header(first, RateLimits.RESET_REQUESTS), "one request of 2 a minute refills in 30 s");
            assertNull(header(first, RateLimits.LIMIT_TOKENS), "no tokens_per_minute: no tokens headers");
            HttpResponse<String> second = post(r.port(), "/generate", "{\"text\":\"Hi\",\"sampling_params\":{\"max_new_tokens\":1}}", KEY_A);
            assertEquals(200, second.statusCode(), second.body());
            assertEquals("0", header(second, RateLimits.REMAINING_REQUESTS));
            assertEquals("1m0s", header(second, RateLimits.RESET_REQUESTS), "empty: full again in a minute, OpenAI's form");
            assertNull(header(second, RateLimits.RESET_TOKENS));
            assertEquals(2, s.decodeCalls.get());

            for (String[] route : new String[][]{{"/v1/completions", body}, {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}"},
                    {"/generate", "{\"text\":[\"Hi\",\"Ho\"]}"}}) {
                HttpResponse<String> third = post(r.port(), route[0], route[1], KEY_A);
                assertEquals(429, third.statusCode(), route[0] + ": " + third.body());
                assertEquals("30", header(third, "Retry-After"), "one request of 2 a minute refills in 30 s");
                assertEquals("0", header(third, RateLimits.REMAINING_REQUESTS));
                assertEquals("1m0s", header(third, RateLimits.RESET_REQUESTS));
                JsonNode e = JSON.readTree(third.body()).path("error");
                assertEquals("rate_limit_error", e.path("type").asText(), third.body());
                assertEquals("tenant a is over its limit of 2 requests per minute (requests_per_minute in --tenants-file); retry in 30 s",
                        e.path("message").asText());
            }
            assertEquals(2, s.decodeCalls.get(), "the refused requests reached no engine");
            HttpResponse<String> other = post(r.port(), "/v1/completions", body, KEY_B);
            assertEquals(200, other.statusCode(), "b has no limit");
            assertNull(header(other, RateLimits.LIMIT_REQUESTS), "nor its headers");

            clock.addAndGet(29 * SECOND);
            HttpResponse<String> early = post(r.port(), "/v1/completions", body, KEY_A);
            assertEquals(429, early.statusCode());
            assertEquals("1", header(early, "Retry-After"));
            clock.addAndGet(SECOND);
            HttpResponse<String> again = post(r.port(), "/v1/completions", body, KEY_A);
            assertEquals(200, again.statusCode(), "one request refilled after 30 s");
            assertEquals("0", header(again, RateLimits.REMAINING_REQUESTS));
            counted(meters, "/v1/completions", 429, "a", 2);
            assertEquals(4, rateLimited(meters, "a", RouterMeters.LIMIT_REQUESTS));
            assertEquals(0, rateLimited(meters, "a", RouterMeters.LIMIT_TOKENS));
            assertEquals(0, rateLimited(meters, "b", RouterMeters.LIMIT_REQUESTS), "every tenant's series is there from the start");
        }
    }

    @Test
    @Timeout(60)
    void tokensPerMinuteChargesPromptAndBudgetGivesBackTheUnusedAndRefusesWhatNeverFits() throws Exception {
        AtomicLong clock = new AtomicLong(-3 * SECOND);
        Tenants tenants = Tenants.of(file(tenant("a", KEY_A, "\"tokens_per_minute\":100,\"requests_per_minute\":10")), TOKEN, clock::get);
        RateBucket bucket = named(tenants, "a").tokens;
        SimpleMeterRegistry meters = new SimpleMeterRegistry();
        try (Stubs s = new Stubs(); Router r = s.router(tenants, meters)) {
            HttpResponse<String> one = post(r.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":20}", KEY_A);
            assertEquals(200, one.statusCode(), one.body());
            int p = JSON.readTree(one.body()).path("usage").path("prompt_tokens").intValue();
            assertTrue(p > 0 && p < 10, "prompt tokens " + p);
            assertEquals("100", header(one, RateLimits.LIMIT_TOKENS));
            assertEquals(Integer.toString(100 - p - 20), header(one, RateLimits.REMAINING_TOKENS), "prompt and max_tokens charged at admission");
            assertEquals("9", header(one, RateLimits.REMAINING_REQUESTS));
            assertEquals("6s", header(one, RateLimits.RESET_REQUESTS), "1 request of 10 a minute");
            assertEquals(RateBucket.resetForm((p + 20) * 600_000_000L), header(one, RateLimits.RESET_TOKENS), "p + 20 tokens at 0.6 s each");
            assertTrue(header(one, RateLimits.RESET_TOKENS).matches("1[2-7](\\.[0-9]+)?s"), header(one, RateLimits.RESET_TOKENS));
            counted(meters, "/v1/completions", 200, "a", 1);
            assertEquals(100 - p - 1, bucket.remaining(), "the 19 tokens the decode did not send given back");

            // n = 2: each choice is charged, and each one's unused budget given back.
            HttpResponse<String> two = post(r.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":20,\"n\":2}", KEY_A);
            assertEquals(200, two.statusCode(), two.body());
            assertEquals(Integer.toString(100 - p - 1 - 2 * (p + 20)), header(two, RateLimits.REMAINING_TOKENS));
            counted(meters, "/v1/completions", 200, "a", 2);
            int left = 100 - 3 * (p + 1);
            assertEquals(left, bucket.remaining());

            int calls = s.decodeCalls.get();
            HttpResponse<String> huge = post(r.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":200}", KEY_A);
            assertEquals(400, huge.statusCode(), huge.body());
            assertEquals("100", header(huge, RateLimits.LIMIT_TOKENS), "a 400 of tokens that never fit names the limit");
            assertEquals(Integer.toString(left), header(huge, RateLimits.REMAINING_TOKENS), "nothing taken");
            JsonNode e = JSON.readTree(huge.body()).path("error");
            assertEquals("invalid_request_error", e.path("type").asText());
            assertEquals("max_tokens", e.path("param").asText());
            assertEquals("tenant a's limit is 100 tokens per minute (tokens_per_minute in --tenants-file) and this request counts "
                    + (p + 200) + " (prompt tokens plus max_tokens): it can never fit; ask for fewer tokens", e.path("message").asText());
            HttpResponse<String> several = post(r.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":40,\"n\":3}", KEY_A);
            assertEquals(400, several.statusCode(), several.body());
            assertTrue(several.body().contains("this request counts " + 3 * (p + 40) + " (prompt tokens plus max_tokens, for each of its 3 "
                    + "choices or prompts): it can never fit"), several.body());
            // A chat without max_tokens counts what the context leaves after its prompt: more than this tenant's minute.
            HttpResponse<String> chat = post(r.port(), "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", KEY_A);
            assertEquals(400, chat.statusCode(), chat.body());
            assertTrue(chat.body().contains("it can never fit"), chat.body());

            // More than the bucket holds now, within its limit: a 429, nothing taken (the request's own count given back too).
            HttpResponse<String> over = post(r.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":" + (100 - p) + "}", KEY_A);
            assertEquals(429, over.statusCode(), over.body());
            long seconds = Math.ceilDiv((100L - left) * 60, 100); // the missing tokens at 100 a minute
            assertEquals(Long.toString(seconds), header(over, "Retry-After"));
            assertEquals("tenant a is over its limit of 100 tokens per minute (tokens_per_minute in --tenants-file): this request counts 100; "
                    + "retry in " + seconds + " s", JSON.readTree(over.body()).path("error").path("message").asText());
            assertEquals(Integer.toString(left), header(over, RateLimits.REMAINING_TOKENS));
            assertEquals("8", header(over, RateLimits.REMAINING_REQUESTS), "a request refused for tokens takes no request");
            assertEquals(calls, s.decodeCalls.get(), "the refused requests reached no engine");
            assertEquals(left, bucket.remaining());
            assertEquals(4, rateLimited(meters, "a", RouterMeters.LIMIT_TOKENS));
            assertEquals(0, rateLimited(meters, "a", RouterMeters.LIMIT_REQUESTS));

            clock.addAndGet(seconds * SECOND);
            HttpResponse<String> later = post(r.port(), "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":" + (100 - p) + "}", KEY_A);
            assertEquals(200, later.statusCode(), "served once refilled: " + later.body());
            assertEquals("0", header(later, RateLimits.REMAINING_TOKENS));
            counted(meters, "/v1/completions", 200, "a", 3);
            assertEquals(100 - (p + 1), bucket.remaining(), "its unused budget back: its prompt and 1 token held");
        }
    }

    /** Real engines: a chat's answer carries the headers, and what stays charged is its prompt and the tokens it generated. */
    @Test
    @Timeout(120)
    void withRealEnginesWhatStaysChargedIsThePromptAndTheGeneratedTokens() throws Exception {
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 32, 32);
        AtomicLong clock = new AtomicLong();
        Tenants tenants = Tenants.of(file(tenant("a", KEY_A, "\"tokens_per_minute\":10000")), TOKEN, clock::get);
        SimpleMeterRegistry meters = new SimpleMeterRegistry();
        try (EngineStack stack = EngineStack.open(spec, spec, TOKEN, TOKEN);
             Router r = new Router(List.of(stack.prefillUrl()), List.of(stack.decodeUrl()), tokenizer, model.weights().config.seqLen(), "m",
                     "127.0.0.1", 0, new Router.Access(TOKEN, null, tenants), meters)) {
            HttpResponse<String> a = post(r.port(), "/v1/chat/completions",
                    "{\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time\"}],\"max_tokens\":40,\"temperature\":0}", KEY_A);
            assertEquals(200, a.statusCode(), a.body());
            JsonNode usage = JSON.readTree(a.body()).path("usage");
            int prompt = usage.path("prompt_tokens").intValue(), completion = usage.path("completion_tokens").intValue();
            assertEquals("10000", header(a, RateLimits.LIMIT_TOKENS));
            assertEquals(Integer.toString(10000 - prompt - 40), header(a, RateLimits.REMAINING_TOKENS));
            counted(meters, "/v1/chat/completions", 200, "a", 1);
            assertEquals(10000 - prompt - completion, named(tenants, "a").tokens.remaining());
        }
    }

    /**
     * A reload keeps an unchanged limit's bucket as it is (a reload is no way to refill one), carries a changed limit's fraction
     * in use over, drops a limit taken away (one set again starts full) and a tenant gone; an invalid limit keeps the set before.
     */
    @Test
    void aReloadKeepsAnUnchangedBucketAndTheFractionOfAChangedOne() throws Exception {
        AtomicLong clock = new AtomicLong(SECOND);
        Path f = dir.resolve("tenants.json");
        Files.writeString(f, file(tenant("a", KEY_A, "\"requests_per_minute\":10,\"tokens_per_minute\":1000"),
                tenant("b", KEY_B, "\"requests_per_minute\":4")));
        FileTime t0 = Files.getLastModifiedTime(f);
        Tenants tenants = Tenants.open(f, TOKEN, clock::get);
        RateBucket aRequests = named(tenants, "a").requests, aTokens = named(tenants, "a").tokens, bRequests = named(tenants, "b").requests;
        assertEquals(0, aRequests.take(10));
        assertEquals(0, aTokens.take(500));
        assertEquals(0, bRequests.take(4));

        Files.writeString(f, file(tenant("a", KEY_A, "\"requests_per_minute\":10,\"tokens_per_minute\":2000"),
                tenant("b", KEY_B, "\"requests_per_minute\":4,\"max_concurrent_requests\":3"), tenant("c", KEY_C, "\"requests_per_minute\":4")));
        Files.setLastModifiedTime(f, FileTime.fromMillis(t0.toMillis() + 10_000));
        tenants.reloadIfChanged();
        assertSame(aRequests, named(tenants, "a").requests, "an unchanged limit keeps its bucket");
        assertEquals(0, named(tenants, "a").requests.remaining(), "...empty as it was");
        assertSame(aTokens, named(tenants, "a").tokens);
        assertEquals(1000, named(tenants, "a").tokens.remaining(), "half of 2000: the fraction in use carried over");
        assertEquals(0, named(tenants, "b").requests.remaining(), "another field changed: the bucket stays");
        assertEquals(4, named(tenants, "c").requests.remaining(), "a new tenant starts full");

        Files.writeString(f, file(tenant("a", KEY_A, "\"tokens_per_minute\":0"), tenant("c", KEY_C, "\"requests_per_minute\":4")));
        Files.setLastModifiedTime(f, FileTime.fromMillis(t0.toMillis() + 20_000));
        tenants.reloadIfChanged();
        assertEquals(List.of("a", "b", "c"), tenants.list().stream().map(Tenants.Tenant::name).toList(), "an invalid limit: the set before kept");
        assertSame(aTokens, named(tenants, "a").tokens);

        Files.writeString(f, file(tenant("a", KEY_A, "\"tokens_per_minute\":2000"), tenant("c", KEY_C, "\"requests_per_minute\":4")));
        Files.setLastModifiedTime(f, FileTime.fromMillis(t0.toMillis() + 30_000));
        tenants.reloadIfChanged();
        assertNull(named(tenants, "a").requests, "a limit taken away");
        assertEquals(1000, named(tenants, "a").tokens.remaining());
        Files.writeString(f, file(tenant("a", KEY_A, "\"requests_per_minute\":10,\"tokens_per_minute\":2000"), tenant("b", KEY_B, "\"requests_per_minute\":4")));
        Files.setLastModifiedTime(f, FileTime.fromMillis(t0.toMillis() + 40_000));
        tenants.reloadIfChanged();
        assertEquals(10, named(tenants, "a").requests.remaining(), "a limit set again starts full");
        assertEquals(4, named(tenants, "b").requests.remaining(), "b was gone: it comes back full");
        assertFalse(tenants.list().stream().anyMatch(t -> t.name().equals("c")));
        clock.addAndGet(15 * SECOND);
        assertEquals(1500, named(tenants, "a").tokens.remaining(), "refilling at the new limit: 1000 + 15 s of 2000 a minute");
    }

    /**
     * A request's unused budget comes back as the time its charge took at the limit it was charged at: a reload that lowered
     * the limit while it ran does not make its refund worth more (a refund of 399 tokens at a new 100 a minute refilled the
     * whole bucket, its prompt's tokens and everyone else's debt with it), nor a raised one worth less.
     */
    @Test
    @Timeout(60)
    void aRefundAfterAReloadGivesBackWhatItsChargeTook() throws Exception {
        AtomicLong clock = new AtomicLong(SECOND);
        Path f = dir.resolve("tenants.json");
        Files.writeString(f, file(tenant("a", KEY_A, "\"tokens_per_minute\":1000")));
        FileTime t0 = Files.getLastModifiedTime(f);
        Tenants tenants = Tenants.open(f, TOKEN, clock::get);
        RateBucket bucket = named(tenants, "a").tokens;
        SimpleMeterRegistry meters = new SimpleMeterRegistry();
        HttpServer prefill = RouterErrorsTest.prefillStub();
        HttpServer decode = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        RouterErrorsTest.answerHealthy(decode);
        CountDownLatch entered = new CountDownLatch(1), release = new CountDownLatch(1);
        decode.setExecutor(Executors.newVirtualThreadPerTaskExecutor());
        decode.createContext("/generate", ex -> {
            ex.getRequestBody().readAllBytes();
            entered.countDown();
            try {
                release.await();
            } catch (InterruptedException e) {
                return;
            }
            ex.sendResponseHeaders(200, 0);
            ex.getResponseBody().write("data: {\"token\":300}\n\ndata: {\"finish_reason\":\"length\"}\n\n".getBytes(StandardCharsets.UTF_8));
            ex.close();
        });
        decode.start();
        try (Router r = new Router(List.of(RouterErrorsTest.url(prefill)), List.of(RouterErrorsTest.url(decode)), tokenizer, CONTEXT, "m",
                "127.0.0.1", 0, new Router.Access(TOKEN, null, tenants), new Router.Admission(0, Duration.ZERO), meters)) {
            CompletableFuture<HttpResponse<String>> held = CompletableFuture.supplyAsync(() -> {
                try {
                    return post(r.port(), "/v1/completions", "{\"prompt\":\"Once upon a time, there was a little girl named Lily. She liked to play "
                            + "outside in the sun with her friends.\",\"max_tokens\":400}", KEY_A);
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            assertTrue(entered.await(20, TimeUnit.SECONDS), "the request reached the decode");
            Files.writeString(f, file(tenant("a", KEY_A, "\"tokens_per_minute\":100")));
            Files.setLastModifiedTime(f, FileTime.fromMillis(t0.toMillis() + 10_000));
            tenants.reloadIfChanged();
            assertSame(bucket, named(tenants, "a").tokens);
            release.countDown();
            HttpResponse<String> a = held.get(20, TimeUnit.SECONDS);
            assertEquals(200, a.statusCode(), a.body());
            int p = JSON.readTree(a.body()).path("usage").path("prompt_tokens").intValue();
            assertTrue(p > 20, "prompt tokens " + p);
            counted(meters, "/v1/completions", 200, "a", 1);
            // Held: its prompt and the 1 token generated, of 1000 a minute; at 100 a minute that fraction of the bucket.
            assertEquals((1000 - p - 1) / 10, bucket.remaining(), "the prompt's tokens stay charged after the reload");
        } finally {
            decode.stop(0);
            prefill.stop(0);
        }
    }

    @Test
    void aBadLimitIsRefusedNamingTheTenantAndTheField() {
        String[][] bad = {
                {tenant("a", KEY_A, "\"requests_per_minute\":0"), "tenants[0] (a).requests_per_minute must be a whole number from 1 to 100000000 (absent: no limit), got 0"},
                {tenant("a", KEY_A, "\"requests_per_minute\":-5"), "tenants[0] (a).requests_per_minute must be a whole number from 1 to 100000000"},
                {tenant("a", KEY_A, "\"tokens_per_minute\":1.5"), "tenants[0] (a).tokens_per_minute must be a whole number from 1 to 100000000 (absent: no limit), got 1.5"},
                {tenant("a", KEY_A, "\"tokens_per_minute\":100000001"), "tenants[0] (a).tokens_per_minute must be a whole number from 1 to 100000000"},
                {tenant("a", KEY_A, "\"tokens_per_minute\":\"100\""), "tenants[0] (a).tokens_per_minute must be a whole number"},
                {tenant("a", KEY_A, "\"tokens_per_minute\":1e20"), "tenants[0] (a).tokens_per_minute must be a whole number"},
                {tenant("a", KEY_A, "\"rpm\":5"), "tenants[0] (a) has an unknown field 'rpm' (name, key, max_concurrent_requests, requests_per_minute, "
                        + "tokens_per_minute, cache_salt)"},
        };
        for (String[] c : bad) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Tenants.of(file(c[0]), TOKEN), c[0]);
            assertTrue(e.getMessage().contains(c[1]), c[0] + " -> " + e.getMessage());
        }
        Tenants ok = Tenants.of(file(tenant("a", KEY_A, "\"requests_per_minute\":100000000,\"tokens_per_minute\":null")), TOKEN);
        assertEquals(100_000_000, ok.list().getFirst().requestsPerMinute());
        assertEquals(0, ok.list().getFirst().tokensPerMinute());
        assertNull(ok.list().getFirst().tokens);
    }
}
