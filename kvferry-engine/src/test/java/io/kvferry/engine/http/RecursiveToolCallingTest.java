package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.engine.serving.Generation;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Tool calling with a tool whose {@code parameters} recurse (a tree of nodes, beside a plain tool) through the router, a
 * TP2 prefill (the first token) and a TP1 decode (the rest), the real checkpoint: the calls' language is a grammar
 * ({@code ToolCalls.language}), compiled by the router and again by each engine from {@code sampling_params.tool_calls}.
 * tool_choice required and named, two samplings: the answer's tokens are the colocated run's under the same constraint,
 * its calls' arguments valid for the schema (a prefix of a match where cut), the stream's deltas accumulated per index the
 * whole answer's calls and finish reason; a recursion with no way out is a 400 naming the tool and the place.
 */
class RecursiveToolCallingTest {
    static final String PROMPT = "Once upon a time";
    static final int MAX = 160;
    static final String TREE = "{\"type\":\"object\",\"properties\":{\"root\":{\"$ref\":\"#/$defs/Node\",\"description\":\"the tree\"}},"
            + "\"required\":[\"root\"],\"$defs\":{\"Node\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
            + "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/Node\"},\"maxItems\":2}},\"required\":[\"name\"]}}}";
    static Tokenizer tokenizer;
    static ConstrainedStack fixture;

    @BeforeAll
    static void start() throws Exception {
        fixture = ConstrainedStack.open("recursive-tool-calling-test");
        tokenizer = fixture.tokenizer;
    }

    @AfterAll
    static void stop() {
        if (fixture != null) fixture.close();
    }

    static ObjectNode request(int s) throws Exception {
        ObjectNode r = (ObjectNode) ToolCallingTest.JSON.readTree("{" + GrammarOutputsTest.SAMPLINGS[s] + "}");
        r.putArray("messages").addObject().put("role", "user").put("content", PROMPT);
        ArrayNode tools = r.putArray("tools");
        tools.addObject().put("type", "function").putObject("function").put("name", "plant_tree").put("description", "Plants a tree")
                .set("parameters", ToolCallingTest.JSON.readTree(TREE));
        tools.addObject().put("type", "function").putObject("function").put("name", "get_weather")
                .set("parameters", ToolCallingTest.JSON.readTree(ToolCallingTest.WEATHER));
        r.put("max_tokens", MAX).put("logprobs", true);
        return r;
    }

    /** {@link #TREE}'s meaning: {@code {"root": NODE}}, a node a name of at most 8 characters and at most 2 kids, each a node. */
    static boolean validArguments(JsonNode v) {
        return v.isObject() && v.size() == 1 && v.has("root") && RecursiveSchemaOutputsTest.validNode(v.get("root"));
    }

    @Test
    @Timeout(300)
    void recursiveToolCallsAreValidEqualColocatedAndStreamAsWhole() throws Exception {
        int whole = 0, nested = 0;
        for (String choice : new String[]{"required", "named"}) {
            for (int s = 0; s < GrammarOutputsTest.SAMPLINGS.length; s++) {
                String what = choice + " " + GrammarOutputsTest.SAMPLINGS[s];
                ObjectNode body = request(s);
                if (choice.equals("required")) body.put("tool_choice", "required");
                else body.putObject("tool_choice").put("type", "function").putObject("function").put("name", "plant_tree");
                // The colocated run under the constraint the router builds of the same request.
                ChatTools.Tools tools = ChatTools.of(body);
                OutputConstraint c = fixture.compiler.compile(OutputConstraint.Kind.TOOL_CALLS, tools.spec().source(), OutputConstraint.Compiler.ANYONE);
                int[] promptIds = tokenizer.encode(ChatPrompt.of(body.get("messages")), true, false);
                Generation ref = fixture.colocated.generate(promptIds, MAX, GrammarOutputsTest.sampling(s, c));
                String refText = tokenizer.decode(ref.tokens());

                JsonNode answer = RouterCalls.ok(fixture.router.port(), "/v1/chat/completions", body.toString());
                assertArrayEquals(ref.tokens(), SamplingParamsTest.ids(answer.path("kvferry").path("token_ids")), what);
                JsonNode ch = answer.path("choices").path(0);
                boolean stopped = ref.finishReason().equals("stop");
                if (stopped) assertTrue(c.matches(refText), what + ": " + refText);
                else assertTrue(c.startsMatch(refText), what + ": " + refText);
                JsonNode message = ch.path("message");
                assertTrue(message.path("content").isNull(), ch.toString());
                List<JsonNode> calls = new ArrayList<>();
                message.path("tool_calls").forEach(calls::add);
                assertFalse(calls.isEmpty(), what + ": " + ch);
                if (choice.equals("named")) assertEquals(1, calls.size(), ch.toString());
                for (int k = 0; k < calls.size(); k++) {
                    JsonNode f = calls.get(k).path("function");
                    String args = f.path("arguments").asText();
                    boolean last = k == calls.size() - 1;
                    if (stopped || !last) {
                        if (f.path("name").asText().equals("plant_tree")) {
                            JsonNode v = ToolCallingTest.JSON.readTree(args);
                            assertTrue(validArguments(v), what + ": " + args);
                            if (v.path("root").has("kids")) nested++;
                        } else {
                            assertEquals("get_weather", f.path("name").asText(), ch.toString());
                        }
                    }
                }
                if (stopped) {
                    whole++;
                    assertEquals(choice.equals("named") ? "stop" : "tool_calls", ch.path("finish_reason").asText(), ch.toString());
                } else {
                    assertEquals("length", ch.path("finish_reason").asText(), ch.toString());
                }

                // Streamed: the deltas accumulated per index (as the SDKs do) are the whole answer's calls.
                List<JsonNode> events = RouterCalls.events(fixture.router.port(), "/v1/chat/completions", body.deepCopy().put("stream", true).toString());
                Map<Integer, ObjectNode> acc = new TreeMap<>();
                String finish = null;
                int logprobs = 0;
                for (JsonNode e : events) {
                    for (JsonNode sc : e.path("choices")) {
                        JsonNode d = sc.path("delta");
                        assertFalse(d.path("content").isTextual(), "no content beside calls: " + e);
                        for (JsonNode tc : d.path("tool_calls")) {
                            ObjectNode a = acc.computeIfAbsent(tc.path("index").asInt(), x -> ToolCallingTest.JSON.createObjectNode());
                            if (tc.has("id")) a.put("name", tc.path("function").path("name").asText()).put("arguments", "");
                            a.put("arguments", a.path("arguments").asText() + tc.path("function").path("arguments").asText());
                        }
                        if (sc.path("logprobs").has("content")) logprobs += sc.path("logprobs").path("content").size();
                        if (sc.hasNonNull("finish_reason")) finish = sc.path("finish_reason").asText();
                    }
                }
                assertEquals(ch.path("finish_reason").asText(), finish, what);
                assertEquals(calls.size(), acc.size(), what + ": " + events);
                for (int k = 0; k < calls.size(); k++) {
                    assertEquals(calls.get(k).path("function").path("name").asText(), acc.get(k).path("name").asText(), what);
                    assertEquals(calls.get(k).path("function").path("arguments").asText(), acc.get(k).path("arguments").asText(), what);
                }
                assertEquals(ch.path("logprobs").path("content").size(), logprobs, what + ": every token's log probabilities");
            }
        }
        assertTrue(whole >= 2, "some answers are whole calls: " + whole);
        assertTrue(nested >= 1, "some trees have kids: " + nested);
    }

    @Test
    void aRecursionWithNoWayOutIsA400NamingTheToolAndThePlace() throws Exception {
        ObjectNode body = request(0).put("tool_choice", "required").put("max_tokens", 8);
        String never = "{\"type\":\"object\",\"properties\":{\"n\":{\"$ref\":\"#/$defs/N\"}},\"required\":[\"n\"],\"$defs\":{\"N\":{\"type\":\"object\","
                + "\"properties\":{\"c\":{\"$ref\":\"#/$defs/N\"}},\"required\":[\"c\"]}}}";
        ((ObjectNode) body.get("tools").get(1).get("function")).set("parameters", ToolCallingTest.JSON.readTree(never));
        var r = RouterCalls.post(fixture.router.port(), "/v1/chat/completions", body.toString());
        assertEquals(400, r.statusCode(), r.body());
        JsonNode error = ToolCallingTest.JSON.readTree(r.body()).path("error");
        assertEquals("tools[1].function.parameters.$defs.N.properties.c", error.path("param").asText(), r.body());
        assertTrue(error.path("message").asText().contains("matches no text at all"), r.body());
    }
}
