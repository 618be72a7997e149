package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.serving.EngineSpec;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@code best_of} on {@code /v1/completions}, through real engines: best_of seeded samples of each prompt run (sample j with
 * seed + j, as n's), and the answer shows the n with the highest cumulative log probability of their sampled tokens, highest
 * first (vLLM's rule), checked against running each sample alone; the usage counts every sample; a stream or best_of
 * below n is a 400.
 */
class BestOfTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final List<String> PROMPTS = List.of("Once upon a time", "The little dog");
    static EngineStack stack;
    static Router router;

    @BeforeAll
    static void start() throws Exception {
        ModelFiles.Loaded model = ModelFiles.load(null, null);
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 32, 32);
        stack = EngineStack.open(spec, spec, "best-of-test", null);
        router = new Router(List.of(stack.prefillUrl()), List.of(stack.decodeUrl()), model.tokenizer(), model.weights().config.seqLen(),
                "test-model", "127.0.0.1", 0);
    }

    @AfterAll
    static void stop() {
        if (router != null) router.close();
        if (stack != null) stack.close();
    }

    static JsonNode ok(String body) throws Exception {
        return RouterCalls.ok(router.port(), "/v1/completions", body);
    }

    /** One sample run alone: its text, its cumulative log probability, its tokens, its prompt's tokens. */
    record Sample(int index, String text, double cumulative, int completionTokens, int promptTokens) {
    }

    static Sample alone(String prompt, int index, long seed, String params) throws Exception {
        JsonNode a = ok("{\"prompt\":" + JSON.writeValueAsString(prompt) + ",\"seed\":" + seed + ",\"logprobs\":0" + params + "}");
        double sum = 0;
        for (JsonNode lp : a.path("choices").get(0).path("logprobs").path("token_logprobs")) sum += lp.doubleValue();
        return new Sample(index, a.path("choices").get(0).path("text").asText(), sum, a.path("usage").path("completion_tokens").intValue(),
                a.path("usage").path("prompt_tokens").intValue());
    }

    /** The samples of {@code prompt} run alone, best first (ties in sample order, as the router's stable sort). */
    static List<Sample> ranked(String prompt, int bestOf, long seed, String params) throws Exception {
        List<Sample> all = new ArrayList<>();
        for (int j = 0; j < bestOf; j++) all.add(alone(prompt, j, seed + j, params));
        List<Sample> sorted = new ArrayList<>(all);
        sorted.sort(Comparator.comparingDouble(Sample::cumulative).reversed());
        return sorted;
    }

    @Test
    @Timeout(120)
    void bestOfShowsTheNSamplesWithTheHighestCumulativeLogprob() throws Exception {
        String params = ",\"max_tokens\":10,\"temperature\":1";
        long seed = 12;
        int n = 2, bestOf = 5;
        List<Sample> ranked = ranked(PROMPTS.getFirst(), bestOf, seed, params);
        assertNotEquals(List.of(0, 1), ranked.subList(0, n).stream().map(Sample::index).toList(),
                "the seed picks samples whose best are not the first n (else the choice would not show): " + ranked);

        JsonNode a = ok("{\"prompt\":" + JSON.writeValueAsString(PROMPTS.getFirst()) + ",\"seed\":" + seed + ",\"n\":" + n
                + ",\"best_of\":" + bestOf + params + "}");
        JsonNode choices = a.path("choices");
        assertEquals(n, choices.size(), a.toString());
        for (int i = 0; i < n; i++) {
            assertEquals(i, choices.get(i).path("index").intValue(), a.toString());
            assertEquals(ranked.get(i).text(), choices.get(i).path("text").asText(), "choice " + i + " is sample " + ranked.get(i).index()
                    + " (" + ranked + "): " + a);
            assertTrue(choices.get(i).path("logprobs").isNull(), "logprobs were not asked: " + a);
        }
        // Every sample counts in the usage (OpenAI bills best_of's), each with its prompt.
        int completion = ranked.stream().mapToInt(Sample::completionTokens).sum(), prompt = ranked.stream().mapToInt(Sample::promptTokens).sum();
        assertEquals(completion, a.path("usage").path("completion_tokens").intValue(), a.toString());
        assertEquals(prompt, a.path("usage").path("prompt_tokens").intValue(), a.toString());
        assertEquals(prompt + completion, a.path("usage").path("total_tokens").intValue(), a.toString());
        assertEquals(n, a.path("kvferry").path("choices").size(), "the extension of each choice shown: " + a);

        // Asked for, the log probabilities are the chosen samples' own.
        JsonNode withLogprobs = ok("{\"prompt\":" + JSON.writeValueAsString(PROMPTS.getFirst()) + ",\"seed\":" + seed + ",\"n\":" + n
                + ",\"best_of\":" + bestOf + ",\"logprobs\":1" + params + "}");
        for (int i = 0; i < n; i++) {
            JsonNode c = withLogprobs.path("choices").get(i);
            assertEquals(ranked.get(i).text(), c.path("text").asText(), withLogprobs.toString());
            double sum = 0;
            for (JsonNode lp : c.path("logprobs").path("token_logprobs")) sum += lp.doubleValue();
            assertEquals(ranked.get(i).cumulative(), sum, 1e-4, withLogprobs.toString());
            assertEquals(1, c.path("logprobs").path("top_logprobs").get(0).size(), withLogprobs.toString());
        }
    }

    @Test
    @Timeout(120)
    void aBatchChoosesPerPromptWithEcho() throws Exception {
        String params = ",\"max_tokens\":8,\"temperature\":1";
        long seed = 21;
        int bestOf = 3;
        JsonNode a = ok("{\"prompt\":" + JSON.writeValueAsString(PROMPTS) + ",\"seed\":" + seed + ",\"best_of\":" + bestOf
                + ",\"echo\":true" + params + "}");
        assertEquals(PROMPTS.size(), a.path("choices").size(), a.toString());
        int completion = 0;
        for (int p = 0; p < PROMPTS.size(); p++) {
            List<Sample> ranked = ranked(PROMPTS.get(p), bestOf, seed, params);
            JsonNode c = a.path("choices").get(p);
            assertEquals(p, c.path("index").intValue(), a.toString());
            assertEquals(PROMPTS.get(p) + ranked.getFirst().text(), c.path("text").asText(), "prompt " + p + " (" + ranked + "): " + a);
            completion += ranked.stream().mapToInt(Sample::completionTokens).sum();
        }
        assertEquals(completion, a.path("usage").path("completion_tokens").intValue(), a.toString());
    }

    /** max_tokens 0 (the prompt alone): nothing to choose between, so the prompt runs once per choice shown, not best_of times. */
    @Test
    @Timeout(60)
    void aPromptOnlyRequestRunsItsPromptOncePerChoice() throws Exception {
        JsonNode once = ok("{\"prompt\":\"Once upon a time\",\"max_tokens\":0,\"echo\":true,\"logprobs\":0}");
        JsonNode a = ok("{\"prompt\":\"Once upon a time\",\"max_tokens\":0,\"echo\":true,\"logprobs\":0,\"best_of\":3,\"seed\":1}");
        assertEquals(1, a.path("choices").size(), a.toString());
        assertEquals(once.path("usage").path("prompt_tokens").intValue(), a.path("usage").path("prompt_tokens").intValue(),
                "the prompt ran best_of times: " + a.path("usage"));
        assertEquals(once.path("choices").get(0).path("logprobs"), a.path("choices").get(0).path("logprobs"), a.toString());
    }

    @Test
    @Timeout(60)
    void badBestOfIsA400NamingIt() throws Exception {
        String[][] cases = {
                {"{\"prompt\":\"x\",\"best_of\":0}", "best_of must be in [1, 64], got 0"},
                {"{\"prompt\":\"x\",\"best_of\":65}", "best_of must be in [1, 64], got 65"},
                {"{\"prompt\":\"x\",\"best_of\":2.5}", "best_of must be an integer"},
                {"{\"prompt\":\"x\",\"n\":3,\"best_of\":2}", "best_of (2) must be at least n (3)"},
                {"{\"prompt\":[\"a\",\"b\"],\"best_of\":33}", "best_of (33) times the 2 prompts asks for 66 samples; a request may ask for at most 64"},
                {"{\"prompt\":\"x\",\"best_of\":2,\"stream\":true}", "best_of (2) above 1 cannot be streamed"},
        };
        for (String[] c : cases) {
            HttpResponse<String> r = RouterCalls.post(router.port(), "/v1/completions", c[0]);
            assertEquals(400, r.statusCode(), c[0] + " -> " + r.body());
            JsonNode e = JSON.readTree(r.body()).path("error");
            assertEquals("best_of", e.path("param").asText(null), c[0] + " -> " + r.body());
            assertTrue(e.path("message").asText().contains(c[1]), c[0] + " -> " + r.body());
        }
        // A chat does not choose among samples: best_of above n was answered with the first n samples, silently.
        for (String body : new String[]{"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":2,\"best_of\":2}",
                "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":2,\"n\":2,\"best_of\":3}",
                "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":2,\"best_of\":\"2\"}"}) {
            HttpResponse<String> r = RouterCalls.post(router.port(), "/v1/chat/completions", body);
            assertEquals(400, r.statusCode(), body + " -> " + r.body());
            assertEquals("best_of", JSON.readTree(r.body()).path("error").path("param").asText(null), body + " -> " + r.body());
        }
        for (String noOp : new String[]{"\"best_of\":1", "\"n\":2,\"best_of\":2", "\"best_of\":null"}) {
            String body = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":2," + noOp + "}";
            assertEquals(200, RouterCalls.post(router.port(), "/v1/chat/completions", body).statusCode(), body);
        }
        // best_of 1 (or n) changes nothing, streamed or not.
        assertEquals(200, RouterCalls.post(router.port(), "/v1/completions", "{\"prompt\":\"x\",\"best_of\":1,\"stream\":true,\"max_tokens\":2}").statusCode());
        assertEquals(200, RouterCalls.post(router.port(), "/v1/completions", "{\"prompt\":\"x\",\"n\":2,\"best_of\":null,\"max_tokens\":2}").statusCode());
    }
}
