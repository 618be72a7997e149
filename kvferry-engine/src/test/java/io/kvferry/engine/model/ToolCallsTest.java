package io.kvferry.engine.model;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dk.brics.automaton.RunAutomaton;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Tool calls as text: render then parse gives the calls back; text cut anywhere or malformed is no calls; and every text
 * the language of a request admits is either calls (of its tools, their arguments valid for each tool's schema under the
 * validator of {@link JsonSchemaSoundnessTest}, as many as the mode allows) or, with {@code auto} only, text that does not
 * start with {@link ToolCalls#OPEN}.
 */
class ToolCallsTest {
    private static final JsonNodeFactory F = JsonNodeFactory.instance;
    private static final String NAME_CHARS = "abcXYZ019_-";

    @Property(seed = "20261207", tries = 200)
    void renderThenParseGivesTheCallsBack(@ForAll @IntRange(min = 0, max = 1_000_000) int seed) {
        SplittableRandom r = new SplittableRandom(seed);
        List<ToolCalls.Call> calls = new ArrayList<>();
        for (int i = 1 + r.nextInt(3); i > 0; i--) calls.add(new ToolCalls.Call(name(r), value(r, 2, true).toString()));
        String text = ToolCalls.render(calls);
        assertEquals(calls, ToolCallsReference.parse(text), text);
        // Cut anywhere: no calls, unless the cut falls right after a whole call (then the calls before it).
        for (int cut = 0; cut < text.length(); cut++) {
            List<ToolCalls.Call> got = ToolCallsReference.parse(text.substring(0, cut));
            if (got != null) assertEquals(calls.subList(0, got.size()), got, text.substring(0, cut));
            if (got != null) assertEquals(ToolCalls.render(got), text.substring(0, cut));
        }
    }

    @Test
    void spacesInTheModelsJsonAreDroppedFromTheArguments() {
        List<ToolCalls.Call> calls = ToolCallsReference.parse("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, 2.50, \"x y\"], \"b\": {}}}</tool_call>");
        assertEquals(List.of(new ToolCalls.Call("f", "{\"a\":[1,2.50,\"x y\"],\"b\":{}}")), calls);
        assertEquals(List.of(new ToolCalls.Call("g", "{}")), ToolCallsReference.parse("<tool_call>{\"arguments\":{},\"name\":\"g\"}</tool_call>"));
    }

    @Test
    void theScannerReadsTheMasksLayoutAndStopsOutsideIt() {
        String text = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, 2.50, \"x } y\\\"\"], \"b\": {}}}</tool_call>\n"
                + "<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call>";
        ToolCalls.Scanner s = new ToolCalls.Scanner();
        List<ToolCalls.Delta> deltas = s.push(text);
        assertEquals(ToolCallsReference.parse(text), s.calls());
        assertTrue(s.complete());
        assertEquals(List.of(new ToolCalls.Delta(0, "f", ""), new ToolCalls.Delta(0, null, "{\"a\":[1,2.50,\"x } y\\\"\"],\"b\":{}}"),
                new ToolCalls.Delta(1, "g", ""), new ToolCalls.Delta(1, null, "{}")), deltas, "a brace in a string is no end");
        // parse takes another key order; the mask never writes it, and the scanner stops there, keeping nothing of it.
        ToolCalls.Scanner other = new ToolCalls.Scanner();
        assertTrue(other.push("<tool_call>{\"arguments\":{},\"name\":\"g\"}</tool_call>").isEmpty());
        assertTrue(other.failed() && other.calls().isEmpty() && !other.complete());
        // Text after the calls: failed, the calls so far kept, not complete.
        ToolCalls.Scanner after = new ToolCalls.Scanner();
        after.push(text + " ");
        assertTrue(after.failed() && !after.complete());
        assertEquals(2, after.calls().size());
    }

    @Test
    void malformedTextIsNoCalls() {
        String[] bad = {
                "", "hello", " <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
                "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> ",
                "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n",
                "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
                "<tool_call>{\"name\": \"f\", \"arguments\": {}}",
                "<tool_call>{\"name\": \"f\", \"arguments\": {}, \"x\": 1}</tool_call>",
                "<tool_call>{\"name\": \"f\"}</tool_call>",
                "<tool_call>{\"arguments\": {}}</tool_call>",
                "<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>",
                "<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>",
                "<tool_call>{\"name\": \"f\", \"name\": \"g\", \"arguments\": {}}</tool_call>",
                "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 01}}</tool_call>",
                "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": }}</tool_call>",
                "<tool_call>[]</tool_call>",
        };
        for (String text : bad) assertNull(ToolCallsReference.parse(text), text);
    }

    /** Tools' schemas, each with its validator's view. */
    private static final String[] SCHEMAS = {
            "{\"type\":\"object\",\"properties\":{}}",
            "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":6},\"unit\":{\"enum\":[\"c\",\"f\"]}},"
                    + "\"required\":[\"city\"]}",
            "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":-3,\"maximum\":40},\"ok\":{\"type\":\"boolean\"},"
                    + "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"pattern\":\"[a-z]{1,3}\"},\"maxItems\":3}},"
                    + "\"required\":[\"n\",\"tags\"]}",
            "{\"type\":\"object\",\"properties\":{\"q\":{\"anyOf\":[{\"type\":\"number\",\"exclusiveMinimum\":0},{\"type\":\"null\"}]}},"
                    + "\"required\":[\"q\"],\"additionalProperties\":false}",
    };

    @Property(seed = "20261207", tries = 60)
    void everyAdmittedTextIsCallsOfTheToolsWithValidArguments(@ForAll @IntRange(min = 0, max = 1_000_000) int seed) throws Exception {
        SplittableRandom r = new SplittableRandom(seed);
        int tools = 1 + r.nextInt(SCHEMAS.length);
        List<String> names = new ArrayList<>(), schemas = new ArrayList<>();
        for (int i = 0; i < tools; i++) {
            names.add("tool_" + i + "-" + name(r));
            schemas.add(SCHEMAS[r.nextInt(SCHEMAS.length)]);
        }
        String mode = r.nextBoolean() ? "auto" : "required";
        boolean parallel = r.nextBoolean();
        RunAutomaton run = new RunAutomaton(ToolCalls.language(ToolCalls.source(mode, parallel, names, schemas)).automaton());
        int callsSeen = 0;
        for (int i = 0; i < 40; i++) {
            String text = OutputConstraintTest.walk(run, r, r.nextInt(200));
            assertNotNull(text);
            List<ToolCalls.Call> calls = ToolCallsReference.parse(text);
            if (calls == null) {
                assertEquals("auto", mode, "required admits only calls: " + text);
                assertFalse(text.startsWith(ToolCalls.OPEN), "auto's text does not start a call: " + text);
                continue;
            }
            callsSeen++;
            assertFalse(calls.isEmpty());
            // Read as a stream reads it, in pieces: the same calls, whole; every cut of it reads without leaving the layout,
            // its calls those whose names are complete, each one's arguments a start of the whole one's.
            ToolCalls.Scanner whole = new ToolCalls.Scanner();
            for (int at = 0; at < text.length(); at += 5) whole.push(text.substring(at, Math.min(text.length(), at + 5)));
            assertEquals(calls, whole.calls(), text);
            assertTrue(whole.complete(), text);
            int cut = r.nextInt(text.length());
            ToolCalls.Scanner part = new ToolCalls.Scanner();
            part.push(text.substring(0, cut));
            assertFalse(part.failed() || part.complete() && !text.startsWith(ToolCalls.BETWEEN, cut), text + " cut at " + cut);
            List<ToolCalls.Call> partCalls = part.calls();
            for (int k = 0; k < partCalls.size(); k++) {
                assertEquals(calls.get(k).name(), partCalls.get(k).name());
                assertTrue(calls.get(k).arguments().startsWith(partCalls.get(k).arguments()), text + " cut at " + cut);
            }
            if (!parallel) assertEquals(1, calls.size(), text);
            for (ToolCalls.Call c : calls) {
                int tool = names.indexOf(c.name());
                assertTrue(tool >= 0, "a tool's name: " + text);
                JsonNode schema = JsonSchemaKeywordsTest.JSON.readTree(schemas.get(tool));
                JsonNode args = JsonSchemaKeywordsTest.JSON.readTree(c.arguments());
                assertTrue(JsonSchemaSoundnessTest.valid(schema, schema, args), schemas.get(tool) + " admits " + c.arguments() + " in " + text);
            }
            // What the router sends back in a conversation is admitted again.
            assertTrue(run.run(ToolCalls.render(calls)), text);
        }
        if (mode.equals("required")) assertEquals(40, callsSeen);
    }

    @Test
    void aNamedCallIsExactlyOneOfThatTool() {
        RunAutomaton run = new RunAutomaton(ToolCalls.language(ToolCalls.source("required", false, List.of("get_weather"), List.of(SCHEMAS[1]))).automaton());
        assertTrue(run.run("<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>"));
        assertTrue(run.run("<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Rome\",\"unit\":\"c\"}}</tool_call>"));
        assertFalse(run.run("<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"c\"}}</tool_call>"), "city is required");
        assertFalse(run.run("<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>\n"
                + "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>"), "one call");
        assertFalse(run.run("Paris"));
        RunAutomaton auto = new RunAutomaton(ToolCalls.language(ToolCalls.source("auto", true, List.of("f"), List.of(SCHEMAS[0]))).automaton());
        assertTrue(auto.run("Once upon a time"));
        assertTrue(auto.run("<tool"), "a text that only starts like a call's opening");
        assertTrue(auto.run(""));
        assertFalse(auto.run("<tool_call>hello"));
        assertTrue(auto.run("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"));
    }

    @Test
    void aCallsArgumentsAreAlwaysAnObjectWhateverTheSchemaAdmits() {
        // parameters {} (any JSON value), an anyOf with a string branch, an enum of numbers: the parser reads only an object's
        // arguments, so a call with a string or a number would be no calls at all (required's answer then silently text).
        for (String schema : List.of("{}", "{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"object\"}]}")) {
            RunAutomaton run = new RunAutomaton(ToolCalls.language(ToolCalls.source("required", true, List.of("f"), List.of(schema))).automaton());
            assertFalse(run.run("<tool_call>{\"name\": \"f\", \"arguments\": 5}</tool_call>"), schema);
            assertFalse(run.run("<tool_call>{\"name\": \"f\", \"arguments\": \"x\"}</tool_call>"), schema);
            assertTrue(run.run("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"), schema);
        }
        // A schema that admits no object at all is a fault naming the tool.
        ToolCalls.Fault f = assertThrows(ToolCalls.Fault.class, () -> ToolCalls.language(ToolCalls.source("required", true, List.of("a", "b"),
                List.of(SCHEMAS[0], "{\"enum\":[1,2]}"))));
        assertEquals(1, f.tool());
        assertEquals("#", f.at());
    }

    @Test
    void aHostileSourceIsARefusalNeverACrashOrAGuess() {
        // An engine's sampling_params.tool_calls need not come from the router: each is an IllegalArgumentException (a 400).
        String f = "[{\"name\":\"f\",\"parameters\":\"{}\"}]";
        for (String source : List.of("", "null", "[]", "{}", "{\"mode\":\"auto\"}", "{\"mode\":\"auto\",\"tools\":[5]}",
                "{\"mode\":\"auto\",\"tools\":[{\"name\":\"f\",\"parameters\":\"[\"}]}", "{\"mode\":\"required\",\"name\":5,\"tools\":" + f + "}",
                "{\"mode\":\"auto\",\"name\":\"f\",\"tools\":" + f + "}", "{\"mode\":\"required\",\"name\":\"g\",\"tools\":" + f + "}",
                "{\"mode\":\"required\",\"parallel\":\"no\",\"tools\":" + f + "}", "[".repeat(5000),
                "{\"mode\":\"auto\",\"tools\":" + ("," + f.substring(1, f.length() - 1)).repeat(ToolCalls.MAX_TOOLS + 1).replaceFirst(",", "[") + "]}")) {
            assertThrows(IllegalArgumentException.class, () -> ToolCalls.language(source), () -> source.substring(0, Math.min(200, source.length())));
        }
    }

    @Test
    void aToolsSchemaFaultNamesTheToolAndThePlace() {
        ToolCalls.Fault f = assertThrows(ToolCalls.Fault.class, () -> ToolCalls.language(ToolCalls.source("required", true, List.of("a", "b"),
                List.of(SCHEMAS[0], "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\",\"patternProperties\":{}}}}"))));
        assertEquals(1, f.tool());
        assertEquals("#/properties/x", f.at());
    }

    private static String name(SplittableRandom r) {
        StringBuilder b = new StringBuilder();
        for (int i = 1 + r.nextInt(12); i > 0; i--) b.append(NAME_CHARS.charAt(r.nextInt(NAME_CHARS.length())));
        return b.toString();
    }

    /** A random JSON value (an object at the top when {@code object}), strings with escapes and spaces in them. */
    private static JsonNode value(SplittableRandom r, int depth, boolean object) {
        int kind = object ? 0 : r.nextInt(depth > 0 ? 7 : 5);
        return switch (kind) {
            case 0 -> {
                ObjectNode o = F.objectNode();
                for (int i = r.nextInt(4); i > 0; i--) o.set("k" + r.nextInt(100) + (r.nextBoolean() ? " \"q\"" : ""), value(r, depth - 1, false));
                yield o;
            }
            case 1 -> F.textNode(List.of("a b", "x\"y", "tab\there", "</tool_call>", "}", "é\n", "").get(r.nextInt(7)));
            case 2 -> F.numberNode(r.nextInt(-1000, 1000));
            case 3 -> F.booleanNode(r.nextBoolean());
            case 4 -> F.nullNode();
            case 5 -> {
                ArrayNode a = F.arrayNode();
                for (int i = r.nextInt(3); i > 0; i--) a.add(value(r, depth - 1, false));
                yield a;
            }
            default -> value(r, depth - 1, true);
        };
    }
}
