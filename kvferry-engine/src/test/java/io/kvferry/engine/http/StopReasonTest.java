package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.engine.serving.ColocatedEngine;
import io.kvferry.engine.serving.EngineSpec;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.Arrays;
import java.util.List;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.stream.IntStream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Which stop ended an answer, through the router, a prefill and a decode: vLLM's per-choice {@code stop_reason} on the
 * OpenAI routes (the matched stop string, the stop token id as an int, null at the model's end or the length), in a
 * whole answer and beside {@code finish_reason} in each choice's last chunk of a stream, and SGLang's
 * {@code meta_info.finish_reason} object on /generate ({@code {"type": "stop", "matched": ...}} or
 * {@code {"type": "length", "length": N}}); the decode's finish event names the token that ended it.
 */
class StopReasonTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final String PROMPT = "Once upon a time";
    static final int MAX = 24;
    /** The model's own end comes within this many tokens, greedy, after PROMPT (BOS at output token 342: ServeTest). */
    static final int STORY = 400;
    static Tokenizer tokenizer;
    static EngineStack stack;
    static Router router;
    static ColocatedEngine colocated;
    static int[] promptIds;
    /** The greedy answer to PROMPT, from the colocated engine: the stop token and stop string come from it. */
    static int[] plain;

    @BeforeAll
    static void start() throws Exception {
        ModelFiles.Loaded model = ModelFiles.load(null, null);
        tokenizer = model.tokenizer();
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 32, 32);
        stack = EngineStack.open(spec, spec, "stop-reason-test", null);
        router = new Router(List.of(stack.prefillUrl()), List.of(stack.decodeUrl()), tokenizer, model.weights().config.seqLen(),
                "test-model", "127.0.0.1", 0);
        colocated = new ColocatedEngine(spec.withMaxRequests(1));
        promptIds = tokenizer.encode(PROMPT, true, false);
        plain = colocated.generate(promptIds, MAX, Sampling.GREEDY).tokens();
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

    /** The plain answer's first token, from its 4th on, that is its first occurrence there: a stop token id that ends it there. */
    static int stopToken() {
        for (int i = 3; i < plain.length; i++) {
            int at = i;
            if (IntStream.range(0, i).noneMatch(k -> plain[k] == plain[at])) return plain[i];
        }
        throw new AssertionError("no token occurs first after the 3rd in " + Arrays.toString(plain));
    }

    /** A stop string from the middle of the plain answer's text: three characters from a space. */
    static String stopString() {
        String text = tokenizer.decode(concat(promptIds, plain)).substring(PROMPT.length());
        int at = text.indexOf(' ', text.length() / 2);
        assertTrue(at > 0, text);
        return text.substring(at, at + 3);
    }

    static int[] concat(int[] a, int[] b) {
        int[] o = Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, o, a.length, b.length);
        return o;
    }

    /** The request's body on a route: completions' prompt, a chat's one user message, /generate's text. */
    static String body(String path, int max, String extra, boolean stream) {
        if (path.equals("/generate")) {
            return "{\"text\":\"" + PROMPT + "\",\"stream\":" + stream + ",\"sampling_params\":{\"max_new_tokens\":" + max + ",\"temperature\":0"
                    + (extra.isEmpty() ? "" : "," + extra) + "}}";
        }
        String head = path.equals("/v1/completions") ? "{\"prompt\":\"" + PROMPT + "\"" : "{\"messages\":[{\"role\":\"user\",\"content\":\"" + PROMPT + "\"}]";
        return head + ",\"max_tokens\":" + max + ",\"temperature\":0" + (extra.isEmpty() ? "" : "," + extra) + ",\"stream\":" + stream + "}";
    }

    /**
     * Each choice of an OpenAI answer, streamed or not, by index: a whole answer's choices, or a stream's last chunk of
     * each choice (the one with its finish_reason; every chunk before it has neither finish_reason nor stop_reason).
     */
    static TreeMap<Integer, JsonNode> choices(String path, int max, String extra, boolean stream) throws Exception {
        TreeMap<Integer, JsonNode> out = new TreeMap<>();
        String body = body(path, max, extra, stream);
        if (!stream) {
            for (JsonNode c : RouterCalls.ok(router.port(), path, body).path("choices")) out.put(c.path("index").intValue(), c);
            return out;
        }
        for (JsonNode e : RouterCalls.events(router.port(), path, body)) {
            for (JsonNode c : e.path("choices")) {
                int index = c.path("index").intValue();
                assertFalse(out.containsKey(index), "a chunk of choice " + index + " after its last: " + e);
                if (c.path("finish_reason").isNull()) {
                    assertFalse(c.has("stop_reason"), "stop_reason before the last chunk: " + e);
                } else {
                    out.put(index, c);
                }
            }
        }
        return out;
    }

    /** Every choice, on both OpenAI routes, streamed and not, ends with {@code finish} and {@code stopReason} (null: JSON null). */
    static void assertOpenAi(int max, String extra, int n, String finish, JsonNode stopReason) throws Exception {
        for (String path : new String[]{"/v1/completions", "/v1/chat/completions"}) {
            for (boolean stream : new boolean[]{false, true}) {
                String what = path + " stream " + stream + " " + extra;
                TreeMap<Integer, JsonNode> cs = choices(path, max, extra + (n > 1 ? (extra.isEmpty() ? "" : ",") + "\"n\":" + n : ""), stream);
                assertEquals(n, cs.size(), what + ": " + cs);
                for (JsonNode c : cs.values()) {
                    assertEquals(finish, c.path("finish_reason").asText(), what + ": " + c);
                    assertTrue(c.has("stop_reason"), what + ": no stop_reason in " + c);
                    assertEquals(stopReason, c.get("stop_reason"), what + ": " + c);
                }
            }
        }
    }

    /** /generate's meta_info.finish_reason, whole and as a stream's last event. */
    static void assertGenerate(int max, String extra, JsonNode finishReason) throws Exception {
        JsonNode whole = RouterCalls.ok(router.port(), "/generate", body("/generate", max, extra, false));
        assertEquals(finishReason, whole.path("meta_info").path("finish_reason"), whole.toString());
        List<JsonNode> events = RouterCalls.events(router.port(), "/generate", body("/generate", max, extra, true));
        assertEquals(finishReason, events.getLast().path("meta_info").path("finish_reason"), events.getLast().toString());
    }

    static ObjectNode sglang(String type) {
        return JSON.createObjectNode().put("type", type);
    }

    @Test
    @Timeout(120)
    void aStopTokenIdIsTheStopReasonAndSglangsMatchedToken() throws Exception {
        int tok = stopToken();
        String extra = "\"stop_token_ids\":[" + tok + "]";
        assertOpenAi(MAX, extra, 2, "stop", JSON.getNodeFactory().numberNode(tok));
        assertGenerate(MAX, extra, sglang("stop").put("matched", tok));
    }

    @Test
    @Timeout(120)
    void aStopStringIsTheStopReasonAndSglangsMatchedString() throws Exception {
        String stop = stopString();
        // The first of those found (the other never occurs): its string, not its place in the list.
        String extra = "\"stop\":[\"zzzz\"," + JSON.writeValueAsString(stop) + "]";
        assertOpenAi(MAX, extra, 2, "stop", JSON.getNodeFactory().textNode(stop));
        assertGenerate(MAX, extra, sglang("stop").put("matched", stop));
    }

    @Test
    @Timeout(120)
    void theModelsEndIsANullStopReasonAndSglangsMatchedBos() throws Exception {
        // Its own story's end, greedy: BOS (llama2.c's checkpoints never emit EOS).
        int[] story = colocated.generate(promptIds, STORY, Sampling.GREEDY).tokens();
        assertEquals(Tokenizer.BOS, story[story.length - 1], "the story runs past " + STORY + " tokens: the test checks nothing");
        for (boolean stream : new boolean[]{false, true}) {
            TreeMap<Integer, JsonNode> cs = choices("/v1/completions", STORY, "", stream);
            assertEquals("stop", cs.firstEntry().getValue().path("finish_reason").asText(), cs.toString());
            assertTrue(cs.firstEntry().getValue().has("stop_reason"), cs.toString());
            assertTrue(cs.firstEntry().getValue().get("stop_reason").isNull(), cs.toString());
        }
        assertGenerate(STORY, "", sglang("stop").put("matched", Tokenizer.BOS));
        // BOS forced at once: the same, on every route and choice; listed in stop_token_ids too, the model's end still wins (vLLM's
        // order: its EOS check comes first), unless ignore_eos, when BOS ends the answer only as the stop token id it is.
        String bos = "\"logit_bias\":{\"1\":100}";
        assertOpenAi(MAX, bos, 2, "stop", JSON.nullNode());
        assertOpenAi(MAX, bos + ",\"stop_token_ids\":[1]", 1, "stop", JSON.nullNode());
        assertOpenAi(MAX, bos + ",\"stop_token_ids\":[1],\"ignore_eos\":true", 1, "stop", JSON.getNodeFactory().numberNode(Tokenizer.BOS));
        assertGenerate(MAX, bos, sglang("stop").put("matched", Tokenizer.BOS));
    }

    @Test
    @Timeout(120)
    void theLengthIsANullStopReasonAndSglangsLength() throws Exception {
        assertOpenAi(4, "", 2, "length", JSON.nullNode());
        assertGenerate(4, "", sglang("length").put("length", 4));
        // The prompt alone (max_new_tokens 0): SGLang's FINISH_LENGTH of 0.
        JsonNode none = RouterCalls.ok(router.port(), "/generate", body("/generate", 0, "", false));
        assertEquals(sglang("length").put("length", 0), none.path("meta_info").path("finish_reason"), none.toString());
    }

    /** The decode's finish event names the token that ended the answer ({@code matched}); one that ran to its length names none. */
    @Test
    @Timeout(60)
    void theDecodesFinishEventNamesTheTokenThatEndedIt() throws Exception {
        int tok = stopToken();
        JsonNode stopped = decodeFinish(101, "{\"temperature\":0,\"stop_token_ids\":[" + tok + "]}", MAX);
        assertEquals("stop", stopped.path("finish_reason").asText(), stopped.toString());
        assertEquals(tok, stopped.path("matched").intValue(), stopped.toString());
        JsonNode bos = decodeFinish(102, "{\"temperature\":0,\"logit_bias\":{\"1\":100}}", MAX);
        assertEquals(Tokenizer.BOS, bos.path("matched").intValue(), bos.toString());
        JsonNode length = decodeFinish(103, "{\"temperature\":0}", 3);
        assertEquals("length", length.path("finish_reason").asText(), length.toString());
        assertFalse(length.has("matched"), length.toString());
    }

    /** The decode's last event for PROMPT on room {@code room}, its prefill called beside it. */
    static JsonNode decodeFinish(long room, String sampling, int max) throws Exception {
        String ids = JSON.writeValueAsString(promptIds);
        HttpResponse<String> d;
        try (HttpClient http = HttpClient.newHttpClient()) {
            CompletableFuture<HttpResponse<String>> prefill = http.sendAsync(HttpRequest.newBuilder(URI.create(stack.prefillUrl() + "/generate"))
                    .POST(HttpRequest.BodyPublishers.ofString("{\"bootstrap_room\":" + room + ",\"input_ids\":" + ids + ",\"sampling_params\":" + sampling + "}"))
                    .build(), HttpResponse.BodyHandlers.ofString());
            d = http.send(HttpRequest.newBuilder(URI.create(stack.decodeUrl() + "/generate"))
                    .POST(HttpRequest.BodyPublishers.ofString("{\"bootstrap_room\":" + room + ",\"bootstrap_addr\":\"" + stack.addr + "\",\"input_ids\":"
                            + ids + ",\"max_new_tokens\":" + max + ",\"sampling_params\":" + sampling + "}"))
                    .build(), HttpResponse.BodyHandlers.ofString());
            assertEquals(200, d.statusCode(), d.body());
            assertEquals(200, prefill.get(30, TimeUnit.SECONDS).statusCode());
        }
        List<String> lines = d.body().lines().filter(l -> l.startsWith("data: ")).toList();
        return JSON.readTree(lines.getLast().substring(6));
    }
}
