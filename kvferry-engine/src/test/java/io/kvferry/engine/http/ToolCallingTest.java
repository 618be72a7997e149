package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvferry.engine.TestModels;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.engine.model.ToolCalls;
import io.kvferry.engine.serving.EngineSpec;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * OpenAI tool calling on /v1/chat/completions through the router, a prefill (the first token) and a decode (the rest),
 * with the real checkpoint: the model has no tool training, so its calls are written under the token mask of the tools'
 * language ({@link ToolCalls}). tool_choice required (two tools, parallel or one call), named, auto (text or calls, both
 * well-formed); a stream's deltas add up to the whole answer for the same seed (calls, their arguments streamed in
 * several fragments as OpenAI's; a length cut before a name, and one inside a call's arguments, both the calls so far;
 * auto's text, auto's text held back while it was a call's opening; parallel calls cut at many places, the same calls,
 * finish reason and log probabilities, streamed and whole); a conversation with an assistant's calls
 * and the tool's result goes on; bad tools and conflicts are 400s naming the place.
 */
class ToolCallingTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final String WEATHER = "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":8},"
            + "\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\"]}},\"required\":[\"city\"]}";
    static final String ADD = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99},"
            + "\"b\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99}},\"required\":[\"a\",\"b\"],\"additionalProperties\":false}";
    static Tokenizer tokenizer;
    static EngineStack stack;
    static Router router;

    @BeforeAll
    static void start() throws Exception {
        TestModels.requireStories();
        ModelFiles.Loaded model = ModelFiles.load(null, null);
        tokenizer = model.tokenizer();
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 32, 32);
        stack = EngineStack.open(spec, spec, "tool-calling-test", null);
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

    static ArrayNode tools() throws Exception {
        ArrayNode tools = JSON.createArrayNode();
        ObjectNode w = tools.addObject().put("type", "function").putObject("function").put("name", "get_weather")
                .put("description", "The weather in a city");
        w.set("parameters", JSON.readTree(WEATHER));
        ObjectNode a = tools.addObject().put("type", "function").putObject("function").put("name", "add").put("strict", true);
        a.set("parameters", JSON.readTree(ADD));
        tools.addObject().put("type", "function").putObject("function").put("name", "now"); // no parameters: {}
        return tools;
    }

    static ObjectNode request(String user, int seed) throws Exception {
        ObjectNode r = JSON.createObjectNode();
        r.putArray("messages").addObject().put("role", "user").put("content", user);
        r.set("tools", tools());
        r.put("max_tokens", 200).put("seed", seed).put("temperature", 1.0);
        return r;
    }

    /** The token whose text is {@code <} (a byte piece in stories260K's vocabulary). */
    static int lessThan() {
        for (int t = 0; t < tokenizer.vocabSize(); t++) {
            if (tokenizer.tokenText(t).equals("<0x3C>") || tokenizer.tokenText(t).equals("<")) return t;
        }
        throw new AssertionError("no token for <");
    }

    static JsonNode chat(ObjectNode body) throws Exception {
        return RouterCalls.ok(router.port(), "/v1/chat/completions", body.toString());
    }

    /** A choice's calls, checked against OpenAI's shape and the tools' schemas; the choice must be calls. */
    static List<JsonNode> assertCalls(JsonNode choice, String finishReason) throws Exception {
        assertEquals(finishReason, choice.path("finish_reason").asText(), choice.toString());
        JsonNode message = choice.path("message");
        assertTrue(message.get("content").isNull(), "no content beside calls: " + choice);
        assertEquals("assistant", message.path("role").asText());
        List<JsonNode> calls = new ArrayList<>();
        message.path("tool_calls").forEach(calls::add);
        assertFalse(calls.isEmpty(), choice.toString());
        for (JsonNode call : calls) {
            assertTrue(call.path("id").asText().matches("call_[A-Za-z0-9]{24}"), call.toString());
            assertEquals("function", call.path("type").asText());
            String name = call.path("function").path("name").asText();
            String argsText = call.path("function").path("arguments").asText();
            JsonNode args = JSON.readTree(argsText);
            assertEquals(args.toString(), argsText, "compact arguments");
            switch (name) {
                case "get_weather" -> {
                    assertTrue(args.path("city").isTextual() && args.path("city").asText().codePointCount(0, args.path("city").asText().length()) <= 8,
                            argsText);
                    assertTrue(!args.has("unit") || List.of("celsius", "fahrenheit").contains(args.path("unit").asText()), argsText);
                }
                case "add" -> {
                    assertEquals(2, args.size(), argsText);
                    for (String k : List.of("a", "b")) {
                        assertTrue(args.path(k).isInt() && args.path(k).asInt() >= 0 && args.path(k).asInt() <= 99, argsText);
                    }
                }
                case "now" -> assertEquals("{}", argsText);
                default -> throw new AssertionError("not a tool: " + name);
            }
        }
        return calls;
    }

    @Test
    void requiredAnswersCallsOfTheTools() throws Exception {
        int several = 0, answered = 0;
        for (int seed = 0; seed < 6; seed++) {
            ObjectNode body = request("What is the weather in Paris, and what is 2 plus 3?", seed).put("tool_choice", "required");
            JsonNode answer = chat(body);
            JsonNode choice = answer.path("choices").path(0);
            if (choice.path("finish_reason").asText().equals("length")) { // cut: the calls so far (OpenAI's rule), never text
                assertTrue(choice.path("message").path("content").isNull(), answer.toString());
                for (JsonNode call : choice.path("message").path("tool_calls")) {
                    assertTrue(List.of("get_weather", "add", "now").contains(call.path("function").path("name").asText()), answer.toString());
                }
                continue;
            }
            List<JsonNode> calls = assertCalls(choice, "tool_calls");
            answered++;
            if (calls.size() > 1) several++;
            assertEquals(answer.path("kvferry").path("token_ids").size(), answer.path("usage").path("completion_tokens").asInt());
        }
        assertTrue(answered >= 4, "most answers end within max_tokens: " + answered);
        assertTrue(several >= 1, "parallel calls come (seeded: the same each run)");
        for (int seed = 0; seed < 6; seed++) {
            ObjectNode body = request("Add two numbers.", seed).put("tool_choice", "required").put("parallel_tool_calls", false);
            JsonNode choice = chat(body).path("choices").path(0);
            if (choice.path("finish_reason").asText().equals("length")) continue;
            assertEquals(1, assertCalls(choice, "tool_calls").size(), "parallel_tool_calls false: one call");
        }
    }

    @Test
    void aNamedToolIsOneCallOfIt() throws Exception {
        for (int seed = 0; seed < 4; seed++) {
            ObjectNode body = request("Add 2 and 3.", seed);
            body.putObject("tool_choice").put("type", "function").putObject("function").put("name", "add");
            JsonNode choice = chat(body).path("choices").path(0);
            List<JsonNode> calls = assertCalls(choice, "stop"); // OpenAI's finish reason for a named tool
            assertEquals(1, calls.size());
            assertEquals("add", calls.getFirst().path("function").path("name").asText());
        }
    }

    @Test
    void autoAnswersTextOrCallsBothWellFormed() throws Exception {
        int texts = 0;
        for (int seed = 0; seed < 6; seed++) {
            ObjectNode body = request("Once upon a time", seed).put("max_tokens", 40);
            if (seed % 2 == 0) body.put("tool_choice", "auto");
            JsonNode choice = chat(body).path("choices").path(0);
            JsonNode message = choice.path("message");
            if (message.has("tool_calls")) {
                assertCalls(choice, "tool_calls");
            } else {
                texts++;
                assertTrue(message.path("content").isTextual(), choice.toString());
                if (!choice.path("finish_reason").asText().equals("length")) {
                    assertFalse(message.path("content").asText().startsWith(ToolCalls.OPEN), choice.toString());
                }
            }
        }
        assertTrue(texts > 0, "a story model answers a story in text");
        // tool_choice none: the tools are ignored, the answer is the plain one.
        ObjectNode none = request("Once upon a time", 3).put("max_tokens", 20).put("tool_choice", "none");
        ObjectNode plain = request("Once upon a time", 3).put("max_tokens", 20);
        plain.remove("tools");
        assertEquals(chat(plain).path("choices").path(0).path("message"), chat(none).path("choices").path(0).path("message"));
    }

    @Test
    void aStreamsDeltasAddUpToTheWholeAnswer() throws Exception {
        List<ObjectNode> bodies = new ArrayList<>();
        bodies.add(request("Weather?", 11).put("tool_choice", "required").put("n", 2).put("logprobs", true));
        ObjectNode named = request("Add.", 12);
        named.putObject("tool_choice").put("type", "function").putObject("function").put("name", "get_weather");
        bodies.add(named);
        bodies.add(request("Once upon a time", 13).put("max_tokens", 30).put("logprobs", true).put("top_logprobs", 2));
        bodies.add(request("Cut short", 14).put("tool_choice", "required").put("max_tokens", 6)); // length before a name: no call
        // length inside the first call's arguments: that call, its arguments as generated (a start of the whole answer's).
        ObjectNode full = request("What is the weather in Paris?", 16).put("tool_choice", "required").put("logprobs", true);
        JsonNode fullAnswer = chat(full);
        String fullArgs = fullAnswer.path("choices").path(0).path("message").path("tool_calls").path(0).path("function").path("arguments").asText();
        int cutAt = midArguments(fullAnswer.path("kvferry").path("token_ids"));
        bodies.add(full.deepCopy().put("max_tokens", cutAt));
        // A stop string inside the first call's arguments: that call up to it, finish_reason stop.
        ObjectNode stopped = full.deepCopy();
        stopped.putArray("stop").add(stopInArguments(fullAnswer.path("kvferry").path("token_ids")));
        bodies.add(stopped);
        // auto's text that starts as a call's opening does ("<"), held back until it is known to be text ("<<"), then sent.
        ObjectNode lt = request("Once upon a time", 15).put("max_tokens", 8).put("logprobs", true);
        lt.putObject("logit_bias").put(String.valueOf(lessThan()), 100);
        bodies.add(lt);
        // auto's text that a stop string cut to nothing: content "", streamed too (its role chunk's, as OpenAI's).
        String story = chat(request("Once upon a time", 17).put("max_tokens", 8)).path("choices").path(0).path("message").path("content").asText();
        ObjectNode empty = request("Once upon a time", 17).put("max_tokens", 8);
        empty.putArray("stop").add(story.substring(0, Math.min(2, story.length())));
        bodies.add(empty);
        int callsCompared = 0, lengthCompared = 0, cutCompared = 0, fragmented = 0, emptied = 0;
        for (ObjectNode body : bodies) {
            JsonNode whole = chat(body);
            ObjectNode streamed = body.deepCopy().put("stream", true);
            List<JsonNode> events = RouterCalls.events(router.port(), "/v1/chat/completions", streamed.toString());
            for (int i = 0; i < whole.path("choices").size(); i++) {
                JsonNode w = whole.path("choices").path(i);
                StringBuilder content = new StringBuilder();
                boolean anyContent = false;
                int contentChunks = 0;
                Map<Integer, ObjectNode> calls = new TreeMap<>();
                Map<Integer, Integer> fragments = new TreeMap<>();
                String finish = null;
                int logprobs = 0;
                for (JsonNode e : events) {
                    for (JsonNode c : e.path("choices")) {
                        if (c.path("index").asInt() != i) continue;
                        JsonNode d = c.path("delta");
                        if (d.path("content").isTextual()) {
                            contentChunks++;
                            content.append(d.path("content").asText());
                            anyContent |= !d.path("content").asText().isEmpty();
                        }
                        for (JsonNode tc : d.path("tool_calls")) {
                            ObjectNode acc = calls.computeIfAbsent(tc.path("index").asInt(), k -> JSON.createObjectNode());
                            if (tc.has("id")) {
                                acc.put("id", tc.path("id").asText()).put("type", tc.path("type").asText());
                                acc.putObject("function").put("name", tc.path("function").path("name").asText()).put("arguments", "");
                            }
                            if (!tc.has("id")) fragments.merge(tc.path("index").asInt(), 1, Integer::sum);
                            ObjectNode f = (ObjectNode) acc.get("function");
                            f.put("arguments", f.path("arguments").asText() + tc.path("function").path("arguments").asText());
                        }
                        if (c.path("logprobs").has("content")) logprobs += c.path("logprobs").path("content").size();
                        if (!c.path("finish_reason").isNull() && c.has("finish_reason")) finish = c.path("finish_reason").asText();
                    }
                }
                assertEquals(w.path("finish_reason").asText(), finish, body + ": " + w);
                JsonNode message = w.path("message");
                if (w.path("finish_reason").asText().equals("length") && body.path("tool_choice").asText().equals("required")) lengthCompared++;
                if (message.has("tool_calls")) {
                    callsCompared++;
                    assertFalse(anyContent, "calls, no content: " + events);
                    // The role's chunk has content null (the answer must be calls, as OpenAI's) or none (auto), so an SDK's
                    // accumulated message is the whole one's (content null, not "").
                    assertEquals(0, contentChunks, "no content, not even \"\": " + events);
                    assertEquals(message.path("tool_calls").size(), calls.size());
                    for (int k = 0; k < calls.size(); k++) {
                        JsonNode wc = message.path("tool_calls").path(k);
                        ObjectNode sc = calls.get(k);
                        assertTrue(sc.path("id").asText().startsWith("call_"));
                        assertEquals(wc.path("type"), sc.path("type"));
                        assertEquals(wc.path("function"), sc.path("function"), body + ": " + events);
                        // OpenAI's stream: the arguments come as they are generated, a few characters a token, not at once.
                        if (wc.path("function").path("arguments").asText().length() > 8) {
                            assertTrue(fragments.getOrDefault(k, 0) > 1, "arguments in several fragments: " + events);
                            fragmented++;
                        }
                    }
                    if (w.path("finish_reason").asText().equals("length") || body.has("stop")) {
                        cutCompared++;
                        assertEquals(body.has("stop") ? "stop" : "length", w.path("finish_reason").asText(), w.toString());
                        assertTrue(message.path("content").isNull(), w.toString());
                        String args = message.path("tool_calls").path(0).path("function").path("arguments").asText();
                        assertTrue(fullArgs.startsWith(args) && args.length() < fullArgs.length() && args.length() > 1,
                                "the arguments as generated up to the cut: " + args + " of " + fullArgs);
                    }
                } else {
                    assertTrue(calls.isEmpty(), events.toString());
                    if (body.path("tool_choice").asText().equals("required")) { // cut before a name: no call, content null
                        assertTrue(message.path("content").isNull() && !message.has("tool_calls"), w.toString());
                        assertEquals(0, contentChunks, "no content, not even \"\": " + events);
                    } else {
                        assertEquals(message.path("content").asText(), content.toString(), body.toString());
                        assertTrue(contentChunks > 0, "a text answer's content, \"\" too, is in a chunk: " + events);
                        if (body.has("stop")) {
                            assertEquals("", message.path("content").asText(), w.toString());
                            emptied++;
                        }
                    }
                    if (body.has("logit_bias")) assertTrue(content.toString().startsWith("<<"), content.toString());
                }
                if (body.has("logprobs")) assertEquals(w.path("logprobs").path("content").size(), logprobs, "every token's log probabilities");
            }
        }
        assertTrue(callsCompared >= 2, "calls were streamed: " + callsCompared);
        assertEquals(2, lengthCompared, "the two cut answers were compared");
        assertEquals(2, cutCompared, "a cut inside a call's arguments (max_tokens, a stop string) streams that call, as the whole answer has it: "
                + fullAnswer);
        assertTrue(fragmented >= 2, "calls' arguments were streamed in fragments: " + fragmented);
        assertEquals(1, emptied, "auto's text cut to nothing by a stop string was compared");
    }

    @Test
    void theStreamIsTheWholeAnswerAtEveryCut() throws Exception {
        // Differential: parallel calls cut by max_tokens every few tokens and by a stop string at every few characters
        // (in a name, the wrapping, the arguments, between the calls): streamed, the same calls (accumulated per index),
        // finish reason, no content, and every token's log probabilities once, in order, on the chunks.
        ObjectNode base = request("Weather and sums?", 20).put("tool_choice", "required").put("logprobs", true).put("top_logprobs", 1);
        JsonNode full = chat(base);
        int[] ids = new int[full.path("kvferry").path("token_ids").size()];
        for (int i = 0; i < ids.length; i++) ids[i] = full.path("kvferry").path("token_ids").get(i).asInt();
        String text = tokenizer.decode(ids);
        List<ObjectNode> bodies = new ArrayList<>();
        for (int k = 1; k < ids.length; k += 9) bodies.add(base.deepCopy().put("max_tokens", k));
        for (int at = 0; at + 2 <= text.length(); at += 13) {
            ObjectNode b = base.deepCopy();
            b.putArray("stop").add(text.substring(at, at + 2));
            bodies.add(b);
        }
        for (ObjectNode body : bodies) {
            JsonNode w = chat(body).path("choices").path(0);
            List<JsonNode> events = RouterCalls.events(router.port(), "/v1/chat/completions", body.deepCopy().put("stream", true).toString());
            Map<Integer, ObjectNode> calls = new TreeMap<>();
            ArrayNode logprobs = JSON.createArrayNode();
            String finish = null;
            for (JsonNode e : events) {
                for (JsonNode c : e.path("choices")) {
                    assertFalse(c.path("delta").hasNonNull("content"), "calls, no content: " + events);
                    for (JsonNode tc : c.path("delta").path("tool_calls")) {
                        ObjectNode acc = calls.computeIfAbsent(tc.path("index").asInt(), k -> JSON.createObjectNode());
                        if (tc.has("id")) acc.put("name", tc.path("function").path("name").asText()).put("arguments", "");
                        acc.put("arguments", acc.path("arguments").asText() + tc.path("function").path("arguments").asText());
                    }
                    c.path("logprobs").path("content").forEach(logprobs::add);
                    if (c.hasNonNull("finish_reason")) finish = c.path("finish_reason").asText();
                }
            }
            String at = body.path("max_tokens") + " " + body.path("stop") + ": " + w;
            assertEquals(w.path("finish_reason").asText(), finish, at);
            assertEquals(w.path("logprobs").path("content"), logprobs, at);
            assertTrue(w.path("message").path("content").isNull(), at);
            ArrayNode whole = JSON.createArrayNode();
            w.path("message").path("tool_calls").forEach(c -> whole.add(c.path("function")));
            assertEquals(whole, JSON.valueToTree(List.copyOf(calls.values())), at + " " + events);
        }
        assertTrue(full.path("choices").path(0).path("message").path("tool_calls").size() > 1, "parallel calls to cut: " + full);
    }

    /** A stop string (two characters) found first inside the first call's arguments of an answer's {@code tokens}, past their opening. */
    static String stopInArguments(JsonNode tokens) {
        int[] ids = new int[tokens.size()];
        for (int i = 0; i < ids.length; i++) ids[i] = tokens.get(i).asInt();
        String text = tokenizer.decode(ids);
        String open = ", \"arguments\": {";
        int from = text.indexOf(open) + open.length() + 1, to = text.indexOf("}" + ToolCalls.CLOSE);
        for (int j = from; j + 2 < to; j++) {
            String stop = text.substring(j, j + 2);
            if (text.indexOf(stop) == j) return stop;
        }
        throw new AssertionError("no stop string fits in " + text);
    }

    /** A number of tokens, of an answer's {@code tokens}, whose text ends inside its first call's arguments (a few characters in). */
    static int midArguments(JsonNode tokens) {
        int[] ids = new int[tokens.size()];
        for (int i = 0; i < ids.length; i++) ids[i] = tokens.get(i).asInt();
        for (int k = 1; k <= ids.length; k++) {
            ToolCalls.Scanner s = new ToolCalls.Scanner();
            s.push(tokenizer.decode(Arrays.copyOf(ids, k)));
            if (!s.calls().isEmpty() && s.calls().getFirst().arguments().length() >= 4) return k;
        }
        throw new AssertionError("no call with arguments in " + tokens);
    }

    @Test
    void aConversationWithAToolsResultGoesOn() throws Exception {
        ObjectNode first = request("What is the weather in Paris?", 5);
        first.putObject("tool_choice").put("type", "function").putObject("function").put("name", "get_weather");
        JsonNode asked = chat(first).path("choices").path(0).path("message");
        JsonNode call = asked.path("tool_calls").path(0);
        ObjectNode next = request("What is the weather in Paris?", 5).put("max_tokens", 16);
        ArrayNode messages = (ArrayNode) next.get("messages");
        messages.add(asked); // the assistant's message as it came: content null, its tool_calls
        messages.addObject().put("role", "tool").put("tool_call_id", call.path("id").asText()).put("content", "Sunny and warm.");
        JsonNode answer = chat(next);
        JsonNode choice = answer.path("choices").path(0);
        assertNotNull(choice.path("finish_reason").asText(null));
        // The prompt is the messages' texts joined by "\n", the call written as the model would have written it.
        String prompt = "What is the weather in Paris?\n" + ToolCalls.render(new ToolCalls.Call("get_weather",
                call.path("function").path("arguments").asText())) + "\nSunny and warm.";
        assertEquals(tokenizer.encode(prompt, true, false).length, answer.path("usage").path("prompt_tokens").asInt(), prompt);
        // A call cut by max_tokens inside its arguments (finish_reason length, its arguments not valid JSON) sent back: served,
        // its arguments in the prompt as sent.
        ObjectNode cutAsk = first.deepCopy().put("max_tokens", midArguments(chat(first).path("kvferry").path("token_ids")));
        JsonNode cutAnswer = chat(cutAsk).path("choices").path(0);
        assertEquals("length", cutAnswer.path("finish_reason").asText(), cutAnswer.toString());
        JsonNode cutCall = cutAnswer.path("message").path("tool_calls").path(0);
        String cutArgs = cutCall.path("function").path("arguments").asText();
        assertThrows(Exception.class, () -> JSON.readTree(cutArgs).isObject(), "not valid JSON: " + cutArgs);
        ObjectNode goOn = request("What is the weather in Paris?", 5).put("max_tokens", 16);
        ((ArrayNode) goOn.get("messages")).add(cutAnswer.path("message"));
        ((ArrayNode) goOn.get("messages")).addObject().put("role", "tool").put("tool_call_id", cutCall.path("id").asText()).put("content", "Cut.");
        JsonNode served = chat(goOn);
        String cutPrompt = "What is the weather in Paris?\n" + ToolCalls.render(new ToolCalls.Call("get_weather", cutArgs)) + "\nCut.";
        assertEquals(tokenizer.encode(cutPrompt, true, false).length, served.path("usage").path("prompt_tokens").asInt(), cutPrompt);
        // A tool message must answer a call made before.
        ObjectNode wrong = next.deepCopy();
        ((ObjectNode) wrong.get("messages").get(2)).put("tool_call_id", "call_nobody");
        assertBadRequest(wrong, "messages[2].tool_call_id", "earlier assistant message");
    }

    @Test
    void badToolsAreRefusedNamingThePlace() throws Exception {
        String[][] cases = {
                {"{\"tools\":{}}", "tools", "must be an array"},
                {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}},{\"type\":\"code\"}]}", "tools[1].type", "must be function"},
                {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}", "tools[0].function.name", "1 to 64"},
                {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}},{\"type\":\"function\",\"function\":{\"name\":\"a\"}}]}",
                        "tools[1].function.name", "unique"},
                {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}},{\"type\":\"function\",\"function\":{\"name\":\"b\","
                        + "\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\",\"patternProperties\":{}}}}}}]}",
                        "tools[1].function.parameters.properties.x", "patternProperties"},
                {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":{\"type\":\"string\"}}}]}",
                        "tools[0].function.parameters.type", "must be object"},
                {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"strict\":\"yes\"}}]}", "tools[0].function.strict", "true or false"},
                {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"b\"}}}",
                        "tool_choice.function.name", "none of the tools"},
                {"{\"tool_choice\":\"required\"}", "tool_choice", "needs tools"},
                {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}}],\"tool_choice\":\"always\"}", "tool_choice", "must be none"},
                {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}}],\"parallel_tool_calls\":\"yes\"}", "parallel_tool_calls", "true or false"},
                {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}}],\"response_format\":{\"type\":\"json_object\"}}", "response_format",
                        "tools (tool_choice auto) and response_format are both set"},
                {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}}],\"guided_regex\":\"a+\"}", "guided_regex", "are both set"},
                {"{\"functions\":[{\"name\":\"a\"}]}", "functions", "send tools"},
                {"{\"function_call\":\"auto\"}", "function_call", "send tools"},
        };
        for (String[] c : cases) {
            ObjectNode body = (ObjectNode) JSON.readTree(c[0]);
            body.putArray("messages").addObject().put("role", "user").put("content", "x");
            body.put("max_tokens", 8);
            assertBadRequest(body, c[1], c[2]);
        }
        String[][] messages = {
                {"[{\"role\":\"function\",\"name\":\"a\",\"content\":\"x\"}]", "messages[0].role", "role tool"},
                {"[{\"role\":\"assistant\",\"content\":null,\"function_call\":{\"name\":\"a\",\"arguments\":\"{}\"}}]", "messages[0].function_call",
                        "send tool_calls"},
                {"[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"a\","
                        + "\"arguments\":\"{}\"}}]}]", "messages[0].tool_calls", "only an assistant"},
                {"[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"a\","
                        + "\"arguments\":[1]}}]}]", "messages[0].tool_calls[0].function.arguments", "must be a string"},
                {"[{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"x\"}]", "messages[0].tool_call_id", "earlier assistant message"},
        };
        for (String[] m : messages) {
            ObjectNode body = JSON.createObjectNode();
            body.set("messages", JSON.readTree(m[0]));
            body.put("max_tokens", 8);
            assertBadRequest(body, m[1], m[2]);
        }
        // The router's /generate is SGLang's: tool calls are the router's to its engines, not a client's there.
        HttpResponse<String> g = RouterCalls.post(router.port(), "/generate", "{\"text\":\"x\",\"sampling_params\":{\"max_new_tokens\":4,"
                + "\"tool_calls\":\"{}\"}}");
        assertEquals(400, g.statusCode(), g.body());
        assertEquals("sampling_params.tool_calls", JSON.readTree(g.body()).path("error").path("param").asText(), g.body());
    }

    static void assertBadRequest(ObjectNode body, String param, String message) throws Exception {
        HttpResponse<String> r = RouterCalls.post(router.port(), "/v1/chat/completions", body.toString());
        assertEquals(400, r.statusCode(), body + " -> " + r.body());
        JsonNode error = JSON.readTree(r.body()).path("error");
        assertEquals(param, error.path("param").asText(null), body + " -> " + r.body());
        assertTrue(error.path("message").asText().contains(message), body + " -> " + r.body());
    }
}
