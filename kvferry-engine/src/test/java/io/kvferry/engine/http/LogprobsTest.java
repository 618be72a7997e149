package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
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

import java.net.http.HttpClient;
import java.net.http.HttpResponse;
import java.util.Arrays;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Log probabilities across PD: a TP2 prefill computes the first token (its logprob in the aux row, beside its logits), a
 * TP1 decode the rest, and every route's logprobs are a colocated run's, value for value, greedy and seeded; shaped as
 * OpenAI's legacy completions, OpenAI's chat and SGLang's /generate shape them; streamed chunks add up to the answer.
 */
class LogprobsTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final String PROMPT = "Once upon a time";
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
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 32, 32);
        stack = EngineStack.open(spec.withParallelism(2, 1), spec, "logprobs-test", null);
        router = new Router(List.of(stack.prefillUrl()), List.of(stack.decodeUrl()), tokenizer, model.weights().config.seqLen(),
                "test-model", "127.0.0.1", 0);
        colocated = new ColocatedEngine(spec.withMaxRequests(1));
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

    static HttpResponse<String> post(String path, String body) throws Exception {
        return RouterCalls.post(router.port(), path, body);
    }

    static JsonNode ok(String path, String body) throws Exception {
        return RouterCalls.ok(router.port(), path, body);
    }

    /** The events of a stream before [DONE]. */
    static List<JsonNode> events(String path, String body) throws Exception {
        return RouterCalls.events(router.port(), path, body);
    }

    static Generation colocated(String prompt, int max, Sampling s, int top) {
        return colocated.generate(tokenizer.encode(prompt, true, false), max, s, top);
    }

    static int[] ids(JsonNode arr) {
        int[] out = new int[arr.size()];
        for (int i = 0; i < out.length; i++) out[i] = arr.get(i).intValue();
        return out;
    }

    /** The samplings compared: greedy, and seeded temperature / top-p (the seed makes PD and colocated draw alike). */
    static final String[] SAMPLINGS = {"\"temperature\":0", "\"temperature\":0.9,\"top_p\":0.95,\"seed\":11"};
    static final Sampling[] SAMPLED = {Sampling.GREEDY, new Sampling(0.9f, 0.95f, 11)};

    /** A top list is the given length, most likely first, and its probabilities sum to at most 1. */
    static void wellFormedTop(float[] top, int n, String what) {
        assertEquals(n, top.length, what);
        double sum = 0;
        for (int k = 0; k < top.length; k++) {
            assertTrue(top[k] <= 0, what);
            if (k > 0) assertTrue(top[k - 1] >= top[k], "sorted, most likely first: " + what);
            sum += Math.exp(top[k]);
        }
        assertTrue(sum <= 1 + 1e-5, "exp-sum " + sum + " <= 1: " + what);
    }

    @Test
    @Timeout(60)
    void completionsLogprobsAreTheColocatedRunsInOpenAisLegacyShape() throws Exception {
        for (int s = 0; s < SAMPLINGS.length; s++) {
            JsonNode j = ok("/v1/completions", "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":24,\"logprobs\":5," + SAMPLINGS[s] + "}");
            Generation expected = colocated(PROMPT, 24, SAMPLED[s], 5);
            int[] tokens = ids(j.path("kvferry").path("token_ids"));
            assertArrayEquals(expected.tokens(), tokens, SAMPLINGS[s]);
            JsonNode lp = j.path("choices").path(0).path("logprobs");
            String text = j.path("choices").path(0).path("text").asText();
            assertEquals(tokens.length, lp.path("tokens").size(), lp.toString());
            assertEquals(tokens.length, lp.path("token_logprobs").size());
            assertEquals(tokens.length, lp.path("top_logprobs").size());
            assertEquals(tokens.length, lp.path("text_offset").size());
            for (int i = 0; i < tokens.length; i++) {
                String what = SAMPLINGS[s] + ", token " + i;
                TokenLogprobs e = expected.logprobs().get(i);
                assertEquals(tokenizer.tokenText(tokens[i]), lp.path("tokens").get(i).asText(), what);
                assertEquals(e.logprob(), lp.path("token_logprobs").get(i).floatValue(), 0f, what);
                JsonNode top = lp.path("top_logprobs").get(i);
                float[] values = new float[top.size()];
                int k = 0;
                for (Iterator<Map.Entry<String, JsonNode>> it = top.fields(); it.hasNext(); k++) {
                    Map.Entry<String, JsonNode> m = it.next();
                    assertEquals(tokenizer.tokenText(e.topTokens()[k]), m.getKey(), what);
                    values[k] = m.getValue().floatValue();
                }
                assertArrayEquals(e.topLogprobs(), values, 0f, what);
                wellFormedTop(values, 5, what);
                if (s == 0) { // greedy: the token is the most likely one
                    assertEquals(values[0], lp.path("token_logprobs").get(i).floatValue(), 0f, what);
                    assertEquals(lp.path("tokens").get(i).asText(), top.fieldNames().next(), what);
                }
                int offset = lp.path("text_offset").get(i).intValue();
                assertTrue(offset >= (i == 0 ? 0 : lp.path("text_offset").get(i - 1).intValue()) && offset <= text.length(), what);
            }
            assertEquals(0, lp.path("text_offset").get(0).intValue());
        }
        JsonNode none = ok("/v1/completions", "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":3}");
        assertTrue(none.path("choices").path(0).path("logprobs").isNull(), "asked for none, none: " + none);
        JsonNode zero = ok("/v1/completions", "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":3,\"temperature\":0,\"logprobs\":0}")
                .path("choices").path(0).path("logprobs");
        assertEquals(3, zero.path("token_logprobs").size(), zero.toString());
        for (JsonNode m : zero.path("top_logprobs")) assertEquals(0, m.size(), "logprobs 0: the token's own only: " + zero);
    }

    @Test
    @Timeout(60)
    void chatLogprobsAreTheColocatedRunsInOpenAisChatShape() throws Exception {
        String msgs = "\"messages\":[{\"role\":\"user\",\"content\":\"" + PROMPT + "\"}]";
        for (int s = 0; s < SAMPLINGS.length; s++) {
            JsonNode j = ok("/v1/chat/completions", "{" + msgs + ",\"max_tokens\":20,\"logprobs\":true,\"top_logprobs\":3," + SAMPLINGS[s] + "}");
            Generation expected = colocated(PROMPT, 20, SAMPLED[s], 3);
            int[] tokens = ids(j.path("kvferry").path("token_ids"));
            assertArrayEquals(expected.tokens(), tokens, SAMPLINGS[s]);
            JsonNode content = j.path("choices").path(0).path("logprobs").path("content");
            assertEquals(tokens.length, content.size(), j.toString());
            for (int i = 0; i < tokens.length; i++) {
                String what = SAMPLINGS[s] + ", token " + i;
                TokenLogprobs e = expected.logprobs().get(i);
                JsonNode c = content.get(i);
                assertEquals(tokenizer.tokenText(tokens[i]), c.path("token").asText(), what);
                assertEquals(e.logprob(), c.path("logprob").floatValue(), 0f, what);
                assertArrayEquals(bytes(tokenizer.tokenBytes(tokens[i])), ids(c.path("bytes")), what);
                JsonNode top = c.path("top_logprobs");
                float[] values = new float[top.size()];
                for (int k = 0; k < values.length; k++) {
                    assertEquals(tokenizer.tokenText(e.topTokens()[k]), top.get(k).path("token").asText(), what);
                    assertArrayEquals(bytes(tokenizer.tokenBytes(e.topTokens()[k])), ids(top.get(k).path("bytes")), what);
                    values[k] = top.get(k).path("logprob").floatValue();
                }
                assertArrayEquals(e.topLogprobs(), values, 0f, what);
                wellFormedTop(values, 3, what);
                if (s == 0) assertEquals(values[0], c.path("logprob").floatValue(), 0f, "greedy: the most likely token: " + what);
            }
        }
        JsonNode noTop = ok("/v1/chat/completions", "{" + msgs + ",\"max_tokens\":2,\"logprobs\":true}");
        for (JsonNode c : noTop.path("choices").path(0).path("logprobs").path("content")) assertEquals(0, c.path("top_logprobs").size());
        JsonNode none = ok("/v1/chat/completions", "{" + msgs + ",\"max_tokens\":2,\"logprobs\":false,\"top_logprobs\":0}");
        assertTrue(none.path("choices").path(0).path("logprobs").isNull(), none.toString());
    }

    static int[] bytes(byte[] b) {
        int[] out = new int[b.length];
        for (int i = 0; i < b.length; i++) out[i] = b[i] & 0xff;
        return out;
    }

    @Test
    @Timeout(60)
    void generateLogprobsAreTheColocatedRunsInSglangsShape() throws Exception {
        for (int s = 0; s < SAMPLINGS.length; s++) {
            JsonNode j = ok("/generate", "{\"text\":\"" + PROMPT + "\",\"return_logprob\":true,\"top_logprobs_num\":4,"
                    + "\"return_text_in_logprobs\":true,\"sampling_params\":{\"max_new_tokens\":16," + SAMPLINGS[s] + "}}");
            Generation expected = colocated(PROMPT, 16, SAMPLED[s], 4);
            int[] tokens = ids(j.path("output_ids"));
            assertArrayEquals(expected.tokens(), tokens);
            JsonNode out = j.path("meta_info").path("output_token_logprobs"), top = j.path("meta_info").path("output_top_logprobs");
            assertEquals(tokens.length, out.size(), j.toString());
            assertEquals(tokens.length, top.size(), j.toString());
            for (int i = 0; i < tokens.length; i++) {
                String what = SAMPLINGS[s] + ", token " + i;
                TokenLogprobs e = expected.logprobs().get(i);
                assertEquals(e.logprob(), out.get(i).get(0).floatValue(), 0f, what);
                assertEquals(tokens[i], out.get(i).get(1).intValue(), what);
                assertEquals(tokenizer.tokenText(tokens[i]), out.get(i).get(2).asText(), what);
                float[] values = new float[top.get(i).size()];
                for (int k = 0; k < values.length; k++) {
                    values[k] = top.get(i).get(k).get(0).floatValue();
                    assertEquals(e.topTokens()[k], top.get(i).get(k).get(1).intValue(), what);
                }
                assertArrayEquals(e.topLogprobs(), values, 0f, what);
                wellFormedTop(values, 4, what);
            }
        }
        // SGLang's defaults: no text in the triples (return_text_in_logprobs false), no top list when top_logprobs_num is 0.
        JsonNode plain = ok("/generate", "{\"text\":\"" + PROMPT + "\",\"return_logprob\":true,\"sampling_params\":{\"max_new_tokens\":3}}")
                .path("meta_info");
        assertEquals(3, plain.path("output_token_logprobs").size(), plain.toString());
        assertTrue(plain.path("output_token_logprobs").get(0).get(2).isNull(), plain.toString());
        assertTrue(plain.path("output_top_logprobs").isMissingNode(), plain.toString());
        JsonNode none = ok("/generate", "{\"text\":\"" + PROMPT + "\",\"sampling_params\":{\"max_new_tokens\":3}}").path("meta_info");
        assertTrue(none.path("output_token_logprobs").isMissingNode(), none.toString());
    }

    /**
     * A stream's chunks carry the log probabilities of their tokens; concatenated they are the whole answer's, on both
     * OpenAI routes, with a stop string too (its last token's go with the last chunk); /generate streams them so far.
     */
    @Test
    @Timeout(60)
    void streamedLogprobsAddUpToTheWholeAnswers() throws Exception {
        String text = ok("/v1/completions", "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":30,\"temperature\":0}").path("choices").path(0)
                .path("text").asText();
        String stop = text.substring(text.length() / 2, text.length() / 2 + 3);
        for (String extra : new String[]{"\"temperature\":0.9,\"seed\":3", "\"temperature\":0,\"stop\":" + JSON.writeValueAsString(stop)}) {
            String body = "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":30,\"logprobs\":3," + extra;
            JsonNode whole = ok("/v1/completions", body + "}").path("choices").path(0).path("logprobs");
            ArrayNode tokens = JSON.createArrayNode(), lps = JSON.createArrayNode(), top = JSON.createArrayNode(), offsets = JSON.createArrayNode();
            for (JsonNode e : events("/v1/completions", body + ",\"stream\":true}")) {
                JsonNode lp = e.path("choices").path(0).path("logprobs");
                if (lp.isNull()) continue;
                tokens.addAll((ArrayNode) lp.path("tokens"));
                lps.addAll((ArrayNode) lp.path("token_logprobs"));
                top.addAll((ArrayNode) lp.path("top_logprobs"));
                offsets.addAll((ArrayNode) lp.path("text_offset"));
            }
            assertEquals(whole.path("tokens"), tokens, extra);
            assertEquals(whole.path("token_logprobs"), lps, extra);
            assertEquals(whole.path("top_logprobs"), top, extra);
            assertEquals(whole.path("text_offset"), offsets, extra);

            String chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"" + PROMPT + "\"}],\"max_tokens\":30,\"logprobs\":true,"
                    + "\"top_logprobs\":2," + extra;
            JsonNode wholeChat = ok("/v1/chat/completions", chat + "}").path("choices").path(0).path("logprobs").path("content");
            ArrayNode content = JSON.createArrayNode();
            for (JsonNode e : events("/v1/chat/completions", chat + ",\"stream\":true}")) {
                JsonNode lp = e.path("choices").path(0).path("logprobs");
                if (!lp.isNull() && !lp.isMissingNode()) content.addAll((ArrayNode) lp.path("content"));
            }
            assertEquals(wholeChat, content, extra);
        }
        String gen = "{\"text\":\"" + PROMPT + "\",\"return_logprob\":true,\"top_logprobs_num\":2,\"sampling_params\":{\"max_new_tokens\":12,"
                + "\"temperature\":0.9,\"seed\":4}";
        JsonNode whole = ok("/generate", gen + "}").path("meta_info");
        List<JsonNode> events = events("/generate", gen + ",\"stream\":true}");
        for (int i = 0; i < events.size() - 1; i++) {
            JsonNode sofar = events.get(i).path("meta_info").path("output_token_logprobs");
            assertEquals(i + 1, sofar.size(), "each event: the logprobs so far");
            for (int t = 0; t <= i; t++) assertEquals(whole.path("output_token_logprobs").get(t), sofar.get(t));
        }
        assertEquals(whole.path("output_token_logprobs"), events.getLast().path("meta_info").path("output_token_logprobs"));
        assertEquals(whole.path("output_top_logprobs"), events.getLast().path("meta_info").path("output_top_logprobs"));
    }

    /**
     * top_k (SGLang's sampling parameter, vLLM's extension of OpenAI's routes) crosses PD: prefill and decode draw a
     * colocated run's tokens, each among the k most likely (its top logprobs say which those were).
     */
    @Test
    @Timeout(60)
    void topKDrawsAColocatedRunsTokensAmongTheKMostLikely() throws Exception {
        Sampling s = new Sampling(1.5f, 1f, 21, 3);
        Generation expected = colocated(PROMPT, 24, s, 3);
        JsonNode c = ok("/v1/completions", "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":24,\"temperature\":1.5,\"seed\":21,\"top_k\":3,"
                + "\"logprobs\":3}");
        assertArrayEquals(expected.tokens(), ids(c.path("kvferry").path("token_ids")));
        JsonNode g = ok("/generate", "{\"text\":\"" + PROMPT + "\",\"sampling_params\":{\"max_new_tokens\":24,\"temperature\":1.5,\"seed\":21,"
                + "\"top_k\":3}}");
        assertArrayEquals(expected.tokens(), ids(g.path("output_ids")));
        JsonNode lp = c.path("choices").path(0).path("logprobs");
        for (int i = 0; i < expected.tokens().length; i++) {
            JsonNode top = lp.path("top_logprobs").get(i);
            assertTrue(top.has(lp.path("tokens").get(i).asText()), "token " + i + " is among the 3 most likely: " + lp);
        }
        int[] free = colocated(PROMPT, 24, new Sampling(1.5f, 1f, 21), -1).tokens();
        assertFalse(Arrays.equals(free, expected.tokens()), "top_k changed the draw (else the test proves nothing)");
    }

    /** Log probability parameters of the wrong type or out of range are a 400 naming the parameter; nothing runs. */
    @Test
    @Timeout(60)
    void badLogprobParametersGetA400NamingThem() throws Exception {
        String msgs = "\"messages\":[{\"role\":\"user\",\"content\":\"Once\"}]";
        String[][] cases = {
                {"/v1/completions", "{\"prompt\":\"x\",\"logprobs\":-1}", "logprobs", "logprobs must be in [0, 20], got -1"},
                {"/v1/completions", "{\"prompt\":\"x\",\"logprobs\":21}", "logprobs", "logprobs must be in [0, 20], got 21"},
                {"/v1/completions", "{\"prompt\":\"x\",\"logprobs\":true}", "logprobs", "logprobs must be an integer, got true"},
                {"/v1/completions", "{\"prompt\":\"x\",\"logprobs\":\"5\"}", "logprobs", "logprobs must be an integer"},
                {"/v1/completions", "{\"prompt\":\"x\",\"logprobs\":2.5}", "logprobs", "logprobs must be an integer"},
                {"/v1/chat/completions", "{" + msgs + ",\"logprobs\":\"yes\"}", "logprobs", "logprobs must be true or false"},
                {"/v1/chat/completions", "{" + msgs + ",\"logprobs\":1}", "logprobs", "logprobs must be true or false"},
                {"/v1/chat/completions", "{" + msgs + ",\"logprobs\":true,\"top_logprobs\":21}", "top_logprobs", "top_logprobs must be in [0, 20]"},
                {"/v1/chat/completions", "{" + msgs + ",\"logprobs\":true,\"top_logprobs\":-1}", "top_logprobs", "top_logprobs must be in [0, 20]"},
                {"/v1/chat/completions", "{" + msgs + ",\"top_logprobs\":2}", "top_logprobs", "top_logprobs (2) needs logprobs: true"},
                {"/v1/chat/completions", "{" + msgs + ",\"logprobs\":false,\"top_logprobs\":2}", "top_logprobs", "needs logprobs: true"},
                {"/generate", "{\"text\":\"x\",\"return_logprob\":\"true\"}", "return_logprob", "return_logprob must be true or false"},
                {"/generate", "{\"text\":\"x\",\"return_logprob\":true,\"top_logprobs_num\":21}", "top_logprobs_num", "must be in [0, 20]"},
                {"/generate", "{\"text\":\"x\",\"top_logprobs_num\":3}", "top_logprobs_num", "top_logprobs_num (3) needs return_logprob: true"},
                {"/generate", "{\"text\":\"x\",\"return_logprob\":true,\"return_text_in_logprobs\":1}", "return_text_in_logprobs",
                        "must be true or false"},
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
