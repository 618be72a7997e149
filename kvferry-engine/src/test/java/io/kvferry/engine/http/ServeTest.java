package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.engine.serving.ColocatedEngine;
import io.kvferry.engine.serving.DecodeEngine;
import io.kvferry.engine.serving.EngineSpec;
import io.kvferry.engine.serving.PrefillEngine;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.BufferedReader;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/** The router and the engines' HTTP servers, end to end over loopback with kvferry's tcp transport between the engines. */
class ServeTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static ModelFiles.Loaded model;
    static EngineStack stack;
    static PrefillEngine prefill;
    static DecodeEngine decode;
    static PrefillServer prefillServer;
    static DecodeServer decodeServer;
    static Router router;
    static ColocatedEngine colocated;
    static final HttpClient http = HttpClient.newBuilder().executor(Executors.newVirtualThreadPerTaskExecutor()).build();

    @BeforeAll
    static void start() throws Exception {
        model = ModelFiles.load(null, null);
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 256, 32);
        stack = EngineStack.open(spec.withParallelism(2, 1), spec, "serve-test", null);
        prefill = stack.prefill;
        decode = stack.decode;
        prefillServer = stack.prefillServer;
        decodeServer = stack.decodeServer;
        router = new Router(List.of(stack.prefillUrl()), List.of(stack.decodeUrl()),
                model.tokenizer(), model.weights().config.seqLen(), "test-model", "127.0.0.1", 0);
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
        return http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + router.port() + path))
                .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
    }

    static int[] ids(JsonNode arr) {
        int[] out = new int[arr.size()];
        for (int i = 0; i < out.length; i++) out[i] = arr.get(i).intValue();
        return out;
    }

    static void awaitPagesReturned() throws Exception {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        int p, d;
        do {
            p = prefill.outstanding().get(5, TimeUnit.SECONDS);
            d = decode.outstanding().get(5, TimeUnit.SECONDS);
            if (p == 0 && d == 0) return;
            Thread.sleep(20);
        } while (System.nanoTime() < until);
        throw new AssertionError("pages not returned: prefill " + p + ", decode " + d);
    }

    @Test
    @Timeout(60)
    void completionsReturnTheColocatedTokensAsText() throws Exception {
        String prompt = "Once upon a time";
        HttpResponse<String> r = post("/v1/completions", "{\"model\":\"test-model\",\"prompt\":\"" + prompt + "\",\"max_tokens\":30,\"temperature\":0}");
        assertEquals(200, r.statusCode(), r.body());
        JsonNode j = JSON.readTree(r.body());
        int[] expected = colocated.generate(model.tokenizer().encode(prompt, true, false), 30, Sampling.GREEDY).tokens();
        assertArrayEquals(expected, ids(j.path("kvferry").path("token_ids")));
        String text = j.path("choices").path(0).path("text").asText();
        assertEquals(model.tokenizer().decode(concat(model.tokenizer().encode(prompt, true, false), expected)).substring(prompt.length()), text);
        assertEquals(expected.length, j.path("usage").path("completion_tokens").asInt());
        assertEquals("text_completion", j.path("object").asText());
        assertTrue(j.path("kvferry").path("bytes").asLong() > 0, r.body());
        if (model.real()) assertTrue(text.startsWith(", there was a little girl named Lily"), text);
    }

    /**
     * llama2.c's checkpoints end a story with BOS and never emit EOS (run.c stops on {@code next == 1}).
     * Greedy "Once upon a time" on stories260K emits BOS as output token 342: the completion ends there
     * with finish_reason "stop" (streamed or not), BOS is counted but is no text, and the text does not
     * run on into a second story. The tokens are still the colocated run's.
     */
    @Test
    @Timeout(120)
    void aStoryEndsAtBosWithFinishReasonStop() throws Exception {
        assumeTrue(model.real(), "needs stories260K: random weights have no stories to end");
        String prompt = "Once upon a time";
        int[] promptIds = model.tokenizer().encode(prompt, true, false);
        int[] expected = colocated.generate(promptIds, 1000, Sampling.GREEDY).tokens();
        for (boolean stream : new boolean[]{false, true}) {
            HttpResponse<String> r = post("/v1/completions", "{\"prompt\":\"" + prompt + "\",\"max_tokens\":1000,\"temperature\":0,\"stream\":" + stream
                    + (stream ? ",\"stream_options\":{\"include_usage\":true}" : "") + "}");
            assertEquals(200, r.statusCode(), r.body());
            StringBuilder text = new StringBuilder();
            JsonNode last = null;
            JsonNode usage = null;
            for (String l : r.body().lines().filter(l -> l.startsWith("{") || l.startsWith("data: {")).toList()) {
                JsonNode j = JSON.readTree(l.startsWith("data: ") ? l.substring(6) : l);
                if (j.has("usage")) usage = j.path("usage");
                if (j.path("choices").isEmpty()) continue; // the include_usage chunk
                last = j;
                text.append(last.path("choices").path(0).path("text").asText());
            }
            int[] ids = ids(last.path("kvferry").path("token_ids"));
            assertArrayEquals(expected, ids, "stream " + stream);
            assertEquals(Tokenizer.BOS, ids[ids.length - 1], "stream " + stream + ": " + Arrays.toString(ids));
            for (int i = 0; i < ids.length - 1; i++) assertNotEquals(Tokenizer.BOS, ids[i], "BOS at " + i + " and generation went on");
            assertTrue(ids.length < 500, "ran to " + ids.length + " tokens");
            assertEquals("stop", last.path("choices").path(0).path("finish_reason").asText(), last.toString());
            assertEquals(ids.length, usage.path("completion_tokens").asInt(), "stream " + stream);
            assertEquals(model.tokenizer().decode(concat(promptIds, ids)).substring(prompt.length()), text.toString());
            assertFalse(text.toString().contains("Once upon a time"), "a second story glued on: " + text);
        }
        awaitPagesReturned();
    }

    /**
     * A prompt that is a whole story: the prefill's first token is already BOS, so the answer is that one
     * token, no text, finish_reason "stop" (OpenAI and SGLang routes alike), and the decode holds nothing.
     */
    @Test
    @Timeout(120)
    void aPromptThatEndsAStoryAnswersNoTextAndStop() throws Exception {
        assumeTrue(model.real(), "needs stories260K: random weights have no stories to end");
        int[] opening = model.tokenizer().encode("Once upon a time", true, false);
        int[] story = colocated.generate(opening, 1000, Sampling.GREEDY).tokens();
        String whole = model.tokenizer().decode(concat(opening, Arrays.copyOf(story, story.length - 1))); // without its closing BOS
        assertArrayEquals(new int[]{Tokenizer.BOS}, colocated.generate(model.tokenizer().encode(whole, true, false), 8, Sampling.GREEDY).tokens(),
                "the re-encoded story no longer ends at once: the test checks nothing");
        JsonNode c = JSON.readTree(post("/v1/completions", JSON.createObjectNode().put("prompt", whole).put("max_tokens", 8).put("temperature", 0)
                .toString()).body());
        assertEquals("[1]", c.path("kvferry").path("token_ids").toString(), c.toString());
        assertEquals("", c.path("choices").path(0).path("text").asText());
        assertEquals("stop", c.path("choices").path(0).path("finish_reason").asText());
        assertEquals(1, c.path("usage").path("completion_tokens").asInt());
        JsonNode g = JSON.readTree(post("/generate", "{\"text\":" + JSON.writeValueAsString(whole)
                + ",\"sampling_params\":{\"max_new_tokens\":1,\"temperature\":0}}").body());
        assertEquals("[1]", g.path("output_ids").toString(), g.toString());
        assertEquals("", g.path("text").asText());
        assertEquals("stop", g.path("meta_info").path("finish_reason").path("type").asText(), "BOS ends it even at max_new_tokens 1");
        awaitPagesReturned();
    }

    static int[] concat(int[] a, int[] b) {
        int[] o = Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, o, a.length, b.length);
        return o;
    }

    @Test
    @Timeout(60)
    void streamedTextEqualsTheWholeAnswer() throws Exception {
        String body = "{\"prompt\":\"Tom had a red ball.\",\"max_tokens\":25,\"temperature\":0.8,\"seed\":5";
        JsonNode whole = JSON.readTree(post("/v1/completions", body + "}").body());
        HttpResponse<String> r = post("/v1/completions", body + ",\"stream\":true}");
        assertEquals(200, r.statusCode());
        assertTrue(r.headers().firstValue("Content-Type").orElse("").startsWith("text/event-stream"));
        StringBuilder text = new StringBuilder();
        JsonNode last = null;
        List<String> lines = r.body().lines().filter(l -> l.startsWith("data: ")).toList();
        assertEquals("data: [DONE]", lines.getLast());
        for (String l : lines.subList(0, lines.size() - 1)) {
            last = JSON.readTree(l.substring(6));
            text.append(last.path("choices").path(0).path("text").asText());
        }
        assertEquals(whole.path("choices").path(0).path("text").asText(), text.toString());
        assertEquals(whole.path("kvferry").path("token_ids"), last.path("kvferry").path("token_ids"), "a seeded sample is reproducible");
        assertTrue(lines.size() > 5, "one event per token");
    }

    @Test
    @Timeout(60)
    void sglangGenerateModelsAndHealth() throws Exception {
        HttpResponse<String> r = post("/generate", "{\"text\":\"One day\",\"sampling_params\":{\"max_new_tokens\":8,\"temperature\":0}}");
        assertEquals(200, r.statusCode(), r.body());
        JsonNode j = JSON.readTree(r.body());
        assertEquals(8, j.path("output_ids").size());
        assertEquals(8, j.path("meta_info").path("completion_tokens").asInt());
        assertEquals("length", j.path("meta_info").path("finish_reason").path("type").asText());
        // SGLang's sampling_params is Optional: null is its defaults, not a 400.
        HttpResponse<String> nullParams = post("/generate", "{\"text\":\"One day\",\"sampling_params\":null}");
        assertEquals(200, nullParams.statusCode(), nullParams.body());
        HttpResponse<String> m = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + router.port() + "/v1/models")).build(),
                HttpResponse.BodyHandlers.ofString());
        assertEquals("test-model", JSON.readTree(m.body()).path("data").path(0).path("id").asText());
        HttpResponse<String> h = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + router.port() + "/health")).build(),
                HttpResponse.BodyHandlers.ofString());
        assertEquals(200, h.statusCode(), h.body());
    }

    @Test
    @Timeout(60)
    void badRequestsGetA400NamingTheProblem() throws Exception {
        String[][] cases = {
                {"{\"max_tokens\":4}", "prompt"},
                {"{\"prompt\":\"x\",\"max_tokens\":0}", "max_tokens 0 (the prompt alone, no completion) needs echo: true"},
                {"{\"prompt\":\"x\",\"max_tokens\":-1}", "max_tokens"},
                {"{\"prompt\":\"x\",\"temperature\":-1}", "temperature"},
                {"{\"prompt\":\"x\",\"top_p\":2}", "top_p"},
                {"{\"prompt\":", "malformed JSON"},
                {"[1,2]", "JSON object"},
                {"{\"prompt\":\"" + "a b ".repeat(400) + "\"}", "context"},
                {"{\"prompt\":\"" + "Once upon a time there was a girl. ".repeat(2000) + "\"}", "context"},
                {"{\"prompt\":\"x\",\"n\":0}", "n must be in [1, 64], got 0"},
                {"{\"prompt\":\"x\",\"n\":65}", "n must be in [1, 64], got 65"},
                {"{\"prompt\":[\"a\",\"b\"],\"n\":33}", "n (33) times the 2 prompts asks for 66 completions; a request may ask for at most 64"},
                {"{\"prompt\":[]}", "prompt must be a string or a list of token ids or a list of 1 to 64 strings or lists of token ids, got a list of 0"},
                {"{\"prompt\":[\"a\",1]}", "prompt[1] must be a string"},
                {"{\"prompt\":\"x\",\"best_of\":0}", "best_of must be in [1, 64], got 0"},
                {"{\"prompt\":\"x\",\"logprobs\":30}", "logprobs must be in [0, 20], got 30"},
                {"{\"prompt\":\"x\",\"echo\":\"yes\"}", "echo must be true or false"},
                {"{\"prompt\":\"x\",\"suffix\":\"end\"}", "suffix"},
                // suffix, the completions parameter refused, beside implemented ones (presence_penalty 1 is applied, not refused).
                {"{\"prompt\":\"x\",\"logprobs\":1,\"echo\":true,\"suffix\":\"x\",\"presence_penalty\":1}", "suffix is not supported"},
                // The penalties and logit_bias out of OpenAI's ranges (SamplingParamsTest: each of them, on every route).
                {"{\"prompt\":\"x\",\"presence_penalty\":2.5}", "presence_penalty must be in [-2, 2], got 2.5"},
                {"{\"prompt\":\"x\",\"frequency_penalty\":-2.5}", "frequency_penalty must be in [-2, 2]"},
                {"{\"prompt\":\"x\",\"logit_bias\":{\"432\":-101}}", "logit_bias values must be in [-100, 100]"},
                {"{\"prompt\":\"x\",\"top_k\":0}", "top_k must be -1 (no limit) or at least 1, got 0"},
                {"{\"prompt\":\"x\",\"top_k\":-2}", "top_k must be in [-1, "},
                {"{\"prompt\":\"x\",\"top_k\":2.5}", "top_k must be an integer"},
                {"{\"prompt\":\"x\",\"min_p\":1.2}", "min_p must be in [0, 1]"},
                {"{\"prompt\":\"x\",\"stop\":5}", "stop"},
                {"{\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop"},
                {"{\"prompt\":\"x\",\"stop\":[\"\"]}", "stop"},
                {"{\"prompt\":\"x\",\"stream\":\"yes\"}", "stream"},
                // model and user change nothing, but a value of another type than OpenAI's string is the client's mistake.
                {"{\"prompt\":\"x\",\"model\":5}", "model must be a string, got 5"},
                {"{\"prompt\":\"x\",\"user\":{\"id\":1}}", "user must be a string"},
                // JSON can hold half a surrogate pair; UTF-8 cannot: it became '?' and the model answered another prompt.
                {"{\"prompt\":\"Once\\ud800\"}", "unpaired UTF-16 surrogate \\ud800 at character 4"},
                {"{\"prompt\":\"\\udc00 upon\"}", "unpaired UTF-16 surrogate \\udc00 at character 0"},
                {"{\"prompt\":\"a\\ude00\\ud83d\"}", "surrogate \\ude00 at character 1"},
        };
        for (String[] c : cases) {
            HttpResponse<String> r = post("/v1/completions", c[0]);
            assertEquals(400, r.statusCode(), c[0] + " -> " + r.body());
            String msg = JSON.readTree(r.body()).path("error").path("message").asText();
            assertTrue(msg.contains(c[1]), c[0] + " -> " + msg);
        }
        HttpResponse<String> pair = post("/v1/completions", "{\"prompt\":\"Once \\ud83d\\ude00\",\"max_tokens\":2}");
        assertEquals(200, pair.statusCode(), "a whole surrogate pair is a character: " + pair.body());
        HttpResponse<String> get = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + router.port() + "/v1/completions")).build(),
                HttpResponse.BodyHandlers.ofString());
        assertEquals(405, get.statusCode());
        awaitPagesReturned(); // refused requests hold nothing
    }

    /**
     * /v1/chat/completions refuses, with a 400 whose {@code param} names the field, what it cannot do: more than one
     * choice, bad tools and legacy function calling, log probabilities, structured output, messages that are missing, empty,
     * of a role outside system/developer/user/assistant/tool, a tool message answering no call, or of content that is not
     * text; and what /v1/completions
     * refuses of the sampling parameters. Its no-op values pass.
     */
    @Test
    @Timeout(60)
    void chatBadRequestsGetA400NamingTheField() throws Exception {
        String msgs = "\"messages\":[{\"role\":\"user\",\"content\":\"Once\"}]";
        String[][] cases = {
                {"{\"max_tokens\":4}", "messages", "messages must be an array"},
                {"{\"messages\":[]}", "messages", "at least one message"},
                {"{\"messages\":\"hi\"}", "messages", "messages must be an array"},
                {"{\"messages\":[\"hi\"]}", "messages[0]", "messages[0] must be an object"},
                {"{\"messages\":[{\"content\":\"hi\"}]}", "messages[0].role", "messages[0].role must be one of"},
                {"{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"tool\",\"content\":\"b\",\"tool_call_id\":\"c\"}]}",
                        "messages[1].tool_call_id", "must be the id of a call of an earlier assistant message's tool_calls [], got \"c\""},
                {"{\"messages\":[{\"role\":\"function\",\"content\":\"b\",\"name\":\"f\"}]}", "messages[0].role", "role function (legacy function calling) is not supported"},
                {"{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content", "must be a string or an array of text parts, got null"},
                {"{\"messages\":[{\"role\":\"user\",\"content\":null}]}", "messages[0].content", "got null"},
                {"{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "messages[0].content", "got 5"},
                {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"http://x/a.png\"}}]}]}",
                        "messages[0].content[0].type", "must be a text part"},
                {"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":7}]}]}", "messages[0].content[0].text", "must be a string"},
                {"{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c\"}]}]}",
                        "messages[0].tool_calls[0].function.name", "must be a string"},
                {"{\"messages\":[{\"role\":\"user\",\"content\":\"Once\\ud800\"}]}", "messages[0].content", "unpaired UTF-16 surrogate"},
                {"{" + msgs + ",\"n\":0}", "n", "n must be in [1, 64], got 0"},
                {"{" + msgs + ",\"n\":65}", "n", "n must be in [1, 64], got 65"},
                {"{" + msgs + ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f g\"}}]}", "tools[0].function.name", "1 to 64"},
                {"{" + msgs + ",\"tool_choice\":\"required\"}", "tool_choice", "needs tools"},
                {"{" + msgs + ",\"functions\":[{\"name\":\"f\"}]}", "functions", "functions is not supported"},
                {"{" + msgs + ",\"function_call\":\"auto\"}", "function_call", "function_call is not supported"},
                {"{" + msgs + ",\"logprobs\":\"yes\"}", "logprobs", "logprobs must be true or false"},
                {"{" + msgs + ",\"top_logprobs\":2}", "top_logprobs", "top_logprobs (2) needs logprobs: true"},
                {"{" + msgs + ",\"response_format\":{\"type\":\"xml\"}}", "response_format", "response_format.type must be text, json_object or json_schema"},
                {"{" + msgs + ",\"presence_penalty\":3}", "presence_penalty", "presence_penalty must be in [-2, 2]"},
                {"{" + msgs + ",\"max_completion_tokens\":0}", "max_completion_tokens", "max_completion_tokens must be in [1, "},
                {"{" + msgs + ",\"max_tokens\":-1}", "max_tokens", "max_tokens must be in [1, "},
                {"{" + msgs + ",\"max_tokens\":4,\"max_completion_tokens\":5}", "max_tokens", "differ"},
                {"{" + msgs + ",\"temperature\":-1}", null, "temperature"},
                {"{" + msgs + ",\"stop\":[\"\"]}", null, "stop"},
                {"{" + msgs + ",\"stream_options\":3}", "stream_options", "stream_options must be an object"},
                // Every unsupported parameter at once, each named; param names the first.
                {"{" + msgs + ",\"n\":3,\"functions\":[{}],\"audio\":{}}", "audio",
                        "audio is not supported (must be null or absent), got {}; functions is not supported"},
        };
        for (String[] c : cases) {
            HttpResponse<String> r = post("/v1/chat/completions", c[0]);
            assertEquals(400, r.statusCode(), c[0] + " -> " + r.body());
            JsonNode error = JSON.readTree(r.body()).path("error");
            assertEquals("invalid_request_error", error.path("type").asText(), r.body());
            assertTrue(error.path("message").asText().contains(c[2]), c[0] + " -> " + r.body());
            if (c[1] != null) assertEquals(c[1], error.path("param").asText(null), c[0] + " -> " + r.body());
            assertTrue(error.path("code").isNull(), "code is a string or null, as OpenAI's clients read it: " + r.body());
        }
        HttpResponse<String> ok = post("/v1/chat/completions", "{" + msgs + ",\"max_tokens\":3,\"n\":1,\"tools\":[],\"tool_choice\":\"none\","
                + "\"logprobs\":false,\"top_logprobs\":0,\"response_format\":{\"type\":\"text\"},\"modalities\":[\"text\"],\"user\":\"u\"}");
        assertEquals(200, ok.statusCode(), "the no-op values pass: " + ok.body());
        JsonNode answer = JSON.readTree(ok.body());
        assertEquals("chat.completion", answer.path("object").asText(), ok.body());
        assertEquals("assistant", answer.path("choices").path(0).path("message").path("role").asText(), ok.body());
        HttpResponse<String> get = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + router.port() + "/v1/chat/completions")).build(),
                HttpResponse.BodyHandlers.ofString());
        assertEquals(405, get.statusCode());
        awaitPagesReturned(); // refused requests hold nothing
    }

    /**
     * The no-op values of the parameters the engine does not implement are accepted, as are fields that
     * change nothing here (model, user, stream_options): the answer is the one without them. A model name other than the
     * one served is accepted too (SERVING.md "Errors": vLLM would answer 404 model_not_found), the answer naming the one served.
     */
    @Test
    @Timeout(60)
    void noOpValuesOfUnimplementedParametersAndIrrelevantFieldsAreAccepted() throws Exception {
        String base = "{\"prompt\":\"Once upon a time\",\"max_tokens\":6,\"temperature\":0";
        JsonNode plain = JSON.readTree(post("/v1/completions", base + "}").body());
        HttpResponse<String> r = post("/v1/completions", base + ",\"presence_penalty\":0,\"frequency_penalty\":0.0,\"logit_bias\":{},"
                + "\"top_k\":-1,\"min_p\":null,\"repetition_penalty\":1,\"n\":1,\"model\":\"gpt-4o\",\"user\":\"u1\","
                + "\"stream_options\":{\"include_usage\":true}}");
        assertEquals(200, r.statusCode(), r.body());
        assertEquals("test-model", JSON.readTree(r.body()).path("model").asText(), "the model served: " + r.body());
        assertEquals(plain.path("kvferry").path("token_ids"), JSON.readTree(r.body()).path("kvferry").path("token_ids"));
        HttpResponse<String> g = post("/generate", "{\"text\":\"Once upon a time\",\"sampling_params\":{\"max_new_tokens\":6,\"temperature\":0,"
                + "\"top_p\":1,\"seed\":3,\"stop\":[\"zzz\"],\"top_k\":-1,\"repetition_penalty\":1.0,\"ignore_eos\":false,"
                + "\"skip_special_tokens\":true,\"stop_token_ids\":[],\"regex\":null}}");
        assertEquals(200, g.statusCode(), g.body());
        assertEquals(plain.path("kvferry").path("token_ids"), JSON.readTree(g.body()).path("output_ids"));
    }

    /**
     * /generate: every sampling_params key the engine does not implement is refused with a 400 naming
     * each (SGLang applies regex, n, …; an unknown key may mean anything), unless null or its no-op value;
     * one it implements, out of range, too.
     */
    @Test
    @Timeout(60)
    void generateRefusesSamplingParamsTheEngineDoesNotImplement() throws Exception {
        String[][] cases = {
                {"\"n\":2,\"no_stop_trim\":true", "sampling_params: n is not supported (must be 1, null or absent), got 2; "
                        + "no_stop_trim is not supported (must be false, null or absent), got true"},
                {"\"ebnf\":\"root ::= x\"", "sampling_params.ebnf: the grammar has an undefined rule 'x' at line 1, column 10"},
                {"\"top_k\":0", "top_k must be -1 (no limit) or at least 1, got 0"},
                // The sampling parameters it implements, out of range (SamplingParamsTest: each of them).
                {"\"min_p\":1.1", "min_p must be in [0, 1]"},
                {"\"frequency_penalty\":3", "frequency_penalty must be in [-2, 2]"},
                {"\"presence_penalty\":-3", "presence_penalty must be in [-2, 2]"},
                {"\"ignore_eos\":\"yes\"", "ignore_eos must be true or false"},
                {"\"min_new_tokens\":5", "min_new_tokens (5) must be at most the token limit (4)"},
                {"\"n\":2", "n is not supported"},
                {"\"stop_token_ids\":[13.5]", "stop_token_ids must be a list of token ids"},
                {"\"regex\":\"a(?=b)\"", "sampling_params.regex: the regex has a lookahead '(?=' at position 1"},
                {"\"temprature\":0.5", "temprature is not supported (this engine implements max_new_tokens, temperature, top_p, top_k, seed, stop, "
                        + "frequency_penalty, presence_penalty, repetition_penalty, min_p, logit_bias, min_new_tokens, ignore_eos, stop_token_ids, regex, json_schema, ebnf)"},
        };
        for (String[] c : cases) {
            String body = "{\"text\":\"Once upon a time\",\"sampling_params\":{\"max_new_tokens\":4," + c[0] + "}}";
            HttpResponse<String> r = post("/generate", body);
            assertEquals(400, r.statusCode(), body + " -> " + r.body());
            String msg = JSON.readTree(r.body()).path("error").path("message").asText();
            assertTrue(msg.contains(c[1]), body + " -> " + msg);
        }
        awaitPagesReturned(); // refused requests hold nothing
    }

    /** Routes match their path exactly; anything else is an OpenAI-shaped JSON 404 naming the path. */
    @Test
    @Timeout(60)
    void unknownPathsGetAJson404() throws Exception {
        for (String path : new String[]{"/v1/embeddings", "/v1/chat/completions/x", "/v1/completionsXYZ", "/generate/x", "/"}) {
            HttpResponse<String> r = post(path, "{\"prompt\":\"Once upon a time\",\"max_tokens\":2}");
            assertEquals(404, r.statusCode(), path + " -> " + r.body());
            assertTrue(JSON.readTree(r.body()).path("error").path("message").asText().contains(path), path + " -> " + r.body());
        }
        HttpResponse<String> m = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + router.port() + "/v1/models/foo")).build(),
                HttpResponse.BodyHandlers.ofString());
        assertEquals(404, m.statusCode(), m.body());
        assertEquals("model", JSON.readTree(m.body()).path("error").path("param").asText(), m.body());
        assertEquals("model_not_found", JSON.readTree(m.body()).path("error").path("code").asText(), "OpenAI's code: " + m.body());
        assertEquals("invalid_request_error", JSON.readTree(m.body()).path("error").path("type").asText(), m.body());
        HttpResponse<String> served = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + router.port() + "/v1/models/test-model"))
                .build(), HttpResponse.BodyHandlers.ofString());
        assertEquals(200, served.statusCode(), "the model served, by its id: " + served.body());
        assertEquals("test-model", JSON.readTree(served.body()).path("id").asText(), served.body());
        assertEquals(0, decode.inFlight(), "a 404 runs nothing");
    }

    /**
     * Prompts far beyond the context are refused at the router with a 400 naming the context, cheaply and
     * without the engines seeing them; a burst of them leaves the backends in rotation for everyone else.
     */
    @Test
    @Timeout(120)
    void aBurstOfOverlongPromptsIsRefusedAndOthersAreStillServed() throws Exception {
        String big = "{\"prompt\":\"" + "Once upon a time there was a girl. ".repeat(29_000) + "\",\"max_tokens\":3}"; // ~1 MB, under the body cap
        ExecutorService exec = Executors.newVirtualThreadPerTaskExecutor();
        List<Future<HttpResponse<String>>> burst = new ArrayList<>();
        for (int i = 0; i < 10; i++) burst.add(exec.submit(() -> post("/v1/completions", big)));
        for (Future<HttpResponse<String>> f : burst) {
            HttpResponse<String> r = f.get(60, TimeUnit.SECONDS);
            assertEquals(400, r.statusCode(), r.body());
            assertTrue(JSON.readTree(r.body()).path("error").path("message").asText().contains("context"), r.body());
        }
        exec.shutdown();
        for (int i = 0; i < 5; i++) {
            HttpResponse<String> r = post("/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3,\"temperature\":0}");
            assertEquals(200, r.statusCode(), r.body());
        }
        HttpResponse<String> h = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + router.port() + "/health")).build(),
                HttpResponse.BodyHandlers.ofString());
        assertEquals(200, h.statusCode(), h.body());
    }

    /**
     * An engine refuses a body over its limit with a 400 its client actually reads: a client that sends
     * its whole body before reading (as curl does) would otherwise find the connection reset and the
     * answer lost, since the server closed with the rest unread.
     */
    @Test
    @Timeout(60)
    void anEngineAnswersAnOversizedBodyWithA400NotAReset() throws Exception {
        byte[] body = new byte[3 << 20];
        Arrays.fill(body, (byte) ' ');
        body[0] = '{';
        body[body.length - 1] = '}';
        try (Socket s = new Socket("127.0.0.1", decodeServer.port())) {
            OutputStream o = s.getOutputStream();
            o.write(("POST /generate HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: " + body.length + "\r\n\r\n")
                    .getBytes(StandardCharsets.US_ASCII));
            o.write(body);
            o.flush();
            s.setSoTimeout(30_000);
            String answer = new String(s.getInputStream().readNBytes(4096), StandardCharsets.UTF_8);
            assertTrue(answer.startsWith("HTTP/1.1 400"), answer);
            assertTrue(answer.contains("request body over"), answer);
        }
    }

    /** The longest prompt the router forwards makes an engine body the engines accept, for any ids. */
    @Test
    void theRoutersLargestBodyFitsTheEnginesLimit() throws Exception {
        for (int context : new int[]{512, 4096, 200_000}) {
            int[] ids = new int[context - 1];
            Arrays.fill(ids, Integer.MAX_VALUE);
            var body = PdCall.generateBody(Long.MAX_VALUE, ids, new Sampling(0.123456789f, 0.987654321f, Long.MIN_VALUE));
            body.put("bootstrap_addr", "a-long-host-name.example.internal:65535");
            body.put("max_new_tokens", Integer.MAX_VALUE);
            assertTrue(JSON.writeValueAsBytes(body).length <= Http.engineBodyLimit(context), "context " + context);
        }
    }

    /**
     * A stream carries the usage only when {@code stream_options.include_usage} asks for it, in a last chunk of no choices
     * (OpenAI's rule), for one choice as for several: without it no chunk has a usage, on completions and chat alike.
     */
    @Test
    @Timeout(60)
    void aStreamOfOneChoiceCarriesTheUsageOnlyWhenAsked() throws Exception {
        String[][] routes = {{"/v1/completions", "\"prompt\":\"Once upon a time\""},
            {"/v1/chat/completions", "\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time\"}]"}};
        for (String[] route : routes) {
            String base = "{" + route[1] + ",\"max_tokens\":5,\"temperature\":0,\"stream\":true";
            JsonNode whole = JSON.readTree(post(route[0], base.replace("\"stream\":true", "\"stream\":false") + "}").body());
            for (boolean include : new boolean[]{false, true}) {
                HttpResponse<String> r = post(route[0], base + (include ? ",\"stream_options\":{\"include_usage\":true}}" : "}"));
                assertEquals(200, r.statusCode(), r.body());
                List<JsonNode> chunks = new ArrayList<>();
                for (String l : r.body().lines().filter(l -> l.startsWith("data: {")).toList()) chunks.add(JSON.readTree(l.substring(6)));
                String what = route[0] + " include_usage " + include + ": " + r.body();
                List<JsonNode> withUsage = chunks.stream().filter(c -> c.has("usage")).toList();
                assertEquals(include ? List.of(chunks.getLast()) : List.of(), withUsage, what);
                if (include) {
                    assertTrue(chunks.getLast().path("choices").isArray() && chunks.getLast().path("choices").isEmpty(), what);
                    assertEquals(whole.path("usage"), chunks.getLast().path("usage"), what);
                }
            }
        }
    }

    /** stop: the text ends before the first stop string, finish_reason is "stop", and the decode is ended (its pages freed). */
    @Test
    @Timeout(60)
    void stopEndsTheTextBeforeTheStopString() throws Exception {
        String base = "{\"prompt\":\"Once upon a time\",\"max_tokens\":40,\"temperature\":0";
        JsonNode whole = JSON.readTree(post("/v1/completions", base + "}").body());
        String full = whole.path("choices").path(0).path("text").asText();
        String stop = full.substring(10, 13); // from the middle of the greedy answer: it occurs, maybe earlier too
        String expected = full.substring(0, full.indexOf(stop));
        String long480 = "{\"prompt\":\"Once upon a time\",\"max_tokens\":480,\"temperature\":0"; // far longer than the stop takes
        JsonNode cut = JSON.readTree(post("/v1/completions", long480 + ",\"stop\":[\"zzzz\"," + JSON.writeValueAsString(stop) + "]}").body());
        assertEquals(expected, cut.path("choices").path(0).path("text").asText(), cut.toString());
        assertEquals("stop", cut.path("choices").path(0).path("finish_reason").asText());
        assertTrue(cut.path("usage").path("completion_tokens").asInt() < 40, cut.toString());

        HttpResponse<String> r = post("/v1/completions", long480 + ",\"stop\":" + JSON.writeValueAsString(stop) + ",\"stream\":true}");
        assertEquals(200, r.statusCode(), r.body());
        StringBuilder streamed = new StringBuilder();
        List<String> lines = r.body().lines().filter(l -> l.startsWith("data: ") && !l.equals("data: [DONE]")).toList();
        for (String l : lines) streamed.append(JSON.readTree(l.substring(6)).path("choices").path(0).path("text").asText());
        assertEquals(expected, streamed.toString(), "a stream sends nothing past the stop");
        assertEquals("stop", JSON.readTree(lines.getLast().substring(6)).path("choices").path(0).path("finish_reason").asText());

        // A stop string the answer never contains changes nothing.
        JsonNode none = JSON.readTree(post("/v1/completions", base + ",\"stop\":\"\\u0000\"}").body());
        assertEquals(full, none.path("choices").path(0).path("text").asText());
        assertEquals("length", none.path("choices").path(0).path("finish_reason").asText());
        // Its pages come back whether the router's abort or the story's end came first on the decode (a loaded machine
        // may finish 480 tokens before the abort lands): RouterErrorsTest#aStopStringMetMakesTheRouterAbortTheRoomOnBothEngines
        // and RunningAbortTest show the abort is sent and honoured without that race.
        awaitPagesReturned();
    }

    /**
     * A completion that ends inside a multi-byte character keeps it as U+FFFD: the text always equals the
     * decoded prompt+tokens minus the prompt (at temperature 50 a lone UTF-8 lead byte comes up often).
     */
    @Test
    @Timeout(60)
    void anIncompleteCharacterAtTheEndIsKeptAsReplacement() throws Exception {
        int[] prompt = model.tokenizer().encode("Hi", true, false);
        boolean sawReplacement = false;
        for (int seed = 0; seed < 40; seed++) {
            for (boolean stream : new boolean[]{false, true}) {
                HttpResponse<String> r = post("/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":1,\"temperature\":50,\"seed\":" + seed
                        + ",\"stream\":" + stream + "}");
                assertEquals(200, r.statusCode(), r.body());
                StringBuilder text = new StringBuilder();
                JsonNode last = null;
                for (String l : r.body().lines().filter(l -> l.startsWith("{") || l.startsWith("data: {")).toList()) {
                    last = JSON.readTree(l.startsWith("data: ") ? l.substring(6) : l);
                    text.append(last.path("choices").path(0).path("text").asText());
                }
                int[] tokens = ids(last.path("kvferry").path("token_ids"));
                String expected = model.tokenizer().decode(concat(prompt, tokens)).substring(model.tokenizer().decode(prompt).length());
                assertEquals(expected, text.toString(), "seed " + seed + " tokens " + Arrays.toString(tokens));
                sawReplacement |= expected.contains("\uFFFD");
            }
        }
        if (model.real()) assertTrue(sawReplacement, "no seed ended inside a character: the test checks nothing");
    }

    /** max_tokens = 2^31 - 1 (a common "no limit") is capped at the context; the engines go on serving. */
    @Test
    @Timeout(120)
    void theLargestMaxTokensIsCappedAtTheContext() throws Exception {
        HttpResponse<String> r = post("/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":2147483647,\"temperature\":0}");
        assertEquals(200, r.statusCode(), r.body());
        JsonNode usage = JSON.readTree(r.body()).path("usage");
        assertTrue(usage.path("total_tokens").asInt() <= model.weights().config.seqLen(), r.body());
        HttpResponse<String> next = post("/v1/completions", "{\"prompt\":\"Once upon a time\",\"max_tokens\":4,\"temperature\":0}");
        assertEquals(200, next.statusCode(), next.body());
        for (int port : new int[]{prefillServer.port(), decodeServer.port()}) {
            HttpResponse<String> h = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/health")).build(),
                    HttpResponse.BodyHandlers.ofString());
            assertEquals(200, h.statusCode(), h.body());
        }
        awaitPagesReturned();
    }

    /** A client that goes away mid-stream leaves nothing held: the room ends on both engines and its pages come back. */
    @Test
    @Timeout(60)
    void aClientDisconnectEndsTheRoomAndFreesItsPages() throws Exception {
        // A story that does not end (with BOS) within 480 greedy tokens: the request is usually still running when the client goes.
        String body = "{\"prompt\":\"Lily and Ben went to the park\",\"max_tokens\":480,\"temperature\":0,\"stream\":true}";
        try (Socket s = new Socket("127.0.0.1", router.port())) {
            OutputStream o = s.getOutputStream();
            o.write(("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                    + body.getBytes(StandardCharsets.UTF_8).length + "\r\n\r\n" + body).getBytes(StandardCharsets.UTF_8));
            o.flush();
            BufferedReader in = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
            String line;
            int events = 0;
            while ((line = in.readLine()) != null && events < 3) if (line.startsWith("data: ")) events++;
            assertEquals(3, events, "the stream started");
        } // closed mid-stream: 480 tokens take far longer than this
        // As with stop: the pages come back whichever came first on the decode, the router's abort or the story's end
        // (RouterErrorsTest#aClientThatClosesMidStreamMakesTheRouterAbortTheRoomOnBothEngines and RunningAbortTest
        // show the abort is sent and honoured without that race).
        awaitPagesReturned();
        assertEquals(0, decode.inFlight());
    }

    @Test
    @Timeout(180)
    void twoHundredConcurrentStreamsAllSucceedAndReturnEveryPage() throws Exception {
        ExecutorService exec = Executors.newVirtualThreadPerTaskExecutor();
        List<Future<String>> results = new ArrayList<>();
        for (int i = 0; i < 200; i++) {
            String prompt = DemoPrompts.get(i);
            Callable<String> c = () -> {
                HttpResponse<InputStream> r = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + router.port() + "/v1/completions"))
                        .POST(HttpRequest.BodyPublishers.ofString("{\"prompt\":\"" + prompt + "\",\"max_tokens\":12,\"temperature\":0,\"stream\":true}"))
                        .build(), HttpResponse.BodyHandlers.ofInputStream());
                try (BufferedReader in = new BufferedReader(new InputStreamReader(r.body(), StandardCharsets.UTF_8))) {
                    if (r.statusCode() != 200) return "HTTP " + r.statusCode() + ": " + in.readLine();
                    String line, last = null, error = null;
                    while ((line = in.readLine()) != null) {
                        if (line.startsWith("data: {\"error\"")) error = line;
                        if (line.startsWith("data: ")) last = line;
                    }
                    return error != null ? error : "data: [DONE]".equals(last) ? "ok" : "ended without [DONE] after " + last;
                }
            };
            results.add(exec.submit(c));
        }
        List<String> failed = new ArrayList<>();
        for (Future<String> f : results) {
            String outcome = f.get(150, TimeUnit.SECONDS);
            if (!outcome.equals("ok")) failed.add(outcome);
        }
        exec.shutdown();
        assertEquals(List.of(), failed, "streams that did not succeed");
        awaitPagesReturned();
    }

    static final class DemoPrompts {
        static final String[] WORDS = {"Once upon a time", "The cat", "Lily saw", "A big dog", "Ben and Mia", "The sun", "One day"};

        static String get(int i) {
            return WORDS[i % WORDS.length] + (i % 3 == 0 ? " went" : "");
        }
    }
}
