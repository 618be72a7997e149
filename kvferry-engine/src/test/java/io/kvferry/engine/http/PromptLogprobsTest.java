package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.model.TokenLogprobs;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.engine.serving.ColocatedEngine;
import io.kvferry.engine.serving.EngineSpec;
import io.kvferry.engine.serving.Generation;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Input token (prompt) log probabilities across PD: a TP2 prefill with chunks of {@link #CHUNK} tokens computes the
 * logits of the prompt's positions for a request that asks, a TP1 decode the output, and the router puts the prompt's in
 * front: SGLang's {@code meta_info.input_token_logprobs} / {@code input_top_logprobs} on /generate, OpenAI's {@code echo}
 * with {@code logprobs} on /v1/completions (lm-evaluation-harness's loglikelihood shape, {@code max_tokens} 0 included:
 * the prefill alone). Every value is a colocated run's, bit for bit.
 */
class PromptLogprobsTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final int CHUNK = 8;
    /** Longer than a chunk: its input logprobs come from several chunks. */
    static final String PROMPT = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park";
    static ModelFiles.Loaded model;
    static Tokenizer tokenizer;
    static EngineStack stack;
    static Router router;
    static ColocatedEngine colocated;
    static final HttpClient http = HttpClient.newBuilder().executor(Executors.newVirtualThreadPerTaskExecutor()).build();

    @BeforeAll
    static void start() throws Exception {
        model = ModelFiles.load(null, null);
        tokenizer = model.tokenizer();
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 32, CHUNK);
        stack = EngineStack.open(spec.withParallelism(2, 1), spec, "prompt-logprobs-test", null);
        router = new Router(List.of(stack.prefillUrl()), List.of(stack.decodeUrl()), tokenizer, model.weights().config.seqLen(),
                "test-model", "127.0.0.1", 0);
        colocated = new ColocatedEngine(spec.withMaxRequests(1));
        assertTrue(ids().length > 3 * CHUNK, "the prompt spans several chunks: " + ids().length + " tokens");
    }

    @AfterAll
    static void stop() {
        for (AutoCloseable c : new AutoCloseable[]{router, stack, colocated}) {
            try {
                if (c != null) c.close();
            } catch (Exception ignored) {
                // closing the rest
            }
        }
    }

    static int[] ids() {
        return tokenizer.encode(PROMPT, true, false);
    }

    static HttpResponse<String> post(String path, String body) throws Exception {
        return RouterCalls.post(router.port(), path, body);
    }

    static JsonNode ok(String path, String body) throws Exception {
        return RouterCalls.ok(router.port(), path, body);
    }

    static List<JsonNode> events(String path, String body) throws Exception {
        return RouterCalls.events(router.port(), path, body);
    }

    static int[] intArray(JsonNode arr) {
        int[] out = new int[arr.size()];
        for (int i = 0; i < out.length; i++) out[i] = arr.get(i).intValue();
        return out;
    }

    /** SGLang's triples against the colocated run's input logprobs from {@code start}. */
    static void sameInputLogprobs(List<TokenLogprobs> expected, int[] ids, int start, int top, JsonNode meta, String what) {
        JsonNode lps = meta.path("input_token_logprobs");
        assertEquals(ids.length - start, lps.size(), what + ": " + meta);
        assertEquals(expected.size(), lps.size(), what);
        for (int i = 0; i < lps.size(); i++) {
            String at = what + ", position " + (start + i);
            assertEquals(ids[start + i], lps.get(i).get(1).intValue(), at);
            TokenLogprobs e = expected.get(i);
            if (start + i == 0) {
                assertNull(e, at);
                assertTrue(lps.get(i).get(0).isNull(), "the first prompt token has no logprob: " + lps.get(i));
                if (top > 0) assertTrue(meta.path("input_top_logprobs").get(i).isNull(), at);
                continue;
            }
            assertEquals(e.logprob(), lps.get(i).get(0).floatValue(), 0f, at);
            if (top == 0) continue;
            JsonNode t = meta.path("input_top_logprobs").get(i);
            assertEquals(top, t.size(), at);
            for (int k = 0; k < top; k++) {
                assertEquals(e.topTokens()[k], t.get(k).get(1).intValue(), at + ", top " + k);
                assertEquals(e.topLogprobs()[k], t.get(k).get(0).floatValue(), 0f, at + ", top " + k);
            }
        }
        if (top == 0) assertTrue(meta.path("input_top_logprobs").isMissingNode(), what);
    }

    @Test
    @Timeout(60)
    void chunkingNeverChangesAColocatedRunsInputLogprobs() {
        EngineSpec whole = new EngineSpec(model.weights(), 1, 1, 16, 1024, 1, 1024);
        try (ColocatedEngine one = new ColocatedEngine(whole)) {
            Generation a = one.generate(ids(), 2, Sampling.GREEDY, 3, 0);
            Generation b = colocated.generate(ids(), 2, Sampling.GREEDY, 3, 0);
            assertEquals(ids().length, b.inputLogprobs().size());
            assertNull(b.inputLogprobs().getFirst());
            for (int i = 1; i < ids().length; i++) {
                TokenLogprobs x = a.inputLogprobs().get(i), y = b.inputLogprobs().get(i);
                assertEquals(ids()[i], y.token());
                assertEquals(x.logprob(), y.logprob(), 0f, "position " + i);
                assertArrayEquals(x.topTokens(), y.topTokens());
                assertArrayEquals(x.topLogprobs(), y.topLogprobs(), 0f);
            }
            // The input logprob of the next token is the one an output token at that position gets.
            int[] prefix = Arrays.copyOf(ids(), 10);
            Generation g = colocated.generate(prefix, 1, Sampling.GREEDY, 3);
            assertEquals(g.logprobs().getFirst().logprob(), TokenLogprobs.of(g.firstLogits(), ids()[10], 3).logprob(), 0f);
            assertEquals(TokenLogprobs.of(g.firstLogits(), ids()[10], 3).logprob(), b.inputLogprobs().get(10).logprob(), 0f);
            // A prompt-only run: the same input logprobs, no output token.
            Generation p = colocated.generate(ids(), 0, Sampling.GREEDY, 3, 5);
            assertEquals(0, p.tokens().length);
            assertEquals(ids().length - 5, p.inputLogprobs().size());
            assertEquals(b.inputLogprobs().get(5).logprob(), p.inputLogprobs().getFirst().logprob(), 0f);
        }
    }

    /**
     * The prefill's prefix cache across the router: SGLang's {@code meta_info.cached_tokens} on /generate and OpenAI's
     * {@code usage.prompt_tokens_details.cached_tokens}: a prompt sent again takes its full pages before the first
     * position whose logits are needed from the cache (all but the last token's page; with {@code logprob_start_len} those
     * before it), and every value stays the colocated run's.
     */
    @Test
    @Timeout(60)
    void cachedTokensAreReportedAndTheAnswerStaysExact() throws Exception {
        String prompt = "Tim and Sue had a big box of toys. They liked to share the toys with their friends at school every day";
        int[] ids = tokenizer.encode(prompt, true, false);
        assertTrue(ids.length > 40, ids.length + " tokens");
        String body = "{\"text\":\"" + prompt + "\",\"sampling_params\":{\"max_new_tokens\":4,\"temperature\":0}";
        JsonNode cold = ok("/generate", body + "}");
        JsonNode warm = ok("/generate", body + "}");
        assertEquals(cold.path("output_ids"), warm.path("output_ids"));
        assertEquals((ids.length - 1) / 16 * 16, warm.path("meta_info").path("cached_tokens").intValue(), warm.toString());
        // Prompt logprobs from position 20: only the page before position 19 is reused, and the values are the colocated run's.
        JsonNode lp = ok("/generate", body + ",\"return_logprob\":true,\"logprob_start_len\":20,\"top_logprobs_num\":2}");
        assertEquals(16, lp.path("meta_info").path("cached_tokens").intValue(), lp.toString());
        Generation expected = colocated.generate(ids, 4, Sampling.GREEDY, 2, 20);
        assertArrayEquals(expected.tokens(), intArray(lp.path("output_ids")));
        sameInputLogprobs(expected.inputLogprobs(), ids, 20, 2, lp.path("meta_info"), "logprob_start_len 20 from the cache");
        JsonNode c = ok("/v1/completions", "{\"prompt\":\"" + prompt + "\",\"max_tokens\":4,\"temperature\":0}");
        assertEquals((ids.length - 1) / 16 * 16, c.path("usage").path("prompt_tokens_details").path("cached_tokens").intValue(), c.toString());
    }

    @Test
    @Timeout(60)
    void generateInputLogprobsAreTheColocatedRunsInSglangsShape() throws Exception {
        int[] ids = ids();
        for (int start : new int[]{0, 1, CHUNK + 3, ids.length - 1}) {
            for (int top : new int[]{0, 3}) {
                for (int max : new int[]{4, 0}) {
                    String what = "logprob_start_len " + start + ", top " + top + ", max_new_tokens " + max;
                    JsonNode j = ok("/generate", "{\"text\":\"" + PROMPT + "\",\"sampling_params\":{\"max_new_tokens\":" + max
                            + ",\"temperature\":0},\"return_logprob\":true,\"logprob_start_len\":" + start + ",\"top_logprobs_num\":" + top + "}");
                    Generation expected = colocated.generate(ids, max, Sampling.GREEDY, top, start);
                    assertArrayEquals(expected.tokens(), intArray(j.path("output_ids")), what);
                    JsonNode meta = j.path("meta_info");
                    assertEquals(max, meta.path("completion_tokens").intValue(), what);
                    sameInputLogprobs(expected.inputLogprobs(), ids, start, top, meta, what);
                    assertEquals(max, meta.path("output_token_logprobs").size(), what);
                }
            }
        }
        // Texts, when asked; streamed, every chunk's meta_info has them (SGLang's so far, not incremental).
        JsonNode j = ok("/generate", "{\"text\":\"" + PROMPT + "\",\"sampling_params\":{\"max_new_tokens\":2,\"temperature\":0},"
                + "\"return_logprob\":true,\"logprob_start_len\":0,\"top_logprobs_num\":2,\"return_text_in_logprobs\":true}");
        JsonNode first = j.path("meta_info").path("input_token_logprobs");
        assertEquals(tokenizer.tokenText(ids[0]), first.get(0).get(2).asText());
        assertEquals(tokenizer.tokenText(ids[5]), first.get(5).get(2).asText());
        List<JsonNode> chunks = events("/generate", "{\"text\":\"" + PROMPT + "\",\"sampling_params\":{\"max_new_tokens\":2,\"temperature\":0},"
                + "\"return_logprob\":true,\"logprob_start_len\":0,\"top_logprobs_num\":2,\"return_text_in_logprobs\":true,\"stream\":true}");
        for (JsonNode c : chunks) assertEquals(j.path("meta_info").path("input_token_logprobs"), c.path("meta_info").path("input_token_logprobs"), c.toString());
        assertEquals(j.path("meta_info").path("input_top_logprobs"), chunks.getLast().path("meta_info").path("input_top_logprobs"));
    }

    @Test
    @Timeout(60)
    void completionsEchoPutsThePromptsTokensFirstInOpenAisLegacyShape() throws Exception {
        int[] ids = ids();
        for (int max : new int[]{3, 0}) {
            String what = "max_tokens " + max;
            JsonNode j = ok("/v1/completions", "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":" + max + ",\"temperature\":0,\"echo\":true,\"logprobs\":2}");
            Generation expected = colocated.generate(ids, max, Sampling.GREEDY, 2, 0);
            JsonNode choice = j.path("choices").path(0);
            String text = choice.path("text").asText();
            String completion = max == 0 ? "" : ok("/v1/completions", "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":" + max
                    + ",\"temperature\":0}").path("choices").path(0).path("text").asText();
            assertEquals(PROMPT + completion, text, what);
            assertEquals(max, j.path("usage").path("completion_tokens").intValue(), what);
            assertEquals(ids.length, j.path("usage").path("prompt_tokens").intValue(), what);
            assertEquals("length", choice.path("finish_reason").asText(), what);
            JsonNode lp = choice.path("logprobs");
            int n = ids.length + max;
            for (String a : List.of("tokens", "token_logprobs", "top_logprobs", "text_offset")) assertEquals(n, lp.path(a).size(), what + " " + a);
            assertTrue(lp.path("token_logprobs").get(0).isNull(), "OpenAI's first prompt token has none: " + lp.path("token_logprobs").get(0));
            assertTrue(lp.path("top_logprobs").get(0).isEmpty(), "an empty map (OpenAI's null fails the OpenAI Java client's validate())");
            int previous = 0;
            for (int i = 0; i < n; i++) {
                int tok = i < ids.length ? ids[i] : expected.tokens()[i - ids.length];
                String at = what + ", token " + i;
                assertEquals(tokenizer.tokenText(tok), lp.path("tokens").get(i).asText(), at);
                int offset = lp.path("text_offset").get(i).intValue();
                assertTrue(offset >= previous && offset <= text.length(), at + ": offset " + offset);
                if (i >= ids.length) assertTrue(offset >= PROMPT.length(), at + ": a completion token's offset is past the echoed prompt");
                previous = offset;
                if (i == 0) continue;
                TokenLogprobs e = i < ids.length ? expected.inputLogprobs().get(i) : expected.logprobs().get(i - ids.length);
                assertEquals(e.logprob(), lp.path("token_logprobs").get(i).floatValue(), 0f, at);
                Iterator<Map.Entry<String, JsonNode>> top = lp.path("top_logprobs").get(i).properties().iterator();
                for (int k = 0; k < 2; k++) {
                    Map.Entry<String, JsonNode> m = top.next();
                    assertEquals(tokenizer.tokenText(e.topTokens()[k]), m.getKey(), at);
                    assertEquals(e.topLogprobs()[k], m.getValue().floatValue(), 0f, at);
                }
            }
            // BOS adds no text; the prompt's first word begins the text, the completion's first token the prompt's end.
            assertEquals(0, lp.path("text_offset").get(1).intValue(), lp.path("text_offset").toString());
            if (max > 0) assertEquals(PROMPT.length(), lp.path("text_offset").get(ids.length).intValue(), lp.path("text_offset").toString());
            // Streamed: the prompt's part is the first chunk, and the chunks add up to the answer.
            List<JsonNode> chunks = events("/v1/completions", "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":" + max
                    + ",\"temperature\":0,\"echo\":true,\"logprobs\":2,\"stream\":true}");
            assertEquals(PROMPT, chunks.getFirst().path("choices").path(0).path("text").asText(), what);
            assertEquals(ids.length, chunks.getFirst().path("choices").path(0).path("logprobs").path("tokens").size(), what);
            StringBuilder all = new StringBuilder();
            List<JsonNode> lps = new ArrayList<>(), offsets = new ArrayList<>();
            for (JsonNode c : chunks) {
                JsonNode ch = c.path("choices").path(0);
                all.append(ch.path("text").asText());
                for (JsonNode v : ch.path("logprobs").path("token_logprobs")) lps.add(v);
                for (JsonNode v : ch.path("logprobs").path("text_offset")) offsets.add(v);
            }
            assertEquals(text, all.toString(), what);
            assertEquals(List.copyOf(lp.path("token_logprobs").valueStream().toList()), lps, what);
            assertEquals(List.copyOf(lp.path("text_offset").valueStream().toList()), offsets, what);
        }
        // echo without logprobs: the prompt and the completion, no logprobs.
        JsonNode j = ok("/v1/completions", "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":2,\"temperature\":0,\"echo\":true}");
        assertEquals(PROMPT + ok("/v1/completions", "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":2,\"temperature\":0}").path("choices").path(0)
                .path("text").asText(), j.path("choices").path(0).path("text").asText());
        assertTrue(j.path("choices").path(0).path("logprobs").isNull());
    }

    /** max_tokens 0 runs on the prefill alone: a router whose one decode is down still answers it, as the router with a decode does. */
    @Test
    @Timeout(60)
    void aPromptOnlyRequestNeverCallsADecode() throws Exception {
        // Held, bound and never listening: a connect there is refused, and no server (this test's own, bound to port 0
        // next) can be given the port while it is held. A ServerSocket(0) closed at once freed it: the next bind(0)
        // could take it, about once in 7,000 binds, and then the "dead" peer answered.
        Socket hold = new Socket();
        hold.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
        int deadPort = hold.getLocalPort();
        try (hold; Router alone = new Router(List.of(stack.prefillUrl()), List.of("http://127.0.0.1:" + deadPort), tokenizer,
                model.weights().config.seqLen(), "test-model", "127.0.0.1", 0)) {
            String body = "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":0,\"echo\":true,\"logprobs\":3}";
            HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + alone.port() + "/v1/completions"))
                    .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
            assertEquals(200, r.statusCode(), r.body());
            assertEquals(ok("/v1/completions", body).path("choices"), JSON.readTree(r.body()).path("choices"));
            HttpResponse<String> withToken = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + alone.port() + "/v1/completions"))
                    .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(body.replace("\"max_tokens\":0", "\"max_tokens\":1")))
                    .build(), HttpResponse.BodyHandlers.ofString());
            assertTrue(withToken.statusCode() >= 500, "a token needs the decode, which is down: " + withToken.body());
        }
    }

    @Test
    @Timeout(60)
    void badPromptLogprobParametersGetA400NamingThem() throws Exception {
        String msgs = "\"messages\":[{\"role\":\"user\",\"content\":\"Once\"}]";
        String[][] cases = {
                {"/generate", "{\"text\":\"Once\",\"return_logprob\":true,\"logprob_start_len\":2}", "logprob_start_len",
                        "logprob_start_len (2) must be below the prompt's 2 tokens"},
                {"/generate", "{\"text\":\"Once\",\"return_logprob\":true,\"logprob_start_len\":-2}", "logprob_start_len", "must be in [-1, "},
                {"/generate", "{\"text\":\"Once\",\"return_logprob\":true,\"logprob_start_len\":\"0\"}", "logprob_start_len", "must be an integer"},
                {"/generate", "{\"text\":\"Once\",\"logprob_start_len\":0}", "logprob_start_len", "logprob_start_len (0) needs return_logprob: true"},
                {"/generate", "{\"text\":\"Once\",\"sampling_params\":{\"max_new_tokens\":-1}}", "sampling_params.max_new_tokens", "must be in [0, "},
                {"/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":0}", "max_tokens", "max_tokens 0 (the prompt alone, no completion) needs echo: true"},
                {"/v1/completions", "{\"prompt\":\"Once\",\"echo\":1}", "echo", "echo must be true or false"},
                {"/v1/chat/completions", "{" + msgs + ",\"echo\":true}", "echo", "echo is a /v1/completions parameter"},
                {"/v1/chat/completions", "{" + msgs + ",\"max_tokens\":0}", "max_tokens", "max_tokens must be in [1, "},
        };
        for (String[] c : cases) {
            HttpResponse<String> r = post(c[0], c[1]);
            assertEquals(400, r.statusCode(), c[1] + " -> " + r.body());
            JsonNode error = JSON.readTree(r.body()).path("error");
            assertEquals("invalid_request_error", error.path("type").asText(), r.body());
            assertEquals(c[2], error.path("param").asText(null), c[1] + " -> " + r.body());
            assertTrue(error.path("message").asText().contains(c[3]), c[1] + " -> " + r.body());
        }
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (stack.decode.outstanding().get(5, TimeUnit.SECONDS) != 0 || stack.prefill.outstanding().get(5, TimeUnit.SECONDS) != 0) {
            assertTrue(System.nanoTime() < until, "refused requests hold nothing");
            Thread.sleep(20);
        }
    }
}
