package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.openai.core.ObjectMappers;
import com.openai.helpers.ChatCompletionAccumulator;
import com.openai.models.chat.completions.ChatCompletion;
import com.openai.models.chat.completions.ChatCompletionChunk;
import com.sun.net.httpserver.Headers;
import com.sun.net.httpserver.HttpContext;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpPrincipal;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.model.SamplingRules;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.engine.model.ToolCalls;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Tool calling's pure parts at the router: tools / tool_choice / parallel_tool_calls read into the tools' language (its
 * mode and tools) or refused with a 400 naming the place; the router → engine translation (sampling_params.tool_calls,
 * parsed back to the same constraint); a conflict with another structured output; the history rendered into the prompt;
 * a stream's deltas (each name once complete, then its arguments' fragments as they come) adding up to the message's calls,
 * a cut leaving the calls so far.
 */
class ChatToolsTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final String TOOLS = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
            + "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}},{\"type\":\"function\",\"function\":{\"name\":\"now\"}}]";

    static ObjectNode req(String extra) throws Exception {
        return (ObjectNode) JSON.readTree("{\"tools\":" + TOOLS + (extra.isEmpty() ? "" : "," + extra) + "}");
    }

    @Test
    void toolChoiceGivesTheLanguagesModeAndTools() throws Exception {
        ChatTools.Tools auto = ChatTools.of(req(""));
        assertEquals(ChatTools.Mode.AUTO, auto.mode());
        assertEquals(OutputConstraint.Kind.TOOL_CALLS, auto.spec().kind());
        JsonNode source = JSON.readTree(auto.spec().source());
        assertEquals("auto", source.path("mode").asText());
        assertTrue(source.path("parallel").asBoolean());
        assertEquals(2, source.path("tools").size());
        assertEquals(ChatTools.NO_PARAMETERS, source.path("tools").path(1).path("parameters").asText(), "no parameters: {} only");
        assertEquals("tool_calls", auto.finishReason());
        ChatTools.Tools required = ChatTools.of(req("\"tool_choice\":\"required\",\"parallel_tool_calls\":false"));
        source = JSON.readTree(required.spec().source());
        assertEquals("required", source.path("mode").asText());
        assertEquals(false, source.path("parallel").asBoolean());
        ChatTools.Tools named = ChatTools.of(req("\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"now\"}}"));
        source = JSON.readTree(named.spec().source());
        assertEquals("required", source.path("mode").asText());
        assertEquals(false, source.path("parallel").asBoolean());
        assertEquals(2, source.path("tools").size(), "every tool, each schema checked");
        assertEquals("now", source.path("name").asText());
        assertEquals("stop", named.finishReason());
        assertNull(ChatTools.of(req("\"tool_choice\":\"none\"")));
        assertNull(ChatTools.of(JSON.readTree("{\"tools\":[]}")));
        assertNull(ChatTools.of(JSON.readTree("{\"tool_choice\":\"none\"}")), "none without tools: nothing to ignore");
    }

    @Test
    void badToolsAre400sNamingThePlace() throws Exception {
        String[][] cases = {
                {"{\"tools\":\"f\"}", "tools"},
                {"{\"tools\":[3]}", "tools[0]"},
                {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}},{\"type\":\"retrieval\"}]}", "tools[1].type"},
                {"{\"tools\":[{\"type\":\"function\"}]}", "tools[0].function"},
                {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"\"}}]}", "tools[0].function.name"},
                {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"" + "x".repeat(65) + "\"}}]}", "tools[0].function.name"},
                {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}},{\"type\":\"function\",\"function\":{\"name\":\"a\"}}]}",
                        "tools[1].function.name"},
                {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"description\":1}}]}", "tools[0].function.description"},
                // A misspelt parameters would silently be a tool of no arguments.
                {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"paramters\":{\"type\":\"object\"}}}]}",
                        "tools[0].function.paramters"},
                {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":[]}}]}", "tools[0].function.parameters"},
                {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":{\"type\":\"array\"}}}]}",
                        "tools[0].function.parameters.type"},
                {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}}],\"tool_choice\":3}", "tool_choice"},
                {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}}],\"tool_choice\":{\"type\":\"x\"}}", "tool_choice.type"},
                {"{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}}],\"tool_choice\":{\"type\":\"function\"}}",
                        "tool_choice.function.name"},
                {"{\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"a\"}}}", "tool_choice"},
                {"{\"tool_choice\":\"auto\"}", "tool_choice"}, // as OpenAI and vLLM: only allowed when tools are given
                {"{\"tools\":[],\"tool_choice\":\"auto\"}", "tool_choice"},
                {"{\"parallel_tool_calls\":1}", "parallel_tool_calls"},
        };
        for (String[] c : cases) {
            Http.BadRequest e = assertThrows(Http.BadRequest.class, () -> ChatTools.of(JSON.readTree(c[0])), c[0]);
            assertEquals(c[1], e.param, c[0] + ": " + e.getMessage());
        }
    }

    @Test
    void atMost128ToolsAsOpenAi() throws Exception {
        // OpenAI's bound ("array too long ... maximum length 128", param tools): it bounds the work a request can ask of the
        // router before its compilation's deadline (the checks of each tool, a name unique among all).
        ArrayNode tools = JSON.createArrayNode();
        for (int i = 0; i < 128; i++) tools.addObject().put("type", "function").putObject("function").put("name", "t" + i);
        ObjectNode r = JSON.createObjectNode().set("tools", tools);
        assertEquals(ChatTools.Mode.AUTO, ChatTools.of(r).mode());
        tools.addObject().put("type", "function").putObject("function").put("name", "t128");
        Http.BadRequest e = assertThrows(Http.BadRequest.class, () -> ChatTools.of(r));
        assertEquals("tools", e.param, e.getMessage());
        assertTrue(e.getMessage().contains("at most 128"), e.getMessage());
    }

    @Test
    void theEnginesGetTheSameConstraintAndSchemaFaultsNameTheirPlace() throws Exception {
        OutputConstraint.Compiler compiler = new OutputConstraint.Compiler(Tokenizer.synthetic(512));
        ChatTools.Tools tools = ChatTools.of(req("\"tool_choice\":\"required\""));
        OutputConstraint c = StructuredOutputs.compile(tools.spec(), compiler);
        Sampling sent = new Sampling(0.8f, 1f, 7, -1, SamplingRules.NONE.withConstraint(c));
        ObjectNode sp = SamplingParams.json(sent);
        assertEquals(tools.spec().source(), sp.path("tool_calls").asText());
        assertEquals(sent, SamplingParams.parse(sp, 0, 512, compiler), "the engine parses back the same constraint");
        assertTrue(c.matches("<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>"));
        // A schema fault goes on into the schema, the tool named by its index (named: the one tool's place).
        String bad = "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\",\"patternProperties\":{}}}}";
        ObjectNode r = req("");
        ((ObjectNode) r.get("tools").get(1).get("function")).set("parameters", JSON.readTree(bad));
        Http.BadRequest e = assertThrows(Http.BadRequest.class, () -> StructuredOutputs.compile(ChatTools.of(r).spec(), compiler));
        assertEquals("tools[1].function.parameters.properties.x", e.param, e.getMessage());
        r.set("tool_choice", JSON.readTree("{\"type\":\"function\",\"function\":{\"name\":\"now\"}}"));
        e = assertThrows(Http.BadRequest.class, () -> StructuredOutputs.compile(ChatTools.of(r).spec(), compiler));
        assertEquals("tools[1].function.parameters.properties.x", e.param, e.getMessage());
        // An engine's sampling_params.tool_calls names that field.
        ObjectNode engine = JSON.createObjectNode().put("tool_calls", ToolCalls.source("required", true, List.of("a"), List.of(bad)));
        e = assertThrows(Http.BadRequest.class, () -> SamplingParams.parse(engine, 0, 512, compiler));
        assertEquals("sampling_params.tool_calls", e.param, e.getMessage());
    }

    @Test
    void aNamedToolChoiceStillChecksEveryTool() throws Exception {
        // As OpenAI: every tool is validated, not only the one tool_choice names; the answer is still that tool's one call.
        OutputConstraint.Compiler compiler = new OutputConstraint.Compiler(Tokenizer.synthetic(512));
        ObjectNode r = req("\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"now\"}}");
        OutputConstraint c = StructuredOutputs.compile(ChatTools.of(r).spec(), compiler);
        assertTrue(c.matches("<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>"));
        assertTrue(!c.matches("<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>"), "only the named tool");
        ((ObjectNode) r.get("tools").get(0).get("function")).set("parameters",
                JSON.readTree("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\",\"patternProperties\":{}}}}"));
        Http.BadRequest e = assertThrows(Http.BadRequest.class, () -> StructuredOutputs.compile(ChatTools.of(r).spec(), compiler));
        assertEquals("tools[0].function.parameters.properties.x", e.param, e.getMessage());
    }

    @Test
    void toolsWithAnotherStructuredOutputIsA400NamingBoth() throws Exception {
        OutputConstraint.Compiler compiler = new OutputConstraint.Compiler(Tokenizer.synthetic(512));
        ObjectNode r = req("\"response_format\":{\"type\":\"json_object\"}");
        Http.BadRequest e = assertThrows(Http.BadRequest.class, () -> RequestParams.ask(r, Prompt.text("x"), 8, -1, -1, 512, compiler,
                ChatTools.of(r)));
        assertEquals("response_format", e.param);
        assertTrue(e.getMessage().contains("tools (tool_choice auto) and response_format are both set"), e.getMessage());
        ObjectNode none = req("\"response_format\":{\"type\":\"json_object\"},\"tool_choice\":\"none\"");
        assertNull(ChatTools.of(none), "tool_choice none: the response_format alone");
    }

    @Test
    void theHistoryIsRenderedAsTheModelWouldHaveWrittenIt() throws Exception {
        JsonNode messages = JSON.readTree("[{\"role\":\"user\",\"content\":\"Weather?\"},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
                + "{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{ \\\"city\\\": \\\"Paris\\\" }\"}},"
                + "{\"id\":\"call_2\",\"type\":\"function\",\"function\":{\"name\":\"now\",\"arguments\":\"{}\"}}]},"
                + "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"Sunny.\"},"
                + "{\"role\":\"tool\",\"tool_call_id\":\"call_2\",\"content\":[{\"type\":\"text\",\"text\":\"Noon.\"}]},"
                + "{\"role\":\"assistant\",\"content\":\"Let me see.\",\"tool_calls\":[{\"id\":\"call_3\",\"type\":\"function\","
                + "\"function\":{\"name\":\"now\",\"arguments\":\"{}\"}}]}]");
        assertEquals("Weather?\n<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}</tool_call>\n"
                + "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>\nSunny.\nNoon.\n"
                + "Let me see.\n<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>", ChatPrompt.of(messages));
        ((ObjectNode) messages.get(2)).put("tool_call_id", "call_3"); // a later call's id
        Http.BadRequest e = assertThrows(Http.BadRequest.class, () -> ChatPrompt.of(messages));
        assertEquals("messages[2].tool_call_id", e.param);
    }

    /**
     * A call cut by max_tokens (finish_reason length) sent back in the history: its arguments, any string (OpenAI takes any),
     * are rendered as sent, where a whole call's are compact as before; what is not a string is a 400 naming it.
     */
    @Test
    void aCutCallsArgumentsInTheHistoryAreRenderedAsSent() throws Exception {
        for (String cut : new String[]{"{\"city\":\"Par", "{\"city\": \"Pa", "{", "", "[1]", "{\"a\":1}}", "not json"}) {
            ObjectNode call = JSON.createObjectNode().put("id", "call_1").put("type", "function");
            call.putObject("function").put("name", "get_weather").put("arguments", cut);
            ArrayNode messages = JSON.createArrayNode();
            messages.addObject().put("role", "user").put("content", "Weather?");
            messages.addObject().put("role", "assistant").putNull("content").putArray("tool_calls").add(call);
            messages.addObject().put("role", "tool").put("tool_call_id", "call_1").put("content", "Cut.");
            String expected = "Weather?\n<tool_call>{\"name\": \"get_weather\", \"arguments\": " + (cut.equals("{\"a\":1}}") ? "{\"a\":1}}" : cut)
                    + "}</tool_call>\nCut.";
            assertEquals(expected, ChatPrompt.of(messages), cut);
        }
        for (String bad : new String[]{"{\"arguments\":{\"city\":\"Paris\"}}", "{\"arguments\":null}", "{}", "{\"arguments\":5}"}) {
            ObjectNode call = JSON.createObjectNode().put("id", "call_1").put("type", "function");
            ObjectNode f = (ObjectNode) JSON.readTree(bad);
            f.put("name", "get_weather");
            call.set("function", f);
            ArrayNode messages = JSON.createArrayNode();
            messages.addObject().put("role", "assistant").putNull("content").putArray("tool_calls").add(call);
            Http.BadRequest e = assertThrows(Http.BadRequest.class, () -> ChatPrompt.of(messages), bad);
            assertEquals("messages[0].tool_calls[0].function.arguments", e.param, e.getMessage());
            assertTrue(e.getMessage().contains("must be a string"), e.getMessage());
        }
    }

    @Test
    void aLoneSurrogateInAHistorysCallIsA400NamingIt() throws Exception {
        // As a content's: UTF-8 has no encoding for it (it would silently become ?), and the 400 names where it is.
        for (String[] c : new String[][]{{"now\ud800", "{}", "name"}, {"now", "{\"a\":\"x\udc00\"}", "arguments"}}) {
            ObjectNode call = JSON.createObjectNode().put("id", "call_1").put("type", "function");
            call.putObject("function").put("name", c[0]).put("arguments", c[1]);
            ArrayNode messages = JSON.createArrayNode();
            messages.addObject().put("role", "user").put("content", "Time?");
            messages.addObject().put("role", "assistant").putNull("content").putArray("tool_calls").add(call);
            Http.BadRequest e = assertThrows(Http.BadRequest.class, () -> ChatPrompt.of(messages), c[2]);
            assertEquals("messages[1].tool_calls[0].function." + c[2], e.param, e.getMessage());
        }
    }

    /** Every delta of a stream fed {@code text} {@code step} characters at a time, in order (one entry each). */
    static List<JsonNode> deltas(String text, int step) {
        ChatTools.Stream s = new ChatTools.Stream();
        List<JsonNode> out = new ArrayList<>();
        for (int i = 0; i < text.length(); i += step) {
            for (ArrayNode d : s.push(text.substring(i, Math.min(text.length(), i + step)))) {
                assertEquals(1, d.size(), "one entry a chunk: " + d);
                out.add(d.get(0));
            }
        }
        return out;
    }

    /** The deltas accumulated per index as the SDKs do: {index: {id, type, function: {name, arguments}}}, checking each head. */
    static Map<Integer, ObjectNode> accumulate(List<JsonNode> deltas) {
        Map<Integer, ObjectNode> calls = new TreeMap<>();
        for (JsonNode d : deltas) {
            int i = d.path("index").asInt();
            if (d.has("id")) {
                assertTrue(d.path("id").asText().matches("call_[A-Za-z0-9]{24}"), d.toString());
                assertEquals("function", d.path("type").asText());
                assertEquals("", d.path("function").path("arguments").asText(), "a head's arguments are empty: " + d);
                assertNull(calls.put(i, d.deepCopy()), "one head a call: " + d);
                assertEquals(calls.size() - 1, i, "indices in order from 0: " + d);
            } else {
                ObjectNode f = (ObjectNode) calls.get(i).get("function"); // a fragment after its call's head
                assertNotNull(f, "a fragment before its head: " + d);
                assertEquals(1, d.path("function").size(), "a fragment has its arguments alone: " + d);
                f.put("arguments", f.path("arguments").asText() + d.path("function").path("arguments").asText());
            }
        }
        return calls;
    }

    @Test
    void aStreamSendsEachNameThenItsArgumentsAsTheyCome() {
        List<ToolCalls.Call> calls = List.of(new ToolCalls.Call("get_weather", "{\"city\":\"Paris, \\\"FR\\\"\",\"days\":[1, 2]}"),
                new ToolCalls.Call("now", "{}"));
        String text = ToolCalls.render(calls);
        for (int step : new int[]{1, 2, 3, 7, text.length()}) {
            List<JsonNode> deltas = deltas(text, step);
            Map<Integer, ObjectNode> got = accumulate(deltas);
            assertEquals(List.of(0, 1), List.copyOf(got.keySet()), "two parallel calls: indices 0 and 1");
            for (int i = 0; i < calls.size(); i++) {
                assertEquals(calls.get(i).name(), got.get(i).path("function").path("name").asText());
                assertEquals(ToolCalls.compact(calls.get(i).arguments()), got.get(i).path("function").path("arguments").asText(),
                        "fragments concatenate to the whole arguments (step " + step + ")");
            }
            if (step == 1) { // a character a push: the arguments as they come, one fragment each of their characters
                assertEquals(ToolCalls.compact(calls.get(0).arguments()).length(),
                        deltas.stream().filter(d -> d.path("index").asInt() == 0 && !d.has("id")).count());
            }
        }
        // The head goes as soon as the name's closing quote comes, before any argument; nothing while the name is incomplete.
        ChatTools.Stream s = new ChatTools.Stream();
        assertTrue(s.push("<tool_call>{\"name\": \"get_wea").isEmpty(), "no head for a name not yet complete");
        List<ArrayNode> head = s.push("ther\"");
        assertEquals(1, head.size());
        assertEquals("get_weather", head.getFirst().get(0).path("function").path("name").asText());
        assertTrue(s.push(", \"arguments\": ").isEmpty(), "the wrapping is never sent");
        List<ArrayNode> frag = s.push("{\"ci");
        assertEquals("{\"ci", frag.getFirst().get(0).path("function").path("arguments").asText());
        assertEquals(0, frag.getFirst().get(0).path("index").asInt());
        // A push that ends one call's arguments and begins the next call's name: the fragment, then nothing more yet.
        List<ArrayNode> end = s.push("ty\": \"X\"}}</tool_call>\n<tool_call>{\"name\": \"n");
        assertEquals(1, end.size(), end.toString());
        assertEquals("ty\":\"X\"}", end.getFirst().get(0).path("function").path("arguments").asText(), "compact, as the whole answer's");
        assertFalse(s.calls().complete());
        assertEquals(1, s.calls().calls().size(), "the second name is not complete yet");
    }

    @Test
    void aCutLeavesTheCallsSoFarWithTheirArgumentsAsGenerated() throws Exception {
        ChatTools.Tools required = ChatTools.of(req("\"tool_choice\":\"required\""));
        String whole = ToolCalls.render(List.of(new ToolCalls.Call("get_weather", "{\"city\":\"Paris\"}"), new ToolCalls.Call("now", "{}")));
        String cut = whole.substring(0, whole.indexOf("Par") + 3); // max_tokens ended it inside the first call's arguments
        ObjectNode choice = choice(cut);
        ChatTools.whole(choice, required, ChatTools.calls(required, cut), Finish.LENGTH);
        assertEquals("length", choice.path("finish_reason").asText(), "OpenAI's rule: a cut call is still calls, finish length");
        assertTrue(choice.path("message").path("content").isNull(), choice.toString());
        assertEquals(1, choice.path("message").path("tool_calls").size(), choice.toString());
        assertEquals("{\"city\":\"Par", choice.path("message").path("tool_calls").path(0).path("function").path("arguments").asText());
        // The stream's deltas up to the cut are the same calls.
        Map<Integer, ObjectNode> streamed = accumulate(deltas(cut, 2));
        assertEquals(choice.path("message").path("tool_calls").path(0).path("function"), streamed.get(0).path("function"));
        // A stop string that cut the call: finish stop, the same partial call.
        choice = choice(cut);
        ChatTools.whole(choice, required, ChatTools.calls(required, cut), Finish.string("is"));
        assertEquals("stop", choice.path("finish_reason").asText());
        assertEquals(1, choice.path("message").path("tool_calls").size());
        // A cut before the second name is complete: only the first call (a name not complete is no call).
        String second = whole.substring(0, whole.lastIndexOf("now") + 2);
        choice = choice(second);
        ChatTools.whole(choice, required, ChatTools.calls(required, second), Finish.LENGTH);
        assertEquals(1, choice.path("message").path("tool_calls").size(), choice.toString());
        assertEquals("{\"city\":\"Paris\"}", choice.path("message").path("tool_calls").path(0).path("function").path("arguments").asText());
        // A cut before any name is complete: no call at all, content null, no tool_calls.
        choice = choice("<tool_call>{\"na");
        ChatTools.whole(choice, required, ChatTools.calls(required, "<tool_call>{\"na"), Finish.LENGTH);
        assertTrue(choice.path("message").path("content").isNull());
        assertFalse(choice.path("message").has("tool_calls"), choice.toString());
        assertEquals("length", choice.path("finish_reason").asText());
        // Whole calls: the tools' finish reason where the answer ended of itself; a length end (max_tokens just after them) stays length.
        choice = choice(whole);
        ChatTools.whole(choice, required, ChatTools.calls(required, whole), Finish.token(2, true));
        assertEquals("tool_calls", choice.path("finish_reason").asText());
        assertEquals(2, choice.path("message").path("tool_calls").size());
        choice = choice(whole);
        ChatTools.whole(choice, required, ChatTools.calls(required, whole), Finish.LENGTH);
        assertEquals("length", choice.path("finish_reason").asText());
        // auto: text that does not start a call is the answer; text that does is calls, cut or not.
        ChatTools.Tools auto = ChatTools.of(req(""));
        assertNull(ChatTools.calls(auto, "Once upon"));
        assertNull(ChatTools.calls(auto, "<tool_ca"), "still only the opening's start: text");
        assertEquals(1, ChatTools.calls(auto, cut).calls().size());
        assertNull(ChatTools.calls(ChatTools.of(JSON.createObjectNode().put("tool_choice", "none")), "x"));
    }

    @Test
    void aStopStringBetweenTwoCallsCutsNoCallShort() throws Exception {
        // A stop string that matched after a whole call, in the next one's wrapping before its name is complete: every
        // call shown is whole, so the finish reason is the tools' (as where the stop matched just after the call); one
        // that matched inside a call (its arguments, its closing wrapping) cut that call short: stop.
        ChatTools.Tools required = ChatTools.of(req("\"tool_choice\":\"required\""));
        String first = ToolCalls.render(new ToolCalls.Call("get_weather", "{\"city\":\"Paris\"}"));
        String second = ToolCalls.render(new ToolCalls.Call("now", "{}"));
        for (String cut : new String[]{first, first + "\n", first + "\n<tool_", first + "\n" + second.substring(0, second.indexOf("now") + 2)}) {
            ObjectNode choice = choice(cut);
            ChatTools.whole(choice, required, ChatTools.calls(required, cut), Finish.string("x"));
            assertEquals("tool_calls", choice.path("finish_reason").asText(), cut);
            assertEquals(1, choice.path("message").path("tool_calls").size(), cut);
            choice = choice(cut);
            ChatTools.whole(choice, required, ChatTools.calls(required, cut), Finish.LENGTH);
            assertEquals("length", choice.path("finish_reason").asText(), cut);
        }
        for (String cut : new String[]{first.substring(0, first.length() - 3), first.substring(0, first.indexOf("Par")), "<tool_call>{\"na", ""}) {
            ObjectNode choice = choice(cut);
            ChatTools.whole(choice, required, ChatTools.calls(required, cut), Finish.string("x"));
            assertEquals("stop", choice.path("finish_reason").asText(), cut);
        }
    }

    /** A whole answer's chat choice of {@code text}, as the route shapes it before the calls are made of it. */
    static ObjectNode choice(String text) {
        return (ObjectNode) OpenAiShape.CHAT.answer("id", 0, "m", text, Finish.LENGTH, false, false).get("choices").get(0);
    }

    /** An exchange whose response body is kept: what a stream's {@link Answer} writes, read back as its events. */
    static final class Recorded extends HttpExchange {
        final ByteArrayOutputStream body = new ByteArrayOutputStream();
        private final Headers response = new Headers();

        /** The {@code data:} events written, but [DONE]. */
        List<String> events() {
            List<String> out = new ArrayList<>();
            for (String e : body.toString(StandardCharsets.UTF_8).split("\n\n")) {
                if (e.startsWith("data: ") && !e.equals("data: [DONE]")) out.add(e.substring("data: ".length()));
            }
            return out;
        }

        @Override public Headers getRequestHeaders() {
            return new Headers();
        }

        @Override public Headers getResponseHeaders() {
            return response;
        }

        @Override public URI getRequestURI() {
            return URI.create("/v1/chat/completions");
        }

        @Override public String getRequestMethod() {
            return "POST";
        }

        @Override public HttpContext getHttpContext() {
            return null;
        }

        @Override public void close() {
        }

        @Override public InputStream getRequestBody() {
            return new ByteArrayInputStream(new byte[0]);
        }

        @Override public OutputStream getResponseBody() {
            return body;
        }

        @Override public void sendResponseHeaders(int code, long length) {
        }

        @Override public InetSocketAddress getRemoteAddress() {
            return new InetSocketAddress(0);
        }

        @Override public int getResponseCode() {
            return 200;
        }

        @Override public InetSocketAddress getLocalAddress() {
            return new InetSocketAddress(0);
        }

        @Override public String getProtocol() {
            return "HTTP/1.1";
        }

        @Override public Object getAttribute(String name) {
            return null;
        }

        @Override public void setAttribute(String name, Object value) {
        }

        @Override public void setStreams(InputStream i, OutputStream o) {
        }

        @Override public HttpPrincipal getPrincipal() {
            return null;
        }
    }

    /** A stream's chunk of a choice's {@code tool_calls} delta, as {@link Choice} sends it. */
    static ObjectNode callsChunk(ArrayNode delta, Finish finish) {
        ObjectNode c = OpenAiShape.CHAT.answer("chatcmpl-1", 1, "m", "", finish, true, false);
        if (delta != null) ((ObjectNode) c.get("choices").get(0).get("delta")).set("tool_calls", delta);
        return c;
    }

    @Test
    void anAutoAnswerOfCallsAccumulatesAsTheWholeOneContentNull() throws Exception {
        // Under auto the role's chunk goes before the answer is known to be text or calls: it must not say content "",
        // which an SDK keeps beside the calls (the whole answer's content is null). Each mode's role chunk, then the calls'.
        String text = ToolCalls.render(new ToolCalls.Call("get_weather", "{\"city\": \"Paris\"}"));
        for (String mode : new String[]{"", "\"tool_choice\":\"required\""}) {
            Recorded ex = new Recorded();
            Answer a = new Answer(ex, OpenAiShape.CHAT, "chatcmpl-test", true, false, false, 1, "m", null, null);
            a.tools = ChatTools.of(req(mode));
            ChatTools.Stream s = new ChatTools.Stream();
            for (int i = 0; i < text.length(); i += 4) {
                for (ArrayNode d : s.push(text.substring(i, Math.min(text.length(), i + 4)))) a.send(callsChunk(d, null));
            }
            ObjectNode fin = callsChunk(null, Finish.token(2, true));
            ((ObjectNode) fin.get("choices").get(0)).put("finish_reason", ChatTools.finishReason(a.tools, s.calls(), Finish.token(2, true)));
            a.send(fin);
            ChatCompletionAccumulator acc = ChatCompletionAccumulator.create();
            for (String e : ex.events()) acc.accumulate(ObjectMappers.jsonMapper().readValue(e, ChatCompletionChunk.class));
            ChatCompletion.Choice streamed = acc.chatCompletion().choices().getFirst();
            ObjectNode whole = choice(text);
            ChatTools.whole(whole, a.tools, ChatTools.calls(a.tools, text), Finish.token(2, true));
            assertTrue(whole.path("message").path("content").isNull());
            assertTrue(streamed.message().content().isEmpty(), mode + ": content null, as the whole answer's: " + ex.events());
            assertEquals(whole.path("message").path("tool_calls").path(0).path("function").path("arguments").asText(),
                    streamed.message().toolCalls().orElseThrow().getFirst().asFunction().function().arguments());
            assertEquals(ChatCompletion.Choice.FinishReason.TOOL_CALLS, streamed.finishReason());
        }
    }
}
