package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.model.SamplingRules;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.engine.model.ToolCalls;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Tool calling's pure parts at the router: tools / tool_choice / parallel_tool_calls read into the tools' language (its
 * mode and tools) or refused with a 400 naming the place; the router → engine translation (sampling_params.tool_calls,
 * parsed back to the same constraint); a conflict with another structured output; the history rendered into the prompt;
 * a stream's deltas adding up to the message's calls.
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

    @Test
    void aStreamsDeltasAddUpToTheMessagesCalls() {
        List<ToolCalls.Call> calls = List.of(new ToolCalls.Call("a", "{\"x\":1}"), new ToolCalls.Call("b", "{}"));
        ArrayNode message = ChatTools.message(calls);
        List<ArrayNode> deltas = ChatTools.deltas(calls);
        for (int i = 0; i < calls.size(); i++) {
            StringBuilder args = new StringBuilder();
            String name = null;
            for (ArrayNode d : deltas) {
                for (JsonNode tc : d) {
                    if (tc.path("index").asInt() != i) continue;
                    if (tc.has("id")) {
                        name = tc.path("function").path("name").asText();
                        assertEquals("function", tc.path("type").asText());
                        assertTrue(tc.path("id").asText().startsWith("call_"));
                    }
                    args.append(tc.path("function").path("arguments").asText());
                }
            }
            assertEquals(message.get(i).path("function").path("name").asText(), name);
            assertEquals(message.get(i).path("function").path("arguments").asText(), args.toString());
        }
        assertNull(ChatTools.calls(ChatTools.of(JSON.createObjectNode().put("tool_choice", "none")), "x", Finish.token(2, true)));
    }
}
