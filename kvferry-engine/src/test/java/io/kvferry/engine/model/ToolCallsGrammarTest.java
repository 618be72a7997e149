package io.kvferry.engine.model;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dk.brics.automaton.RunAutomaton;
import io.kvferry.engine.TestModels;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.statistics.Statistics;
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
 * Tool calls whose {@code parameters} recurse, served by a grammar ({@link ToolCalls#language}): the whole calls' language
 * (names, wrapping, parallel calls, auto's text, a named tool) against the DFA of the same tools with each recursive schema
 * unrolled to a few levels ({@link JsonSchemaGrammarTest#unroll}), as {@link JsonSchemaGrammarTest} holds a recursive
 * {@code response_format}; the scanner reads its calls, valid for their schemas; refusals name the tool and the place; a
 * tool set without recursion keeps its DFA.
 */
class ToolCallsGrammarTest {
    static final String WEATHER = "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":8},"
            + "\"unit\":{\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\"]}";
    /** A filter expression, as MCP servers publish them: a leaf condition, or and / or of sub-filters. */
    static final String FILTER = """
            {"type":"object","properties":{"filter":{"$ref":"#/$defs/F"}},"required":["filter"],
            "$defs":{"F":{"anyOf":[{"type":"object","properties":{"field":{"enum":["a","b"]},"eq":{"type":"integer","minimum":0,"maximum":9}},
            "required":["field","eq"]},{"type":"object","properties":{"op":{"enum":["and","or"]},"of":{"type":"array","items":{"$ref":"#/$defs/F"},
            "minItems":1,"maxItems":2}},"required":["op","of"]}]}}}""";

    private static String source(String mode, boolean parallel, List<String> schemas, String only) {
        List<String> names = List.of("tree", "get_weather", "search").subList(0, schemas.size());
        return ToolCalls.source(mode, parallel, names, schemas, only);
    }

    private static Earley grammar(String source) {
        JsonSchemaAutomaton.Language l = ToolCalls.language(source);
        assertNull(l.automaton(), "a recursive tool's calls take the grammar path");
        assertNotNull(l.grammar());
        return new Earley(l.grammar());
    }

    /**
     * Every mode, against the DFA of the same tools with the recursive ones unrolled: every text the 3-level unrolling
     * admits is a whole match of the grammar, and a single-character mutation of one is a match (whole and as a prefix)
     * exactly where it is of the 5-level unrolling; the calls read from each are valid for their tools' schemas.
     */
    @Test
    void theCallsGrammarAcceptsExactlyTheUnrolledCalls() throws Exception {
        SplittableRandom r = new SplittableRandom(20261207);
        String alphabet = "{}[],:\" 0123456789-.nulvaxyc<>/_\n";
        List<String> schemas = List.of(JsonSchemaGrammarTest.TREE, WEATHER, FILTER);
        record Case(String mode, boolean parallel, String only) {
        }
        for (Case c : List.of(new Case("required", true, null), new Case("required", false, null), new Case("auto", true, null),
                new Case("auto", false, null), new Case("required", false, "tree"), new Case("required", false, "search"))) {
            String source = source(c.mode(), c.parallel(), schemas, c.only());
            Earley e = grammar(source);
            List<String> shallowSchemas = List.of(JsonSchemaGrammarTest.unroll(schemas.get(0), 3), WEATHER, JsonSchemaGrammarTest.unroll(FILTER, 3));
            List<String> deeperSchemas = List.of(JsonSchemaGrammarTest.unroll(schemas.get(0), 5), WEATHER, JsonSchemaGrammarTest.unroll(FILTER, 5));
            RunAutomaton shallow = new RunAutomaton(ToolCalls.language(source(c.mode(), c.parallel(), shallowSchemas, c.only())).automaton());
            RunAutomaton deeper = new RunAutomaton(ToolCalls.language(source(c.mode(), c.parallel(), deeperSchemas, c.only())).automaton());
            // auto's walks are mostly text: every other one walks its calls (required's language, a part of auto's).
            RunAutomaton calls = c.mode().equals("auto")
                    ? new RunAutomaton(ToolCalls.language(source("required", c.parallel(), shallowSchemas, c.only())).automaton()) : shallow;
            int nested = 0, several = 0;
            for (int i = 0; i < 30; i++) {
                String text = OutputConstraintTest.walk(i % 2 == 0 ? calls : shallow, r, r.nextInt(250));
                assertNotNull(text, c.toString());
                assertTrue(e.matches(text), c + " admits " + text);
                if (text.contains("\"children\": [{") || text.contains("\"children\":[{") || text.contains("\"op\"")) nested++;
                ToolCalls.Scanner s = new ToolCalls.Scanner();
                s.push(text);
                if (text.startsWith(ToolCalls.OPEN)) {
                    assertTrue(s.complete(), c + ": " + text);
                    if (s.calls().size() > 1) several++;
                    if (!c.parallel()) assertEquals(1, s.calls().size(), text);
                    for (ToolCalls.Call call : s.calls()) {
                        if (c.only() != null) assertEquals(c.only(), call.name());
                        String schema = schemas.get(List.of("tree", "get_weather", "search").indexOf(call.name()));
                        JsonNode root = JsonSchemaKeywordsTest.JSON.readTree(schema);
                        JsonNode args = JsonSchemaKeywordsTest.JSON.readTree(call.arguments());
                        assertTrue(JsonSchemaSoundnessTest.valid(root, root, args), call + " in " + text);
                    }
                } else {
                    assertEquals("auto", c.mode(), text);
                }
                for (int m = 0; m < 8; m++) {
                    int at = r.nextInt(Math.max(1, text.length()));
                    char ch = alphabet.charAt(r.nextInt(alphabet.length()));
                    String t = text.isEmpty() ? String.valueOf(ch) : switch (m % 3) {
                        case 0 -> text.substring(0, at) + text.substring(at + 1);
                        case 1 -> text.substring(0, at) + ch + text.substring(at);
                        default -> text.substring(0, at) + ch + text.substring(at + 1);
                    };
                    assertEquals(deeper.run(t), e.matches(t), c + " whole: " + t);
                    String pre = t.substring(0, r.nextInt(t.length() + 1));
                    assertEquals(JsonSchemaGrammarTest.dfaStarts(deeper, pre), JsonSchemaGrammarTest.startsMatch(e, pre), c + " prefix: " + pre);
                }
            }
            if (c.only() == null || !c.only().equals("get_weather")) assertTrue(nested > 3, c + ": the walks nest (" + nested + ")");
            if (c.parallel()) assertTrue(several > 0, c + ": parallel calls walked");
        }
    }

    /**
     * For random tool sets without recursion (one to three tools, each parameters an object of the soundness test's random
     * schemas, $defs included), the calls' grammar ({@link ToolCalls#language} forced onto its grammar path) accepts
     * exactly what their DFA does, whole and as a prefix, in every mode (auto, required, a named tool; parallel_tool_calls
     * true and false): on texts the DFA generates (auto's: its text and its calls), several calls joined, and mutations of
     * them (a character of the calls' wrapping, a line break or a space inserted, deleted or replaced).
     */
    @Property(tries = 40, seed = "20261207")
    void theCallsGrammarAcceptsWhatTheDfaDoesForToolsWithoutRecursion(@ForAll @IntRange(min = 0, max = 1_000_000) int seed) {
        SplittableRandom r = new SplittableRandom(seed);
        int tools = 1 + r.nextInt(3);
        List<String> schemas = new ArrayList<>();
        for (int t = 0; t < tools; t++) {
            ObjectNode root = JsonNodeFactory.instance.objectNode().put("type", "object");
            ObjectNode defs = JsonNodeFactory.instance.objectNode();
            ObjectNode props = root.putObject("properties");
            for (int p = 0, n = 1 + r.nextInt(2); p < n; p++) props.set("p" + p, new JsonSchemaSoundnessTest.Gen(r, defs).schema(2));
            if (r.nextBoolean()) root.putArray("required").add("p0");
            if (!defs.isEmpty()) root.set("$defs", defs);
            schemas.add(root.toString());
        }
        String mode = r.nextBoolean() ? "auto" : "required";
        boolean parallel = r.nextBoolean();
        String only = mode.equals("required") && r.nextInt(3) == 0 ? List.of("tree", "get_weather", "search").get(r.nextInt(tools)) : null;
        String source = source(mode, parallel, schemas, only);
        String calledSource = source("required", parallel, schemas, only);
        RunAutomaton run;
        RunAutomaton called;
        try {
            run = new RunAutomaton(ToolCalls.language(source).automaton());
            called = new RunAutomaton(ToolCalls.language(calledSource).automaton());
        } catch (IllegalArgumentException e) {
            Statistics.label("tools").collect("refused");
            return;
        }
        Earley e;
        try {
            e = new Earley(ToolCalls.language(source, true).grammar());
        } catch (ClientRegex.TooComplex tooLarge) {
            Statistics.label("tools").collect("grammar too large");
            return;
        }
        Statistics.label("tools").collect("compared " + mode + (parallel ? " parallel" : "") + (only != null ? " named" : ""));
        String alphabet = "{}[],:\" 0123456789-.eEtrufalsnp<>/_\n\\x";
        for (int i = 0; i < 8; i++) {
            // auto's own walks are mostly text: every other one walks its calls (required's language, a part of auto's).
            String text = OutputConstraintTest.walk(i % 2 == 0 ? called : run, r, 60);
            if (text == null) return;
            List<String> cases = new ArrayList<>(List.of(text, text + "\n" + text, text + " " + text, text + text));
            for (int m = 0; m < 8 && !text.isEmpty(); m++) {
                int at = r.nextInt(text.length());
                char c = alphabet.charAt(r.nextInt(alphabet.length()));
                cases.add(switch (m % 3) {
                    case 0 -> text.substring(0, at) + text.substring(at + 1);
                    case 1 -> text.substring(0, at) + c + text.substring(at);
                    default -> text.substring(0, at) + c + text.substring(at + 1);
                });
            }
            for (String t : cases) {
                assertEquals(run.run(t), e.matches(t), source + " whole: " + t);
                for (int p = 0; p <= t.length(); p += 1 + t.length() / 6) {
                    String pre = t.substring(0, p);
                    assertEquals(JsonSchemaGrammarTest.dfaStarts(run, pre), JsonSchemaGrammarTest.startsMatch(e, pre), source + " prefix: " + pre);
                }
            }
        }
    }

    @Test
    void deeperThanAnyUnrollingAndTheLayoutsEdges() {
        Earley e = grammar(source("required", true, List.of(JsonSchemaGrammarTest.TREE, WEATHER), null));
        String deep = "{\"value\":0,\"children\":[]}";
        for (int i = 1; i <= 12; i++) deep = "{\"value\":" + i + ",\"children\":[" + deep + "]}";
        String call = "<tool_call>{\"name\": \"tree\", \"arguments\": " + deep + "}</tool_call>";
        String weather = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>";
        assertTrue(e.matches(call));
        assertTrue(e.matches(call + "\n" + weather + "\n" + call));
        assertFalse(e.matches(call + "\n"), "no trailing joiner");
        assertFalse(e.matches(call + " " + weather), "calls are joined by a line break");
        assertFalse(e.matches("<tool_call>{\"name\": \"tree\", \"arguments\": {\"value\":1}}</tool_call>"), "children required");
        assertFalse(e.matches("<tool_call>{\"name\": \"nope\", \"arguments\": {}}</tool_call>"));
        assertFalse(e.matches("Once upon a time"), "required: calls only");
        assertFalse(e.matches(""));
        Earley auto = grammar(source("auto", false, List.of(JsonSchemaGrammarTest.TREE), null));
        assertTrue(auto.matches("Once upon a time.\nThe end."), "auto's text, line breaks included");
        assertTrue(auto.matches(""));
        assertTrue(auto.matches("<tool"), "a text that only starts like a call's opening");
        assertTrue(auto.matches("\u0000\u001f"), "control characters in auto's text are characters, not holes");
        assertFalse(auto.matches("<tool_call>hello"));
        assertTrue(auto.matches(call));
        assertFalse(auto.matches(call + "\n" + call), "parallel_tool_calls false: one call");
    }

    @Test
    void aToolSetWithoutRecursionInItsCallsKeepsItsDfa() {
        JsonSchemaAutomaton.Language plain = ToolCalls.language(source("required", true, List.of(WEATHER, WEATHER.replace("8", "9")), null));
        assertNotNull(plain.automaton());
        assertNull(plain.grammar());
        // A named tool without recursion beside a recursive one: its calls alone, a DFA; the recursive one still checked.
        JsonSchemaAutomaton.Language named = ToolCalls.language(source("required", false, List.of(JsonSchemaGrammarTest.TREE, WEATHER), "get_weather"));
        assertNotNull(named.automaton());
        String never = "{\"type\":\"object\",\"properties\":{\"n\":{\"$ref\":\"#/$defs/N\"}},\"required\":[\"n\"],\"$defs\":{\"N\":{\"type\":\"object\","
                + "\"properties\":{\"c\":{\"$ref\":\"#/$defs/N\"}},\"required\":[\"c\"]}}}";
        ToolCalls.Fault f = assertThrows(ToolCalls.Fault.class, () -> ToolCalls.language(source("required", false, List.of(never, WEATHER), "get_weather")));
        assertEquals(0, f.tool());
    }

    /**
     * A tool's parameters as an MCP server or Pydantic writes a recursive model: the root a $ref beside {@code "type":
     * "object"} (MCP requires it) and annotations, a $ref beside a description inside: served (a 400 before), the calls'
     * arguments those of the plain schema.
     */
    @Test
    void aRootRefBesideTypeObjectAndAnnotationsIsServed() {
        String mcp = JsonSchemaGrammarTest.TREE.substring(0, JsonSchemaGrammarTest.TREE.length() - 1) + ",\"type\":\"object\",\"title\":\"Tree\"}";
        mcp = mcp.replace("\"items\":{\"$ref\":\"#/$defs/Node\"}", "\"items\":{\"$ref\":\"#/$defs/Node\",\"description\":\"a kid\",\"default\":{}}");
        assertTrue(mcp.endsWith("\"type\":\"object\",\"title\":\"Tree\"}") && mcp.contains("a kid"), mcp);
        Earley e = grammar(source("required", true, List.of(mcp, WEATHER), null));
        assertTrue(e.matches("<tool_call>{\"name\": \"tree\", \"arguments\": {\"value\":1,\"children\":[{\"value\":2,\"children\":[]}]}}</tool_call>"));
        assertFalse(e.matches("<tool_call>{\"name\": \"tree\", \"arguments\": {\"value\":1}}</tool_call>"));
    }

    @Test
    void refusalsNameTheToolAndThePlace() {
        String never = "{\"type\":\"object\",\"properties\":{\"n\":{\"$ref\":\"#/$defs/N\"}},\"required\":[\"n\"],\"$defs\":{\"N\":{\"type\":\"object\","
                + "\"properties\":{\"c\":{\"$ref\":\"#/$defs/N\"}},\"required\":[\"c\"]}}}";
        ToolCalls.Fault f = assertThrows(ToolCalls.Fault.class, () -> ToolCalls.language(source("auto", true, List.of(JsonSchemaGrammarTest.TREE, never), null)));
        assertEquals(1, f.tool());
        assertEquals("#/$defs/N/properties/c", f.at());
        assertTrue(f.getMessage().startsWith("matches no text at all: its recursive $ref '#/$defs/N'"), f.getMessage());
        // Over 32 recursive definitions: each D_i holds D_i and D_{i+1}.
        StringBuilder defs = new StringBuilder();
        for (int i = 0; i < 34; i++) {
            defs.append(i == 0 ? "" : ",").append("\"D").append(i).append("\":{\"type\":\"object\",\"properties\":{\"s\":{\"$ref\":\"#/$defs/D")
                    .append(i).append("\"},\"t\":{\"$ref\":\"#/$defs/D").append(i + 1 < 34 ? i + 1 : 0).append("\"}}}");
        }
        String many = "{\"type\":\"object\",\"properties\":{\"d\":{\"$ref\":\"#/$defs/D0\"}},\"$defs\":{" + defs + "}}";
        ToolCalls.Fault m = assertThrows(ToolCalls.Fault.class, () -> ToolCalls.language(source("required", true, List.of(WEATHER, many), null)));
        assertEquals(1, m.tool());
        assertTrue(m.getMessage().contains("over " + JsonSchemaGrammar.MAX_HOLES + " recursive definitions"), m.getMessage());
        // A recursive $ref beside keywords that constrain the same value: its place.
        String beside = JsonSchemaGrammarTest.TREE.replace("\"items\":{\"$ref\":\"#/$defs/Node\"}", "\"items\":{\"$ref\":\"#/$defs/Node\",\"type\":\"object\",\"required\":[]}");
        ToolCalls.Fault b = assertThrows(ToolCalls.Fault.class, () -> ToolCalls.language(source("required", true, List.of(beside), null)));
        assertEquals("#/$defs/Node/properties/children/items", b.at());
        // The grammar's size: a recursive tool with a large enum, named.
        StringBuilder words = new StringBuilder();
        SplittableRandom r = new SplittableRandom(7);
        for (int i = 0; i < 1_000; i++) {
            words.append(i == 0 ? "\"" : ",\"");
            for (int k = 0; k < 10; k++) words.append((char) ('a' + r.nextInt(26)));
            words.append('"');
        }
        String big = "{\"$defs\":{\"N\":{\"type\":\"object\",\"properties\":{\"w\":{\"enum\":[" + words
                + "]},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/N\"}}}}},\"$ref\":\"#/$defs/N\"}";
        ClientRegex.TooComplex t = assertThrows(ClientRegex.TooComplex.class, () -> ToolCalls.language(source("required", true, List.of(WEATHER, big), null)));
        assertTrue(t.getMessage().contains("tools[1] (get_weather)"), t.getMessage());
        assertTrue(t.getMessage().contains("over " + JsonSchemaGrammar.MAX_SYMBOLS + " symbols"), t.getMessage());
    }

    /** Through the compiler, as the router and the engines compile sampling_params.tool_calls: a grammar, cached as any spec. */
    @Test
    void theCompilerServesTheGrammarUnderTheToolCallsKind() throws Exception {
        TestModels.requireStories();
        OutputConstraint.Compiler compiler = new OutputConstraint.Compiler(ModelFiles.load(null, null).tokenizer());
        String source = source("required", true, List.of(JsonSchemaGrammarTest.TREE, WEATHER), null);
        OutputConstraint c = compiler.compile(OutputConstraint.Kind.TOOL_CALLS, source, OutputConstraint.Compiler.ANYONE);
        assertEquals(OutputConstraint.Kind.TOOL_CALLS, c.kind());
        assertTrue(c.matches("<tool_call>{\"name\": \"tree\", \"arguments\": {\"value\":1,\"children\":[{\"value\":2,\"children\":[]}]}}</tool_call>"));
        assertTrue(c.startsMatch("<tool_call>{\"name\": \"tree\", \"arguments\": {\"value\":1,\"children\":[{\"value\":2,\"children\":[{"));
        assertEquals(c, compiler.compile(OutputConstraint.Kind.TOOL_CALLS, source, OutputConstraint.Compiler.ANYONE));
    }
}
