package io.kvferry.engine.model;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dk.brics.automaton.Automaton;
import dk.brics.automaton.RunAutomaton;
import io.kvferry.engine.TestModels;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Structured outputs' pure parts: the client regex translator (the language java.util.regex matches whole, and the
 * refusals with their construct and position), the JSON schema compiler (every text it accepts parses, with the
 * schema's shape), and the mask (tokens that leave the language, the end only where the output is a whole match).
 */
class OutputConstraintTest {
    static final ObjectMapper JSON = new ObjectMapper();

    /** Each expression, and strings to try on it: the translator accepts exactly what java.util.regex matches whole. */
    static final String[] ACCEPTED = {
            "abc", "a|b|", "(ab)*c+d?", "(?:yes|no)\\.?", "[a-c0-9_]{2,4}", "[^a-z]+", "\\d{3}-\\d{4}", "\\w+\\s\\W\\S\\D", "a.b",
            "x{2}", "x{2,}", "x{0,3}", "x*?y+?z??", "^anchored$", "\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\\\\\^\\$", "\\x41\\u0042\\t",
            "[\\]\\-a]", "[]a]", "[a-]", "\\{\"k\": ?[0-9]+\\}", "(a|b(c|d)*)e",
    };

    static List<String> probes(SplittableRandom r) {
        String alphabet = "abcdexyz0129_-. {}[]\"\\:\n\tAB^$*+?|,()";
        List<String> out = new ArrayList<>(List.of("", "abc", "c", "yes", "no.", "ab0_", "ZZ", "123-4567", "ab_ ! a", "a\nb", "a b", "xx",
                "xxxx", "", "yz", "xyz", "anchored", ".*+?()[]{}|\\^$", "AB\t", "]", "-a", "a-", "a{,2}", "a{x}", "{\"k\": 12}", "{\"k\":1}",
                "abe", "ee", "bcde", "bce"));
        for (int i = 0; i < 400; i++) {
            StringBuilder b = new StringBuilder();
            int len = r.nextInt(7);
            for (int k = 0; k < len; k++) b.append(alphabet.charAt(r.nextInt(alphabet.length())));
            out.add(b.toString());
        }
        return out;
    }

    /** A grammar's mask sets the sequence-ending tokens by the request's rules from this list: it must be the tokens endsSequence names. */
    @Test
    void theSequenceEndsAreTheTokensEndsSequenceNames() {
        for (int t = 0; t < 100_000; t++) {
            boolean listed = false;
            for (int e : OutputConstraint.SEQUENCE_ENDS) listed |= e == t;
            assertEquals(Tokenizer.endsSequence(t), listed, "token " + t);
        }
    }

    @Test
    void theTranslatorAcceptsTheSameStringsAsJavaUtilRegex() {
        SplittableRandom r = new SplittableRandom(5);
        for (String re : ACCEPTED) {
            Automaton a = ClientRegex.compile(re);
            Pattern p = Pattern.compile(re);
            List<String> probes = probes(r);
            // and a few of its own strings, so a match is tried, not only mismatches
            RunAutomaton run = new RunAutomaton(a);
            for (int i = 0; i < 50; i++) probes.add(walk(run, r, 12));
            for (String s : probes) {
                if (s == null || !s.chars().allMatch(ch -> ch < 128)) continue; // java.util.regex's classes are ASCII: see below
                assertEquals(p.matcher(s).matches(), a.run(s), "'" + re + "' on '" + s + "'");
            }
        }
    }

    /** '.', a negated class and \\S take no half of a surrogate pair: an emoji is never two of them (before: ".." took one). */
    @Test
    void anyCharacterIsNeverHalfOfASurrogatePair() {
        for (String re : new String[]{"..", "[^a][^a]", "\\S\\S", "\\W\\W", "\\D\\D", "[\\s\\S]{2}"}) {
            Automaton a = ClientRegex.compile(re);
            assertFalse(a.run("\uD83D\uDE00"), re);
            assertTrue(a.run("\u00E0\uFFFD") || re.contains("W"), re);
        }
    }

    @Test
    void pythonsCountsAndLiteralBraces() {
        Automaton upTo2 = ClientRegex.compile("a{,2}"); // Python's: zero to two (java.util.regex refuses it)
        assertTrue(upTo2.run("") && upTo2.run("a") && upTo2.run("aa"));
        assertFalse(upTo2.run("aaa"));
        Automaton octal = ClientRegex.compile("\\012\\0[\\07]\\09"); // \0 takes up to two more octal digits, as Python's (it took none)
        assertTrue(octal.run("\n\u0000\u0007\u00009"));
        assertFalse(octal.run("\u000012\u0000\u0007\u00009"));
        Automaton literal = ClientRegex.compile("a{x}"); // not a count: the characters themselves, as Python reads them
        assertTrue(literal.run("a{x}"));
        assertFalse(literal.run("a"));
    }

    /**
     * A class escape admits only what both Python (str patterns: Unicode) and JavaScript (ASCII \\w \\d) admit, negated
     * or not: \\S took U+200A (a stories260K token both call a space), \\W and [^\\w] took 'é', \\D took '٣'.
     */
    @Test
    void classEscapesAdmitOnlyWhatPythonAndJavaScriptBothAdmit() {
        String[][] cases = { // regex, accepted (| separated), refused
                {"\\S", "a|!", "\u200A|\u00A0|\u3000|\uFEFF|\u001C|\u0085| "},
                {"[^\\s]", "a|!", "\u200A|\u00A0|\uFEFF|\u001C| "},
                {"\\s", " |\t|\u00A0|\u200A|\u3000", "\u001C|\u0085|\uFEFF|a"},
                {"[\\s]", " |\u00A0", "\u001C|\uFEFF"},
                {"[\\s\\S]", "a| |\u001C|\u0085|\uFEFF|\u00E9", ""},
                {"\\W", "!| |-", "\u00E9|\u00F1|\u0663|a|_|\u00B2"},
                {"[^\\w]", "!| ", "\u00E9|\u00F1|a|_"},
                {"\\w", "a|Z|0|_", "\u00E9|!"},
                {"\\D", "x|\u00E9", "\u0663|5"},
                {"[^\\d]", "x", "\u0663|5"},
                {"[^\\W]", "a|_", "\u00E9|!"},
        };
        for (String[] c : cases) {
            Automaton a = ClientRegex.compile(c[0]);
            for (String ok : c[1].split("\\|")) assertTrue(a.run(ok), c[0] + " accepts U+" + Integer.toHexString(ok.charAt(0)));
            for (String no : c[2].isEmpty() ? new String[0] : c[2].split("\\|")) assertFalse(a.run(no), c[0] + " refuses U+" + Integer.toHexString(no.charAt(0)));
        }
    }

    @Test
    void theTranslatorRefusesWhatItDoesNotSupportNamingTheConstructAndItsPosition() {
        String[][] refused = {
                {"a(?=b)", "lookahead '(?=' at position 1"},
                {"a(?!b)", "lookahead '(?!' at position 1"},
                {"(?<=a)b", "lookbehind '(?<=' at position 0"},
                {"(a)\\1", "backreference '\\1' at position 3"},
                {"(?P<x>a)", "named group at position 0"},
                {"(?<x>a)", "named group at position 0"},
                {"(?i)abc", "inline flag group '(?i)' at position 0"},
                {"ab^c", "anchor '^' inside the expression (only at its start) at position 2"},
                {"a$b", "anchor '$' inside the expression (only at its end) at position 1"},
                {"(a$)", "anchor '$' inside the expression"},
                {"\\bword", "word boundary '\\b' at position 0"},
                {"a\\Z", "anchor '\\Z' at position 1"},
                {"a++", "possessive quantifier at position 2"},
                {"\\p{L}", "Unicode property '\\p' at position 0"},
                {"[a[b]]", "nested class or set operation '[' at position 2"},
                {"(ab", "'(' is never closed"},
                {"ab)", "unbalanced ')'"},
                {"[ab", "'[' is never closed"},
                {"*a", "nothing to repeat before '*'"},
                {"a**", "a quantifier after a quantifier"},
                {"\\q", "unknown escape '\\q'"},
                {"a{,}", "'{,}' (zero or more in Python, the characters themselves in JavaScript) at position 1"}, // was literal
                {"a{3,1}", "maximum below its minimum"},
                {"a{1000}", "a count above 256"},
                {"[z-a]", "is reversed"},
                {"(a|b)*a(a|b){24}", "too complex"},
                {"(((a|b){0,256}){256}){256}", "too large at position 15"}, // refused before its copies are made
                {"[^\\s\\S]", "matches no text at all"},
                {"\uD83D\uDE00+", "a character beyond U+FFFF (or half of one) at position 0"}, // before: + repeated its second half
                {"[a\uD83D\uDE00]", "a character beyond U+FFFF (or half of one) at position 2"},
                {"\\uD83D", "a character beyond U+FFFF (or half of one) at position 0"},
                // a StackOverflowError (no 400) before: the parser recursed once per level
                {"(".repeat(5000) + "a" + ")".repeat(5000), "groups nested deeper than 256 at position 256"},
        };
        OutputConstraint.Compiler c = new OutputConstraint.Compiler(Tokenizer.synthetic(300));
        for (String[] x : refused) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> c.regex(x[0]), x[0]);
            assertTrue(e.getMessage().contains(x[1]), x[0] + " -> " + e.getMessage());
        }
    }

    /**
     * A random walk through the automaton from its start to an accepting state: random characters for {@code budget} steps
     * (stopping at an accepting state now and then), then the shortest way to one (null if there is none).
     */
    static String walk(RunAutomaton run, SplittableRandom r, int budget) {
        char[] points = run.getCharIntervals();
        int[] dist = distances(run, points);
        StringBuilder b = new StringBuilder();
        int s = run.getInitialState();
        if (dist[s] == Integer.MAX_VALUE) return null;
        for (int i = 0; ; i++) {
            if (run.isAccept(s) && (i >= budget || r.nextInt(4) == 0)) return b.toString();
            char best = 0;
            int bestDist = Integer.MAX_VALUE;
            List<Character> next = new ArrayList<>();
            for (int k = 0; k < points.length; k++) {
                char lo = points[k];
                char hi = k + 1 < points.length ? (char) (points[k + 1] - 1) : Character.MAX_VALUE;
                int t = run.step(s, lo);
                if (t < 0 || dist[t] == Integer.MAX_VALUE) continue;
                char c = (char) (lo + r.nextInt(Math.min(hi - lo + 1, 95)));
                next.add(c);
                if (dist[t] < bestDist) {
                    bestDist = dist[t];
                    best = c;
                }
            }
            if (next.isEmpty()) return b.toString(); // an accepting state with nothing after it
            char c = i >= budget ? best : next.get(r.nextInt(next.size()));
            b.append(c);
            s = run.step(s, c);
        }
    }

    /** Each state's fewest characters to an accepting state (MAX_VALUE: none). */
    private static int[] distances(RunAutomaton run, char[] points) {
        int[] dist = new int[run.getSize()];
        for (int s = 0; s < dist.length; s++) dist[s] = run.isAccept(s) ? 0 : Integer.MAX_VALUE;
        for (boolean changed = true; changed; ) {
            changed = false;
            for (int s = 0; s < dist.length; s++) {
                for (char c : points) {
                    int t = run.step(s, c);
                    if (t >= 0 && dist[t] != Integer.MAX_VALUE && dist[t] + 1 < dist[s]) {
                        dist[s] = dist[t] + 1;
                        changed = true;
                    }
                }
            }
        }
        return dist;
    }

    static final String PERSON = "{\"type\":\"object\",\"title\":\"P\",\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":8},"
            + "\"age\":{\"type\":\"integer\"},\"score\":{\"type\":\"number\"},\"tags\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/tag\"},"
            + "\"minItems\":1,\"maxItems\":3},\"kind\":{\"enum\":[\"a\",\"b\",1,null]},\"ok\":{\"type\":[\"boolean\",\"null\"]},"
            + "\"code\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}[0-9]$\"},\"any\":{},\"obj\":{\"type\":\"object\"},\"c\":{\"const\":\"x\"}},"
            + "\"required\":[\"name\",\"age\",\"tags\"],\"additionalProperties\":false,\"$defs\":{\"tag\":{\"anyOf\":[{\"type\":\"string\","
            + "\"maxLength\":3},{\"type\":\"null\"}]}}}";

    static final RunAutomaton PERSON_RUN = new RunAutomaton(JsonSchemaAutomaton.compile(PERSON));
    static final RunAutomaton OBJECT_RUN = new RunAutomaton(JsonSchemaAutomaton.compile("{\"type\":\"object\"}"));

    @Property(seed = "20261207", tries = 100)
    void everyTextASchemaAcceptsParsesWithItsShape(@ForAll @IntRange(min = 0, max = 1_000_000) int seed) throws Exception {
        String text = walk(PERSON_RUN, new SplittableRandom(seed), 60);
        assertNotNull(text, "a walk reaches a match (else the property would be vacuous)");
        JsonNode p = JSON.readTree(text);
        assertTrue(p.isObject(), text);
        assertTrue(p.get("name").isTextual() && !p.get("name").asText().isEmpty() && p.get("name").asText().length() <= 8, text);
        assertTrue(p.get("age").isIntegralNumber(), text);
        assertTrue(p.get("tags").isArray() && p.get("tags").size() >= 1 && p.get("tags").size() <= 3, text);
        if (p.has("code")) assertTrue(p.get("code").asText().matches("[A-Z]{2}[0-9]"), text);
        if (p.has("obj")) assertTrue(p.get("obj").isObject(), text);
        if (p.has("c")) assertEquals("x", p.get("c").asText(), text);
        List<String> order = new ArrayList<>();
        p.fieldNames().forEachRemaining(order::add);
        List<String> declared = List.of("name", "age", "score", "tags", "kind", "ok", "code", "any", "obj", "c");
        assertEquals(order.stream().sorted((x, y) -> declared.indexOf(x) - declared.indexOf(y)).toList(), order, "declared order: " + text);
    }

    @Property(seed = "20261207", tries = 100)
    void everyTextJsonObjectAcceptsParsesAsAnObject(@ForAll @IntRange(min = 0, max = 1_000_000) int seed) throws Exception {
        String text = walk(OBJECT_RUN, new SplittableRandom(seed), 40);
        assertNotNull(text, "a walk reaches a match (else the property would be vacuous)");
        assertTrue(JSON.readTree(text).isObject(), text);
    }

    @Test
    void theSchemaCompilerRefusesUnsupportedKeywordsByName() {
        String[][] refused = {
                {"{\"type\":\"string\",\"format\":\"hostname\"}", "format \"hostname\" at #"},
                {"{\"type\":\"object\",\"minProperties\":1}", "keyword 'minProperties' at #"},
                {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"if\":{}}}}", "keyword 'if' at #/properties/a"},
                {"{\"type\":\"object\",\"patternProperties\":{}}", "keyword 'patternProperties'"},
                {"{\"type\":\"date\"}", "type 'date'"},
                {"{\"$ref\":\"#/$defs/a\",\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}}}", "recursive $ref"},
                {"{\"$ref\":\"http://x/y\"}", "only #/$defs/<name>"},
                {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}", "not one of its properties"},
                {"{\"type\":\"string\",\"maxLength\":1000}", "at most 256"},
                // before: any object, {} included, which lacks the required name
                {"{\"type\":\"object\",\"required\":[\"name\"]}", "has required [\"name\"] at # without properties"},
                {"{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "lookahead"},
                {"[1]", "must be a JSON object"},
                {"{nope", "is not valid JSON"},
        };
        for (String[] x : refused) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> JsonSchemaAutomaton.compile(x[0]), x[0]);
            assertTrue(e.getMessage().contains(x[1]), x[0] + " -> " + e.getMessage());
        }
    }

    /** A definition used twice at each of 40 levels: built once per level (before: 2^40 builds, 37 s at 18 levels). */
    @Test
    void aDefinitionUsedManyTimesIsBuiltOnce() {
        StringBuilder b = new StringBuilder("{\"$defs\":{\"d0\":{\"type\":\"integer\"}");
        for (int i = 1; i <= 40; i++) {
            b.append(",\"d").append(i).append("\":{\"anyOf\":[{\"$ref\":\"#/$defs/d").append(i - 1).append("\"},{\"$ref\":\"#/$defs/d")
                    .append(i - 1).append("\"}]}");
        }
        b.append("},\"$ref\":\"#/$defs/d40\"}");
        OutputConstraint c = new OutputConstraint.Compiler(Tokenizer.synthetic(300)).jsonSchema(b.toString());
        assertTrue(c.matches("-12") && !c.matches("1.5"));
    }

    /**
     * A long run of parts that accept the empty string ({@code .*} 4,000 times) compiles, within the compiler's deadline,
     * to {@code .*}: dk.brics's concatenation gave each state a transition to every later one (millions), built for minutes
     * with no look at the deadline while the compiler's turn was held; now a batch at a time, each made minimal. A long
     * literal keeps its exact language across the batches.
     */
    @Test
    @Timeout(600)
    void aLongRunOfStarsCompilesWithinTheDeadline() {
        OutputConstraint.Compiler c = new OutputConstraint.Compiler(Tokenizer.synthetic(300));
        OutputConstraint stars = c.regex(".*".repeat(4_000));
        assertTrue(stars.matches("") && stars.matches("any text at all") && stars.matches("x".repeat(500)));
        String literal = "abcdefghij".repeat(100) + "(x|yz)*" + "0123456789".repeat(50);
        Automaton a = ClientRegex.compile(literal);
        assertTrue(a.run("abcdefghij".repeat(100) + "xyzx" + "0123456789".repeat(50)));
        assertFalse(a.run("abcdefghij".repeat(100) + "xy" + "0123456789".repeat(50)));
        assertFalse(a.run("abcdefghij".repeat(99) + "0123456789".repeat(50)));
        assertTrue(ClientRegex.compile(".*".repeat(3 * ClientRegex.CONCATENATION_BATCH + 1) + "a").run("bba"));
        assertFalse(ClientRegex.compile(".*".repeat(3 * ClientRegex.CONCATENATION_BATCH + 1) + "a").run("bab"));
    }

    /** A compilation past the compiler's deadline is a refusal (the next one waits no longer than that). */
    @Test
    void aCompilationPastItsDeadlineIsRefused() {
        OutputConstraint.Compiler c = new OutputConstraint.Compiler(Tokenizer.synthetic(300), 0, OutputConstraint.Compiler.CACHED_TABLE);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> c.regex("(a|b)*a(a|b){8}"));
        assertTrue(e.getMessage().contains("too complex: it took over 0 ms to compile"), e.getMessage());
        assertEquals(0, c.cachedCount());
    }

    /**
     * A minimization stops at the compilation's deadline ({@link DfaMinimizer}), so none is refused for its size before
     * it starts any more: dk.brics's Hopcroft could not stop, and a budget of 1.5e9 states × transitions refused an allOf
     * of six multipleOf (233 B) at its last branch's 39,791 states × 372,086 transitions, which it had minimized for
     * 6.5–8.5 s past the 5 s deadline. Given the time (a 10-minute deadline here, not timed), that minimization runs now,
     * to 35,259 states, and the allOf is refused for those, naming the branch. A pattern within maxLength 256 is joined
     * by the capped product (dk.brics's intersection built the 2M states of (a|b)*a(a|b){12} × 257 lengths unbounded).
     */
    @Test
    void aMinimizationIsBoundedByTheDeadlineNotRefusedForItsSize() {
        OutputConstraint.Compiler patient = new OutputConstraint.Compiler(Tokenizer.synthetic(300), TimeUnit.MINUTES.toNanos(10),
                OutputConstraint.Compiler.CACHED_TABLE);
        String allOf = "{\"allOf\":[{\"type\":\"number\",\"multipleOf\":0.002},{\"type\":\"number\",\"multipleOf\":0.003},"
                + "{\"type\":\"number\",\"multipleOf\":0.005},{\"type\":\"number\",\"multipleOf\":0.007},"
                + "{\"type\":\"number\",\"multipleOf\":0.011},{\"type\":\"number\",\"multipleOf\":0.013}]}";
        IllegalArgumentException refused = assertThrows(IllegalArgumentException.class, () -> patient.jsonSchema(allOf));
        assertEquals("is too complex at # (joining allOf's branch 5 with what comes before it): its automaton has over "
                + ClientRegex.MAX_STATES + " states", refused.getMessage());

        OutputConstraint.Compiler c = new OutputConstraint.Compiler(Tokenizer.synthetic(300));
        IllegalArgumentException pattern = assertThrows(IllegalArgumentException.class,
                () -> c.jsonSchema("{\"type\":\"string\",\"pattern\":\"(a|b)*a(a|b){12}\",\"maxLength\":256}"));
        assertEquals("is too complex: combining its automata takes over " + ClientRegex.MAX_NFA_STATES + " states", pattern.getMessage());
        // A legitimate model compiles: forty required dates.
        StringBuilder dates = new StringBuilder("{\"type\":\"object\",\"properties\":{");
        StringBuilder req = new StringBuilder();
        for (int i = 0; i < 40; i++) {
            dates.append(i > 0 ? "," : "").append("\"d").append(i).append("\":{\"type\":\"string\",\"format\":\"date\"}");
            req.append(i > 0 ? "," : "").append("\"d").append(i).append('"');
        }
        OutputConstraint model = c.jsonSchema(dates.append("},\"required\":[").append(req).append("]}").toString());
        assertFalse(model.matches("{}"));
    }

    /**
     * An array's copies of its item are counted before dk.brics's repeat makes them (uninterruptibly): up to 256 arrays of
     * up to 256 dates made 3.8M states and ran 77 s past the 5 s deadline; now refused at once, naming maxItems and the
     * item's (deterministic) states. A small item repeated 256 times still compiles.
     */
    @Test
    void anArraysCopiesOfItsItemAreBoundedBeforeTheyAreMade() {
        OutputConstraint.Compiler c = new OutputConstraint.Compiler(Tokenizer.synthetic(300));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> c.jsonSchema("{\"type\":\"array\",\"items\":{\"type\":"
                + "\"array\",\"items\":{\"type\":\"string\",\"format\":\"date\"},\"maxItems\":256},\"maxItems\":256}"));
        assertEquals("is too large at #: 256 copies (maxItems 256) of its items' automaton of 8961 states would pass "
                + ClientRegex.MAX_NFA_STATES + " automaton states before determinization", e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> c.jsonSchema("{\"type\":\"object\",\"properties\":{\"xs\":{\"type\":\"array\","
                + "\"minItems\":60}}}"));
        assertTrue(e.getMessage().startsWith("is too large at #/properties/xs: 61 copies (minItems 60) of its items' automaton of "), e.getMessage());
        assertTrue(c.jsonSchema("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"maxItems\":256}").matches("[1, 2, 3]"));
    }

    /** A compilation stopped at its deadline is counted as such, apart from the other refusals, and its time with the rest. */
    @Test
    void theOutcomesTellTheDeadlineFromTheOtherRefusals() {
        OutputConstraint.Compiler c = new OutputConstraint.Compiler(Tokenizer.synthetic(300), 0, OutputConstraint.Compiler.CACHED_TABLE);
        assertThrows(IllegalArgumentException.class, () -> c.regex("(a|b)*a(a|b){8}"));
        assertThrows(IllegalArgumentException.class, () -> c.jsonSchema("{\"allOf\":[{\"type\":\"integer\"},{\"minimum\":3}]}"));
        assertThrows(IllegalArgumentException.class, () -> c.regex("(a|b)*a(a|b){8}")); // remembered: refused, not compiled again
        assertEquals(2, c.outcomes(OutputConstraint.Compiler.Outcome.DEADLINE));
        assertEquals(1, c.outcomes(OutputConstraint.Compiler.Outcome.REFUSED));
        assertEquals(0, c.outcomes(OutputConstraint.Compiler.Outcome.COMPILED));
        assertEquals(2, c.compileCount());
    }

    /**
     * A spec refused for its complexity is remembered: sent again it is refused at once with the same message, without a
     * compilation (it used to be compiled anew each time, up to the deadline with the one compilation slot held).
     */
    @Test
    void aSpecRefusedForItsComplexityIsNotCompiledAgain() {
        OutputConstraint.Compiler c = new OutputConstraint.Compiler(Tokenizer.synthetic(300));
        String[][] specs = {
                {"regex", "(((a|b){0,256}){256}){256}"}, // refused by a bound before its copies are made
                {"schema", "{\"type\":\"string\",\"pattern\":\"(((a|b){0,256}){256}){256}\"}"},
        };
        for (String[] spec : specs) {
            OutputConstraint.Kind kind = spec[0].equals("regex") ? OutputConstraint.Kind.REGEX : OutputConstraint.Kind.JSON_SCHEMA;
            long before = c.compileCount();
            IllegalArgumentException first = assertThrows(IllegalArgumentException.class, () -> c.compile(kind, spec[1]));
            assertTrue(first.getMessage().contains("too large"), first.getMessage());
            assertEquals(before + 1, c.compileCount());
            IllegalArgumentException again = assertThrows(IllegalArgumentException.class, () -> c.compile(kind, spec[1]));
            assertEquals(first.getMessage(), again.getMessage());
            assertEquals(before + 1, c.compileCount(), "refused from memory");
        }
        // The same text as the other kind is another spec.
        assertThrows(IllegalArgumentException.class, () -> c.jsonSchema(specs[0][1]));
        assertEquals(3, c.compileCount());
        // How a spec is written is quick to check again: not remembered.
        assertThrows(IllegalArgumentException.class, () -> c.regex("(ab"));
        assertThrows(IllegalArgumentException.class, () -> c.regex("(ab"));
        assertEquals(5, c.compileCount());
        assertEquals(2, c.refusedCount());
    }

    /** The refused specs remembered are the last {@link OutputConstraint.Compiler#REFUSED}, least recently used out. */
    @Test
    void theRefusedSpecsRememberedAreBounded() {
        OutputConstraint.Compiler c = new OutputConstraint.Compiler(Tokenizer.synthetic(300), 0, OutputConstraint.Compiler.CACHED_TABLE);
        int n = OutputConstraint.Compiler.REFUSED;
        for (int i = 0; i <= n; i++) {
            int k = i;
            assertThrows(IllegalArgumentException.class, () -> c.regex("a{" + k + "}")); // past the deadline of 0
        }
        assertEquals(n, c.refusedCount());
        assertEquals(n + 1, c.compileCount());
        assertThrows(IllegalArgumentException.class, () -> c.regex("a{" + n + "}"));
        assertEquals(n + 1, c.compileCount(), "the newest is remembered");
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> c.regex("a{0}"));
        assertTrue(e.getMessage().contains("too complex: it took over 0 ms to compile"), e.getMessage());
        assertEquals(n + 2, c.compileCount(), "the least recently used was let go, so compiled again");
        assertEquals(n, c.refusedCount());
    }

    /** The cache keeps at most its table budget in all (64 near-cap tables were ~1 GB), the newest always. */
    @Test
    void theCacheIsBoundedByItsTablesSize() {
        OutputConstraint.Compiler c = new OutputConstraint.Compiler(Tokenizer.synthetic(300), OutputConstraint.Compiler.DEADLINE_MS * 1_000_000, 1);
        OutputConstraint first = c.regex("a+");
        c.regex("b+");
        OutputConstraint third = c.regex("c+");
        assertEquals(1, c.cachedCount());
        assertSame(third, c.regex("c+"));
        assertNotSame(first, c.regex("a+"), "evicted, so compiled anew");
    }

    /** A spec already compiled is answered while another compilation holds the compiler (it used to wait for it). */
    @Test
    void aCachedSpecDoesNotWaitForAnotherCompilation() throws Exception {
        OutputConstraint.Compiler c = new OutputConstraint.Compiler(Tokenizer.synthetic(300));
        OutputConstraint cached = c.regex("(yes|no)");
        try (CompilerSlot held = CompilerSlot.hold(c)) {
            var again = CompletableFuture.supplyAsync(() -> c.regex("(yes|no)"));
            assertSame(cached, again.get(60, TimeUnit.SECONDS));
        }
    }

    /**
     * A spec not cached waits for the compiler a bounded time, then is refused as busy (the server's state: not an
     * IllegalArgumentException, not remembered); before, it waited behind every compilation queued, each up to the deadline.
     */
    @Test
    @Timeout(60)
    void anUncachedSpecIsRefusedAsBusyPastTheBoundedWait() throws Exception {
        OutputConstraint.Compiler c = new OutputConstraint.Compiler(Tokenizer.synthetic(300), OutputConstraint.Compiler.DEADLINE_MS * 1_000_000,
                OutputConstraint.Compiler.CACHED_TABLE, TimeUnit.MILLISECONDS.toNanos(20));
        try (CompilerSlot held = CompilerSlot.hold(c)) {
            RuntimeException e = assertThrows(RuntimeException.class, () -> c.regex("[a-z]+"));
            OutputConstraint.Busy busy = assertInstanceOf(OutputConstraint.Busy.class, e);
            assertFalse(e instanceof IllegalArgumentException, "not the spec's fault");
            assertTrue(e.getMessage().startsWith("was not compiled: the structured-output compiler is busy"), e.getMessage());
            assertTrue(e.getMessage().contains("waited 20 ms"), e.getMessage());
            assertEquals(5, busy.retryAfterSeconds());
            assertEquals(0, c.compileCount());
            assertEquals(1, c.busyRefusals());
            assertEquals(0, c.refusedCount(), "a busy refusal is not remembered");
        }
        assertTrue(c.regex("[a-z]+").matches("abc"), "compiled once the compiler is free");
    }

    /**
     * Uncached specs wait for the compiler by client, and the compiler goes round-robin between them (FairSlotTest): here
     * A's two specs and B's one queue apart, and each is compiled once the compiler is free.
     */
    @Test
    @Timeout(60)
    void uncachedSpecsQueueByTheirClient() throws Exception {
        OutputConstraint.Compiler c = new OutputConstraint.Compiler(Tokenizer.synthetic(300));
        List<CompletableFuture<OutputConstraint>> specs = new ArrayList<>();
        try (CompilerSlot held = CompilerSlot.hold(c)) {
            String[][] sent = {{"A", "a+"}, {"A", "b+"}, {"B", "c+"}};
            for (String[] s : sent) {
                int before = c.compiling.waiting(s[0]);
                specs.add(CompletableFuture.supplyAsync(() -> c.compile(OutputConstraint.Kind.REGEX, s[1], s[0]), r -> Thread.ofPlatform().start(r)));
                while (c.compiling.waiting(s[0]) == before) Thread.yield(); // queued: the slot's state, not a time
            }
            assertEquals(Map.of("A", 2, "B", 1), c.queued());
            assertEquals(CompilerSlot.HOLDER, c.compiling.holder());
        }
        assertTrue(specs.get(0).get(60, TimeUnit.SECONDS).matches("aa"));
        assertTrue(specs.get(1).get(60, TimeUnit.SECONDS).matches("bb"));
        assertTrue(specs.get(2).get(60, TimeUnit.SECONDS).matches("cc"));
        assertEquals(3, c.compileCount());
        assertEquals(Map.of(), c.queued());
    }

    /** The default wait is two deadlines: the running compilation and one queued before it. */
    @Test
    void theDefaultWaitIsTwoDeadlines() {
        assertEquals(2 * OutputConstraint.Compiler.DEADLINE_MS, OutputConstraint.Compiler.MAX_WAIT_MS);
    }

    /** A string's \\u escapes name whole characters: an escaped surrogate pair counted two toward minLength (one for a validator). */
    @Test
    void stringEscapesAreNeverHalfACharacter() {
        Automaton a = JsonSchemaAutomaton.compile("{\"type\":\"string\",\"minLength\":2}");
        assertFalse(a.run("\"\\ud83d\\ude00\""));
        assertFalse(a.run("\"\\uD800x\""));
        assertTrue(a.run("\"\\u00e9\\uFFFD\""));
        assertTrue(a.run("\"\\ue000\\u0041\""));
    }

    @Test
    void choicesAreQuotedAsLiterals() {
        List<String> choices = List.of("yes", "a.b", "(x|y)*", "\\d", "line\nbreak", "");
        Automaton a = ClientRegex.compile(ClientRegex.quote(choices));
        for (String c : choices) assertTrue(a.run(c), c);
        for (String c : List.of("a-b", "x", "xy", "5", "linebreak", "ye")) assertFalse(a.run(c), c);
    }

    /**
     * The mask on the real vocabulary: a token survives only if its text keeps the output a prefix of a match; EOS / BOS
     * and stop token ids only where the output is whole and the request's rules let it end; where nothing can follow, EOS
     * alone (whatever ignore_eos says); byte tokens only for ASCII; the state is the output's, whoever computes it.
     */
    @Test
    void theMaskKeepsTheTokensThatStayInTheLanguageAndTheEndOnlyOnAWholeMatch() throws Exception {
        TestModels.requireStories();
        Tokenizer tok = ModelFiles.load(null, null).tokenizer();
        OutputConstraint c = new OutputConstraint.Compiler(tok).regex("(Lily|Tom) (is|was) (happy|sad)\\.");
        int[] prompt = tok.encode("Once upon a time", true, false);
        int vocab = tok.vocabSize();
        float[] logits = new float[vocab];
        // Step 0: every surviving token's text starts a match; none of the others does.
        int[] seq = prompt.clone();
        c.mask(logits, seq, prompt.length, 0, true, true, new int[0]);
        int kept = 0;
        for (int t = 0; t < vocab; t++) {
            String text = new String(tok.pieceBytes(prompt[prompt.length - 1], t), StandardCharsets.UTF_8);
            boolean ok = t > Tokenizer.EOS && !text.isEmpty() && isPrefix(text);
            if (logits[t] != Float.NEGATIVE_INFINITY) kept++;
            assertEquals(ok, logits[t] != Float.NEGATIVE_INFINITY, "token " + t + " '" + text + "'");
        }
        assertTrue(kept > 0);
        // A whole match: only the end survives (EOS and BOS), the stop token ids too; with ignore_eos nothing is left but EOS.
        int[] out = path(c, prompt, vocab);
        int[] whole = concat(prompt, out);
        assertTrue(isPrefix(tok.decode(out)) && tok.decode(out).endsWith("."), tok.decode(out));
        assertTrue(c.complete(c.state(whole, prompt.length, out.length)));
        float[] l = new float[vocab];
        c.mask(l, whole, prompt.length, out.length, true, true, new int[]{100});
        for (int t = 0; t < vocab; t++) {
            boolean end = t == Tokenizer.EOS || t == Tokenizer.BOS || t == 100;
            assertEquals(end, l[t] != Float.NEGATIVE_INFINITY, "token " + t);
        }
        l = new float[vocab];
        l[Tokenizer.EOS] = Float.NEGATIVE_INFINITY; // as min_tokens masks it
        c.mask(l, whole, prompt.length, out.length, false, false, new int[]{100});
        for (int t = 0; t < vocab; t++) assertEquals(t == Tokenizer.EOS, l[t] != Float.NEGATIVE_INFINITY, "forced EOS, token " + t);
        // Sampled through the rules, greedy and seeded: EOS ends the answer under a constraint even with ignore_eos.
        SamplingRules ignoring = SamplingRules.of(0, 0, 1, 0, Map.of(), 0, true, new int[0]).withConstraint(c);
        assertEquals(Tokenizer.EOS, new Sampling(0f, 1f, 0, -1, ignoring).sample(new float[vocab], out.length, whole, prompt.length));
        assertEquals(Tokenizer.EOS, new Sampling(0.8f, 0.9f, 3, -1, ignoring).sample(new float[vocab], out.length, whole, prompt.length));
        assertTrue(ignoring.ends(Tokenizer.EOS, out.length));
        // Half way: the end is masked, the path's next token is not.
        int half = out.length / 2;
        float[] h = new float[vocab];
        c.mask(h, whole, prompt.length, half, true, true, new int[0]);
        assertEquals(Float.NEGATIVE_INFINITY, h[Tokenizer.EOS]);
        assertEquals(Float.NEGATIVE_INFINITY, h[Tokenizer.BOS]);
        assertNotEquals(Float.NEGATIVE_INFINITY, h[out[half]]);
    }

    @Test
    void byteTokensCountOnlyForAsciiAndRulesWithoutAConstraintAreUnchanged() throws Exception {
        TestModels.requireStories();
        Tokenizer tok = ModelFiles.load(null, null).tokenizer();
        OutputConstraint c = new OutputConstraint.Compiler(tok).regex("[\\s\\S]*"); // anything
        float[] l = new float[tok.vocabSize()];
        int[] prompt = tok.encode("x", true, false);
        c.mask(l, prompt, prompt.length, 0, true, true, new int[0]);
        for (int t = 3; t < 3 + 256; t++) { // byte tokens <0x00>..<0xFF>
            assertEquals(t - 3 < 0x80, l[t] != Float.NEGATIVE_INFINITY, tok.tokenText(t));
        }
        assertEquals(Float.NEGATIVE_INFINITY, l[0], "<unk> is never generated under a constraint");
        // No constraint: isNone, and no logit changes (the plain path).
        assertTrue(SamplingRules.NONE.isNone());
        assertFalse(SamplingRules.NONE.withConstraint(c).isNone());
        assertTrue(SamplingRules.NONE.withConstraint(c).changesLogits(7));
        assertEquals(SamplingRules.NONE, SamplingRules.NONE.withConstraint(null));
    }

    /** A whole match, token by token: at each step the first token the mask keeps that is not an end. */
    private static int[] path(OutputConstraint c, int[] prompt, int vocab) {
        int[] seq = prompt.clone();
        for (int step = 0; step < 40; step++) {
            int s = c.state(seq, prompt.length, step);
            if (c.complete(s)) return Arrays.copyOfRange(seq, prompt.length, seq.length);
            float[] l = new float[vocab];
            c.mask(l, seq, prompt.length, step, true, true, new int[0]);
            int next = -1;
            for (int t = Tokenizer.EOS + 1; t < vocab && next < 0; t++) if (l[t] != Float.NEGATIVE_INFINITY) next = t;
            seq = concat(seq, new int[]{next});
        }
        throw new AssertionError("no whole match in 40 tokens");
    }

    private static boolean isPrefix(String text) {
        for (String full : List.of("Lily is happy.", "Lily is sad.", "Lily was happy.", "Lily was sad.", "Tom is happy.", "Tom is sad.",
                "Tom was happy.", "Tom was sad.")) {
            if (full.startsWith(text)) return true;
        }
        return false;
    }

    private static int[] concat(int[] a, int[] b) {
        int[] out = new int[a.length + b.length];
        System.arraycopy(a, 0, out, 0, a.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }
}
