package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.engine.serving.EngineSpec;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Token-id prompts through real engines, as evaluation harnesses and OpenAI/vLLM/SGLang clients send them: a
 * {@code /v1/completions} {@code prompt} as a list of ints (one prompt) or of int lists (a batch), {@code /generate}'s
 * {@code input_ids} (SGLang's, a list or a batch of lists); a prompt equal to a text's tokenization answers as the text
 * does (echo and prompt logprobs included), given ids get no BOS added, bad ids are a 400 naming the field; and vLLM's
 * {@code /tokenize} and {@code /detokenize}.
 */
class TokenIdPromptsTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final List<String> PROMPTS = List.of("Once upon a time", "The little dog", "Lily and Tom went");
    static ModelFiles.Loaded model;
    static Tokenizer tokenizer;
    static EngineStack stack;
    static Router router;

    @BeforeAll
    static void start() throws Exception {
        model = ModelFiles.load(null, null);
        tokenizer = model.tokenizer();
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 32, 32);
        stack = EngineStack.open(spec, spec, "token-id-prompts-test", null);
        router = new Router(List.of(stack.prefillUrl()), List.of(stack.decodeUrl()), tokenizer, model.weights().config.seqLen(),
                "test-model", "127.0.0.1", 0);
    }

    @AfterAll
    static void stop() {
        if (router != null) router.close();
        if (stack != null) stack.close();
    }

    static JsonNode ok(String path, String body) throws Exception {
        return RouterCalls.ok(router.port(), path, body);
    }

    static String json(Object o) throws Exception {
        return JSON.writeValueAsString(o);
    }

    /** The prompt's tokens as the router sends a text prompt: BOS first. */
    static int[] ids(String prompt) {
        return tokenizer.encode(prompt, true, false);
    }

    /** An answer without what differs between two runs of one request: id, created, kvferry's extension (rooms, timings). */
    static JsonNode comparable(JsonNode answer) {
        ObjectNode a = answer.deepCopy();
        a.remove(List.of("id", "created", "kvferry"));
        return a;
    }

    @Test
    @Timeout(120)
    void aTokenIdPromptAnswersAsTheTextItIsTheTokenizationOf() throws Exception {
        String prompt = PROMPTS.getFirst();
        // Greedy and seeded sampling, with echo and the prompt's logprobs (lm-evaluation-harness's loglikelihood: max_tokens 0).
        for (String params : List.of(",\"max_tokens\":8,\"temperature\":0,\"logprobs\":2,\"echo\":true",
                ",\"max_tokens\":8,\"temperature\":1,\"seed\":5,\"logprobs\":1",
                ",\"max_tokens\":0,\"temperature\":0,\"logprobs\":1,\"echo\":true")) {
            JsonNode text = ok("/v1/completions", "{\"prompt\":" + json(prompt) + params + "}");
            JsonNode tokens = ok("/v1/completions", "{\"prompt\":" + json(ids(prompt)) + params + "}");
            assertEquals(comparable(text), comparable(tokens), params);
            if (params.contains("echo")) assertTrue(tokens.path("choices").get(0).path("text").asText().startsWith(prompt), tokens.toString());
        }
        // A batch of id lists with n: the string batch's answer.
        String params = ",\"n\":2,\"max_tokens\":6,\"temperature\":1,\"seed\":3,\"logprobs\":1,\"echo\":true";
        List<int[]> batch = new ArrayList<>();
        for (String p : PROMPTS) batch.add(ids(p));
        JsonNode texts = ok("/v1/completions", "{\"prompt\":" + json(PROMPTS) + params + "}");
        JsonNode lists = ok("/v1/completions", "{\"prompt\":" + json(batch) + params + "}");
        assertEquals(6, lists.path("choices").size(), lists.toString());
        assertEquals(comparable(texts), comparable(lists));

        // Streamed with echo: the chunks add up to the whole answer's text.
        StringBuilder streamed = new StringBuilder();
        String body = "{\"prompt\":" + json(ids(prompt)) + ",\"max_tokens\":8,\"temperature\":0,\"echo\":true,\"stream\":true}";
        for (JsonNode chunk : RouterCalls.events(router.port(), "/v1/completions", body)) {
            for (JsonNode c : chunk.path("choices")) streamed.append(c.path("text").asText(""));
        }
        JsonNode whole = ok("/v1/completions", body.replace("\"stream\":true", "\"stream\":false"));
        assertEquals(whole.path("choices").get(0).path("text").asText(), streamed.toString());

        // Ids without BOS are sent as given: no BOS added (vLLM's behaviour); the echo is their decoded text.
        int[] noBos = Arrays.copyOfRange(ids(prompt), 1, ids(prompt).length);
        JsonNode bare = ok("/v1/completions", "{\"prompt\":" + json(noBos) + ",\"max_tokens\":4,\"temperature\":0,\"echo\":true,\"logprobs\":0}");
        assertEquals(noBos.length, bare.path("usage").path("prompt_tokens").intValue(), "no BOS added: " + bare);
        JsonNode choice = bare.path("choices").get(0);
        assertTrue(choice.path("text").asText().startsWith(tokenizer.decode(noBos)), "the echo is the ids' decoded text: " + bare);
        assertEquals(noBos.length + 4, choice.path("logprobs").path("tokens").size(), bare.toString());
        assertTrue(choice.path("logprobs").path("token_logprobs").get(0).isNull(), "the first prompt token has none: " + bare);
        assertEquals(tokenizer.tokenText(noBos[0]), choice.path("logprobs").path("tokens").get(0).asText(), "the first token is the one sent: " + bare);
    }

    /** SGLang's input_ids: a list is the text's answer, a list of lists the text batch's. */
    @Test
    @Timeout(120)
    void generateTakesInputIdsAsSglangDoes() throws Exception {
        String params = ",\"sampling_params\":{\"max_new_tokens\":6,\"temperature\":0},\"return_logprob\":true,\"top_logprobs_num\":2,"
                + "\"logprob_start_len\":0,\"return_text_in_logprobs\":true";
        JsonNode text = ok("/generate", "{\"text\":" + json(PROMPTS.getFirst()) + params + "}");
        JsonNode ids = ok("/generate", "{\"input_ids\":" + json(ids(PROMPTS.getFirst())) + params + "}");
        assertEquals(withoutRun(text), withoutRun(ids));

        List<int[]> lists = new ArrayList<>();
        for (String p : PROMPTS) lists.add(ids(p));
        JsonNode texts = ok("/generate", "{\"text\":" + json(PROMPTS) + params + "}");
        JsonNode batch = ok("/generate", "{\"input_ids\":" + json(lists) + params + "}");
        assertTrue(batch.isArray() && batch.size() == PROMPTS.size(), batch.toString());
        for (int i = 0; i < PROMPTS.size(); i++) assertEquals(withoutRun(texts.get(i)), withoutRun(batch.get(i)), "prompt " + i);

        // Streamed: its last event is the whole answer's.
        List<JsonNode> events = RouterCalls.events(router.port(), "/generate", "{\"input_ids\":" + json(ids(PROMPTS.getFirst()))
                + ",\"sampling_params\":{\"max_new_tokens\":6,\"temperature\":0},\"stream\":true}");
        assertEquals(text.path("text"), events.getLast().path("text"));
    }

    /** SGLang's answer without its room and latency. */
    static JsonNode withoutRun(JsonNode answer) {
        ObjectNode a = answer.deepCopy();
        ((ObjectNode) a.get("meta_info")).remove(List.of("id", "e2e_latency"));
        return a;
    }

    @Test
    @Timeout(60)
    void badTokenIdPromptsAreA400NamingTheField() throws Exception {
        int vocab = tokenizer.vocabSize(), context = model.weights().config.seqLen();
        int[] full = new int[context];
        Arrays.fill(full, 5);
        String[][] cases = {
                {"/v1/completions", "{\"prompt\":[[]]}", "prompt", "prompt[0] must hold at least one token id"},
                {"/v1/completions", "{\"prompt\":[1,\"a\"]}", "prompt", "prompt must be a list of token ids (integers): element 1 is \"a\""},
                {"/v1/completions", "{\"prompt\":[1,2.5]}", "prompt", "element 1 is 2.5"},
                {"/v1/completions", "{\"prompt\":[1,-1]}", "prompt", "token id -1 (element 1) is not in the model's vocab [0, " + vocab + ")"},
                {"/v1/completions", "{\"prompt\":[1," + vocab + "]}", "prompt", "token id " + vocab + " (element 1) is not in the model's vocab"},
                {"/v1/completions", "{\"prompt\":[[1,2],[1," + vocab + "]]}", "prompt", "prompt[1]: token id " + vocab + " (element 1)"},
                {"/v1/completions", "{\"prompt\":[[1,2],\"a\"]}", "prompt", "prompt[1] must be a list of token ids, as prompt[0] is"},
                {"/v1/completions", "{\"prompt\":[[1,2],[3,\"x\"]]}", "prompt", "prompt[1] must be a list of token ids (integers): element 1"},
                {"/v1/completions", "{\"prompt\":[\"a\",[1,2]]}", "prompt", "prompt[1] must be a string, as prompt[0] is"},
                {"/v1/completions", "{\"prompt\":" + json(full) + "}", "prompt", "the prompt has " + context + " tokens; the model's context is " + context},
                {"/v1/completions", "{\"prompt\":[[1]," + json(full) + "]}", "prompt", "prompt[1]: the prompt has " + context + " tokens"},
                {"/generate", "{\"text\":\"a\",\"input_ids\":[1]}", "input_ids", "send one of text and input_ids, not both"},
                {"/generate", "{}", "text", "text (a string or a list of strings) or input_ids (a list of token ids or a list of such lists) is required"},
                {"/generate", "{\"input_ids\":5}", "input_ids", "input_ids must be a list of token ids or a list of such lists, got 5"},
                {"/generate", "{\"input_ids\":[]}", "input_ids", "got a list of 0"},
                {"/generate", "{\"input_ids\":[1," + vocab + "]}", "input_ids", "token id " + vocab + " (element 1) is not in the model's vocab"},
                {"/generate", "{\"input_ids\":[[1],[1," + vocab + "]]}", "input_ids", "input_ids[1]: token id " + vocab},
                {"/generate", "{\"input_ids\":[[1],\"a\"]}", "input_ids", "input_ids[1] must be a list of token ids, as input_ids[0] is"},
                {"/generate", "{\"input_ids\":[\"a\"]}", "input_ids", "input_ids[0] must be a list of token ids, got \"a\""},
                {"/generate", "{\"text\":[[1,2]]}", "text", "text[0] must be a string, got [1,2]"},
                {"/generate", "{\"input_ids\":[[1],[2]],\"stream\":true}", "stream", "a batch (input_ids a list of lists) is answered whole"},
                {"/generate", "{\"input_ids\":" + json(full) + "}", "input_ids", "the prompt has " + context + " tokens"},
        };
        for (String[] c : cases) {
            HttpResponse<String> r = RouterCalls.post(router.port(), c[0], c[1]);
            assertEquals(400, r.statusCode(), c[1] + " -> " + r.body());
            JsonNode e = JSON.readTree(r.body()).path("error");
            assertEquals(c[2], e.path("param").asText(null), c[1] + " -> " + r.body());
            assertTrue(e.path("message").asText().contains(c[3]), c[1] + " -> " + r.body());
        }
        assertEquals(0, stack.prefill.inFlight(), "none reached an engine");
    }

    /**
     * A text prompt's faults name their field as a token-id prompt's do (a text too long for the context, half a surrogate
     * pair: param was null), and /generate's sampling_params fields are named sampling_params.&lt;field&gt; as its rules are
     * (temperature, top_p, top_k, seed, max_new_tokens were named as top-level fields, a non-object sampling_params not at
     * all); a temperature or top_p out of range names it on the OpenAI routes too (param was null).
     */
    @Test
    @Timeout(60)
    void textPromptAndSamplingFaultsAreA400NamingTheField() throws Exception {
        String tooLong = "a ".repeat(model.weights().config.seqLen() * 8);
        String[][] cases = {
                {"/v1/completions", "{\"prompt\":\"" + tooLong + "\"}", "prompt", "more than the model's context"},
                {"/v1/completions", "{\"prompt\":\"a\\ud800\"}", "prompt", "unpaired UTF-16 surrogate"},
                {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"" + tooLong + "\"}]}", "messages",
                        "more than the model's context"},
                {"/generate", "{\"text\":\"" + tooLong + "\"}", "text", "more than the model's context"},
                {"/generate", "{\"text\":\"a\\udc00\"}", "text", "unpaired UTF-16 surrogate"},
                {"/v1/completions", "{\"prompt\":\"a\",\"temperature\":-1}", "temperature", "temperature must be >= 0"},
                {"/v1/completions", "{\"prompt\":\"a\",\"top_p\":0}", "top_p", "top_p must be in (0, 1]"},
                {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"top_p\":1.5}", "top_p", "top_p must be in (0, 1]"},
                // The number as the client sent it, not the 32-bit float it rounds to (Infinity, 0.0).
                {"/v1/completions", "{\"prompt\":\"a\",\"temperature\":1e39}", "temperature",
                        "temperature must be >= 0 and at most 3.4028235E38 (a 32-bit float), got 1e39"},
                {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"top_p\":1e-50}", "top_p",
                        "top_p must be in (0, 1], got 1e-50 (0 as a 32-bit float)"},
                {"/generate", "{\"text\":\"a\",\"sampling_params\":{\"temperature\":1e39}}", "sampling_params.temperature", "got 1e39"},
                {"/generate", "{\"text\":\"a\",\"sampling_params\":{\"top_p\":1e-50}}", "sampling_params.top_p", "got 1e-50 (0 as"},
                {"/generate", "{\"text\":\"a\",\"sampling_params\":5}", "sampling_params", "sampling_params must be an object"},
                {"/generate", "{\"text\":\"a\",\"sampling_params\":{\"temperature\":\"x\"}}", "sampling_params.temperature", "must be a number"},
                {"/generate", "{\"text\":\"a\",\"sampling_params\":{\"temperature\":-1}}", "sampling_params.temperature", "temperature must be >= 0"},
                {"/generate", "{\"text\":\"a\",\"sampling_params\":{\"top_p\":0}}", "sampling_params.top_p", "top_p must be in (0, 1]"},
                {"/generate", "{\"text\":\"a\",\"sampling_params\":{\"top_k\":0}}", "sampling_params.top_k", "top_k must be -1"},
                {"/generate", "{\"text\":\"a\",\"sampling_params\":{\"seed\":\"x\"}}", "sampling_params.seed", "seed must be an integer"},
                {"/generate", "{\"text\":\"a\",\"sampling_params\":{\"max_new_tokens\":-1}}", "sampling_params.max_new_tokens", "max_new_tokens must be in"},
        };
        for (String[] c : cases) {
            HttpResponse<String> r = RouterCalls.post(router.port(), c[0], c[1]);
            String what = c[1].substring(0, Math.min(120, c[1].length()));
            assertEquals(400, r.statusCode(), what + " -> " + r.body());
            JsonNode e = JSON.readTree(r.body()).path("error");
            assertEquals(c[2], e.path("param").asText(null), what + " -> " + r.body());
            assertTrue(e.path("message").asText().contains(c[3]), what + " -> " + r.body());
        }
        assertEquals(0, stack.prefill.inFlight(), "none reached an engine");
    }

    @Test
    @Timeout(60)
    void tokenizeAndDetokenizeAsVllmServesThem() throws Exception {
        String prompt = PROMPTS.getFirst();
        JsonNode t = ok("/tokenize", "{\"model\":\"test-model\",\"prompt\":" + json(prompt) + "}");
        assertEquals(JSON.valueToTree(ids(prompt)), t.path("tokens"), t.toString());
        assertEquals(ids(prompt).length, t.path("count").intValue());
        assertEquals(model.weights().config.seqLen(), t.path("max_model_len").intValue());
        assertTrue(t.path("token_strs").isNull(), t.toString());
        assertEquals(prompt, ok("/detokenize", "{\"tokens\":" + t.path("tokens") + "}").path("prompt").asText(), "a round trip");

        JsonNode bare = ok("/tokenize", "{\"prompt\":" + json(prompt) + ",\"add_special_tokens\":false,\"return_token_strs\":true}");
        assertEquals(JSON.valueToTree(tokenizer.encode(prompt, false, false)), bare.path("tokens"), "no BOS: " + bare);
        assertEquals(bare.path("count").intValue(), bare.path("token_strs").size(), bare.toString());
        for (int i = 0; i < bare.path("count").intValue(); i++) {
            assertEquals(tokenizer.tokenText(bare.path("tokens").get(i).intValue()), bare.path("token_strs").get(i).asText(), bare.toString());
        }

        // A chat's messages: the ids the chat route sends, which is the completion of the same ids' answer.
        String messages = "[{\"role\":\"system\",\"content\":\"Tom had a red ball.\"},{\"role\":\"user\",\"content\":" + json(prompt) + "}]";
        JsonNode chat = ok("/tokenize", "{\"messages\":" + messages + "}");
        assertEquals(JSON.valueToTree(ids("Tom had a red ball." + ChatPrompt.SEPARATOR + prompt)), chat.path("tokens"), chat.toString());
        JsonNode chatAnswer = ok("/v1/chat/completions", "{\"messages\":" + messages + ",\"max_tokens\":6,\"temperature\":0}");
        JsonNode idsAnswer = ok("/v1/completions", "{\"prompt\":" + chat.path("tokens") + ",\"max_tokens\":6,\"temperature\":0}");
        assertEquals(chatAnswer.path("choices").get(0).path("message").path("content").asText(), idsAnswer.path("choices").get(0).path("text").asText());
        assertEquals(chat.path("count").intValue(), chatAnswer.path("usage").path("prompt_tokens").intValue());

        // Longer than the context: counted, not refused (the count says it does not fit, as vLLM's).
        JsonNode longer = ok("/tokenize", "{\"prompt\":" + json("a b ".repeat(400)) + "}");
        assertTrue(longer.path("count").intValue() > longer.path("max_model_len").intValue(), longer.toString());
        // An echo of ids gives the text /detokenize gives.
        int[] some = {1, 403, 407, 261, 378};
        String detok = ok("/detokenize", "{\"tokens\":" + json(some) + "}").path("prompt").asText();
        assertNotEquals("", detok);
        JsonNode echoed = ok("/v1/completions", "{\"prompt\":" + json(some) + ",\"max_tokens\":1,\"temperature\":0,\"echo\":true}");
        assertTrue(echoed.path("choices").get(0).path("text").asText().startsWith(detok), echoed + " / " + detok);

        String[][] cases = {
                {"/tokenize", "{}", "prompt", "prompt (a string) or messages (a chat's) is required"},
                {"/tokenize", "{\"prompt\":5}", "prompt", "prompt must be a string, got 5"},
                {"/tokenize", "{\"prompt\":\"a\",\"messages\":" + messages + "}", "prompt", "send one of prompt and messages, not both"},
                {"/tokenize", "{\"messages\":[]}", "messages", "messages must hold at least one message"},
                {"/tokenize", "{\"prompt\":\"a\\ud800\"}", "prompt", "unpaired UTF-16 surrogate"},
                {"/tokenize", "{\"prompt\":\"a\",\"add_special_tokens\":\"no\"}", "add_special_tokens", "add_special_tokens"},
                {"/detokenize", "{}", "tokens", "tokens must be a list of token ids, got null"},
                {"/detokenize", "{\"tokens\":[1,-1]}", "tokens", "tokens[1] must be a token id in the model's vocab [0, " + tokenizer.vocabSize() + "), got -1"},
                {"/detokenize", "{\"tokens\":[1,2.5]}", "tokens", "tokens[1] must be a token id"},
                {"/detokenize", "{\"tokens\":[" + tokenizer.vocabSize() + "]}", "tokens", "tokens[0] must be a token id"},
        };
        for (String[] c : cases) {
            HttpResponse<String> r = RouterCalls.post(router.port(), c[0], c[1]);
            assertEquals(400, r.statusCode(), c[1] + " -> " + r.body());
            JsonNode e = JSON.readTree(r.body()).path("error");
            assertEquals(c[2], e.path("param").asText(null), c[1] + " -> " + r.body());
            assertTrue(e.path("message").asText().contains(c[3]), c[1] + " -> " + r.body());
        }
    }
}
