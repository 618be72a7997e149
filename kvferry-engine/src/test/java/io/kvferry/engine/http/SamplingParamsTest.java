package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.model.SamplingRules;
import io.kvferry.engine.model.TokenLogprobs;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.engine.serving.ColocatedEngine;
import io.kvferry.engine.serving.EngineSpec;
import io.kvferry.engine.serving.Generation;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The sampling parameters of OpenAI, vLLM and SGLang beyond temperature / top-p / top-k (penalties, logit bias, min-p,
 * min tokens, ignore_eos, stop token ids) through the router, a TP2 prefill (the first token) and a TP1 decode (the
 * rest): each changes the answer, and the answer is a colocated run's token for token, greedy and seeded; a bad value
 * is a 400 naming the field, at the router and at an engine.
 */
class SamplingParamsTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final String PROMPT = "Once upon a time";
    static final int MAX = 32;
    static Tokenizer tokenizer;
    static EngineStack stack;
    static Router router;
    static ColocatedEngine colocated;
    static int[] promptIds;

    @BeforeAll
    static void start() throws Exception {
        ModelFiles.Loaded model = ModelFiles.load(null, null);
        tokenizer = model.tokenizer();
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 32, 32);
        stack = EngineStack.open(spec.withParallelism(2, 1), spec, "sampling-params-test", null);
        router = new Router(List.of(stack.prefillUrl()), List.of(stack.decodeUrl()), tokenizer, model.weights().config.seqLen(),
                "test-model", "127.0.0.1", 0);
        colocated = new ColocatedEngine(spec.withMaxRequests(1));
        promptIds = tokenizer.encode(PROMPT, true, false);
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

    /** Greedy, and seeded temperature / top-p: the seed makes PD and colocated draw alike. */
    static final String[] SAMPLINGS = {"\"temperature\":0", "\"temperature\":0.9,\"top_p\":0.95,\"seed\":11"};

    static Sampling sampling(int s, SamplingRules r) {
        return s == 0 ? new Sampling(0f, 1f, 0, -1, r) : new Sampling(0.9f, 0.95f, 11, -1, r);
    }

    static SamplingRules rules(float freq, float pres, float rep, float minP, Map<Integer, Float> bias, int minTokens, boolean ignoreEos,
                               int... stopIds) {
        return SamplingRules.of(freq, pres, rep, minP, bias, minTokens, ignoreEos, stopIds);
    }

    static int[] ids(JsonNode arr) {
        int[] out = new int[arr.size()];
        for (int i = 0; i < out.length; i++) out[i] = arr.get(i).intValue();
        return out;
    }

    static JsonNode completion(String extra) throws Exception {
        return RouterCalls.ok(router.port(), "/v1/completions", "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":" + MAX
                + (extra.isEmpty() ? "" : "," + extra) + "}");
    }

    static JsonNode generate(String extra) throws Exception {
        return RouterCalls.ok(router.port(), "/generate", "{\"text\":\"" + PROMPT + "\",\"sampling_params\":{\"max_new_tokens\":" + MAX
                + (extra.isEmpty() ? "" : "," + extra) + "}}");
    }

    static JsonNode chat(String extra) throws Exception {
        return RouterCalls.ok(router.port(), "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"" + PROMPT
                + "\"}],\"max_tokens\":" + MAX + (extra.isEmpty() ? "" : "," + extra) + "}");
    }

    static String join(String... parts) {
        return String.join(",", Arrays.stream(parts).filter(p -> !p.isEmpty()).toList());
    }

    /**
     * One parameter: its OpenAI and SGLang spellings, the rules they make, the request it is added to (its base, with
     * its rules), and in which samplings (greedy, seeded) it must change the answer.
     */
    record Case(String name, String openAi, String sglang, SamplingRules rules, String base, SamplingRules baseRules, boolean changesGreedy,
                boolean changesSeeded) {
    }

    /** The plain greedy answer's tokens, from which some cases pick their token. */
    static int[] plainGreedy() {
        return colocated.generate(promptIds, MAX, Sampling.GREEDY).tokens();
    }

    @Test
    @Timeout(120)
    void eachParameterChangesTheAnswerAndPdEqualsColocatedTokenForToken() throws Exception {
        int[] plain = plainGreedy();
        int first = plain[0];
        int stopAt = 3; // the stop token: the plain answer's 4th, where it is its first occurrence
        while (stopAt < plain.length && indexOf(plain, plain[stopAt]) != stopAt) stopAt++;
        int stopTok = plain[stopAt];
        String forceBos = "\"logit_bias\":{\"1\":100}"; // the model would end its story at once: min_tokens and ignore_eos decide
        SamplingRules bos = rules(0, 0, 1, 0, Map.of(1, 100f), 0, false);
        Case[] cases = {
                new Case("frequency_penalty", "\"frequency_penalty\":1.5", "\"frequency_penalty\":1.5", rules(1.5f, 0, 1, 0, Map.of(), 0, false),
                        "", SamplingRules.NONE, true, true),
                new Case("presence_penalty", "\"presence_penalty\":1.5", "\"presence_penalty\":1.5", rules(0, 1.5f, 1, 0, Map.of(), 0, false),
                        "", SamplingRules.NONE, true, true),
                new Case("repetition_penalty", "\"repetition_penalty\":1.5", "\"repetition_penalty\":1.5", rules(0, 0, 1.5f, 0, Map.of(), 0, false),
                        "", SamplingRules.NONE, true, true),
                // min_p leaves the greedy token (the most likely is always kept) and narrows a draw.
                new Case("min_p", "\"min_p\":0.3", "\"min_p\":0.3", rules(0, 0, 1, 0.3f, Map.of(), 0, false), "", SamplingRules.NONE, false, true),
                new Case("logit_bias", "\"logit_bias\":{\"" + first + "\":-100}", "\"logit_bias\":{\"" + first + "\":-100}",
                        rules(0, 0, 1, 0, Map.of(first, -100f), 0, false), "", SamplingRules.NONE, true, true),
                new Case("min_tokens", "\"min_tokens\":5", "\"min_new_tokens\":5", rules(0, 0, 1, 0, Map.of(1, 100f), 5, false), forceBos, bos,
                        true, true),
                new Case("ignore_eos", "\"ignore_eos\":true", "\"ignore_eos\":true", rules(0, 0, 1, 0, Map.of(1, 100f), 0, true), forceBos, bos,
                        true, true),
                new Case("stop_token_ids", "\"stop_token_ids\":[" + stopTok + "]", "\"stop_token_ids\":[" + stopTok + "]",
                        rules(0, 0, 1, 0, Map.of(), 0, false, stopTok), "", SamplingRules.NONE, true, false),
        };
        List<String> unchanged = new ArrayList<>();
        for (Case c : cases) {
            for (int s = 0; s < SAMPLINGS.length; s++) {
                String what = c.name() + ", " + SAMPLINGS[s];
                Generation expected = colocated.generate(promptIds, MAX, sampling(s, c.rules()));
                Generation without = colocated.generate(promptIds, MAX, sampling(s, c.baseRules()));
                JsonNode pd = completion(join(SAMPLINGS[s], c.base(), c.openAi()));
                assertArrayEquals(expected.tokens(), ids(pd.path("kvferry").path("token_ids")), what + ": PD = colocated");
                assertEquals(expected.finishReason(), pd.path("choices").path(0).path("finish_reason").asText(), what);
                JsonNode pdWithout = completion(join(SAMPLINGS[s], c.base()));
                assertArrayEquals(without.tokens(), ids(pdWithout.path("kvferry").path("token_ids")), what + ": without, PD = colocated");
                boolean changes = s == 0 ? c.changesGreedy() : c.changesSeeded();
                if (changes && Arrays.equals(expected.tokens(), without.tokens())) unchanged.add(what);
                if (!changes && s == 0) assertArrayEquals(without.tokens(), expected.tokens(), what + ": greedy is the same");
                // SGLang's spelling on /generate, and the chat route: the same tokens.
                JsonNode g = generate(join(SAMPLINGS[s], c.base(), c.sglang()));
                assertArrayEquals(expected.tokens(), ids(g.path("output_ids")), what + ": /generate");
                assertEquals(expected.finishReason(), g.path("meta_info").path("finish_reason").path("type").asText(), what);
                JsonNode ch = chat(join(SAMPLINGS[s], c.base(), c.openAi()));
                assertArrayEquals(expected.tokens(), ids(ch.path("kvferry").path("token_ids")), what + ": chat");
            }
        }
        assertTrue(unchanged.isEmpty(), "the parameter changed nothing: " + unchanged);
        // What each end rule did, greedy: min_tokens held BOS off for 5 tokens, then it ended the answer; ignore_eos ran
        // through it to max_tokens; the stop token id ended the answer at its first occurrence, its text left out.
        int[] min5 = ids(completion(join(SAMPLINGS[0], forceBos, "\"min_tokens\":5")).path("kvferry").path("token_ids"));
        assertEquals(6, min5.length, Arrays.toString(min5));
        assertEquals(Tokenizer.BOS, min5[5]);
        for (int i = 0; i < 5; i++) assertFalse(Tokenizer.endsSequence(min5[i]), Arrays.toString(min5));
        JsonNode ignored = completion(join(SAMPLINGS[0], forceBos, "\"ignore_eos\":true"));
        int[] all = ids(ignored.path("kvferry").path("token_ids"));
        assertEquals(MAX, all.length);
        for (int t : all) assertEquals(Tokenizer.BOS, t);
        assertEquals("length", ignored.path("choices").path(0).path("finish_reason").asText());
        JsonNode stopped = completion(join(SAMPLINGS[0], "\"stop_token_ids\":[" + stopTok + "]"));
        assertArrayEquals(Arrays.copyOf(plain, stopAt + 1), ids(stopped.path("kvferry").path("token_ids")));
        assertEquals("stop", stopped.path("choices").path(0).path("finish_reason").asText());
        assertEquals(text(Arrays.copyOf(plain, stopAt)), stopped.path("choices").path(0).path("text").asText(), "the stop token's text is left out");
        awaitPagesReturned();
    }

    static int indexOf(int[] a, int v) {
        for (int i = 0; i < a.length; i++) if (a[i] == v) return i;
        return -1;
    }

    /** The text of output tokens as the router decodes them after the prompt. */
    static String text(int[] tokens) {
        Tokenizer.TextStream t = new Tokenizer.TextStream(tokenizer, promptIds[promptIds.length - 1]);
        StringBuilder b = new StringBuilder();
        for (int tok : tokens) b.append(t.push(tok));
        return b.append(t.finish()).toString();
    }

    /**
     * Several choices carry the rules (sample j seeded seed + j, as without them), and a stream with a stop token id
     * sends the answer's text: the stop token's left out there too.
     */
    @Test
    @Timeout(60)
    void choicesAndStreamsCarryTheRules() throws Exception {
        String params = "\"temperature\":0.9,\"seed\":5,\"frequency_penalty\":0.8,\"repetition_penalty\":1.2,\"min_p\":0.1";
        SamplingRules r = rules(0.8f, 0, 1.2f, 0.1f, Map.of(), 0, false);
        JsonNode two = completion(params + ",\"n\":2");
        for (int j = 0; j < 2; j++) {
            int[] expected = colocated.generate(promptIds, MAX, new Sampling(0.9f, 1f, 5 + j, -1, r)).tokens();
            assertArrayEquals(expected, ids(two.path("kvferry").path("choices").path(j).path("token_ids")), "choice " + j + ": " + two);
        }
        int[] plain = plainGreedy();
        String stopIds = "\"stop_token_ids\":[" + plain[5] + "]";
        JsonNode whole = completion(join(SAMPLINGS[0], stopIds));
        StringBuilder streamed = new StringBuilder();
        for (JsonNode e : RouterCalls.events(router.port(), "/v1/completions", "{\"prompt\":\"" + PROMPT + "\",\"max_tokens\":" + MAX + ","
                + join(SAMPLINGS[0], stopIds) + ",\"stream\":true}")) {
            streamed.append(e.path("choices").path(0).path("text").asText(""));
        }
        assertEquals(whole.path("choices").path(0).path("text").asText(), streamed.toString());
        assertEquals(text(Arrays.copyOf(plain, indexOf(plain, plain[5]))), streamed.toString());
    }

    /**
     * What the router sends the engines: a request without rules sends the keys it sent before them (no byte more), and
     * rules travel exactly (SGLang's names; the engine parses back the very floats and ids the router read).
     */
    @Test
    void theEnginesSamplingParamsCarryTheRulesExactlyAndNothingWithoutThem() {
        Sampling plain = new Sampling(0.9f, 0.95f, 11);
        assertEquals(List.of("temperature", "top_p", "seed"), fieldNames(SamplingParams.json(plain)));
        assertEquals(List.of("temperature", "top_p", "seed", "top_k"), fieldNames(SamplingParams.json(new Sampling(0f, 1f, 3, 5))));
        Sampling ruled = new Sampling(0.7f, 0.9f, 42, 8, rules(0.1f, -1.3f, 1.17f, 0.07f, Map.of(300, -0.3f, 5, 99.9f), 4, true, 13, 7));
        JsonNode sent = SamplingParams.json(ruled);
        assertEquals(List.of("temperature", "top_p", "seed", "top_k", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_p",
                "logit_bias", "min_new_tokens", "ignore_eos", "stop_token_ids"), fieldNames(sent));
        assertEquals(ruled, SamplingParams.parse(sent, 0, 512));
        assertEquals(plain, SamplingParams.parse(SamplingParams.json(plain), 0, 512));
    }

    static List<String> fieldNames(JsonNode n) {
        List<String> out = new ArrayList<>();
        n.fieldNames().forEachRemaining(out::add);
        return out;
    }

    /**
     * A prompt whose full pages the prefill's prefix cache holds: its first token, sampled with the rules over the whole
     * prompt (input_ids, cached or computed), is the colocated run's as on the first (uncached) run.
     */
    @Test
    @Timeout(60)
    void theRulesReadTheWholePromptWhenThePrefillCachedItsPages() throws Exception {
        String prompt = "Once upon a time there was a little girl named Lily. She liked to play in the park with her dog every day";
        int[] ids = tokenizer.encode(prompt, true, false);
        assertTrue(ids.length > 16, "a full page of 16 to cache: " + ids.length);
        SamplingRules r = rules(0.5f, 0.5f, 1.4f, 0, Map.of(432, -100f), 0, false);
        int[] expected = colocated.generate(ids, MAX, new Sampling(0f, 1f, 0, -1, r)).tokens();
        String body = "{\"prompt\":\"" + prompt + "\",\"max_tokens\":" + MAX + ",\"temperature\":0,\"frequency_penalty\":0.5,"
                + "\"presence_penalty\":0.5,\"repetition_penalty\":1.4,\"logit_bias\":{\"432\":-100}}";
        for (int run = 0; run < 2; run++) {
            JsonNode j = RouterCalls.ok(router.port(), "/v1/completions", body);
            assertArrayEquals(expected, ids(j.path("kvferry").path("token_ids")), "run " + run + ": " + j);
            int cached = j.path("usage").path("prompt_tokens_details").path("cached_tokens").asInt(0);
            if (run == 1) assertTrue(cached >= 16, "the second run took the prompt's first page from the cache: " + j.path("usage"));
        }
        assertFalse(Arrays.equals(expected, colocated.generate(ids, MAX, Sampling.GREEDY).tokens()), "the rules changed the answer");
    }

    /** A stop string does not end the answer before min_tokens; a match ending after it does (vLLM's check). */
    @Test
    @Timeout(60)
    void noStopStringEndsTheAnswerBeforeMinTokens() throws Exception {
        JsonNode plain = completion(SAMPLINGS[0]);
        String text = plain.path("choices").path(0).path("text").asText();
        int[] plainTokens = ids(plain.path("kvferry").path("token_ids"));
        String stop = text(Arrays.copyOf(plainTokens, 2)).substring(text(Arrays.copyOf(plainTokens, 1)).length()).trim(); // the 2nd token's text
        assertFalse(stop.isEmpty(), text);
        JsonNode early = completion(join(SAMPLINGS[0], "\"stop\":" + JSON.writeValueAsString(stop)));
        assertTrue(ids(early.path("kvferry").path("token_ids")).length <= 2, "the stop string ends the answer at its 2nd token: " + early);
        JsonNode held = completion(join(SAMPLINGS[0], "\"stop\":" + JSON.writeValueAsString(stop), "\"min_tokens\":6"));
        int[] heldTokens = ids(held.path("kvferry").path("token_ids"));
        assertTrue(heldTokens.length >= 6, "min_tokens 6 held the stop string off: " + held);
        assertArrayEquals(Arrays.copyOf(plainTokens, heldTokens.length), heldTokens, "the same tokens, only longer");
        assertTrue(held.path("choices").path(0).path("text").asText().contains(stop), held.toString());
        JsonNode g = generate(join(SAMPLINGS[0], "\"stop\":" + JSON.writeValueAsString(stop), "\"min_new_tokens\":6"));
        assertEquals(held.path("choices").path(0).path("text").asText(), g.path("text").asText());
    }

    /** Log probabilities stay the model's (raw logits, temperature 1) whatever the penalties and bias make the sampler draw. */
    @Test
    @Timeout(60)
    void logprobsStayTheModelsUnderPenaltiesAndBias() throws Exception {
        SamplingRules r = rules(1f, 0.5f, 1.3f, 0, Map.of(9, 5f), 2, false);
        Generation expected = colocated.generate(promptIds, MAX, new Sampling(0f, 1f, 0, -1, r), 2);
        JsonNode j = completion(join(SAMPLINGS[0], "\"frequency_penalty\":1,\"presence_penalty\":0.5,\"repetition_penalty\":1.3,"
                + "\"logit_bias\":{\"9\":5},\"min_tokens\":2,\"logprobs\":2"));
        assertArrayEquals(expected.tokens(), ids(j.path("kvferry").path("token_ids")));
        JsonNode lps = j.path("choices").path(0).path("logprobs").path("token_logprobs");
        Generation plain = colocated.generate(promptIds, 1, Sampling.GREEDY, 2);
        assertEquals(plain.logprobs().getFirst().topLogprobs()[0], expected.logprobs().getFirst().topLogprobs()[0], 0f,
                "the first position's top logprob is the unbiased model's");
        for (int i = 0; i < expected.tokens().length; i++) {
            TokenLogprobs e = expected.logprobs().get(i);
            assertEquals(e.logprob(), lps.get(i).floatValue(), 0f, "token " + i);
        }
        // Forced by the bias, the token's logprob is the model's: far from the 0 of a certainty.
        Generation forced = colocated.generate(promptIds, 1, new Sampling(0f, 1f, 0, -1, rules(0, 0, 1, 0, Map.of(9, 100f), 0, false)), 0);
        assertEquals(9, forced.tokens()[0]);
        assertTrue(forced.logprobs().getFirst().logprob() < -1, "the raw logprob: " + forced.logprobs().getFirst().logprob());
        JsonNode f = completion(join(SAMPLINGS[0], "\"logit_bias\":{\"9\":100},\"logprobs\":0"));
        assertEquals(forced.logprobs().getFirst().logprob(), f.path("choices").path(0).path("logprobs").path("token_logprobs").get(0).floatValue(), 0f);
    }

    @Test
    @Timeout(60)
    void badValuesAreA400NamingTheFieldAtTheRouterAndAtTheEngines() throws Exception {
        String[][] openAi = {
                {"\"frequency_penalty\":2.5", "frequency_penalty", "frequency_penalty must be in [-2, 2], got 2.5"},
                {"\"frequency_penalty\":\"high\"", "frequency_penalty", "must be a number"},
                {"\"presence_penalty\":-3", "presence_penalty", "presence_penalty must be in [-2, 2]"},
                {"\"repetition_penalty\":0", "repetition_penalty", "repetition_penalty must be > 0"},
                {"\"repetition_penalty\":-1", "repetition_penalty", "repetition_penalty must be > 0"},
                {"\"min_p\":1.5", "min_p", "min_p must be in [0, 1]"},
                {"\"min_p\":-0.1", "min_p", "min_p must be in [0, 1]"},
                {"\"logit_bias\":{\"abc\":1}", "logit_bias", "logit_bias keys must be token ids"},
                {"\"logit_bias\":{\"-5\":1}", "logit_bias", "logit_bias keys must be token ids"},
                {"\"logit_bias\":{\"600\":1}", "logit_bias", "logit_bias names token 600, outside the vocabulary (0..511)"},
                {"\"logit_bias\":{\"5\":101}", "logit_bias", "logit_bias values must be in [-100, 100]"},
                {"\"logit_bias\":{\"5\":\"x\"}", "logit_bias", "logit_bias values must be numbers"},
                {"\"logit_bias\":[5]", "logit_bias", "logit_bias must be an object"},
                {"\"min_tokens\":-1", "min_tokens", "min_tokens must be in [0, "},
                {"\"min_tokens\":" + (MAX + 1), "min_tokens", "min_tokens (" + (MAX + 1) + ") must be at most the token limit (" + MAX + ")"},
                {"\"ignore_eos\":\"yes\"", "ignore_eos", "ignore_eos must be true or false"},
                {"\"stop_token_ids\":[600]", "stop_token_ids", "stop_token_ids names token 600"},
                {"\"stop_token_ids\":[-1]", "stop_token_ids", "stop_token_ids must be a list of token ids"},
                {"\"stop_token_ids\":7", "stop_token_ids", "stop_token_ids must be a list of token ids"},
        };
        for (String[] c : openAi) {
            assertBadRequest("/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":" + MAX + "," + c[0] + "}", c[1], c[2]);
            assertBadRequest("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":" + MAX + "," + c[0] + "}",
                    c[1], c[2]);
            String sglang = c[0].replace("min_tokens", "min_new_tokens");
            assertBadRequest("/generate", "{\"text\":\"x\",\"sampling_params\":{\"max_new_tokens\":" + MAX + "," + sglang + "}}",
                    "sampling_params." + c[1].replace("min_tokens", "min_new_tokens"), c[2].replace("min_tokens", "min_new_tokens"));
        }
        // A minimum the context cannot hold after the prompt, whatever the token limit says (a chat without one runs to the
        // context's end): before, it was taken, and the answer ended at the context short of it.
        assertBadRequest("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"min_tokens\":600}",
                "min_tokens", "must be at most the tokens the model's context (512) leaves after the prompt's");
        assertBadRequest("/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":1000,\"min_tokens\":600}", "min_tokens",
                "must be at most the tokens the model's context (512) leaves");
        assertBadRequest("/generate", "{\"text\":\"x\",\"sampling_params\":{\"max_new_tokens\":1000,\"min_new_tokens\":600}}",
                "sampling_params.min_new_tokens", "must be at most the tokens the model's context (512) leaves");
        // The engines check what they are sent: a 400, never a crash, and nothing held.
        String ids = Arrays.toString(promptIds).replace(" ", "");
        String[][] engine = {
                {"\"min_p\":2", "min_p must be in [0, 1]"},
                {"\"logit_bias\":{\"9999\":1}", "logit_bias names token 9999"},
                {"\"stop_token_ids\":[512]", "stop_token_ids names token 512"},
                {"\"repetition_penalty\":0", "repetition_penalty must be > 0"},
                {"\"frequency_penalty\":9", "frequency_penalty must be in [-2, 2]"},
                {"\"min_new_tokens\":-3", "min_new_tokens must be in [0, "},
                {"\"ignore_eos\":1", "ignore_eos must be true or false"},
        };
        long room = 7_000;
        for (String[] c : engine) {
            for (String url : new String[]{stack.prefillUrl(), stack.decodeUrl()}) {
                String body = "{\"bootstrap_room\":" + room++ + ",\"input_ids\":" + ids + ",\"bootstrap_addr\":\"" + stack.addr
                        + "\",\"max_new_tokens\":4,\"sampling_params\":{\"temperature\":0," + c[0] + "}}";
                HttpResponse<String> r = RouterCalls.post(Integer.parseInt(url.substring(url.lastIndexOf(':') + 1)), "/generate", body);
                assertEquals(400, r.statusCode(), url + " " + body + " -> " + r.body());
                assertTrue(JSON.readTree(r.body()).path("error").path("message").asText().contains(c[1]), url + " " + body + " -> " + r.body());
            }
        }
        awaitPagesReturned();
    }

    static void assertBadRequest(String path, String body, String param, String message) throws Exception {
        HttpResponse<String> r = RouterCalls.post(router.port(), path, body);
        assertEquals(400, r.statusCode(), body + " -> " + r.body());
        JsonNode error = JSON.readTree(r.body()).path("error");
        assertEquals("invalid_request_error", error.path("type").asText(), r.body());
        assertEquals(param, error.path("param").asText(null), body + " -> " + r.body());
        assertTrue(error.path("message").asText().contains(message), body + " -> " + r.body());
    }

    static void awaitPagesReturned() throws Exception {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (stack.decode.outstanding().get(5, TimeUnit.SECONDS) != 0 || stack.prefill.outstanding().get(5, TimeUnit.SECONDS) != 0) {
            assertTrue(System.nanoTime() < until, "every request's pages came back");
            Thread.sleep(20);
        }
    }
}
