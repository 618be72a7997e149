package io.kvferry.tools;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Predicate;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * A Grafana dashboard against real scrapes: every metric its queries name exists, with every label they group by
 * (but the target's, {@link #TARGET_LABELS}, which Prometheus adds) and every {@code label="value"} they select.
 */
final class GrafanaDashboardCheck {
    private static final Pattern METRIC = Pattern.compile("\\b(kvferry_[a-z0-9_]+)\\b");
    private static final Pattern BY = Pattern.compile("\\bby \\(([^)]*)\\)");
    /** A metric's selector: {@code name{...}}. */
    private static final Pattern SELECTOR = Pattern.compile("\\b(kvferry_[a-z0-9_]+)\\{([^}]*)}");
    /** An exact matcher in a selector; regex and negative matchers ({@code =~}, {@code !=}) are not checked. */
    private static final Pattern EXACT = Pattern.compile("([a-z_]+)\\s*=\\s*\"([^\"$]*)\"");

    /** The labels Prometheus attaches to every series it scrapes (the target's), which no process's own scrape has. */
    static final Set<String> TARGET_LABELS = Set.of("instance", "job");

    private GrafanaDashboardCheck() {}

    /** The kvferry metrics the dashboard's queries name. */
    static Set<String> metricsQueried(Path dashboard) throws IOException {
        Set<String> names = new HashSet<>();
        for (JsonNode panel : new ObjectMapper().readTree(dashboard.toFile()).path("panels")) {
            for (JsonNode target : panel.path("targets")) {
                Matcher m = METRIC.matcher(target.path("expr").asText());
                while (m.find()) names.add(m.group(1));
            }
        }
        return names;
    }

    static void assertEverySeriesExists(Path dashboard, List<String> scrapes) throws IOException {
        assertEverySeriesExists(dashboard, scrapes, name -> true);
    }

    /**
     * Checks the queries that name a metric {@code checked} accepts (each such metric of theirs; the others are some
     * other scrape's to check).
     *
     * @return how many queries were checked
     */
    static int assertEverySeriesExists(Path dashboard, List<String> scrapes, Predicate<String> checked) throws IOException {
        JsonNode d = new ObjectMapper().readTree(dashboard.toFile());
        List<BenchMetricsTest.Sample> samples = new ArrayList<>();
        for (String s : scrapes) samples.addAll(BenchMetricsTest.parse(s));
        int queries = 0, checkedQueries = 0;
        for (JsonNode panel : d.path("panels")) {
            for (JsonNode target : panel.path("targets")) {
                String expr = target.path("expr").asText();
                queries++;
                Matcher m = METRIC.matcher(expr);
                Set<String> names = new HashSet<>();
                while (m.find()) names.add(m.group(1));
                assertTrue(!names.isEmpty(), "query names no kvferry metric: " + expr);
                names.removeIf(checked.negate());
                if (names.isEmpty()) continue;
                checkedQueries++;
                Set<String> grouped = new HashSet<>();
                Matcher by = BY.matcher(expr);
                while (by.find()) for (String l : by.group(1).split(",")) grouped.add(l.strip());
                grouped.remove("le");
                grouped.removeAll(TARGET_LABELS);
                for (String name : names) {
                    List<BenchMetricsTest.Sample> series = samples.stream().filter(s -> s.name().equals(name)).toList();
                    if (series.isEmpty()) fail("panel '" + panel.path("title").asText() + "' queries " + name + ", which no scrape has");
                    for (String label : grouped) {
                        assertTrue(series.stream().anyMatch(s -> s.labels().containsKey(label)),
                                "panel '" + panel.path("title").asText() + "' groups " + name + " by " + label + ", which it lacks");
                    }
                }
                Matcher sel = SELECTOR.matcher(expr);
                while (sel.find()) {
                    String name = sel.group(1);
                    if (!names.contains(name)) continue;
                    Matcher exact = EXACT.matcher(sel.group(2));
                    while (exact.find()) {
                        String label = exact.group(1), value = exact.group(2);
                        assertTrue(samples.stream().anyMatch(s -> s.name().equals(name) && value.equals(s.labels().get(label))),
                                "panel '" + panel.path("title").asText() + "' selects " + name + "{" + label + "=\"" + value
                                        + "\"}, which no scrape has");
                    }
                }
            }
        }
        assertEquals(d.path("panels").size() > 0, queries > 0);
        return checkedQueries;
    }

    /**
     * The panels whose title {@code panels} accepts show data, not a flat zero: every metric selector of their queries
     * (its exact matchers, with {@code labels} in place of the template variables' matchers such as
     * {@code role=~"$role"}) has a sample above 0 in the scrapes.
     *
     * @return how many selectors were checked
     */
    static int assertSeriesPositive(Path dashboard, List<String> scrapes, Predicate<String> panels, Map<String, String> labels)
            throws IOException {
        JsonNode d = new ObjectMapper().readTree(dashboard.toFile());
        List<BenchMetricsTest.Sample> samples = new ArrayList<>();
        for (String s : scrapes) samples.addAll(BenchMetricsTest.parse(s));
        int checked = 0;
        for (JsonNode panel : d.path("panels")) {
            String title = panel.path("title").asText();
            if (!panels.test(title)) continue;
            for (JsonNode target : panel.path("targets")) {
                Matcher sel = SELECTOR.matcher(target.path("expr").asText());
                while (sel.find()) {
                    String name = sel.group(1);
                    Map<String, String> want = new HashMap<>(labels);
                    Matcher exact = EXACT.matcher(sel.group(2));
                    while (exact.find()) want.put(exact.group(1), exact.group(2));
                    assertTrue(samples.stream().anyMatch(s -> s.name().equals(name) && s.value() > 0
                                    && want.entrySet().stream().allMatch(e -> e.getValue().equals(s.labels().get(e.getKey())))),
                            "panel '" + title + "' shows " + name + want + " at 0 or not at all");
                    checked++;
                }
            }
        }
        return checked;
    }
}
