package io.kvferry.engine.model;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dk.brics.automaton.RunAutomaton;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.constraints.LongRange;
import org.junit.jupiter.api.Test;

import java.math.BigDecimal;
import java.time.LocalDate;
import java.time.LocalTime;
import java.time.format.DateTimeParseException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.UUID;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The JSON schema keywords beyond shapes: number ranges and multipleOf, allOf / oneOf / not, string formats, nullable,
 * additionalProperties' schema. Each is checked against an independent validator written here (BigDecimal comparisons,
 * java.time, plain string checks): every text the automaton accepts parses and satisfies the schema (sound), and for
 * ranges and multiples every number in a window, written canonically, is accepted exactly when it satisfies it
 * (complete, for the canonical form the automaton generates).
 */
class JsonSchemaKeywordsTest {
    /** Decimals as written (a double would round 4541233821479916.12). */
    static final ObjectMapper JSON = new ObjectMapper().enable(DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS);

    /** A bound of the test's: null for none, else its value and whether exclusive, as schema text. */
    record Side(BigDecimal value, boolean exclusive) {
        String json(String inclusiveKey, String exclusiveKey) {
            return value == null ? "" : ",\"" + (exclusive ? exclusiveKey : inclusiveKey) + "\":" + value.toPlainString();
        }
    }

    static boolean inRange(BigDecimal x, Side lo, Side hi) {
        if (lo.value() != null) {
            int c = x.compareTo(lo.value());
            if (c < 0 || c == 0 && lo.exclusive()) return false;
        }
        if (hi.value() != null) {
            int c = x.compareTo(hi.value());
            if (c > 0 || c == 0 && hi.exclusive()) return false;
        }
        return true;
    }

    /** A random bound: none, an integer, or a decimal of up to 3 fraction digits, around {@code center}. */
    static Side side(SplittableRandom r, long center, long spread) {
        if (r.nextInt(5) == 0) return new Side(null, false);
        BigDecimal v = BigDecimal.valueOf(center + r.nextLong(-spread, spread + 1));
        if (r.nextBoolean()) v = v.add(BigDecimal.valueOf(r.nextInt(1, 1000), r.nextInt(1, 4)));
        return new Side(v, r.nextBoolean());
    }

    static RunAutomaton compile(String schema) {
        return new RunAutomaton(JsonSchemaAutomaton.compile(schema));
    }

    @Property(seed = "20261207", tries = 40)
    void integerRangesAcceptExactlyTheIntegersInThem(@ForAll @IntRange(min = 0, max = 1_000_000) int seed,
                                                     @ForAll @LongRange(min = -100_000_000_000L, max = 100_000_000_000L) long center) throws Exception {
        SplittableRandom r = new SplittableRandom(seed);
        long spread = r.nextBoolean() ? 200 : 5_000_000;
        Side lo = side(r, center - spread, spread), hi = side(r, center + spread, spread);
        String schema = "{\"type\":\"integer\"" + lo.json("minimum", "exclusiveMinimum") + hi.json("maximum", "exclusiveMaximum") + "}";
        RunAutomaton run;
        try {
            run = compile(schema);
        } catch (IllegalArgumentException e) {
            // only a range without an integer in it is refused
            for (long x = center - 3 * spread; x <= center + 3 * spread; x += Math.max(1, spread / 500)) {
                assertFalse(inRange(BigDecimal.valueOf(x), lo, hi), schema + ": " + x + " is in it, but " + e.getMessage());
            }
            return;
        }
        // complete (and sound) over a window: canonical integers, and near the bounds exhaustively
        List<Long> probes = new ArrayList<>();
        for (int i = 0; i < 300; i++) probes.add(center + r.nextLong(-3 * spread, 3 * spread + 1));
        for (Side s : List.of(lo, hi)) {
            if (s.value() == null) continue;
            long b = s.value().longValue();
            for (long x = b - 3; x <= b + 3; x++) probes.add(x);
        }
        for (long x : probes) {
            assertEquals(inRange(BigDecimal.valueOf(x), lo, hi), run.run(Long.toString(x)), schema + " on " + x);
        }
        if (lo.value() != null || hi.value() != null) assertFalse(run.run("-0"), schema + ": 0 is written once");
        soundWalks(run, schema, v -> v.isIntegralNumber() && inRange(v.decimalValue(), lo, hi));
    }

    @Property(seed = "20261207", tries = 40)
    void numberRangesAcceptExactlyTheDecimalsInThem(@ForAll @IntRange(min = 0, max = 1_000_000) int seed) throws Exception {
        SplittableRandom r = new SplittableRandom(seed);
        long center = r.nextLong(-1000, 1001);
        Side lo = side(r, center - 20, 20), hi = side(r, center + 20, 20);
        String schema = "{\"type\":\"number\"" + lo.json("minimum", "exclusiveMinimum") + hi.json("maximum", "exclusiveMaximum") + "}";
        RunAutomaton run;
        try {
            run = compile(schema);
        } catch (IllegalArgumentException e) {
            assertTrue(lo.value() != null && hi.value() != null && !inRange(lo.value(), lo, hi) && !inRange(hi.value(), lo, hi),
                    schema + " refused: " + e.getMessage());
            return;
        }
        List<BigDecimal> probes = new ArrayList<>();
        for (int i = 0; i < 400; i++) {
            int scale = r.nextInt(0, 4);
            long unit = (long) Math.pow(10, scale);
            probes.add(BigDecimal.valueOf(center * unit + r.nextLong(-80 * unit, 80 * unit + 1), scale));
        }
        for (Side s : List.of(lo, hi)) {
            if (s.value() == null) continue;
            for (int d = -3; d <= 3; d++) probes.add(s.value().add(BigDecimal.valueOf(d, 3)));
            probes.add(s.value());
        }
        for (BigDecimal x : probes) {
            // as written: trailing zeros kept (1.50), and the integer itself without a point
            String text = x.toPlainString();
            if (text.startsWith("-") && x.signum() == 0) continue; // -0.000 is written 0 (once)
            assertEquals(inRange(x, lo, hi), run.run(text), schema + " on " + text);
        }
        soundWalks(run, schema, v -> v.isNumber() && inRange(v.decimalValue(), lo, hi));
    }

    @Property(seed = "20261207", tries = 40)
    void multiplesAcceptExactlyTheMultiples(@ForAll @IntRange(min = 0, max = 1_000_000) int seed) throws Exception {
        SplittableRandom r = new SplittableRandom(seed);
        BigDecimal m = switch (r.nextInt(3)) {
            case 0 -> BigDecimal.valueOf(r.nextInt(1, 60));
            case 1 -> BigDecimal.valueOf(r.nextInt(1, 60), r.nextInt(1, 3));
            default -> new BigDecimal(List.of("0.5", "2.5", "0.01", "0.25", "1.0", "10", "100").get(r.nextInt(7)));
        };
        boolean integer = r.nextBoolean();
        String schema = "{\"type\":\"" + (integer ? "integer" : "number") + "\",\"multipleOf\":" + m.toPlainString() + ",\"minimum\":-500}";
        RunAutomaton run = compile(schema);
        for (int i = 0; i < 400; i++) {
            BigDecimal x = BigDecimal.valueOf(r.nextLong(-600_000, 600_001), integer ? 0 : r.nextInt(0, 4));
            String text = x.toPlainString();
            if (text.startsWith("-") && x.signum() == 0) continue;
            boolean ok = x.compareTo(BigDecimal.valueOf(-500)) >= 0 && x.remainder(m).signum() == 0;
            assertEquals(ok, run.run(text), schema + " on " + text);
        }
        soundWalks(run, schema, v -> v.isNumber() && v.decimalValue().remainder(m).signum() == 0
                && v.decimalValue().compareTo(BigDecimal.valueOf(-500)) >= 0 && (!integer || v.isIntegralNumber()));
    }

    @Test
    void bigBoundsAndBoundsThatAreNotIntegers() {
        RunAutomaton big = compile("{\"type\":\"integer\",\"minimum\":18446744073709551615,\"maximum\":18446744073709551700}");
        assertTrue(big.run("18446744073709551615") && big.run("18446744073709551700") && big.run("18446744073709551650"));
        assertFalse(big.run("18446744073709551614") || big.run("18446744073709551701"));
        RunAutomaton above = compile("{\"type\":\"integer\",\"minimum\":1e20}");
        assertTrue(above.run("100000000000000000000") && above.run("100000000000000000001"));
        assertFalse(above.run("99999999999999999999"));
        RunAutomaton half = compile("{\"type\":\"integer\",\"minimum\":-2.5,\"maximum\":2.5}");
        for (String s : List.of("-2", "-1", "0", "1", "2")) assertTrue(half.run(s), s);
        for (String s : List.of("-3", "3", "2.5", "-0")) assertFalse(half.run(s), s);
        RunAutomaton draft4 = compile("{\"type\":\"integer\",\"minimum\":0,\"exclusiveMinimum\":true,\"maximum\":3,\"exclusiveMaximum\":false}");
        assertFalse(draft4.run("0"));
        assertTrue(draft4.run("1") && draft4.run("3"));
        RunAutomaton both = compile("{\"type\":\"number\",\"minimum\":1,\"exclusiveMinimum\":1}"); // the tighter: > 1
        assertFalse(both.run("1") || both.run("1.0"));
        assertTrue(both.run("1.0001"));
        // more digits than a double holds: read as written (before: 0.12345678901234566 after a double's rounding)
        RunAutomaton fine = compile("{\"type\":\"number\",\"minimum\":0.12345678901234567,\"maximum\":1e0}");
        assertTrue(fine.run("0.1234567890123457") && fine.run("1") && fine.run("0.9999999999999999"));
        RunAutomaton above1 = compile("{\"type\":\"number\",\"minimum\":1.00000000000000001}"); // a double: 1.0
        assertFalse(above1.run("1") || above1.run("1.0"));
        assertTrue(above1.run("1.0000000000000001"));
        // a fraction has at most 16 digits: the bound's 17th is compared, never generated
        assertFalse(fine.run("0.12345678901234567") || fine.run("0.1234567890123456") || fine.run("1.0000000000000001"));
        RunAutomaton tiny = compile("{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1e-3}");
        assertTrue(tiny.run("0.001") && tiny.run("0.0000000000000001") && tiny.run("0.0010"));
        assertFalse(tiny.run("0") || tiny.run("0.0") || tiny.run("0.0011") || tiny.run("1e-3"));
    }

    @Property(seed = "20261207", tries = 30)
    void datesAreExactlyTheCalendarsDates(@ForAll @IntRange(min = 0, max = 1_000_000) int seed) throws Exception {
        RunAutomaton run = compile("{\"type\":\"string\",\"format\":\"date\"}");
        SplittableRandom r = new SplittableRandom(seed);
        for (int i = 0; i < 300; i++) {
            int y = r.nextInt(3) == 0 ? List.of(1900, 2000, 2100, 2400, 2024, 2023, 0, 4, 100).get(r.nextInt(9)) : r.nextInt(10_000);
            String text = String.format("%04d-%02d-%02d", y, r.nextInt(14), r.nextInt(33));
            boolean valid;
            try {
                LocalDate.parse(text); // ISO_LOCAL_DATE, strict: month lengths and leap years
                valid = y >= 1; // year 0000 left out (Python's datetime has none)
            } catch (DateTimeParseException e) {
                valid = false;
            }
            assertEquals(valid, run.run("\"" + text + "\""), text);
        }
        soundWalks(run, "date", v -> {
            LocalDate.parse(v.textValue());
            return true;
        });
    }

    @Property(seed = "20261207", tries = 30)
    void formattedStringsSatisfyTheirFormat(@ForAll @IntRange(min = 0, max = 1_000_000) int seed) throws Exception {
        SplittableRandom r = new SplittableRandom(seed);
        soundWalks(FORMATS.get("date-time"), "date-time", v -> {
            String[] dt = v.textValue().split("T");
            LocalDate.parse(dt[0]);
            return offsetTime(dt[1]);
        }, r);
        soundWalks(FORMATS.get("time"), "time", v -> offsetTime(v.textValue()), r);
        soundWalks(FORMATS.get("uuid"), "uuid", v -> {
            String s = v.textValue();
            UUID.fromString(s);
            return s.length() == 36 && s.charAt(8) == '-' && s.charAt(13) == '-' && s.charAt(18) == '-' && s.charAt(23) == '-';
        }, r);
        soundWalks(FORMATS.get("ipv4"), "ipv4", v -> {
            String[] o = v.textValue().split("\\.", -1);
            if (o.length != 4) return false;
            for (String x : o) {
                if (x.isEmpty() || x.length() > 3 || (x.length() > 1 && x.charAt(0) == '0') || Integer.parseInt(x) > 255) return false;
            }
            return true;
        }, r);
        soundWalks(FORMATS.get("email"), "email", v -> email(v.textValue()), r);
        soundWalks(FORMATS.get("duration"), "duration", v -> duration(v.textValue()), r);
    }

    static final Map<String, RunAutomaton> FORMATS = new HashMap<>();

    static {
        for (String f : List.of("date-time", "time", "uuid", "ipv4", "email", "duration")) {
            FORMATS.put(f, compile("{\"type\":\"string\",\"format\":\"" + f + "\"}"));
        }
    }

    /** RFC 3339's full-time: a partial time java.time reads, then Z or an offset of hours 00-23 and minutes 00-59. */
    static boolean offsetTime(String s) {
        int at = Math.max(s.indexOf('Z'), Math.max(s.indexOf('+'), s.indexOf('-')));
        LocalTime.parse(s.substring(0, at));
        String off = s.substring(at);
        return off.equals("Z") || off.length() == 6 && Integer.parseInt(off.substring(1, 3)) < 24 && off.charAt(3) == ':'
                && Integer.parseInt(off.substring(4)) < 60;
    }

    /**
     * RFC 3339's duration (appendix A): P, then weeks alone, or date components then a time part, each component digits
     * and a designator, the date's a run of Y M D in order without a gap, the time's (after T) of H M S.
     */
    static boolean duration(String s) {
        if (!s.startsWith("P") || s.length() < 3) return false;
        String body = s.substring(1);
        if (body.endsWith("W")) return body.substring(0, body.length() - 1).chars().allMatch(Character::isDigit);
        int t = body.indexOf('T');
        String date = t < 0 ? body : body.substring(0, t), time = t < 0 ? null : body.substring(t + 1);
        if (date.isEmpty() && time == null || time != null && time.isEmpty()) return false;
        return run(date, "YMD") && (time == null || run(time, "HMS"));
    }

    /** Whether text is digits-designator pairs whose designators are a gapless run of {@code order} (empty text: yes). */
    private static boolean run(String text, String order) {
        StringBuilder designators = new StringBuilder();
        int digits = 0;
        for (char c : text.toCharArray()) {
            if (Character.isDigit(c)) {
                digits++;
            } else {
                if (digits == 0) return false;
                designators.append(c);
                digits = 0;
            }
        }
        return digits == 0 && order.contains(designators);
    }

    static boolean email(String s) {
        int at = s.indexOf('@');
        if (at < 1 || at != s.lastIndexOf('@') || at > 64) return false;
        String local = s.substring(0, at), domain = s.substring(at + 1);
        if (local.startsWith(".") || local.endsWith(".") || local.contains("..")) return false;
        if (!local.matches("[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]+")) return false;
        String[] labels = domain.split("\\.", -1);
        if (labels.length < 2 || !labels[labels.length - 1].matches("[A-Za-z]{2,63}")) return false;
        for (String l : labels) if (!l.matches("[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")) return false;
        return true;
    }

    @Property(seed = "20261207", tries = 30)
    void allOfIntersectsOneOfOfDisjointBranchesIsTheirUnionAndNotLeavesTheOtherTypes(@ForAll @IntRange(min = 0, max = 1_000_000) int seed)
            throws Exception {
        SplittableRandom r = new SplittableRandom(seed);
        int a = r.nextInt(-50, 50), b = a + r.nextInt(0, 60), c = r.nextInt(-50, 50), d = c + r.nextInt(0, 60), m = r.nextInt(2, 7);
        String one = "{\"type\":\"integer\",\"minimum\":" + a + ",\"maximum\":" + b + "}";
        String two = "{\"type\":\"integer\",\"minimum\":" + c + ",\"maximum\":" + d + "}";
        String[] schemas = {
                "{\"allOf\":[" + one + "," + two + ",{\"multipleOf\":" + m + "}]}",
                "{\"oneOf\":[" + one + ",{\"type\":\"string\",\"format\":\"date\"},{\"type\":\"null\"}]}",
                "{\"anyOf\":[" + one + "," + two + ",{\"type\":\"string\"}],\"not\":{\"type\":\"string\"}}",
        };
        for (int k = 0; k < schemas.length; k++) {
            RunAutomaton run;
            try {
                run = compile(schemas[k]);
            } catch (IllegalArgumentException e) {
                assertTrue(k == 0 && e.getMessage().contains("matches no text"), schemas[k] + ": " + e.getMessage());
                continue;
            }
            for (int x = -120; x <= 120; x++) {
                boolean in1 = a <= x && x <= b, in2 = c <= x && x <= d;
                boolean expected = switch (k) {
                    case 0 -> in1 && in2 && x % m == 0;
                    case 1 -> in1;
                    default -> in1 || in2;
                };
                assertEquals(expected, run.run(Integer.toString(x)), schemas[k] + " on " + x);
            }
            assertEquals(k == 1, run.run("null") && run.run("\"2024-02-29\""), schemas[k]);
            assertFalse(run.run("\"x\""), schemas[k]);
        }
    }

    /** Pydantic's discriminated union: oneOf of $refs to objects that require a property of different consts. */
    @Test
    void oneOfADiscriminatedUnionIsExactlyOneBranch() throws Exception {
        String schema = "{\"$defs\":{\"Cat\":{\"properties\":{\"pet_type\":{\"const\":\"cat\",\"title\":\"Pet Type\",\"type\":\"string\"},"
                + "\"lives\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":9}},\"required\":[\"pet_type\",\"lives\"],\"title\":\"Cat\","
                + "\"type\":\"object\"},\"Dog\":{\"properties\":{\"pet_type\":{\"enum\":[\"dog\"]},\"born\":{\"type\":\"string\",\"format\":"
                + "\"date\"}},\"required\":[\"pet_type\",\"born\"],\"type\":\"object\"}},\"properties\":{\"pet\":{\"discriminator\":"
                + "{\"mapping\":{\"cat\":\"#/$defs/Cat\",\"dog\":\"#/$defs/Dog\"},\"propertyName\":\"pet_type\"},\"oneOf\":[{\"$ref\":\"#/$defs/Cat\"},"
                + "{\"$ref\":\"#/$defs/Dog\"}],\"title\":\"Pet\"}},\"required\":[\"pet\"],\"type\":\"object\"}";
        RunAutomaton run = compile(schema);
        assertTrue(run.run("{\"pet\":{\"pet_type\":\"cat\",\"lives\":9}}") && run.run("{\"pet\":{\"pet_type\":\"dog\",\"born\":\"2020-01-31\"}}"));
        assertFalse(run.run("{\"pet\":{\"pet_type\":\"cat\",\"lives\":10}}") || run.run("{\"pet\":{\"pet_type\":\"dog\",\"lives\":1}}"));
        soundWalks(run, "pet", v -> {
            JsonNode pet = v.get("pet");
            boolean cat = pet.get("pet_type").asText().equals("cat") && pet.get("lives").asInt() >= 1 && pet.get("lives").asInt() <= 9;
            boolean dog = pet.get("pet_type").asText().equals("dog");
            if (dog) LocalDate.parse(pet.get("born").asText());
            return cat != dog;
        });
        // Zod's never ({"not": {}}): the property is never generated
        RunAutomaton never = compile("{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{}},\"b\":{\"type\":\"null\"}}}");
        assertTrue(never.run("{}") && never.run("{\"b\":null}"));
        assertFalse(never.run("{\"a\":1}"));
    }

    @Test
    void nullableAdditionalPropertiesAndAnnotations() throws Exception {
        RunAutomaton n = compile("{\"type\":\"integer\",\"nullable\":true,\"minimum\":1,\"deprecated\":true,\"readOnly\":false,"
                + "\"writeOnly\":false,\"title\":\"t\",\"default\":3,\"examples\":[2]}");
        assertTrue(n.run("null") && n.run("1"));
        assertFalse(n.run("0"));
        // a map of integers (Pydantic's dict[str, int]): before, any object, whose values broke the schema
        RunAutomaton map = compile("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\",\"minimum\":0}}");
        assertTrue(map.run("{}") && map.run("{\"a\":1, \"b\":2}"));
        assertFalse(map.run("{\"a\":\"x\"}") || map.run("{\"a\":-1}"));
        // OpenAPI 3.0.3: null joins the type's values only; the other keywords hold for it too (before: null was added
        // after them all, past allOf, not and $ref)
        for (String other : List.of("{\"nullable\":true,\"allOf\":[{\"type\":\"string\"}]}",
                "{\"type\":\"string\",\"nullable\":true,\"not\":{\"type\":\"null\"}}",
                "{\"$defs\":{\"s\":{\"type\":\"string\"}},\"$ref\":\"#/$defs/s\",\"nullable\":true}",
                "{\"type\":\"string\",\"nullable\":true,\"oneOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}")) {
            RunAutomaton o = compile(other);
            assertFalse(o.run("null"), other);
            assertTrue(o.run("\"a\""), other);
        }
        assertTrue(compile("{\"type\":[\"string\",\"null\"],\"nullable\":true}").run("null"));
        assertTrue(compile("{\"nullable\":true,\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}").run("null"));
        RunAutomaton none = compile("{\"type\":\"object\",\"additionalProperties\":false}");
        assertTrue(none.run("{}"));
        assertFalse(none.run("{\"a\":1}"));
        // keywords without a type: the types they speak of, before any JSON value (a 2-character string for minLength 3)
        RunAutomaton len = compile("{\"minLength\":3}");
        assertFalse(len.run("\"ab\"") || len.run("1"));
        assertTrue(len.run("\"abc\""));
    }

    @Test
    void refusalsNameTheKeywordAndItsPlace() {
        String[][] refused = {
                {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"format\":\"hostname\"}}}", "#/properties/a",
                        "format \"hostname\" at #/properties/a"},
                {"{\"type\":\"integer\",\"minimum\":\"3\"}", "#", "minimum \"3\" at #, not a number"},
                {"{\"type\":\"integer\",\"minimum\":3,\"maximum\":2}", "#", "no number is in: [3, 2]"},
                {"{\"type\":\"integer\",\"exclusiveMinimum\":2,\"exclusiveMaximum\":3}", "#", "no integer is in: (2, 3)"},
                {"{\"type\":\"integer\",\"exclusiveMinimum\":true}", "#", "exclusiveMinimum true at # without minimum"},
                {"{\"type\":\"number\",\"multipleOf\":0}", "#", "not above 0"},
                {"{\"type\":\"number\",\"multipleOf\":123457}", "#", "multipleOf 123457 at #, whose automaton would need over 10000 states"},
                {"{\"type\":\"number\",\"multipleOf\":1e-9999}", "#", "at most 100 digits"},
                {"{\"type\":\"integer\",\"maximum\":1e200}", "#", "at most 100 digits"},
                {"{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"object\",\"minProperties\":1}]}", "#/anyOf/1", "keyword 'minProperties' at #/anyOf/1"},
                {"{\"$ref\":\"#/$defs/a\",\"$defs\":{\"a\":{\"type\":\"integer\",\"nullable\":1}}}", "#/$defs/a", "nullable 1"},
                {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\",\"minimum\":2}]}", "#", "branches 0 and 1 may both hold"},
                {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"not\":{\"const\":3}}}}", "#/properties/a",
                        "not at #/properties/a with {\"const\":3}"},
                {"{\"not\":{\"type\":\"integer\"}}", "#", "not at # with"},
                {"{\"type\":\"integer\",\"oneOf\":[{\"minimum\":3},{\"maximum\":2}]}", "#", "may both hold"},
                // both admit null (OpenAPI's nullable): a union would give null, which holds for both
                {"{\"oneOf\":[{\"type\":\"string\",\"nullable\":true},{\"type\":\"null\"}]}", "#", "may both hold"},
                // a schema true beside another branch (before: an UnsupportedOperationException, a 500)
                {"{\"oneOf\":[true,{\"type\":\"string\"}]}", "#", "may both hold"},
        };
        for (String[] x : refused) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> new OutputConstraint.Compiler(Tokenizer.synthetic(300))
                    .jsonSchema(x[0]), x[0]);
            assertTrue(e.getMessage().contains(x[2]), x[0] + " -> " + e.getMessage());
            assertEquals(x[1], assertInstanceOf(JsonSchemaAutomaton.Fault.class, e).at(), x[0]);
        }
    }

    /**
     * oneOf's disjointness reads each schema's types once: a definition reached through 15 levels of anyOf with four
     * $refs each to the next (a 1.7 KB schema) was 4^15 walks, minutes holding the one compile slot with no deadline.
     */
    @Test
    void oneOfTellsTypesApartOncePerSchema() {
        int levels = 15;
        StringBuilder d = new StringBuilder("{\"$defs\":{");
        for (int i = 0; i < levels; i++) {
            String next = "{\"$ref\":\"#/$defs/d" + (i + 1) + "\"}";
            d.append(i > 0 ? "," : "").append("\"d").append(i).append("\":{\"anyOf\":[").append(String.join(",", next, next, next, next)).append("]}");
        }
        d.append(",\"d").append(levels).append("\":{\"type\":\"integer\"}},\"oneOf\":[{\"$ref\":\"#/$defs/d0\"},{\"type\":\"string\"}]}");
        RunAutomaton run = compile(d.toString());
        assertTrue(run.run("12") && run.run("\"a\""));
        assertFalse(run.run("null"));
    }

    /** An intersection past the state caps is the caps' refusal (a 400), not a compilation that goes on. */
    @Test
    void combinationsPastTheCapsAreRefusedAsTooComplex() {
        // a count of a's mod 250 and of b's mod 250: 250 states each, 62,500 pairs together (refused at 50,000)
        String a = "{\"type\":\"string\",\"pattern\":\"((b*a){250})*b*\"}", b = "{\"type\":\"string\",\"pattern\":\"((a*b){250})*a*\"}";
        assertTrue(compile(a).getSize() < 1_000);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> new OutputConstraint.Compiler(Tokenizer.synthetic(300))
                .jsonSchema("{\"allOf\":[" + a + "," + b + "]}"));
        assertInstanceOf(ClientRegex.TooComplex.class, e);
        assertTrue(e.getMessage().contains("too complex"), e.getMessage());
    }

    /**
     * An object whose members' automata are past the state cap together is refused before they are joined: 30 members
     * of any value ({@code {}}, 931 states each; a 322-byte schema) took the whole 5 s deadline, again for each variation
     * of their names, which the remembered refusals do not recognise.
     */
    @Test
    void objectsWhoseMembersArePastTheCapAreRefusedBeforeJoiningThem() {
        StringBuilder s = new StringBuilder("{\"type\":\"object\",\"properties\":{");
        for (int i = 0; i < 30; i++) s.append(i > 0 ? "," : "").append("\"k").append(i).append("\":{}");
        ClientRegex.TooComplex e = assertThrows(ClientRegex.TooComplex.class, () -> JsonSchemaAutomaton.compile(s.append("}}").toString()));
        assertTrue(e.getMessage().contains("the members of its object at # have over 20000 automaton states together"), e.getMessage());
    }

    interface Check {
        boolean ok(JsonNode v) throws Exception;
    }

    static void soundWalks(RunAutomaton run, String what, Check check) throws Exception {
        soundWalks(run, what, check, new SplittableRandom(what.hashCode()));
    }

    /** Random texts the automaton accepts parse as JSON and pass the check. */
    static void soundWalks(RunAutomaton run, String what, Check check, SplittableRandom r) throws Exception {
        for (int i = 0; i < 30; i++) {
            String text = OutputConstraintTest.walk(run, r, 40);
            assertNotNull(text, what + ": a walk reaches a match");
            assertTrue(run.run(text), text);
            JsonNode v = JSON.readTree(text);
            boolean ok;
            try {
                ok = check.ok(v);
            } catch (RuntimeException e) {
                ok = false;
            }
            assertTrue(ok, what + ": " + text);
        }
    }
}
