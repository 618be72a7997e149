package io.kvferry.engine.model;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dk.brics.automaton.RunAutomaton;
import io.kvferry.engine.TestModels;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.statistics.Statistics;
import org.junit.jupiter.api.Test;

import java.util.ArrayDeque;
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
 * Recursive {@code $ref}s served by a grammar ({@link JsonSchemaGrammar}, through {@link JsonSchemaAutomaton#language}):
 * a tree node, a linked list, mutual recursion, recursion through anyOf and arrays, each exact in the DFA path's layout;
 * a recursion that never ends and a recursive $ref beside other keywords refused; the grammar's size bounded; each
 * recursive schema against the DFA of its unrolling to a few levels; and, for non-recursive schemas, the grammar path
 * accepts exactly what the DFA does (texts the DFA generates and mutations).
 */
class JsonSchemaGrammarTest {
    static final String TREE = """
            {"$defs":{"Node":{"type":"object","properties":{"value":{"type":"integer"},
            "children":{"type":"array","items":{"$ref":"#/$defs/Node"}}},"required":["value","children"]}},
            "$ref":"#/$defs/Node"}""";
    static final String LIST = """
            {"definitions":{"L":{"type":"object","properties":{"v":{"type":"string","maxLength":3},
            "next":{"anyOf":[{"$ref":"#/definitions/L"},{"type":"null"}]}},"required":["v","next"]}},
            "type":"object","properties":{"head":{"$ref":"#/definitions/L"}},"required":["head"]}""";
    static final String MUTUAL = """
            {"$defs":{"A":{"type":"object","properties":{"name":{"enum":["x","y"]},"b":{"$ref":"#/$defs/B"}},"required":["name"]},
            "B":{"type":"array","items":{"$ref":"#/$defs/A"},"maxItems":2}},"$ref":"#/$defs/A"}""";
    static final String EXPR = """
            {"$defs":{"E":{"anyOf":[{"type":"integer","minimum":0,"maximum":99},
            {"type":"array","items":{"$ref":"#/$defs/E"},"minItems":1,"maxItems":3}]}},"$ref":"#/$defs/E"}""";

    private static EbnfGrammar grammarOf(String schema) {
        JsonSchemaAutomaton.Language l = JsonSchemaAutomaton.language(schema);
        assertNull(l.automaton(), "a recursive schema takes the grammar path");
        assertNotNull(l.grammar());
        return l.grammar();
    }

    static boolean startsMatch(Earley e, String text) {
        Earley.Budget b = new Earley.Budget(Earley.MAX_WORK * (text.length() + 1L));
        List<Earley.ItemSet> chart = e.start(b);
        for (int i = 0; i < text.length(); i++) if (!e.read(chart, text.charAt(i), b)) return false;
        return true;
    }

    @Test
    void aTreeNodeNestsToAnyDepthInTheDfaLayout() {
        Earley e = new Earley(grammarOf(TREE));
        assertTrue(e.matches("{\"value\":1,\"children\":[]}"));
        assertTrue(e.matches("{\"value\": -12, \"children\": [{\"value\":2,\"children\":[]}, {\"value\":3,\"children\":[]}]}"));
        String deep = "{\"value\":0,\"children\":[]}";
        for (int i = 1; i <= 12; i++) deep = "{\"value\":" + i + ",\"children\":[" + deep + "]}";
        assertTrue(e.matches(deep), deep);
        assertFalse(e.matches("{\"value\":1}"), "required children");
        assertFalse(e.matches("{\"children\":[],\"value\":1}"), "the declared order, as the DFA path");
        assertFalse(e.matches("{\"value\":1,\"children\":[]} "), "no trailing space");
        assertFalse(e.matches("{\"value\":1,  \"children\":[]}"), "one optional space at most");
        assertFalse(e.matches("{\"value\":1.5,\"children\":[]}"), "an integer");
        assertFalse(e.matches("{\"value\":1,\"children\":[1]}"), "items are nodes");
        assertTrue(startsMatch(e, "{\"value\":1,\"children\":[{\"value\":2,\"ch"));
        assertFalse(startsMatch(e, "{\"value\":1,\"children\":[{\"valu3"));
        // The DFA path alone (compile) still refuses it: language takes the grammar path.
        JsonSchemaAutomaton.Fault f = assertThrows(JsonSchemaAutomaton.Fault.class, () -> JsonSchemaAutomaton.compile(TREE));
        assertTrue(f.getMessage().contains("recursive $ref"), f.getMessage());
    }

    @Test
    void aLinkedListEndsInNullWithItsLeafKeywordsExact() {
        Earley e = new Earley(grammarOf(LIST));
        assertTrue(e.matches("{\"head\":{\"v\":\"a\",\"next\":null}}"));
        assertTrue(e.matches("{\"head\": {\"v\": \"abc\", \"next\": {\"v\":\"\",\"next\":{\"v\":\"\\u00e9\",\"next\":null}}}}"));
        assertFalse(e.matches("{\"head\":{\"v\":\"abcd\",\"next\":null}}"), "maxLength 3");
        assertFalse(e.matches("{\"head\":{\"v\":\"a\"}}"), "next is required");
        assertFalse(e.matches("{\"head\":{\"v\":\"a\",\"next\":{}}}"), "a node or null");
    }

    @Test
    void mutualRecursionAThroughBToA() {
        Earley e = new Earley(grammarOf(MUTUAL));
        assertTrue(e.matches("{\"name\":\"x\"}"));
        assertTrue(e.matches("{\"name\":\"x\",\"b\":[{\"name\":\"y\",\"b\":[]},{\"name\":\"x\",\"b\":[{\"name\":\"y\"}]}]}"));
        assertFalse(e.matches("{\"name\":\"x\",\"b\":[{\"name\":\"y\"},{\"name\":\"y\"},{\"name\":\"y\"}]}"), "maxItems 2");
        assertFalse(e.matches("{\"name\":\"z\"}"), "the enum");
    }

    @Test
    void recursionThroughAnyOfAndArrays() {
        Earley e = new Earley(grammarOf(EXPR));
        assertTrue(e.matches("7"));
        assertTrue(e.matches("[1,[2,[3, 99]],4]"));
        assertFalse(e.matches("[]"), "minItems 1");
        assertFalse(e.matches("[1,2,3,4]"), "maxItems 3");
        assertFalse(e.matches("[100]"), "maximum 99");
    }

    /**
     * A hole is a control character (U+0000 to U+001F) read as its definition's whole value: no leaf may admit one raw,
     * or the grammar would take a nested value's text where the leaf's character goes. A user's pattern
     * ({@code [\x00-\x1f]}, {@code .}, a negated class), a format, a const, a string: the leaf in the recursive schema
     * accepts exactly what its DFA alone does, a node's text inside it included ({@code {}}, with its quotes
     * {@code {"k":[]}}); an additionalProperties key never holds a node.
     */
    @Test
    void noTextCharacterReadsAsAHole() {
        for (String leaf : new String[]{"{\"type\":\"string\",\"pattern\":\"^[\\\\x00-\\\\x1f]*$\"}",
                "{\"type\":\"string\",\"pattern\":\"^.*$\"}", "{\"type\":\"string\",\"pattern\":\"^[^a]*$\"}",
                "{\"type\":\"string\",\"format\":\"email\"}", "{\"const\":\"\\u0000\"}", "{\"type\":\"string\"}"}) {
            String schema = "{\"$defs\":{\"N\":{\"type\":\"object\",\"properties\":{\"s\":" + leaf
                    + ",\"k\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/N\"}}}}},\"$ref\":\"#/$defs/N\"}";
            Earley e = new Earley(grammarOf(schema));
            RunAutomaton alone = new RunAutomaton(JsonSchemaAutomaton.compile("{\"type\":\"object\",\"properties\":{\"s\":" + leaf + "}}"));
            for (String v : new String[]{"{}", "a{}", "{\"k\":[]}", "{\"k\":[{}]}b", "\\u0000", "", "x@y.io"}) {
                String t = "{\"s\":\"" + v + "\"}";
                assertEquals(alone.run(t), e.matches(t), leaf + ": " + t);
            }
            for (char c = 0; c < JsonSchemaGrammar.MAX_HOLES; c++) assertFalse(startsMatch(e, "{\"s\":\"" + c), leaf + ": raw U+" + (int) c);
            assertTrue(e.matches("{\"k\":[{}]}"), leaf);
        }
        String extra = "{\"$defs\":{\"N\":{\"type\":\"object\",\"additionalProperties\":{\"$ref\":\"#/$defs/N\"}}},\"$ref\":\"#/$defs/N\"}";
        Earley x = new Earley(grammarOf(extra));
        assertTrue(x.matches("{\"a\":{\"b\":{}}}"));
        assertTrue(x.matches("{\"{}\":{}}"), "a name of braces, as text");
        assertFalse(x.matches("{\"{\"a\":{}}\":{}}"), "a node with its quotes as a name");
        assertFalse(x.matches("{\"a\":1}"));
    }

    /** Pydantic v2's schemas as it writes them: list["Comment"] = [], Optional["Node"] = None, a $ref with a description. */
    @Test
    void pydanticsRecursiveModels() {
        String comment = """
                {"$defs":{"Comment":{"properties":{"author":{"title":"Author","type":"string"},"text":{"title":"Text","type":"string"},
                "replies":{"default":[],"items":{"$ref":"#/$defs/Comment"},"title":"Replies","type":"array"}},
                "required":["author","text"],"title":"Comment","type":"object"}},"$ref":"#/$defs/Comment"}""";
        Earley e = new Earley(grammarOf(comment));
        assertTrue(e.matches("{\"author\":\"a\",\"text\":\"b\"}"));
        assertTrue(e.matches("{\"author\":\"a\",\"text\":\"b\",\"replies\":[{\"author\":\"c\",\"text\":\"d\",\"replies\":[]}]}"));
        assertFalse(e.matches("{\"author\":\"a\",\"replies\":[]}"));
        String node = """
                {"$defs":{"Node":{"properties":{"value":{"title":"Value","type":"integer"},
                "next":{"anyOf":[{"$ref":"#/$defs/Node","description":"the rest"},{"type":"null"}],"default":null}},
                "required":["value"],"title":"Node","type":"object"}},"properties":{"head":{"$ref":"#/$defs/Node"}},
                "required":["head"],"title":"LinkedList","type":"object"}""";
        Earley n = new Earley(grammarOf(node));
        assertTrue(n.matches("{\"head\":{\"value\":1,\"next\":{\"value\":2,\"next\":{\"value\":3}}}}"));
        assertTrue(n.matches("{\"head\":{\"value\":1,\"next\":null}}"));
        assertFalse(n.matches("{\"head\":{\"value\":1,\"next\":{\"next\":null}}}"));
    }

    @Test
    void aRecursionThatNeverEndsMatchesNoText() {
        String schema = """
                {"$defs":{"N":{"type":"object","properties":{"child":{"$ref":"#/$defs/N"}},"required":["child"]}},"$ref":"#/$defs/N"}""";
        JsonSchemaAutomaton.Fault e = assertThrows(JsonSchemaAutomaton.Fault.class, () -> JsonSchemaAutomaton.language(schema));
        assertTrue(e.getMessage().startsWith("matches no text at all: its recursive $ref '#/$defs/N'"), e.getMessage());
        assertEquals("#/$defs/N/properties/child", e.at());
        // Made optional, it ends.
        assertNotNull(JsonSchemaAutomaton.language(schema.replace("\"required\":[\"child\"]", "\"required\":[]")).grammar());
    }

    @Test
    void aRecursiveRefBesideOtherKeywordsIsRefusedWithItsPlace() {
        String schema = """
                {"$defs":{"N":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/N","type":"object","required":[]}}}}},
                "$ref":"#/$defs/N"}""";
        JsonSchemaAutomaton.Fault f = assertThrows(JsonSchemaAutomaton.Fault.class, () -> JsonSchemaAutomaton.language(schema));
        assertTrue(f.getMessage().contains("recursive $ref") && f.getMessage().contains("beside other keywords"), f.getMessage());
        assertEquals("#/$defs/N/properties/kids/items", f.at());
    }

    /**
     * Annotations beside a recursive $ref (Pydantic writes description, title and default there) are ignored, as on the DFA
     * path: the same grammar as without them, the unrolling's language. A bare type beside a recursive $ref or anyOf is
     * served exactly (the value's first character filtered; a definition none of whose values is of the type left out),
     * against the unrolling's DFA, at the root too; a type's keywords, integer alone, a definition some of whose values are
     * of the type and some not, and other keywords beside it stay refused, naming the place.
     */
    @Test
    void annotationsAndABareTypeBesideARecursiveRef() throws Exception {
        SplittableRandom r = new SplittableRandom(20261208);
        String annotations = "\"description\":\"a kid\",\"title\":\"Kid\",\"default\":{},\"examples\":[{}],\"$comment\":\"c\","
                + "\"deprecated\":false,\"readOnly\":true,\"writeOnly\":false";
        String annotated = TREE.replace("\"items\":{\"$ref\":\"#/$defs/Node\"}", "\"items\":{\"$ref\":\"#/$defs/Node\"," + annotations + "}")
                .replace("\"$ref\":\"#/$defs/Node\"}", "\"$ref\":\"#/$defs/Node\",\"title\":\"Tree\",\"description\":\"the root\"}");
        assertTrue(annotated.contains("\"readOnly\"") && annotated.contains("\"Tree\""), annotated);
        assertEquals(grammarOf(TREE).symbols(), grammarOf(annotated).symbols(), "the same grammar");
        assertMatchesItsUnrolling(annotated, r);
        // A bare type: at the root beside the $ref, at the items beside the $ref, an anyOf narrowed by a type list, and an
        // optional member whose type no node has (left out).
        String typed = """
                {"$defs":{"Node":{"type":"object","properties":{"value":{"type":"integer"},
                "children":{"type":"array","items":{"$ref":"#/$defs/Node","type":"object"}},
                "next":{"anyOf":[{"$ref":"#/$defs/Node"},{"type":"null"},{"type":"string","maxLength":2}],"type":["object","null"]},
                "alt":{"$ref":"#/$defs/Node","type":"string"}},"required":["value","children"]}},
                "$ref":"#/$defs/Node","type":"object"}""";
        assertMatchesItsUnrolling(typed, r);
        Earley e = new Earley(grammarOf(typed));
        assertTrue(e.matches("{\"value\":1,\"children\":[],\"next\":null}"));
        assertTrue(e.matches("{\"value\":1,\"children\":[],\"next\":{\"value\":2,\"children\":[]}}"));
        assertFalse(e.matches("{\"value\":1,\"children\":[],\"next\":\"ab\"}"), "a string is not of the type list");
        assertFalse(startsMatch(e, "{\"value\":1,\"children\":[],\"alt\":"), "no node is a string");
        String[][] refused = {
                {"\"type\":\"object\",\"properties\":{}", "#/$defs/Node/properties/children/items"},
                {"\"type\":\"integer\"", "#/$defs/Node/properties/children/items"},
                {"\"enum\":[{}]", "#/$defs/Node/properties/children/items"},
                {"\"type\":\"object\",\"allOf\":[{}]", "#/$defs/Node/properties/children/items"},
        };
        for (String[] c : refused) {
            String schema = TREE.replace("\"items\":{\"$ref\":\"#/$defs/Node\"}", "\"items\":{\"$ref\":\"#/$defs/Node\"," + c[0] + "}");
            JsonSchemaAutomaton.Fault f = assertThrows(JsonSchemaAutomaton.Fault.class, () -> JsonSchemaAutomaton.language(schema), c[0]);
            assertTrue(f.getMessage().contains("beside other keywords"), f.getMessage());
            assertEquals(c[1], f.at(), c[0]);
        }
        // A definition some of whose values are arrays and some numbers, beside the type array: not told by a first character.
        String expr = EXPR.replace("\"items\":{\"$ref\":\"#/$defs/E\"}", "\"items\":{\"$ref\":\"#/$defs/E\",\"type\":\"array\"}");
        JsonSchemaAutomaton.Fault f = assertThrows(JsonSchemaAutomaton.Fault.class, () -> JsonSchemaAutomaton.language(expr));
        assertEquals("#/$defs/E/anyOf/1/items", f.at());
    }

    @Test
    void theGrammarsSizeIsBounded() {
        String schema = bigSchema();
        ClientRegex.TooComplex e = assertThrows(ClientRegex.TooComplex.class, () -> JsonSchemaAutomaton.language(schema));
        assertTrue(e.getMessage().contains("over " + JsonSchemaGrammar.MAX_SYMBOLS + " symbols"), e.getMessage());
    }

    /** A recursive node with an enum of 1,000 unrelated words: a trie of thousands of states, each a rule. */
    private static String bigSchema() {
        StringBuilder words = new StringBuilder();
        SplittableRandom r = new SplittableRandom(7);
        for (int i = 0; i < 1_000; i++) {
            words.append(i == 0 ? "\"" : ",\"");
            for (int k = 0; k < 10; k++) words.append((char) ('a' + r.nextInt(26)));
            words.append('"');
        }
        return "{\"$defs\":{\"N\":{\"type\":\"object\",\"properties\":{\"w\":{\"enum\":[" + words
                + "]},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/N\"}}}}},\"$ref\":\"#/$defs/N\"}";
    }

    /**
     * Through the compiler (the router's and each engine's): the kind stays json_schema, a second compile is the cache's
     * (counted CACHED, not compiled again), the table counted is the grammar's symbols and its precomputed mask's ints; a size refusal is remembered
     * (counted REFUSED, not compiled again) as a DFA's is.
     */
    @Test
    void theCompilerCachesAndCountsARecursiveSchemaAsAnyOther() throws Exception {
        TestModels.requireStories();
        OutputConstraint.Compiler compiler = new OutputConstraint.Compiler(ModelFiles.load(null, null).tokenizer());
        OutputConstraint c = compiler.jsonSchema(TREE);
        assertEquals(OutputConstraint.Kind.JSON_SCHEMA, c.kind());
        assertEquals(TREE, c.source());
        long cacheInts = Math.max(0, c.maskCacheCost()[1]); // the precomputed mask's ints (GrammarMaskCache), counted beside
        assertEquals(grammarOf(TREE).symbols() + cacheInts, c.tableEntries(), "the grammar's symbols and its mask cache, as an ebnf spec's");
        assertTrue(c.matches("{\"value\":1,\"children\":[{\"value\":2,\"children\":[{\"value\":3,\"children\":[]}]}]}"));
        assertTrue(c.startsMatch("{\"value\":1,\"children\":[{\"value\":2,\"children\":[{"));
        assertEquals(c, compiler.jsonSchema(TREE));
        assertEquals(1, compiler.outcomes(OutputConstraint.Compiler.Outcome.COMPILED));
        assertEquals(1, compiler.outcomes(OutputConstraint.Compiler.Outcome.CACHED));
        long compiles = compiler.compileCount();
        String big = bigSchema();
        assertThrows(ClientRegex.TooComplex.class, () -> compiler.jsonSchema(big));
        assertThrows(ClientRegex.TooComplex.class, () -> compiler.jsonSchema(big));
        assertEquals(compiles + 1, compiler.compileCount(), "the refusal remembered");
        assertEquals(2, compiler.outcomes(OutputConstraint.Compiler.Outcome.REFUSED));
    }

    @Test
    void aNonRecursiveSchemaKeepsTheDfaPath() {
        JsonSchemaAutomaton.Language l = JsonSchemaAutomaton.language("{\"$defs\":{\"P\":{\"type\":\"integer\"}},\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/P\"}}");
        assertNotNull(l.automaton());
        assertNull(l.grammar());
    }

    /**
     * For random non-recursive schemas (the soundness test's generator: every keyword of the subset, $defs included),
     * the grammar path accepts exactly what the DFA does, whole and as a prefix: on texts the DFA generates and on
     * mutations of them (a character deleted, inserted, replaced; a piece repeated).
     */
    @Property(tries = 80, seed = "20261207")
    void theGrammarPathAcceptsWhatTheDfaDoes(@ForAll @IntRange(min = 0, max = 1_000_000) int seed) {
        SplittableRandom r = new SplittableRandom(seed);
        ObjectNode root = JsonNodeFactory.instance.objectNode();
        ObjectNode defs = JsonNodeFactory.instance.objectNode();
        JsonNode body = new JsonSchemaSoundnessTest.Gen(r, defs).schema(3);
        if (body.isObject()) root.setAll((ObjectNode) body);
        else root.set("allOf", JsonNodeFactory.instance.arrayNode().add(body));
        if (!defs.isEmpty()) root.set("$defs", defs);
        String schema = root.toString();
        RunAutomaton run;
        try {
            run = new RunAutomaton(JsonSchemaAutomaton.compile(schema));
        } catch (IllegalArgumentException e) {
            Statistics.label("schema").collect("refused");
            return;
        }
        EbnfGrammar g;
        try {
            g = JsonSchemaAutomaton.grammar(schema);
        } catch (ClientRegex.TooComplex e) {
            Statistics.label("schema").collect("grammar too large");
            return;
        } catch (IllegalArgumentException e) {
            // The DFA matched nothing: both refuse (OutputConstraint says "matches no text at all").
            assertNull(OutputConstraintTest.walk(run, r, 10), schema + ": " + e.getMessage());
            return;
        }
        Statistics.label("schema").collect("compared");
        Earley earley = new Earley(g);
        String alphabet = "{}[],:\" 0123456789-.eEtrufalsn\\x";
        for (int i = 0; i < 12; i++) {
            String text = OutputConstraintTest.walk(run, r, 40);
            if (text == null) return;
            List<String> cases = new ArrayList<>(List.of(text));
            for (int m = 0; m < 6 && !text.isEmpty(); m++) {
                int at = r.nextInt(text.length() + 1);
                char c = alphabet.charAt(r.nextInt(alphabet.length()));
                int k = Math.min(text.length(), at + 1 + r.nextInt(6));
                cases.add(switch (m % 4) {
                    case 0 -> text.substring(0, Math.min(at, text.length() - 1)) + text.substring(Math.min(at, text.length() - 1) + 1);
                    case 1 -> text.substring(0, at) + c + text.substring(at);
                    case 2 -> at < text.length() ? text.substring(0, at) + c + text.substring(at + 1) : text + c;
                    default -> text.substring(0, k) + text.substring(Math.min(at, k), k) + text.substring(k);
                });
            }
            for (String t : cases) {
                assertEquals(run.run(t), earley.matches(t), schema + " whole: " + t);
                for (int p = 0; p <= t.length(); p += 1 + t.length() / 8) {
                    String pre = t.substring(0, p);
                    assertEquals(dfaStarts(run, pre), startsMatch(earley, pre), schema + " prefix: " + pre);
                }
            }
        }
    }

    /**
     * The recursive schemas against their unrolling: each definition copied per level, a $ref at level i naming level
     * i + 1's copy and the last level's {@code {"not": {}}} (nothing), compiled on the DFA path. Every text the 3-level
     * unrolling's DFA generates is a whole match of the grammar; a single-character mutation of one is a match of the
     * grammar exactly where it is of the 5-level unrolling (an edit adds a level at most), whole and as a prefix.
     */
    @Test
    void recursiveSchemasMatchTheirUnrollingsDfa() throws Exception {
        SplittableRandom r = new SplittableRandom(20261207);
        for (String schema : List.of(TREE, LIST, MUTUAL, EXPR)) assertMatchesItsUnrolling(schema, r);
    }

    /** {@link #recursiveSchemasMatchTheirUnrollingsDfa} for one schema. */
    static void assertMatchesItsUnrolling(String schema, SplittableRandom r) throws Exception {
        String alphabet = "{}[],:\" 0123456789-.nulxyv";
        Earley e = new Earley(grammarOf(schema));
        RunAutomaton shallow = new RunAutomaton(JsonSchemaAutomaton.compile(unroll(schema, 3)));
        RunAutomaton deeper = new RunAutomaton(JsonSchemaAutomaton.compile(unroll(schema, 5)));
        int nested = 0;
        for (int i = 0; i < 40; i++) {
            String text = OutputConstraintTest.walk(shallow, r, 50);
            assertNotNull(text, schema);
            assertTrue(e.matches(text), schema + " admits " + text);
            if (text.indexOf('[', 1) > 0 || text.indexOf('{', 1) > 0) nested++;
            for (int m = 0; m < 8; m++) {
                int at = r.nextInt(text.length());
                char c = alphabet.charAt(r.nextInt(alphabet.length()));
                String t = switch (m % 3) {
                    case 0 -> text.substring(0, at) + text.substring(at + 1);
                    case 1 -> text.substring(0, at) + c + text.substring(at);
                    default -> text.substring(0, at) + c + text.substring(at + 1);
                };
                assertEquals(deeper.run(t), e.matches(t), schema + " whole: " + t);
                String pre = t.substring(0, r.nextInt(t.length() + 1));
                assertEquals(dfaStarts(deeper, pre), startsMatch(e, pre), schema + " prefix: " + pre);
            }
        }
        assertTrue(nested > 5, schema + ": the walks nest (" + nested + ")");
    }

    /** {@code schema} with its definitions copied per level (0..levels-1), the last level's $refs nothing. */
    static String unroll(String schema, int levels) throws Exception {
        ObjectNode root = (ObjectNode) JsonSchemaKeywordsTest.JSON.readTree(schema);
        String key = root.has("$defs") ? "$defs" : "definitions";
        ObjectNode defs = (ObjectNode) root.remove(key);
        ObjectNode out = JsonNodeFactory.instance.objectNode();
        for (int level = 0; level < levels; level++) {
            for (var d : defs.properties()) out.set(d.getKey() + level, relink(d.getValue().deepCopy(), key, level + 1, levels));
        }
        ObjectNode top = (ObjectNode) relink(root, key, 0, levels);
        top.set(key, out);
        return top.toString();
    }

    private static JsonNode relink(JsonNode n, String key, int level, int levels) {
        if (n.isObject()) {
            ObjectNode o = (ObjectNode) n;
            if (o.has("$ref")) {
                String name = o.get("$ref").textValue().substring(("#/" + key + "/").length());
                if (level >= levels) return JsonNodeFactory.instance.objectNode().set("not", JsonNodeFactory.instance.objectNode());
                o.put("$ref", "#/" + key + "/" + name + level);
                return o;
            }
            for (var f : List.copyOf(o.properties())) o.set(f.getKey(), relink(f.getValue(), key, level, levels));
        } else if (n.isArray()) {
            for (int i = 0; i < n.size(); i++) ((ArrayNode) n).set(i, relink(n.get(i), key, level, levels));
        }
        return n;
    }

    /** Whether a DFA text begins with {@code text} (a live state after it). */
    static boolean dfaStarts(RunAutomaton run, String text) {
        int s = run.getInitialState();
        for (int i = 0; i < text.length() && s >= 0; i++) s = run.step(s, text.charAt(i));
        if (s < 0) return false;
        // live: some accepting state reachable
        ArrayDeque<Integer> q = new ArrayDeque<>(List.of(s));
        boolean[] seen = new boolean[run.getSize()];
        seen[s] = true;
        char[] points = run.getCharIntervals();
        while (!q.isEmpty()) {
            int x = q.poll();
            if (run.isAccept(x)) return true;
            for (char c : points) {
                int t = run.step(x, c);
                if (t >= 0 && !seen[t]) {
                    seen[t] = true;
                    q.add(t);
                }
            }
        }
        return false;
    }
}
