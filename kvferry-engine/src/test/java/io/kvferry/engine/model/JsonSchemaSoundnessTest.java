package io.kvferry.engine.model;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dk.brics.automaton.RunAutomaton;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.statistics.Statistics;

import java.math.BigDecimal;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.UUID;

import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * Soundness over random schemas that mix the keywords (ranges with decimal, exclusive, negative, zero and huge bounds,
 * multipleOf, allOf, oneOf of different types and discriminated objects, not, nullable, formats, enum / const, type
 * lists, additionalProperties' schema, $ref), each compiled or refused with a 400's exception: every text a random walk
 * over the automaton reaches parses and is valid under a validator written here, independently of the compiler (JSON
 * Schema 2020-12's meaning of each keyword, with OpenAPI 3.0.3's nullable; numbers compared as BigDecimal, lengths in
 * code points).
 */
class JsonSchemaSoundnessTest {
    private static final JsonNodeFactory F = JsonNodeFactory.instance;
    private static final List<String> FORMATS = List.of("date", "time", "date-time", "duration", "uuid", "ipv4", "email");

    @Property(seed = "20261207", tries = 100)
    void everyWalkedTextOfARandomSchemaIsValid(@ForAll @IntRange(min = 0, max = 1_000_000) int seed) throws Exception {
        SplittableRandom r = new SplittableRandom(seed);
        ObjectNode root = F.objectNode();
        ObjectNode defs = F.objectNode();
        JsonNode body = new Gen(r, defs).schema(3);
        if (body.isObject()) root.setAll((ObjectNode) body);
        else root.set("allOf", F.arrayNode().add(body));
        if (!defs.isEmpty()) root.set("$defs", defs);
        String schema = root.toString();
        RunAutomaton run;
        try {
            run = new RunAutomaton(JsonSchemaAutomaton.compile(schema));
        } catch (IllegalArgumentException e) {
            Statistics.label("schema").collect(e instanceof ClientRegex.TooComplex ? "too complex" : "refused");
            return; // a 400 (its wording is checked elsewhere); anything else thrown fails the property
        }
        Statistics.label("schema").collect("compiled");
        for (int i = 0; i < 25; i++) {
            String text = OutputConstraintTest.walk(run, r, 60);
            if (text == null) return; // matches nothing: OutputConstraint refuses it ("matches no text at all")
            JsonNode v;
            try {
                v = JsonSchemaKeywordsTest.JSON.readTree(text);
            } catch (Exception e) {
                fail(schema + " admits " + text + ", which is not JSON: " + e.getMessage());
                return;
            }
            assertNotNull(v, text);
            assertTrue(valid(root, root, v), schema + " admits " + text);
        }
    }

    /** A random schema's parts; definitions go into {@code defs}. */
    record Gen(SplittableRandom r, ObjectNode defs) {
        JsonNode schema(int depth) {
            int kind = r.nextInt(depth <= 0 ? 7 : 16);
            ObjectNode s = F.objectNode();
            switch (kind) {
                case 0, 1 -> number(s);
                case 2 -> string(s);
                case 3 -> s.put("type", List.of("boolean", "null").get(r.nextInt(2)));
                case 4 -> s.set("enum", values(1 + r.nextInt(3)));
                case 5 -> s.set("const", values(1).get(0));
                case 6 -> {
                    s.set("type", F.arrayNode().add(List.of("integer", "number", "string").get(r.nextInt(3))).add("null"));
                    if (r.nextBoolean()) s.put("minimum", decimal());
                    if (r.nextBoolean()) s.put("maxLength", r.nextInt(0, 5));
                }
                case 7, 8 -> object(s, depth);
                case 9 -> {
                    s.put("type", "array");
                    s.set("items", schema(depth - 1));
                    int min = r.nextInt(3);
                    if (r.nextBoolean()) s.put("minItems", min);
                    if (r.nextBoolean()) s.put("maxItems", min + r.nextInt(3));
                }
                case 10 -> s.set("anyOf", list(depth, 1 + r.nextInt(3)));
                case 11 -> s.set("allOf", allOf(depth));
                case 12 -> s.set("oneOf", oneOf(depth));
                case 13 -> {
                    s.set("not", F.objectNode().put("type", List.of("string", "number", "null", "object", "array", "boolean").get(r.nextInt(6))));
                    if (r.nextBoolean()) s.set("anyOf", list(depth, 2));
                }
                case 14 -> {
                    String name = "d" + defs.size();
                    defs.set(name, schema(depth - 1));
                    s.put("$ref", "#/$defs/" + name);
                }
                default -> {
                    s.put("type", "object");
                    s.set("additionalProperties", r.nextInt(4) == 0 ? F.booleanNode(r.nextBoolean()) : schema(0));
                }
            }
            if (r.nextInt(6) == 0) s.put("nullable", r.nextBoolean());
            if (r.nextInt(8) == 0 && !s.has("not")) s.set("not", F.objectNode().put("type", "null"));
            return s;
        }

        ArrayNode list(int depth, int n) {
            ArrayNode a = F.arrayNode();
            for (int i = 0; i < n; i++) a.add(schema(depth - 1));
            return a;
        }

        /** Ranges, multiples, strings or objects of one type each, so that some intersections are not empty. */
        ArrayNode allOf(int depth) {
            ArrayNode a = F.arrayNode();
            int n = 2 + r.nextInt(2);
            String type = List.of("number", "string", "object", "any").get(r.nextInt(4));
            for (int i = 0; i < n; i++) {
                ObjectNode b = F.objectNode();
                switch (type) {
                    case "number" -> number(b);
                    case "string" -> string(b);
                    case "object" -> object(b, depth - 1);
                    default -> {
                        a.add(schema(depth - 1));
                        continue;
                    }
                }
                a.add(b);
            }
            return a;
        }

        /** Branches of different types, or objects that require a property of different consts. */
        ArrayNode oneOf(int depth) {
            ArrayNode a = F.arrayNode();
            if (r.nextBoolean()) {
                List<String> types = new ArrayList<>(List.of("integer", "string", "null", "boolean", "array", "object"));
                int n = 2 + r.nextInt(2);
                for (int i = 0; i < n; i++) {
                    ObjectNode b = F.objectNode();
                    String t = types.remove(r.nextInt(types.size()));
                    switch (t) {
                        case "integer" -> number(b);
                        case "string" -> string(b);
                        case "object" -> object(b, depth - 1);
                        default -> b.put("type", t);
                    }
                    b.put("type", t);
                    a.add(b);
                }
                return a;
            }
            for (String tag : List.of("a", "b")) {
                ObjectNode b = F.objectNode().put("type", "object");
                ObjectNode props = F.objectNode();
                props.set("kind", r.nextBoolean() ? F.objectNode().put("const", tag) : F.objectNode().set("enum", F.arrayNode().add(tag)));
                props.set("v", schema(depth - 1));
                b.set("properties", props);
                b.set("required", F.arrayNode().add("kind"));
                if (r.nextBoolean()) {
                    String name = "o" + defs.size();
                    defs.set(name, b);
                    a.add(F.objectNode().put("$ref", "#/$defs/" + name));
                } else {
                    a.add(b);
                }
            }
            return a;
        }

        void number(ObjectNode s) {
            s.put("type", r.nextBoolean() ? "integer" : "number");
            BigDecimal lo = null;
            if (r.nextInt(3) > 0) {
                lo = decimal();
                s.put(r.nextBoolean() ? "minimum" : "exclusiveMinimum", lo);
            }
            if (r.nextInt(3) > 0) {
                BigDecimal hi = lo == null || r.nextInt(5) == 0 ? decimal() : lo.add(decimal().abs());
                if (r.nextInt(6) == 0 && lo != null) hi = lo;
                s.put(r.nextBoolean() ? "maximum" : "exclusiveMaximum", hi);
            }
            if (r.nextInt(3) == 0) {
                s.put("multipleOf", new BigDecimal(List.of("1", "2", "3", "7", "0.5", "0.25", "0.1", "0.01", "2.5", "1e-3", "12").get(r.nextInt(11))));
            }
        }

        BigDecimal decimal() {
            return switch (r.nextInt(7)) {
                case 0 -> BigDecimal.ZERO;
                case 1 -> new BigDecimal(List.of("-0", "0.0", "-0.5", "1e20", "-1e20", "123456789012345678901234567890.5", "1e-30", "-1e-17")
                        .get(r.nextInt(8)));
                case 2 -> BigDecimal.valueOf(r.nextLong(-1_000_000, 1_000_001), r.nextInt(0, 8));
                default -> BigDecimal.valueOf(r.nextInt(-60, 61), r.nextInt(0, 3));
            };
        }

        void string(ObjectNode s) {
            s.put("type", "string");
            if (r.nextBoolean()) s.put("format", FORMATS.get(r.nextInt(FORMATS.size())));
            int min = r.nextInt(0, 12);
            if (r.nextInt(3) == 0) s.put("minLength", min);
            if (r.nextInt(3) == 0) s.put("maxLength", min + r.nextInt(0, 40));
        }

        void object(ObjectNode s, int depth) {
            s.put("type", "object");
            ObjectNode props = F.objectNode();
            ArrayNode req = F.arrayNode();
            int n = r.nextInt(4);
            for (int i = 0; i < n; i++) {
                String name = List.of("a", "b", "c", "d").get(r.nextInt(4));
                props.set(name, schema(depth - 1));
                if (r.nextBoolean()) req.add(name);
            }
            s.set("properties", props);
            if (!req.isEmpty()) s.set("required", dedupe(req));
            if (r.nextInt(3) == 0) s.set("additionalProperties", r.nextBoolean() ? F.booleanNode(r.nextBoolean()) : schema(0));
        }

        ArrayNode values(int n) {
            ArrayNode a = F.arrayNode();
            for (int i = 0; i < n; i++) {
                switch (r.nextInt(6)) {
                    case 0 -> a.add(r.nextInt(-3, 4));
                    case 1 -> a.add(new BigDecimal(List.of("1.0", "1e2", "-0.5", "0").get(r.nextInt(4))));
                    case 2 -> a.add(List.of("x", "2024-02-29", "", "é\"").get(r.nextInt(4)));
                    case 3 -> a.addNull();
                    case 4 -> a.add(r.nextBoolean());
                    default -> a.add(F.objectNode().put("k", r.nextInt(3)));
                }
            }
            return a;
        }
    }

    private static ArrayNode dedupe(ArrayNode a) {
        ArrayNode out = F.arrayNode();
        for (JsonNode x : a) if (!contains(out, x)) out.add(x);
        return out;
    }

    private static boolean contains(JsonNode list, JsonNode v) {
        for (JsonNode x : list) if (same(x, v)) return true;
        return false;
    }

    /** JSON Schema's equality: numbers by value, objects by members, arrays item by item. */
    static boolean same(JsonNode a, JsonNode b) {
        if (a.isNumber() && b.isNumber()) return a.decimalValue().compareTo(b.decimalValue()) == 0;
        if (a.isObject() && b.isObject()) {
            if (a.size() != b.size()) return false;
            for (Map.Entry<String, JsonNode> e : a.properties()) {
                JsonNode o = b.get(e.getKey());
                if (o == null || !same(e.getValue(), o)) return false;
            }
            return true;
        }
        if (a.isArray() && b.isArray()) {
            if (a.size() != b.size()) return false;
            for (int i = 0; i < a.size(); i++) if (!same(a.get(i), b.get(i))) return false;
            return true;
        }
        return a.equals(b);
    }

    /** The validator: whether {@code v} is valid for {@code s} (the keywords the generator uses). */
    static boolean valid(JsonNode root, JsonNode s, JsonNode v) {
        if (s.isBoolean()) return s.booleanValue();
        if (s.has("$ref")) {
            String name = s.get("$ref").asText().substring("#/$defs/".length());
            if (!valid(root, root.get("$defs").get(name), v)) return false;
        }
        if (s.has("type") && !typeOk(s.get("type"), v, s.path("nullable").asBoolean(false))) return false;
        if (s.has("const") && !same(s.get("const"), v)) return false;
        if (s.has("enum") && !contains(s.get("enum"), v)) return false;
        if (s.has("anyOf")) {
            boolean any = false;
            for (JsonNode b : s.get("anyOf")) any |= valid(root, b, v);
            if (!any) return false;
        }
        if (s.has("allOf")) for (JsonNode b : s.get("allOf")) if (!valid(root, b, v)) return false;
        if (s.has("oneOf")) {
            int n = 0;
            for (JsonNode b : s.get("oneOf")) if (valid(root, b, v)) n++;
            if (n != 1) return false;
        }
        if (s.has("not") && valid(root, s.get("not"), v)) return false;
        if (v.isNumber() && !numberOk(s, v.decimalValue())) return false;
        if (v.isTextual() && !stringOk(s, v.textValue())) return false;
        if (v.isArray()) {
            if (s.has("minItems") && v.size() < s.get("minItems").asInt()) return false;
            if (s.has("maxItems") && v.size() > s.get("maxItems").asInt()) return false;
            if (s.has("items")) for (JsonNode x : v) if (!valid(root, s.get("items"), x)) return false;
        }
        if (v.isObject()) {
            JsonNode props = s.path("properties");
            for (JsonNode req : s.path("required")) if (!v.has(req.asText())) return false;
            for (Iterator<Map.Entry<String, JsonNode>> it = v.properties().iterator(); it.hasNext(); ) {
                Map.Entry<String, JsonNode> m = it.next();
                JsonNode p = props.get(m.getKey());
                JsonNode sub = p != null ? p : s.get("additionalProperties");
                if (sub != null && !valid(root, sub, m.getValue())) return false;
            }
        }
        return true;
    }

    private static boolean typeOk(JsonNode type, JsonNode v, boolean nullable) {
        if (nullable && v.isNull()) return true; // OpenAPI 3.0.3: null besides the type
        if (type.isArray()) {
            for (JsonNode t : type) if (typeOk(t, v, false)) return true;
            return false;
        }
        return switch (type.asText()) {
            case "integer" -> v.isNumber() && v.decimalValue().stripTrailingZeros().scale() <= 0;
            case "number" -> v.isNumber();
            case "string" -> v.isTextual();
            case "boolean" -> v.isBoolean();
            case "null" -> v.isNull();
            case "object" -> v.isObject();
            case "array" -> v.isArray();
            default -> false;
        };
    }

    private static boolean numberOk(JsonNode s, BigDecimal x) {
        if (s.has("minimum") && x.compareTo(s.get("minimum").decimalValue()) < 0) return false;
        if (s.has("maximum") && x.compareTo(s.get("maximum").decimalValue()) > 0) return false;
        if (s.has("exclusiveMinimum") && x.compareTo(s.get("exclusiveMinimum").decimalValue()) <= 0) return false;
        if (s.has("exclusiveMaximum") && x.compareTo(s.get("exclusiveMaximum").decimalValue()) >= 0) return false;
        return !s.has("multipleOf") || x.remainder(s.get("multipleOf").decimalValue()).signum() == 0;
    }

    private static boolean stringOk(JsonNode s, String x) {
        int len = x.codePointCount(0, x.length());
        if (s.has("minLength") && len < s.get("minLength").asInt()) return false;
        if (s.has("maxLength") && len > s.get("maxLength").asInt()) return false;
        if (!s.has("format")) return true;
        try {
            return switch (s.get("format").asText()) {
                case "date" -> LocalDate.parse(x) != null && !x.startsWith("0000");
                case "time" -> JsonSchemaKeywordsTest.offsetTime(x);
                case "date-time" -> {
                    String[] dt = x.split("T", -1);
                    yield dt.length == 2 && LocalDate.parse(dt[0]) != null && JsonSchemaKeywordsTest.offsetTime(dt[1]);
                }
                case "duration" -> JsonSchemaKeywordsTest.duration(x);
                case "uuid" -> x.length() == 36 && UUID.fromString(x) != null && x.matches("[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}");
                case "ipv4" -> x.matches("((25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])");
                case "email" -> JsonSchemaKeywordsTest.email(x);
                default -> false;
            };
        } catch (RuntimeException e) {
            return false;
        }
    }
}
