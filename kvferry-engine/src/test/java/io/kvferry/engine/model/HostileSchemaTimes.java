package io.kvferry.engine.model;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Compile times of hostile JSON schemas (docs/PERFORMANCE.md, "Structured-output compiler: hostile schemas"), then of
 * realistic ones (a tool's arguments, an extraction, an order, an event; session 13): a small harness, not a test. Each
 * schema is compiled {@code runs} times (default 3) by one warm {@link OutputConstraint.Compiler}, each run with new
 * property names (or a new title: a letter per run) so that no cache answers, and its wall time and outcome printed.
 *
 * <pre>
 * mvn -q -B -o package -DskipTests -Dcheckstyle.skip=true
 * mvn -q -B -o -pl kvferry-engine test-compile -Dcheckstyle.skip=true
 * java -cp kvferry-engine/target/test-classes:kvferry-engine/target/classes:'kvferry-cli/target/lib/*' \
 *     io.kvferry.engine.model.HostileSchemaTimes [runs]
 * </pre>
 */
public final class HostileSchemaTimes {
    private HostileSchemaTimes() {
    }

    /** The schemas by name, each for run {@code r} (its names or title new to the compiler). */
    static List<String[]> schemas(int r) {
        List<String[]> out = new ArrayList<>();
        out.add(new String[]{"20 email strings", object(r, 20, "{\"type\":\"string\",\"format\":\"email\"}", false)});
        out.add(new String[]{"20 × not:{type:string}", object(r, 20, "{\"not\":{\"type\":\"string\"}}", false)});
        StringBuilder all = new StringBuilder("{\"title\":\"" + (char) ('a' + r) + "\",\"allOf\":[");
        String[] mults = {"0.002", "0.003", "0.005", "0.007", "0.011", "0.013"};
        for (int i = 0; i < mults.length; i++) {
            if (i > 0) all.append(',');
            all.append("{\"type\":\"number\",\"multipleOf\":").append(mults[i]).append('}');
        }
        out.add(new String[]{"allOf of 6 multipleOf", all.append("]}").toString()});
        out.add(new String[]{"40 required dates", object(r, 40, "{\"type\":\"string\",\"format\":\"date\"}", true)});
        out.add(new String[]{"256 × 256 dates, nested", "{\"title\":\"" + (char) ('a' + r) + "\",\"type\":\"array\",\"items\":{\"type\":\"array\","
                + "\"items\":{\"type\":\"string\",\"format\":\"date\"},\"maxItems\":256},\"maxItems\":256}"});
        return out;
    }

    /** Realistic schemas (what clients send for tools and extractions), each for run {@code r} (a new title). */
    static List<String[]> realistic(int r) {
        String t = "\"title\":\"" + (char) ('a' + r) + "\",";
        List<String[]> out = new ArrayList<>();
        out.add(new String[]{"weather tool arguments", "{" + t + "\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\"},"
                + "\"unit\":{\"type\":\"string\",\"enum\":[\"celsius\",\"fahrenheit\"]},\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":14}},"
                + "\"required\":[\"location\"],\"additionalProperties\":false}"});
        out.add(new String[]{"person extraction", "{" + t + "\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":64},"
                + "\"age\":{\"type\":\"integer\",\"minimum\":0},\"email\":{\"type\":\"string\",\"format\":\"email\"},"
                + "\"phone\":{\"type\":\"string\",\"pattern\":\"^\\\\+?[0-9 ()-]{7,20}$\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":8}},"
                + "\"required\":[\"name\",\"email\"]}"});
        out.add(new String[]{"order with line items", "{" + t + "\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"format\":\"uuid\"},"
                + "\"status\":{\"enum\":[\"pending\",\"paid\",\"shipped\",\"cancelled\"]},\"items\":{\"type\":\"array\",\"minItems\":1,"
                + "\"items\":{\"type\":\"object\",\"properties\":{\"sku\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}-[0-9]{4}$\"},"
                + "\"quantity\":{\"type\":\"integer\",\"minimum\":1},\"price\":{\"type\":\"number\"}},\"required\":[\"sku\",\"quantity\"]}},"
                + "\"total\":{\"type\":\"number\"},\"placed\":{\"type\":\"string\",\"format\":\"date-time\"}},\"required\":[\"id\",\"status\",\"items\"]}"});
        out.add(new String[]{"calendar event", "{" + t + "\"type\":\"object\",\"properties\":{\"summary\":{\"type\":\"string\"},"
                + "\"start\":{\"type\":\"string\",\"format\":\"date-time\"},\"end\":{\"type\":\"string\",\"format\":\"date-time\"},"
                + "\"attendees\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"email\":{\"type\":\"string\",\"format\":\"email\"},"
                + "\"optional\":{\"type\":\"boolean\"}},\"required\":[\"email\"]}},\"location\":{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"null\"}]}},"
                + "\"required\":[\"summary\",\"start\",\"end\"]}"});
        out.add(new String[]{"any JSON object", "{" + t + "\"type\":\"object\"}"});
        out.add(new String[]{"12 dates and numbers", object(r, 12, "{\"anyOf\":[{\"type\":\"string\",\"format\":\"date\"},{\"type\":\"number\"}]}", true)});
        return out;
    }

    private static String object(int r, int n, String member, boolean required) {
        StringBuilder b = new StringBuilder("{\"type\":\"object\",\"properties\":{");
        StringBuilder req = new StringBuilder();
        for (int i = 0; i < n; i++) {
            String name = (char) ('a' + r) + Integer.toString(i);
            if (i > 0) {
                b.append(',');
                req.append(',');
            }
            b.append('"').append(name).append("\":").append(member);
            req.append('"').append(name).append('"');
        }
        b.append('}');
        if (required) b.append(",\"required\":[").append(req).append(']');
        return b.append('}').toString();
    }

    public static void main(String[] args) {
        int runs = args.length > 0 ? Integer.parseInt(args[0]) : 3;
        OutputConstraint.Compiler c = new OutputConstraint.Compiler(Tokenizer.synthetic(300));
        c.jsonSchema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"format\":\"date\"},\"b\":{\"type\":\"integer\"}}}"); // warm-up
        for (int r = 0; r < runs; r++) {
            List<String[]> all = new ArrayList<>(schemas(r));
            all.addAll(realistic(r));
            for (String[] s : all) {
                long t0 = System.nanoTime();
                String outcome;
                try {
                    c.jsonSchema(s[1]);
                    outcome = "compiled";
                } catch (IllegalArgumentException e) {
                    outcome = "refused: " + e.getMessage();
                }
                System.out.printf(Locale.ROOT, "%-24s %5d B  run %d  %7.2f s  %s%n", s[0], s[1].length(), r, (System.nanoTime() - t0) / 1e9, outcome);
            }
        }
    }
}
