package io.kvferry.engine.model;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dk.brics.automaton.Automaton;
import dk.brics.automaton.BasicAutomata;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A JSON schema as the automaton of the compact JSON texts it admits (structured outputs' {@code json_schema}), for a
 * documented subset ({@code docs/SERVING.md}, "Structured outputs"):
 * <ul>
 * <li>{@code type} (a name or a list of them): {@code object}, {@code string}, {@code integer}, {@code number},
 * {@code boolean}, {@code null}, {@code array};</li>
 * <li>an object's {@code properties} come in their declared order, each {@code required} one always, each other one
 * present or left out; no other property is generated ({@code additionalProperties} false, true or absent alike); an
 * object without {@code properties} is any JSON object ({@link #ANY_DEPTH} levels deep at most);</li>
 * <li>a string's {@code enum} / {@code const}, {@code minLength}, {@code maxLength} (up to {@link ClientRegex#MAX_REPEAT})
 * and {@code pattern} (matching the whole value; characters JSON would escape are not generated);</li>
 * <li>an array's {@code items} (absent: any JSON value), {@code minItems}, {@code maxItems};</li>
 * <li>{@code enum}, {@code const}, {@code anyOf}, {@code $ref} to {@code #/$defs/…} or {@code #/definitions/…} (not
 * recursive); annotations ({@code title}, {@code description}, {@code $schema}, {@code $id}, {@code $comment},
 * {@code examples}, {@code default}) are ignored.</li>
 * </ul>
 * Any other keyword is refused with its name. Whitespace: none, except one optional space after each {@code ,} and
 * {@code :} (bounded, so a small model cannot loop on spaces). Numbers: an integer has at most 16 digits, a fraction at
 * most 16, an exponent at most 3 (so a number ends). Pure; callers serialize (as {@link ClientRegex}).
 */
public final class JsonSchemaAutomaton {
    /** How deeply objects and arrays nest where the schema leaves them free (json_object, an object without properties). */
    public static final int ANY_DEPTH = 4;

    private static final ObjectMapper JSON = new ObjectMapper();
    private static final Set<String> ANNOTATIONS = Set.of("title", "description", "$schema", "$id", "$comment", "examples", "default");
    private static final Set<String> KNOWN = Set.of("type", "properties", "required", "additionalProperties", "enum", "const", "anyOf",
            "$ref", "$defs", "definitions", "items", "minItems", "maxItems", "minLength", "maxLength", "pattern");

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
    /** Each definition's automaton, built once per schema: a definition used twice at each of n levels is n builds, not 2^n. */
    private final Map<String, Automaton> resolved = new HashMap<>();

    private JsonSchemaAutomaton(JsonNode root) {
        this.root = root;
    }

    /** The automaton of the schema given as JSON text; a refusal names what is wrong (a keyword, a value). */
    public static Automaton compile(String schema) {
        JsonNode n;
        try {
            n = JSON.readTree(schema);
        } catch (JsonProcessingException e) {
            throw new IllegalArgumentException("is not valid JSON: " + e.getOriginalMessage());
        }
        if (n == null || !n.isObject()) throw new IllegalArgumentException("must be a JSON object (a schema), got " + n);
        return ClientRegex.minimal(new JsonSchemaAutomaton(n).of(n, "#"));
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
        if (s.has("$ref")) return ref(s, at);
        if (s.has("const")) return value(s.get("const"));
        if (s.has("enum")) {
            JsonNode e = s.get("enum");
            if (!e.isArray() || e.isEmpty()) throw new IllegalArgumentException("has enum at " + at + " that is not a non-empty list");
            List<Automaton> alts = new ArrayList<>();
            for (JsonNode v : e) alts.add(value(v));
            return Automaton.union(alts);
        }
        if (s.has("anyOf")) {
            JsonNode any = s.get("anyOf");
            if (!any.isArray() || any.isEmpty()) throw new IllegalArgumentException("has anyOf at " + at + " that is not a non-empty list");
            List<Automaton> alts = new ArrayList<>();
            for (int i = 0; i < any.size(); i++) alts.add(of(any.get(i), at + "/anyOf/" + i));
            return ClientRegex.minimal(Automaton.union(alts));
        }
        JsonNode type = s.get("type");
        if (type == null) {
            if (s.has("properties")) return object(s, at);
            if (s.has("items")) return array(s, at);
            return anyValue(ANY_DEPTH - 1);
        }
        if (type.isArray()) {
            List<Automaton> alts = new ArrayList<>();
            for (JsonNode t : type) alts.add(typed(s, t, at));
            if (alts.isEmpty()) throw new IllegalArgumentException("has an empty type list at " + at);
            return ClientRegex.minimal(Automaton.union(alts));
        }
        return typed(s, type, at);
    }

    private Automaton typed(JsonNode s, JsonNode type, String at) {
        if (!type.isTextual()) throw new IllegalArgumentException("has type " + type + " at " + at + ", not a type name");
        return switch (type.textValue()) {
            case "object" -> object(s, at);
            case "array" -> array(s, at);
            case "string" -> string(s, at);
            case "integer" -> regex(INTEGER);
            case "number" -> regex(NUMBER);
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
        if (!resolving.add(ref)) throw new IllegalArgumentException("has a recursive $ref '" + ref + "' at " + at + ", which structured outputs do not support");
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
            return anyObject(ClientRegex.minimal(anyValue(ANY_DEPTH - 1)));
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
        for (Map.Entry<String, JsonNode> p : props.properties()) {
            Automaton key = value(JSON.getNodeFactory().textNode(p.getKey()));
            members.add(ClientRegex.minimal(key.concatenate(colon()).concatenate(of(p.getValue(), at + "/properties/" + p.getKey()))));
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
            restStarted = ClientRegex.minimal(started);
            restFresh = ClientRegex.minimal(fresh);
        }
        return lit("{").concatenate(restFresh).concatenate(lit("}"));
    }

    private Automaton array(JsonNode s, String at) {
        int min = count(s, "minItems", 0, at), max = count(s, "maxItems", -1, at);
        if (max >= 0 && max < min) throw new IllegalArgumentException("has maxItems " + max + " below minItems " + min + " at " + at);
        JsonNode items = s.get("items");
        Automaton item = items == null ? anyValue(ANY_DEPTH - 1) : ClientRegex.minimal(of(items, at + "/items"));
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
                throw e instanceof ClientRegex.TooComplex ? new ClientRegex.TooComplex(what) : new IllegalArgumentException(what);
            }
            // The pattern's characters as themselves: a quote, a backslash or a control character would need an escape.
            Automaton plain = regex("[^\"\\\\\\x00-\\x1f]*");
            Automaton within = p.intersection(plain);
            if (min > 0 || max >= 0) within = within.intersection(regex(max < 0 ? "[\\s\\S]{" + min + ",}" : "[\\s\\S]{" + min + "," + max + "}"));
            body = within;
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
