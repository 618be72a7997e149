package io.kvferry.tools;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/** docs/grafana/kvferry.json against real scrapes: every metric its queries name exists, with every label they group by. */
final class GrafanaDashboardCheck {
    private static final Pattern METRIC = Pattern.compile("\\b(kvferry_[a-z0-9_]+)\\b");
    private static final Pattern BY = Pattern.compile("\\bby \\(([^)]*)\\)");

    private GrafanaDashboardCheck() {}

    static void assertEverySeriesExists(Path dashboard, List<String> scrapes) throws IOException {
        JsonNode d = new ObjectMapper().readTree(dashboard.toFile());
        List<BenchMetricsTest.Sample> samples = new ArrayList<>();
        for (String s : scrapes) samples.addAll(BenchMetricsTest.parse(s));
        int queries = 0;
        for (JsonNode panel : d.path("panels")) {
            for (JsonNode target : panel.path("targets")) {
                String expr = target.path("expr").asText();
                queries++;
                Matcher m = METRIC.matcher(expr);
                Set<String> names = new HashSet<>();
                while (m.find()) names.add(m.group(1));
                assertTrue(!names.isEmpty(), "query names no kvferry metric: " + expr);
                Set<String> grouped = new HashSet<>();
                Matcher by = BY.matcher(expr);
                while (by.find()) for (String l : by.group(1).split(",")) grouped.add(l.strip());
                grouped.remove("le");
                for (String name : names) {
                    List<BenchMetricsTest.Sample> series = samples.stream().filter(s -> s.name().equals(name)).toList();
                    if (series.isEmpty()) fail("panel '" + panel.path("title").asText() + "' queries " + name + ", which no scrape has");
                    for (String label : grouped) {
                        assertTrue(series.stream().anyMatch(s -> s.labels().containsKey(label)),
                                "panel '" + panel.path("title").asText() + "' groups " + name + " by " + label + ", which it lacks");
                    }
                }
            }
        }
        assertEquals(d.path("panels").size() > 0, queries > 0);
    }
}
