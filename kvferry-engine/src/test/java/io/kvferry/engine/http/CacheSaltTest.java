package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.engine.serving.EngineSpec;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.http.HttpResponse;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * vLLM's {@code cache_salt} through the router with a real prefill and decode: a prompt reuses prefix cache pages (the
 * prefill's: {@code cached_tokens}; the decode's: fewer {@code kv_pages} sent) only from requests with the same salt, no
 * salt being the shared cache, and the answer is the same either way. A bad salt is a 400 naming {@code cache_salt} on the
 * router's routes and on each engine's /generate.
 */
class CacheSaltTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final int PAGE = 16;
    static Tokenizer tokenizer;
    static EngineStack stack;
    static Router router;

    @BeforeAll
    static void start() throws Exception {
        ModelFiles.Loaded model = ModelFiles.load(null, null);
        tokenizer = model.tokenizer();
        stack = EngineStack.open(new EngineSpec(model.weights(), 1, 1, PAGE, 1024, 32, 32), "cache-salt-test");
        router = new Router(List.of(stack.prefillUrl()), List.of(stack.decodeUrl()), tokenizer, model.weights().config.seqLen(),
                "test-model", "127.0.0.1", 0);
    }

    @AfterAll
    static void stop() {
        for (AutoCloseable c : new AutoCloseable[]{router, stack}) {
            try {
                if (c != null) c.close();
            } catch (Exception ignored) {
                // closing the rest
            }
        }
    }

    static String salt(String s) {
        return s == null ? "" : ",\"cache_salt\":\"" + s + "\"";
    }

    @Test
    @Timeout(120)
    void aPromptReusesCachedPagesOnlyUnderItsOwnSalt() throws Exception {
        String prompt = "Tom had a red ball. He liked to throw the ball high in the sky and catch it with his two small hands";
        int tokens = tokenizer.encode(prompt, true, false).length;
        assertTrue(tokens > 2 * PAGE, tokens + " tokens");
        int warm = (tokens - 1) / PAGE * PAGE; // the prefill reuses every full page before the last token's
        String body = "{\"prompt\":\"" + prompt + "\",\"max_tokens\":4,\"temperature\":0";
        JsonNode cold = ok("/v1/completions", body + salt("tenant-a") + "}");
        assertEquals(0, cached(cold), cold.toString());
        int coldPages = cold.path("kvferry").path("kv_pages").intValue();
        String text = cold.path("choices").path(0).path("text").asText();
        // Another tenant: neither engine's cache is tenant a's, so the prefill computes it all and the decode takes it all.
        JsonNode other = ok("/v1/completions", body + salt("tenant-b") + "}");
        assertEquals(0, cached(other), "another salt reuses nothing: " + other);
        assertEquals(coldPages, other.path("kvferry").path("kv_pages").intValue(), "the decode had nothing for salt b: " + other);
        assertEquals(text, other.path("choices").path(0).path("text").asText());
        // The unsalted, shared cache does not see the salted prompts either.
        JsonNode unsalted = ok("/v1/completions", body + "}");
        assertEquals(0, cached(unsalted), unsalted.toString());
        assertEquals(coldPages, unsalted.path("kvferry").path("kv_pages").intValue(), unsalted.toString());
        assertEquals(text, unsalted.path("choices").path(0).path("text").asText());
        // The same salt again, each tenant's own and the unsalted prompt: hits on both engines, the same answer.
        for (String s : new String[]{"tenant-a", "tenant-b", null}) {
            JsonNode again = ok("/v1/completions", body + salt(s) + "}");
            assertEquals(warm, cached(again), s + ": " + again);
            assertTrue(again.path("kvferry").path("kv_pages").intValue() < coldPages, "the decode reused its pages for " + s + ": " + again);
            assertEquals(text, again.path("choices").path(0).path("text").asText(), s);
        }

        // /generate (the salt at the top level, SGLang's shape otherwise) and the chat route do the same.
        String gen = "{\"text\":\"" + prompt + " again\",\"sampling_params\":{\"max_new_tokens\":4,\"temperature\":0}";
        JsonNode g1 = ok("/generate", gen + salt("g1") + "}");
        JsonNode g2 = ok("/generate", gen + salt("g2") + "}");
        JsonNode g1again = ok("/generate", gen + salt("g1") + "}");
        assertEquals(0, g1.path("meta_info").path("cached_tokens").intValue(), g1.toString());
        assertEquals(0, g2.path("meta_info").path("cached_tokens").intValue(), "another salt: " + g2);
        assertTrue(g1again.path("meta_info").path("cached_tokens").intValue() > 0, g1again.toString());
        assertEquals(g1.path("output_ids"), g2.path("output_ids"));
        assertEquals(g1.path("output_ids"), g1again.path("output_ids"));
        String chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"" + prompt + " once more\"}],\"max_tokens\":4,\"temperature\":0";
        JsonNode c1 = ok("/v1/chat/completions", chat + salt("c1") + "}");
        JsonNode c2 = ok("/v1/chat/completions", chat + salt("c2") + "}");
        JsonNode c1again = ok("/v1/chat/completions", chat + salt("c1") + "}");
        assertEquals(0, cached(c2), "another salt: " + c2);
        assertTrue(cached(c1again) > 0, c1again.toString());
        assertEquals(c1.path("choices").path(0).path("message"), c2.path("choices").path(0).path("message"));
        assertEquals(c1.path("choices").path(0).path("message"), c1again.path("choices").path(0).path("message"));
        assertEquals(0, stack.decode.outstanding().get(5, TimeUnit.SECONDS));
    }

    @Test
    @Timeout(60)
    void aBadSaltIsA400NamingCacheSaltOnTheRouterAndOnEachEngine() throws Exception {
        String longest = "s".repeat(256);
        String[][] bad = {
                {"\"\"", "cache_salt must be a non-empty string"},
                {"7", "cache_salt must be a non-empty string if given, got number"},
                {"[\"a\"]", "cache_salt must be a non-empty string if given, got array"},
                {"{\"a\":1}", "cache_salt must be a non-empty string if given, got object"},
                {"\"" + longest + "s\"", "cache_salt has 257 characters; at most 256"},
                // JSON holds half a surrogate pair, UTF-8 cannot: the salt went on to the engines as bytes no text encodes.
                {"\"t\\ud800\"", "cache_salt holds an unpaired UTF-16 surrogate \\ud800 at character 1"},
        };
        String[] routes = {
                "/v1/completions\u0000{\"prompt\":\"Once upon a time\",\"max_tokens\":2,\"cache_salt\":",
                "/v1/chat/completions\u0000{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":2,\"cache_salt\":",
                "/generate\u0000{\"text\":\"Once upon a time\",\"sampling_params\":{\"max_new_tokens\":2},\"cache_salt\":",
        };
        for (String route : routes) {
            String[] r = route.split("\u0000");
            for (String[] c : bad) assertRefused(router.port(), r[0], r[1] + c[0] + "}", c[1]);
        }
        long room = 7_000;
        for (String url : List.of(stack.prefillUrl(), stack.decodeUrl())) {
            for (String[] c : bad) {
                assertRefused(EngineInputTest.port(url), "/generate", "{\"bootstrap_room\":" + room++ + ",\"input_ids\":[1,2,3],\"bootstrap_addr\":\""
                        + stack.addr + "\",\"max_new_tokens\":4,\"cache_salt\":" + c[0] + "}", c[1]);
            }
        }
        assertEquals(0, stack.prefill.outstanding().get(5, TimeUnit.SECONDS));
        assertEquals(0, stack.decode.outstanding().get(5, TimeUnit.SECONDS));
        // The longest salt allowed, and null (no salt), are served.
        ok("/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":2,\"cache_salt\":\"" + longest + "\"}");
        ok("/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":2,\"cache_salt\":null}");
    }

    static int cached(JsonNode answer) {
        return answer.path("usage").path("prompt_tokens_details").path("cached_tokens").intValue();
    }

    static JsonNode ok(String path, String body) throws Exception {
        return RouterCalls.ok(router.port(), path, body);
    }

    static void assertRefused(int port, String path, String body, String message) throws Exception {
        HttpResponse<String> r = RouterCalls.post(port, path, body);
        String what = port + path + " " + body + " -> " + r.body();
        assertEquals(400, r.statusCode(), what);
        JsonNode error = JSON.readTree(r.body()).path("error");
        assertEquals("cache_salt", error.path("param").asText(null), what);
        assertTrue(error.path("message").asText().contains(message), what);
    }
}
