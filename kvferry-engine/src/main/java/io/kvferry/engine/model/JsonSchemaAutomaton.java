package io.kvferry.engine.model;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dk.brics.automaton.Automaton;
import dk.brics.automaton.BasicAutomata;
import dk.brics.automaton.Transition;

import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.IdentityHashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A JSON schema as the automaton of the compact JSON texts it admits (structured outputs' {@code json_schema}), for a
 * documented subset ({@code docs/SERVING.md}, "Structured outputs"); every text admitted is valid for the schema, and
 * what could only be approximated is refused. A schema's keywords each give a language, intersected:
 * <ul>
 * <li>{@code type} (a name or a list of them): {@code object}, {@code string}, {@code integer}, {@code number},
 * {@code boolean}, {@code null}, {@code array}; without it, the types whose keywords the schema uses; {@code nullable};</li>
 * <li>an object's {@code properties} come in their declared order, each {@code required} one always, each other one
 * present or left out; no other property is generated ({@code additionalProperties} false, true, a schema or absent
 * alike); an object without {@code properties} is any JSON object ({@link #ANY_DEPTH} levels deep at most), its values
 * of {@code additionalProperties}' schema, none where it is false;</li>
 * <li>a string's {@code minLength}, {@code maxLength} (up to {@link ClientRegex#MAX_REPEAT}), {@code pattern} (matching
 * the whole value; characters JSON would escape are not generated) and {@code format} ({@link SchemaScalars#format});</li>
 * <li>a number's {@code minimum}, {@code maximum}, {@code exclusiveMinimum}, {@code exclusiveMaximum}, {@code multipleOf}
 * (exact: {@link SchemaScalars#number});</li>
 * <li>an array's {@code items} (absent: any JSON value), {@code minItems}, {@code maxItems};</li>
 * <li>{@code enum}, {@code const}, {@code anyOf}, {@code allOf}, {@code oneOf} of branches no value can satisfy two of,
 * {@code not} of {@code {}} or of a type alone, {@code $ref} to {@code #/$defs/…} or {@code #/definitions/…} (not
 * recursive in {@link #compile}; {@link #language} serves a recursive one by a grammar, {@link JsonSchemaGrammar});
 * annotations ({@link #ANNOTATIONS}) are ignored.</li>
 * </ul>
 * Any other keyword is refused with its name and place ({@link Fault}). Whitespace: none, except one optional space after
 * each {@code ,} and {@code :} (bounded, so a small model cannot loop on spaces). Numbers: an integer has at most 16
 * digits, a fraction at most 16, an exponent at most 3 (so a number ends). Pure; callers serialize (as
 * {@link ClientRegex}).
 */
public final class JsonSchemaAutomaton {
    /** How deeply objects and arrays nest where the schema leaves them free (json_object, an object without properties). */
    public static final int ANY_DEPTH = 4;
    /** How large an object's members may grow unminimized while it is built ({@link #compact}). */
    static final int MINIMIZE_PAST = 4_000;
    /**
     * How deeply schemas may nest while one is built ({@code properties}, {@code items}, {@code anyOf} … and each
     * {@code $ref}'s definition a level more): the build recurses once a level, some 2 KB of stack each, and a chain of
     * thousands of {@code $ref}s (a few bytes each: Jackson's nesting limit does not see it) overflowed the request thread's
     * stack, so the client got no answer at all; 510 levels overflowed a 1 MB stack. Real schemas nest a few levels.
     */
    public static final int MAX_BUILD_DEPTH = 128;

    /** Decimals as written: a bound read as a double would be rounded past 15 significant digits. */
    private static final ObjectMapper JSON = new ObjectMapper().enable(DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS);
    private static final Set<String> ANNOTATIONS = Set.of("title", "description", "$schema", "$id", "$comment", "examples", "default",
            "deprecated", "readOnly", "writeOnly", "discriminator");
    private static final Set<String> KNOWN = Set.of("type", "properties", "required", "additionalProperties", "enum", "const", "anyOf",
            "allOf", "oneOf", "not", "$ref", "$defs", "definitions", "items", "minItems", "maxItems", "minLength", "maxLength", "pattern",
            "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "nullable");
    private static final Set<String> STRING_KEYS = Set.of("minLength", "maxLength", "pattern", "format");
    private static final Set<String> NUMBER_KEYS = Set.of("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf");
    private static final Set<String> ARRAY_KEYS = Set.of("items", "minItems", "maxItems");
    private static final Set<String> OBJECT_KEYS = Set.of("properties", "required", "additionalProperties");

    /**
     * A refusal for how the schema is written, with where in it ({@link #at}: a JSON pointer, {@code #/properties/age});
     * a complexity refusal ({@link ClientRegex.TooComplex}) names no place.
     */
    public static sealed class Fault extends IllegalArgumentException permits Recursive {
        private final String at;

        Fault(String message, String at) {
            super(message);
            this.at = at;
        }

        /** Where in the schema: a JSON pointer from its root, {@code #} for the root. */
        public String at() {
            return at;
        }
    }

    /**
     * A JSON string's characters: anything but a quote, a backslash and a control character, or an escape, never of half a
     * surrogate pair (a lone one is no character; a pair would count as two toward minLength, one for a validator).
     */
    private static final String CHAR = "([^\"\\\\\\x00-\\x1f]|\\\\[\"\\\\/bfnrt]|\\\\u([0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))";
    private static final String INTEGER = "-?(0|[1-9][0-9]{0,15})";
    private static final String NUMBER = INTEGER + "(\\.[0-9]{1,16})?([eE][+\\-]?[0-9]{1,3})?";

    /** {@link #anyValue} by depth, minimal (each is hundreds of milliseconds to build): handed out as clones. */
    private static final Map<Integer, Automaton> ANY_VALUE = new ConcurrentHashMap<>();

    private final JsonNode root;
    private final Set<String> resolving = new HashSet<>();
    /** The schemas being built, nested ({@link #build}): at most {@link #MAX_BUILD_DEPTH}. */
    private int depth;
    /** Each definition's automaton, built once per schema: a definition used twice at each of n levels is n builds, not 2^n. */
    private final Map<String, Automaton> resolved = new HashMap<>();
    /**
     * {@link #types} by schema node (identity): a definition reached through n levels of anyOf with w $refs each to the
     * next was w^n walks (4^14: minutes past the deadline, holding the one compile slot), now one per node.
     */
    private final Map<JsonNode, Set<String>> typesOf = new IdentityHashMap<>();

    /**
     * Where the schema's {@code $ref}s recurse ({@link JsonSchemaGrammar}): each recursive one is a hole, a control
     * character (never in a JSON text this class generates) standing for its definition's language, by ref; null: a
     * recursive {@code $ref} is refused ({@link Recursive}).
     */
    private final Map<String, Character> holes;
    /** Where each hole's {@code $ref} was first met (a refusal's place). */
    private final Map<String, String> holeAt = new HashMap<>();

    /** A recursive {@code $ref}'s refusal on the DFA path: {@link #language} then takes the grammar path. */
    static final class Recursive extends Fault {
        Recursive(String message, String at) {
            super(message, at);
        }
    }

    /** A schema's language: its automaton (DFA path), or where its {@code $ref}s recurse, its grammar. */
    public record Language(Automaton automaton, EbnfGrammar grammar) {
    }

    private JsonSchemaAutomaton(JsonNode root, Map<String, Character> holes) {
        this.root = root;
        this.holes = holes;
    }

    /** The automaton of the schema given as JSON text; a refusal names what is wrong (a keyword, a value). */
    public static Automaton compile(String schema) {
        JsonNode n = parse(schema);
        return ClientRegex.minimal(new JsonSchemaAutomaton(n, null).of(n, "#"));
    }

    /**
     * The schema's language as structured outputs serve it: its automaton ({@link #compile}), or where a {@code $ref}
     * recurses, the exact grammar {@link JsonSchemaGrammar} makes of it (the same layout); a refusal as {@link #compile}'s.
     */
    public static Language language(String schema) {
        JsonNode n = parse(schema);
        try {
            return new Language(ClientRegex.minimal(new JsonSchemaAutomaton(n, null).of(n, "#")), null);
        } catch (Recursive r) {
            return new Language(null, grammar(n));
        }
    }

    /** The grammar path for any schema (tests: a non-recursive schema's grammar against its automaton). */
    static EbnfGrammar grammar(String schema) {
        return grammar(parse(schema));
    }

    private static EbnfGrammar grammar(JsonNode n) {
        return holed(n).grammar();
    }

    /**
     * A schema compiled with its recursive {@code $ref}s as holes ({@link JsonSchemaGrammar}): the root's automaton
     * ({@link #top}), each recursive definition's by its hole ({@link #defs}, holes inside), each hole's {@code $ref}
     * ({@link #refs}) and where it was first met ({@link #refAt}). {@link #grammar}: the schema's grammar.
     */
    record Holed(Automaton top, Map<Character, Automaton> defs, Map<String, Character> refs, Map<String, String> refAt) {
        EbnfGrammar grammar() {
            return JsonSchemaGrammar.of(top, defs, refs, refAt);
        }
    }

    /** The schema given as JSON text compiled with its recursive $refs as holes (tool calls' grammar: {@link ToolCalls}). */
    static Holed holed(String schema) {
        return holed(parse(schema));
    }

    private static Holed holed(JsonNode n) {
        JsonSchemaAutomaton c = new JsonSchemaAutomaton(n, new LinkedHashMap<>());
        Automaton top = ClientRegex.minimal(c.of(n, "#"));
        Map<Character, Automaton> defs = new LinkedHashMap<>();
        for (Map.Entry<String, Character> h : c.holes.entrySet()) defs.put(h.getValue(), c.resolved.get(h.getKey()));
        return new Holed(top, defs, c.holes, c.holeAt);
    }

    private static JsonNode parse(String schema) {
        JsonNode n;
        try {
            n = JSON.readTree(schema);
        } catch (JsonProcessingException e) {
            throw new IllegalArgumentException("is not valid JSON: " + e.getOriginalMessage());
        }
        if (n == null || !n.isObject()) throw new IllegalArgumentException("must be a JSON object (a schema), got " + n);
        return n;
    }

    /** Any JSON value of at most {@code depth} nested objects and arrays (0: scalars only). */
    public static Automaton anyValue(int depth) {
        Automaton cached = ANY_VALUE.get(depth);
        if (cached == null) {
            cached = ClientRegex.minimal(buildAnyValue(depth));
            ANY_VALUE.putIfAbsent(depth, cached);
        }
        return cached.clone();
    }

    private static Automaton buildAnyValue(int depth) {
        Automaton v = Automaton.union(List.of(regex("\"" + CHAR + "*\""), regex(NUMBER), regex("true|false|null")));
        for (int d = 1; d <= depth; d++) {
            Automaton inner = ClientRegex.minimal(v);
            v = ClientRegex.minimal(Automaton.union(List.of(v, anyObject(inner), list(inner, 0, -1))));
        }
        return v;
    }

    /** Any JSON object whose values have at most {@code depth} - 1 levels of nesting. */
    public static Automaton anyObject(int depth) {
        return ClientRegex.minimal(anyObject(anyValue(depth - 1)));
    }

    private static Automaton anyObject(Automaton value) {
        Automaton member = regex("\"" + CHAR + "*\"").concatenate(colon()).concatenate(value.clone());
        return lit("{").concatenate(member.clone().concatenate(comma().concatenate(member).repeat()).optional()).concatenate(lit("}"));
    }

    private static Automaton list(Automaton item, int min, int max) {
        // [ ] or [ item (, item){min-1..max-1} ]
        Automaton more = comma().concatenate(item.clone());
        Automaton rest = max < 0 ? more.repeat(Math.max(min - 1, 0)) : more.repeat(Math.max(min - 1, 0), max - 1);
        Automaton some = item.clone().concatenate(rest);
        if (max == 0) return lit("[]");
        return lit("[").concatenate(min == 0 ? some.optional() : some).concatenate(lit("]"));
    }

    private static Automaton comma() {
        return regex(", ?");
    }

    private static Automaton colon() {
        return regex(": ?");
    }

    private static Automaton lit(String s) {
        return BasicAutomata.makeString(s);
    }

    private static Automaton regex(String r) {
        return ClientRegex.compile(r);
    }

    private Automaton of(JsonNode s, String at) {
        if (depth >= MAX_BUILD_DEPTH) {
            throw new Fault("nests schemas over " + MAX_BUILD_DEPTH + " deep at " + at + " (each $ref's definition a level more), which structured "
                    + "outputs do not support", at);
        }
        depth++;
        try {
            return build(s, at);
        } catch (Fault | ClientRegex.TooComplex e) {
            throw e;
        } catch (IllegalArgumentException e) {
            throw new Fault(e.getMessage(), at);
        } finally {
            depth--;
        }
    }

    /**
     * The schema's keywords, each a language, intersected (JSON Schema's conjunction): {@code $ref}, {@code const} or
     * {@code enum}, {@code anyOf}, the type's own keywords, each of {@code allOf}, {@code oneOf}; then less {@code not}'s.
     */
    private Automaton build(JsonNode s, String at) {
        ClientRegex.checkDeadline();
        if (s.isBoolean()) {
            if (s.booleanValue()) return anyValue(ANY_DEPTH - 1);
            throw new IllegalArgumentException("has the schema false at " + at + ", which no value matches");
        }
        if (!s.isObject()) throw new IllegalArgumentException("has " + s + " at " + at + " where a schema (an object) belongs");
        for (Iterator<String> it = s.fieldNames(); it.hasNext(); ) {
            String k = it.next();
            if (!KNOWN.contains(k) && !ANNOTATIONS.contains(k)) {
                throw new IllegalArgumentException("uses the keyword '" + k + "' at " + at + ", which structured outputs do not support");
            }
        }
        List<Automaton> parts = new ArrayList<>();
        if (s.has("$ref")) parts.add(ref(s, at));
        if (s.has("const")) {
            parts.add(value(s.get("const")));
        } else if (s.has("enum")) {
            JsonNode e = s.get("enum");
            if (!e.isArray() || e.isEmpty()) throw new IllegalArgumentException("has enum at " + at + " that is not a non-empty list");
            List<Automaton> alts = new ArrayList<>();
            for (JsonNode v : e) alts.add(value(v));
            parts.add(Automaton.union(alts));
        }
        if (s.has("anyOf")) {
            List<Automaton> alts = branches(s, "anyOf", at);
            parts.add(ClientRegex.minimal(Automaton.union(alts)));
        }
        Automaton typed = typed(s, at);
        JsonNode nullable = s.get("nullable");
        if (nullable != null) {
            if (!nullable.isBoolean()) throw new IllegalArgumentException("has nullable " + nullable + " at " + at + ", not a boolean");
            // OpenAPI 3.0's: null besides the type, and only there: the schema's other keywords (allOf, oneOf, not, $ref,
            // an enum or const, which lists its values itself, 3.0.3) still hold for it. Without a type (nor a type's
            // keywords) null is no further value: a schema without a type admits null unless another keyword rules it out.
            if (nullable.booleanValue() && typed != null) typed = ClientRegex.minimal(typed.union(lit("null")));
        }
        int typedAt = typed == null ? -1 : parts.size();
        if (typed != null) parts.add(typed);
        int first = parts.size();
        if (s.has("allOf")) parts.addAll(branches(s, "allOf", at));
        int last = parts.size();
        if (s.has("oneOf")) parts.add(oneOf(s, at));
        if (s.has("not")) parts.add(not(s.get("not"), at));
        Automaton a = parts.isEmpty() ? anyValue(ANY_DEPTH - 1) : parts.getFirst();
        if (holes != null && parts.size() > 1) {
            // A hole is one character for a whole value: a product would take it for that character, not its language.
            // A bare type beside it (a $ref or an anyOf) is exact as a filter of the value's first character.
            if (parts.size() == 2 && typedAt >= 0 && JsonSchemaGrammar.hasHole(parts.get(1 - typedAt))) {
                Automaton filtered = typeBeside(s, parts.get(1 - typedAt));
                if (filtered != null) return filtered;
            }
            for (Automaton p : parts) {
                if (JsonSchemaGrammar.hasHole(p)) {
                    throw new IllegalArgumentException("has a recursive $ref at " + at + " (or below it) beside other keywords that constrain the"
                            + " same value (allOf, oneOf, not, or $ref, anyOf, enum / const and the type's keywords together; a bare type is"
                            + " served, but not integer alone), which structured outputs do not support for a recursive schema: write the"
                            + " recursive part as a $ref or anyOf alone");
                }
            }
        }
        for (int i = 1; i < parts.size(); i++) {
            try {
                a = ClientRegex.product(a, parts.get(i));
            } catch (ClientRegex.TooComplex e) {
                // Name what was being joined: an allOf branch, or the keywords (anyOf, the type's, oneOf, not) together.
                String what = i >= first && i < last ? "allOf's branch " + (i - first) : "its keywords";
                throw e.reworded("is too complex at " + at + " (joining " + what + " with what comes before it): "
                        + e.getMessage().replaceFirst("^is too complex: ", ""));
            }
        }
        return a; // a product is minimal; a part alone is as it was built (its parent minimizes it with its key)
    }

    /**
     * A bare {@code type} (no keyword of a type's, {@code nullable} aside) beside {@code a}, a language with holes: the
     * values of {@code a} whose JSON type is one of those named, exactly, by the value's first character ({@code {} [ "}, a
     * digit or {@code -}, {@code t f}, {@code n}); a hole there (the value is a recursive definition's, or may be) only where
     * every value of that definition is of a type named ({@link #types}), left out where none is. Null where that cannot be
     * exact: a type's keyword beside it, {@code integer} without {@code number} (1.5 and 1 begin alike), a hole whose
     * definition's values may be of a type named and of another (the caller refuses it).
     */
    private Automaton typeBeside(JsonNode s, Automaton a) {
        if (has(s, OBJECT_KEYS) || has(s, ARRAY_KEYS) || has(s, STRING_KEYS) || has(s, NUMBER_KEYS)) return null;
        Set<String> names = typeNames(s.get("type"));
        if (names == null) return null;
        if (s.path("nullable").asBoolean(false)) names.add("null");
        if (names.remove("integer") && !names.contains("number")) return null;
        Map<String, String> starts = Map.of("object", "{", "array", "[", "string", "\"", "number", "-0123456789", "boolean", "tf", "null", "n");
        if (!starts.keySet().containsAll(names)) return null; // an unknown name: typed refused it already
        StringBuilder first = new StringBuilder();
        for (String n : names) first.append(starts.get(n));
        Map<Character, String> refOf = new HashMap<>();
        for (Map.Entry<String, Character> h : holes.entrySet()) refOf.put(h.getValue(), h.getKey());
        for (Transition t : a.getInitialState().getTransitions()) {
            for (char c = t.getMin(); c <= t.getMax() && c < JsonSchemaGrammar.MAX_HOLES; c++) {
                String ref = refOf.get(c);
                if (ref == null) continue;
                JsonNode target = refTarget(JSON.createObjectNode().put("$ref", ref));
                Set<String> of = types(target, 0), outside = new HashSet<>(of);
                outside.removeAll(names);
                if (outside.isEmpty()) first.append(c); // every value of it is of a type named
                else if (outside.size() < of.size()) return null; // some are, some not: not told by the first character
                // else none is: no value of it holds
            }
        }
        List<Automaton> chars = new ArrayList<>();
        for (int i = 0; i < first.length(); i++) chars.add(BasicAutomata.makeChar(first.charAt(i)));
        return ClientRegex.product(a, Automaton.union(chars).concatenate(BasicAutomata.makeAnyString()));
    }

    /**
     * oneOf, where its branches cannot both hold for one value (then it is their union, exactly): their JSON types differ
     * ({@link #types}), or they are objects that both require a property whose const / enum values differ (a discriminated
     * union). Else a refusal: the automata generate a subset of each branch's values (one layout, one order of
     * properties), so a difference of them would admit a value another branch also holds.
     */
    private Automaton oneOf(JsonNode s, String at) {
        List<Automaton> alts = branches(s, "oneOf", at);
        JsonNode list = s.get("oneOf");
        for (int i = 0; i < list.size(); i++) {
            for (int j = i + 1; j < list.size(); j++) {
                if (!disjoint(list.get(i), list.get(j), 0)) {
                    throw new IllegalArgumentException("has oneOf at " + at + " whose branches " + i + " and " + j + " may both hold for one value;"
                            + " structured outputs take a oneOf whose branches are of different types, or objects told apart by a required"
                            + " property's const or enum");
                }
            }
        }
        return ClientRegex.minimal(Automaton.union(alts));
    }

    /**
     * not, for the schemas whose values a text's first character tells: {@code {}} / {@code true} (nothing remains),
     * {@code type} alone (annotations aside; not {@code integer}: 1.0 is one); else a refusal.
     */
    private Automaton not(JsonNode n, String at) {
        Set<String> types = null;
        boolean plain = n.isBoolean() ? n.booleanValue() : n.isObject();
        if (plain && n.isObject()) {
            for (Iterator<String> it = n.fieldNames(); it.hasNext(); ) {
                String k = it.next();
                if (!k.equals("type") && !ANNOTATIONS.contains(k)) plain = false;
            }
            if (plain && n.has("type")) {
                types = typeNames(n.get("type"));
                if (types == null || types.contains("integer")) plain = false;
            }
        }
        if (!plain) {
            throw new IllegalArgumentException("has not at " + at + " with " + n + "; structured"
                    + " outputs take not of {} (nothing) or of a type alone (not integer)");
        }
        if (types == null) return BasicAutomata.makeEmpty();
        Map<String, String> starts = Map.of("object", "{", "array", "\\[", "string", "\"", "number", "\\-0-9", "boolean", "tf", "null", "n");
        if (!starts.keySet().containsAll(types)) throw new IllegalArgumentException("has not at " + at + " with the type " + n.get("type")
                + ", not a JSON schema type name");
        StringBuilder first = new StringBuilder();
        for (Map.Entry<String, String> e : starts.entrySet()) if (!types.contains(e.getKey())) first.append(e.getValue());
        // Any JSON value (as a schema without a type) of the types left.
        return first.isEmpty() ? BasicAutomata.makeEmpty() : ClientRegex.product(anyValue(ANY_DEPTH - 1), regex("[" + first + "][\\s\\S]*"));
    }

    /** A type keyword's names, integer as itself; null where it is not a name or a list of names. */
    private static Set<String> typeNames(JsonNode type) {
        Set<String> names = new HashSet<>();
        if (type.isTextual()) names.add(type.textValue());
        else if (type.isArray()) for (JsonNode t : type) {
            if (!t.isTextual()) return null;
            names.add(t.textValue());
        }
        else return null;
        return names;
    }

    /**
     * The JSON types a schema's values can have, over-approximated (integer is number): its type, its const's or enum's
     * values' types, its $ref's, its anyOf's union, its allOf's intersection, null for nullable; else all of them.
     */
    private Set<String> types(JsonNode s, int depth) {
        Set<String> all = Set.of("object", "array", "string", "number", "boolean", "null");
        if (!s.isObject() || depth > 32) return new HashSet<>(all);
        Set<String> known = typesOf.get(s);
        if (known != null) return new HashSet<>(known); // one reached deeper may be all of them: still an over-approximation
        ClientRegex.checkDeadline();
        Set<String> out = new HashSet<>(all);
        JsonNode type = s.get("type");
        if (type != null) {
            Set<String> names = typeNames(type);
            if (names != null) {
                if (names.remove("integer")) names.add("number");
                if (s.path("nullable").asBoolean(false)) names.add("null"); // as build adds it, beside the type
                out.retainAll(names);
            }
        }
        JsonNode values = s.has("const") ? JSON.createArrayNode().add(s.get("const")) : s.get("enum");
        if (values != null && values.isArray()) {
            Set<String> of = new HashSet<>();
            for (JsonNode v : values) of.add(v.isNumber() ? "number" : v.getNodeType().name().toLowerCase(Locale.ROOT));
            out.retainAll(of);
        }
        JsonNode target = refTarget(s);
        if (target != null) out.retainAll(types(target, depth + 1));
        if (s.path("anyOf").isArray()) {
            Set<String> of = new HashSet<>();
            for (JsonNode b : s.get("anyOf")) of.addAll(types(b, depth + 1));
            out.retainAll(of);
        }
        if (s.path("allOf").isArray()) for (JsonNode b : s.get("allOf")) out.retainAll(types(b, depth + 1));
        typesOf.put(s, Set.copyOf(out));
        return out;
    }

    /** The schema a {@code $ref} names (null: none, or not one this compiler resolves). */
    private JsonNode refTarget(JsonNode s) {
        String ref = s.path("$ref").asText("");
        if (ref.startsWith("#/$defs/")) return root.path("$defs").get(ref.substring("#/$defs/".length()));
        if (ref.startsWith("#/definitions/")) return root.path("definitions").get(ref.substring("#/definitions/".length()));
        return null;
    }

    /** Whether no value can hold for both schemas (false where it cannot tell). */
    private boolean disjoint(JsonNode a, JsonNode b, int depth) {
        Set<String> ta = types(a, 0);
        ta.retainAll(types(b, 0));
        if (ta.isEmpty()) return true;
        if (depth > 32) return false;
        // Objects told apart by a property both require, whose values differ.
        JsonNode ra = refTarget(a), rb = refTarget(b);
        if (ra != null) return disjoint(ra, b, depth + 1);
        if (rb != null) return disjoint(a, rb, depth + 1);
        if (!ta.equals(Set.of("object")) || !a.path("properties").isObject() || !b.path("properties").isObject()) return false;
        for (JsonNode req : a.path("required")) {
            if (!req.isTextual() || !contains(b.path("required"), req)) continue;
            JsonNode pa = a.get("properties").get(req.textValue()), pb = b.get("properties").get(req.textValue());
            if (pa == null || pb == null) continue;
            if (valuesDisjoint(pa, pb) || disjoint(pa, pb, depth + 1)) return true;
        }
        return false;
    }

    /** Whether both schemas list their values (const / enum, through a $ref) and no value is in both (numbers by value). */
    private boolean valuesDisjoint(JsonNode a, JsonNode b) {
        List<JsonNode> va = values(a), vb = values(b);
        if (va == null || vb == null) return false;
        for (JsonNode x : va) {
            for (JsonNode y : vb) {
                if (x.equals(y) || x.isNumber() && y.isNumber() && x.decimalValue().compareTo(y.decimalValue()) == 0) return false;
                if (!x.isValueNode() || !y.isValueNode()) return false; // objects and arrays: their numbers may compare equal
            }
        }
        return true;
    }

    private List<JsonNode> values(JsonNode s) {
        JsonNode t = refTarget(s);
        if (t != null) return values(t);
        if (s.has("const")) return List.of(s.get("const"));
        JsonNode e = s.get("enum");
        if (e == null || !e.isArray()) return null;
        List<JsonNode> out = new ArrayList<>();
        e.forEach(out::add);
        return out;
    }

    private static boolean contains(JsonNode list, JsonNode v) {
        for (JsonNode x : list) if (x.equals(v)) return true;
        return false;
    }

    private List<Automaton> branches(JsonNode s, String key, String at) {
        JsonNode list = s.get(key);
        if (!list.isArray() || list.isEmpty()) throw new IllegalArgumentException("has " + key + " at " + at + " that is not a non-empty list");
        List<Automaton> alts = new ArrayList<>();
        for (int i = 0; i < list.size(); i++) alts.add(ClientRegex.minimal(of(list.get(i), at + "/" + key + "/" + i)));
        return alts;
    }

    /**
     * The language of {@code type} and its keywords; without a type, that of the types whose keywords the schema uses
     * (a subset of what the schema admits: {@code {"minimum": 3}} generates numbers only); null where it uses none.
     */
    private Automaton typed(JsonNode s, String at) {
        JsonNode type = s.get("type");
        List<JsonNode> types = new ArrayList<>();
        if (type == null) {
            if (has(s, OBJECT_KEYS)) types.add(JSON.getNodeFactory().textNode("object"));
            if (has(s, ARRAY_KEYS)) types.add(JSON.getNodeFactory().textNode("array"));
            if (has(s, STRING_KEYS)) types.add(JSON.getNodeFactory().textNode("string"));
            if (has(s, NUMBER_KEYS)) types.add(JSON.getNodeFactory().textNode("number"));
            if (types.isEmpty()) return null;
        } else if (type.isArray()) {
            type.forEach(types::add);
            if (types.isEmpty()) throw new IllegalArgumentException("has an empty type list at " + at);
        } else {
            types.add(type);
        }
        List<Automaton> alts = new ArrayList<>();
        for (JsonNode t : types) alts.add(typed(s, t, at));
        return alts.size() == 1 ? alts.getFirst() : ClientRegex.minimal(Automaton.union(alts));
    }

    private static boolean has(JsonNode s, Set<String> keys) {
        for (String k : keys) if (s.has(k)) return true;
        return false;
    }

    private Automaton typed(JsonNode s, JsonNode type, String at) {
        if (!type.isTextual()) throw new IllegalArgumentException("has type " + type + " at " + at + ", not a type name");
        return switch (type.textValue()) {
            case "object" -> object(s, at);
            case "array" -> array(s, at);
            case "string" -> string(s, at);
            case "integer" -> number(s, true, at);
            case "number" -> number(s, false, at);
            case "boolean" -> regex("true|false");
            case "null" -> lit("null");
            default -> throw new IllegalArgumentException("has the type '" + type.textValue() + "' at " + at + ", which is not a JSON schema type");
        };
    }

    private Automaton ref(JsonNode s, String at) {
        String ref = s.path("$ref").asText("");
        String name;
        JsonNode target;
        if (ref.startsWith("#/$defs/")) {
            name = ref.substring("#/$defs/".length());
            target = root.path("$defs").get(name);
        } else if (ref.startsWith("#/definitions/")) {
            name = ref.substring("#/definitions/".length());
            target = root.path("definitions").get(name);
        } else {
            throw new IllegalArgumentException("has $ref '" + ref + "' at " + at + "; only #/$defs/<name> and #/definitions/<name> are supported");
        }
        if (target == null) throw new IllegalArgumentException("has $ref '" + ref + "' at " + at + ", which names no definition");
        if (!resolving.add(ref)) {
            if (holes == null) throw new Recursive("has a recursive $ref '" + ref + "' at " + at + ", which structured outputs do not support", at);
            Character h = holes.get(ref);
            if (h == null) {
                if (holes.size() >= JsonSchemaGrammar.MAX_HOLES) {
                    throw new IllegalArgumentException("has over " + JsonSchemaGrammar.MAX_HOLES + " recursive definitions (at " + at + ", $ref '"
                            + ref + "'), which structured outputs do not support");
                }
                h = (char) holes.size();
                holes.put(ref, h);
                holeAt.put(ref, at);
            }
            return BasicAutomata.makeChar(h);
        }
        Automaton done = resolved.get(ref);
        if (done != null) {
            resolving.remove(ref);
            return done.clone();
        }
        try {
            Automaton a = ClientRegex.minimal(of(target, ref));
            resolved.put(ref, a);
            return a.clone();
        } finally {
            resolving.remove(ref);
        }
    }

    private static Automaton value(JsonNode v) {
        try {
            return lit(JSON.writeValueAsString(v));
        } catch (JsonProcessingException e) {
            throw new IllegalArgumentException("has a value that cannot be written: " + e.getMessage());
        }
    }

    private Automaton object(JsonNode s, String at) {
        JsonNode props = s.get("properties");
        JsonNode extra = s.get("additionalProperties");
        if (extra != null && !extra.isBoolean() && !extra.isObject()) {
            throw new IllegalArgumentException("has additionalProperties " + extra + " at " + at + ", not a boolean or a schema");
        }
        if (props == null) {
            JsonNode req = s.get("required");
            if (req != null && !req.isEmpty()) { // any object would include {}, which lacks them
                throw new IllegalArgumentException("has required " + req + " at " + at + " without properties, which structured outputs do not support");
            }
            // Any member names, each value of additionalProperties' schema: none for false.
            if (extra != null && extra.isBoolean() && !extra.booleanValue()) return lit("{}");
            Automaton value = extra == null || extra.isBoolean() ? anyValue(ANY_DEPTH - 1) : of(extra, at + "/additionalProperties");
            return anyObject(ClientRegex.minimal(value));
        }
        if (!props.isObject()) throw new IllegalArgumentException("has properties at " + at + " that are not an object");
        Set<String> required = new HashSet<>();
        JsonNode req = s.get("required");
        if (req != null) {
            if (!req.isArray()) throw new IllegalArgumentException("has required at " + at + " that is not a list of names");
            for (JsonNode r : req) {
                if (!r.isTextual() || !props.has(r.textValue())) {
                    throw new IllegalArgumentException("has required " + r + " at " + at + ", which is not one of its properties");
                }
                required.add(r.textValue());
            }
        }
        List<Automaton> members = new ArrayList<>();
        List<Boolean> needed = new ArrayList<>();
        long states = 0;
        for (Map.Entry<String, JsonNode> p : props.properties()) {
            Automaton key = value(JSON.getNodeFactory().textNode(p.getKey()));
            Automaton m = ClientRegex.minimal(key.concatenate(colon()).concatenate(of(p.getValue(), at + "/properties/" + escape(p.getKey()))));
            // Each member's states stay apart in the object's minimal automaton (what follows a member differs by its
            // place): past the cap together, the object is refused now, not after seconds of joining them (30 members
            // {} were 5 s to the deadline, and a variation of the names escapes the refusals remembered).
            states += m.getNumberOfStates();
            if (states > ClientRegex.MAX_STATES) {
                throw new ClientRegex.TooComplex("is too complex: the members of its object at " + at + " have over "
                        + ClientRegex.MAX_STATES + " automaton states together");
            }
            members.add(m);
            needed.add(required.contains(p.getKey()));
        }
        // after[i][e]: the members from i on, e: whether one came before (then each starts with a comma).
        Automaton restStarted = BasicAutomata.makeEmptyString(), restFresh = BasicAutomata.makeEmptyString();
        for (int i = members.size() - 1; i >= 0; i--) {
            Automaton m = members.get(i);
            Automaton started = comma().concatenate(m.clone()).concatenate(restStarted.clone());
            Automaton fresh = m.clone().concatenate(restStarted.clone());
            if (!needed.get(i)) {
                started = started.union(restStarted.clone());
                fresh = fresh.union(restFresh.clone());
            }
            restStarted = compact(started);
            restFresh = compact(fresh);
        }
        return lit("{").concatenate(restFresh).concatenate(lit("}"));
    }

    /**
     * An integer's or a number's language: unbounded, the plain syntax ({@link #INTEGER}, {@link #NUMBER}); with
     * {@code minimum}, {@code maximum}, {@code exclusiveMinimum}, {@code exclusiveMaximum} (a number, or draft 4's boolean
     * beside minimum / maximum) or {@code multipleOf}, exactly the values in range written without an exponent
     * ({@link SchemaScalars#number}).
     */
    private Automaton number(JsonNode s, boolean integer, String at) {
        if (!has(s, NUMBER_KEYS)) return regex(integer ? INTEGER : NUMBER);
        SchemaScalars.Bound lo = bound(s, "minimum", "exclusiveMinimum", at), hi = bound(s, "maximum", "exclusiveMaximum", at);
        BigDecimal multipleOf = null;
        if (s.has("multipleOf")) {
            multipleOf = decimal(s, "multipleOf", at);
            if (multipleOf.signum() <= 0) throw new IllegalArgumentException("has multipleOf " + s.get("multipleOf") + " at " + at + ", not above 0");
            if (SchemaScalars.residueStates(multipleOf) > SchemaScalars.MAX_MODULUS_STATES) {
                throw new IllegalArgumentException("has multipleOf " + s.get("multipleOf") + " at " + at + ", whose automaton would need over "
                        + SchemaScalars.MAX_MODULUS_STATES + " states (its digits M as an integer, times its fraction digits k + 3)");
            }
        }
        if (lo.value() != null && hi.value() != null) {
            int c = lo.value().compareTo(hi.value());
            if (c > 0 || c == 0 && (lo.exclusive() || hi.exclusive())) {
                throw new IllegalArgumentException("has a range at " + at + " that no number is in: " + range(lo, hi));
            }
        }
        Automaton a;
        try {
            a = SchemaScalars.number(integer, lo, hi, multipleOf);
        } catch (ClientRegex.TooComplex e) {
            throw e.reworded("is too complex at " + at + " (its range and multipleOf " + s.get("multipleOf") + "): "
                    + e.getMessage().replaceFirst("^is too complex: ", ""));
        }
        if (a.isEmpty()) {
            throw new IllegalArgumentException("has a range at " + at + " that no " + (integer ? "integer" : "number")
                    + (multipleOf == null ? "" : " multiple of " + multipleOf.toPlainString()) + " is in: " + range(lo, hi));
        }
        return a;
    }

    private static String range(SchemaScalars.Bound lo, SchemaScalars.Bound hi) {
        return (lo.value() == null ? "(-inf" : (lo.exclusive() ? "(" : "[") + lo.value().toPlainString()) + ", "
                + (hi.value() == null ? "+inf)" : hi.value().toPlainString() + (hi.exclusive() ? ")" : "]"));
    }

    /** A side of the range: the tighter of {@code key} (inclusive) and {@code exclusiveKey} (a number; draft 4: a boolean). */
    private static SchemaScalars.Bound bound(JsonNode s, String key, String exclusiveKey, String at) {
        BigDecimal inclusive = s.has(key) ? decimal(s, key, at) : null;
        JsonNode ex = s.get(exclusiveKey);
        if (ex == null) return new SchemaScalars.Bound(inclusive, false);
        if (ex.isBoolean()) {
            if (inclusive == null && ex.booleanValue()) {
                throw new IllegalArgumentException("has " + exclusiveKey + " true at " + at + " without " + key);
            }
            return new SchemaScalars.Bound(inclusive, ex.booleanValue());
        }
        BigDecimal exclusive = decimal(s, exclusiveKey, at);
        if (inclusive == null) return new SchemaScalars.Bound(exclusive, true);
        int c = exclusive.compareTo(inclusive) * (key.equals("minimum") ? 1 : -1);
        return c >= 0 ? new SchemaScalars.Bound(exclusive, true) : new SchemaScalars.Bound(inclusive, false);
    }

    private static BigDecimal decimal(JsonNode s, String key, String at) {
        JsonNode v = s.get(key);
        if (!v.isNumber()) throw new IllegalArgumentException("has " + key + " " + v + " at " + at + ", not a number");
        BigDecimal d = v.decimalValue();
        // A zero's scale is no digit of it, but arithmetic and printing would take it as written (0e-2147483647: two
        // billion zeros after the point): one past the digits allowed is plain 0.
        if (d.signum() == 0) return Math.abs((long) d.scale()) > SchemaScalars.MAX_BOUND_DIGITS ? BigDecimal.ZERO : d;
        // The digits before the point counted in a long (stripping zeros leaves the count as it is): an exponent near an
        // int's end (1e2147483647, scale -2147483647) overflowed precision() - scale() to a negative count, and the bound
        // went on to arithmetic that failed (a 500) or would have printed it whole; stripping 10e2147483648's zero underflows.
        BigDecimal plain = (long) d.precision() - d.scale() > SchemaScalars.MAX_BOUND_DIGITS ? null : d.stripTrailingZeros();
        if (plain == null || plain.scale() > SchemaScalars.MAX_BOUND_DIGITS) {
            throw new IllegalArgumentException("has " + key + " " + v + " at " + at + "; at most " + SchemaScalars.MAX_BOUND_DIGITS
                    + " digits before and after the point are supported");
        }
        return d;
    }

    /** A JSON pointer's escapes of a property name ({@code ~} and {@code /}). */
    private static String escape(String key) {
        return key.replace("~", "~0").replace("/", "~1");
    }

    /**
     * An object's members so far, deterministic; minimized only once past {@link #MINIMIZE_PAST} states, else once at
     * the end with the whole object. The threshold dates from dk.brics's Hopcroft (states × character classes each
     * time: minimizing every step took seconds for a dozen members with formats); with {@link DfaMinimizer} a lower one
     * is a trade, not a gain (thread CPU time, warm, interleaved: 0 or 1,000 took the twenty optional emails from
     * 1.6 to 1.2 s and forty required dates from 0.3 to 0.4–0.5 s; docs/PERFORMANCE.md, session 13), so it stays.
     */
    private static Automaton compact(Automaton a) {
        Automaton d = ClientRegex.determinize(a, ClientRegex.MAX_NFA_STATES);
        return d.getNumberOfStates() > MINIMIZE_PAST ? ClientRegex.minimal(d) : d;
    }

    private Automaton array(JsonNode s, String at) {
        int min = count(s, "minItems", 0, at), max = count(s, "maxItems", -1, at);
        if (max >= 0 && max < min) throw new IllegalArgumentException("has maxItems " + max + " below minItems " + min + " at " + at);
        JsonNode items = s.get("items");
        Automaton item = items == null ? anyValue(ANY_DEPTH - 1) : ClientRegex.minimal(of(items, at + "/items"));
        // The list's copies of its item (and a comma each), counted before they are made: dk.brics's repeat builds them
        // uninterruptibly (an array of up to 256 arrays of up to 256 dates made 3.8M states for 77 s past the deadline).
        long copies = max < 0 ? min + 1L : Math.max(max, 1);
        if ((item.getNumberOfStates() + 3L) * copies > ClientRegex.MAX_NFA_STATES) {
            throw new ClientRegex.TooComplex("is too large at " + at + ": " + copies + " copies (" + (max < 0 ? "minItems " + min : "maxItems " + max)
                    + ") of its items' automaton of " + item.getNumberOfStates() + " states would pass " + ClientRegex.MAX_NFA_STATES
                    + " automaton states before determinization");
        }
        return list(item, min, max);
    }

    private Automaton string(JsonNode s, String at) {
        int min = count(s, "minLength", 0, at), max = count(s, "maxLength", -1, at);
        if (max >= 0 && max < min) throw new IllegalArgumentException("has maxLength " + max + " below minLength " + min + " at " + at);
        Automaton chars = regex(CHAR);
        Automaton body = max < 0 ? chars.repeat(min) : chars.repeat(min, max);
        JsonNode pattern = s.get("pattern");
        if (pattern != null) {
            if (!pattern.isTextual()) throw new IllegalArgumentException("has pattern " + pattern + " at " + at + ", not a string");
            Automaton p;
            try {
                p = ClientRegex.compile(pattern.textValue());
            } catch (IllegalArgumentException e) {
                String what = "has a pattern at " + at + " that " + e.getMessage();
                throw e instanceof ClientRegex.TooComplex t ? t.reworded(what) : new IllegalArgumentException(what);
            }
            // The pattern's characters as themselves: a quote, a backslash or a control character would need an escape.
            Automaton plain = regex("[^\"\\\\\\x00-\\x1f]*");
            // The capped product (dk.brics's intersection has no bound: a 8,193-state pattern within maxLength 256 is 2M states).
            Automaton within = ClientRegex.product(p, plain);
            if (min > 0 || max >= 0) within = ClientRegex.product(within, regex(max < 0 ? "[\\s\\S]{" + min + ",}" : "[\\s\\S]{" + min + "," + max + "}"));
            body = within;
        }
        JsonNode format = s.get("format");
        if (format != null) {
            Automaton f = format.isTextual() ? SchemaScalars.format(format.textValue()) : null;
            if (f == null) {
                throw new IllegalArgumentException("has the format " + format + " at " + at + ", which structured outputs do not support (they do "
                        + String.join(", ", SchemaScalars.FORMATS) + ")");
            }
            body = ClientRegex.product(f, body);
        }
        return lit("\"").concatenate(body).concatenate(lit("\""));
    }

    private static int count(JsonNode s, String key, int dflt, String at) {
        JsonNode v = s.get(key);
        if (v == null) return dflt;
        if (!v.isIntegralNumber() || !v.canConvertToInt() || v.intValue() < 0) {
            throw new IllegalArgumentException("has " + key + " " + v + " at " + at + ", not a non-negative integer");
        }
        if (v.intValue() > ClientRegex.MAX_REPEAT) {
            throw new IllegalArgumentException("has " + key + " " + v + " at " + at + "; at most " + ClientRegex.MAX_REPEAT + " is supported");
        }
        return v.intValue();
    }
}
