package io.kvferry.ops;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVPoll;
import io.kvferry.metrics.HandshakeRefusal;
import io.kvferry.metrics.RankIdentity;
import io.kvferry.metrics.RankTelemetry;
import io.kvferry.metrics.RoomCensus;
import io.kvferry.plan.CopyPlan;
import io.kvferry.plan.TransferPlanner;
import io.kvferry.registry.BootstrapRegistryServer;
import io.kvferry.registry.RegistryOptions;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * {@code /metrics} read by a strict parser of the Prometheus text format (0.0.4), as a scraper would read it,
 * with every kind of kvferry meter recorded: each family typed once and described once before its samples and
 * not split, names and label names valid, label values escaped, no series twice, counters named {@code _total},
 * never negative or NaN and never going down across scrapes (also when a rank is torn down and created again),
 * histograms with ordered cumulative buckets ending in {@code +Inf} equal to their count.
 */
class MetricsExpositionTest {
    private static final Pattern NAME = Pattern.compile("[a-zA-Z_:][a-zA-Z0-9_:]*");
    private static final Pattern LABEL_NAME = Pattern.compile("[a-zA-Z_][a-zA-Z0-9_]*");
    private static final Pattern FLOAT = Pattern.compile("[+-]?(Inf|NaN|(\\d+\\.?\\d*|\\.\\d+)([eE][+-]?\\d+)?)");
    private static final Set<String> TYPES = Set.of("counter", "gauge", "histogram", "summary", "untyped");

    /** One sample: its metric name, labels in order of appearance, value. */
    record Sample(String name, Map<String, String> labels, double value) {
        String series() {
            return name + new TreeMap<>(labels);
        }
    }

    /** A scrape parsed: samples by family, each family's type. */
    record Scrape(Map<String, String> types, Map<String, List<Sample>> families) {
        Map<String, Double> counters() {
            Map<String, Double> out = new HashMap<>();
            families.forEach((f, samples) -> {
                if (types.get(f).equals("counter")) for (Sample s : samples) out.put(s.series(), s.value());
            });
            return out;
        }
    }

    /** Parses a scrape, failing on anything a strict reader of the text format would refuse. */
    static Scrape parse(String text) {
        Map<String, String> types = new LinkedHashMap<>();
        Set<String> helped = new HashSet<>();
        Map<String, List<Sample>> families = new LinkedHashMap<>();
        Set<String> series = new HashSet<>();
        Set<String> closed = new HashSet<>(); // families whose samples ended: one seen again is split
        String current = null;
        assertTrue(text.isEmpty() || text.endsWith("\n"), "a scrape ends with a newline");
        for (String line : text.split("\n", -1)) {
            if (line.isEmpty()) continue;
            if (line.startsWith("#")) {
                String[] parts = line.split(" ", 4);
                if (parts.length >= 3 && (parts[1].equals("HELP") || parts[1].equals("TYPE"))) {
                    String family = parts[2];
                    assertTrue(NAME.matcher(family).matches(), "metric name: " + line);
                    assertFalse(families.containsKey(family), "HELP/TYPE after the family's samples: " + line);
                    if (parts[1].equals("TYPE")) {
                        assertEquals(4, parts.length, line);
                        assertTrue(TYPES.contains(parts[3]), "type: " + line);
                        assertTrue(types.put(family, parts[3]) == null, "TYPE twice: " + line);
                    } else {
                        assertTrue(helped.add(family), "HELP twice: " + line);
                        if (parts.length == 4) checkEscapes(parts[3], false, line);
                    }
                }
                continue;
            }
            Sample s = sample(line);
            String family = familyOf(s.name(), types);
            assertNotNull(family, "a sample of no declared family: " + line);
            if (!family.equals(current)) {
                if (current != null) closed.add(current);
                assertFalse(closed.contains(family), "the samples of " + family + " are split: " + line);
                current = family;
            }
            assertTrue(series.add(s.series()), "a series twice: " + line);
            families.computeIfAbsent(family, f -> new ArrayList<>()).add(s);
        }
        types.keySet().forEach(f -> families.putIfAbsent(f, List.of()));
        Scrape scrape = new Scrape(types, families);
        checkCounters(scrape);
        checkHistograms(scrape);
        return scrape;
    }

    private static Sample sample(String line) {
        int i = 0;
        Matcher name = NAME.matcher(line);
        assertTrue(name.lookingAt(), "sample name: " + line);
        i = name.end();
        Map<String, String> labels = new LinkedHashMap<>();
        if (i < line.length() && line.charAt(i) == '{') {
            i++;
            while (line.charAt(i) != '}') {
                Matcher ln = LABEL_NAME.matcher(line).region(i, line.length());
                assertTrue(ln.lookingAt(), "label name at " + i + ": " + line);
                String label = ln.group();
                assertFalse(label.startsWith("__"), "reserved label name: " + line);
                i = ln.end();
                assertEquals("=\"", line.substring(i, i + 2), "label " + label + ": " + line);
                i += 2;
                StringBuilder value = new StringBuilder();
                while (line.charAt(i) != '"') {
                    char c = line.charAt(i);
                    if (c == '\\') {
                        char e = line.charAt(i + 1);
                        if (e == 'n') value.append('\n');
                        else if (e == '\\' || e == '"') value.append(e);
                        else fail("escape \\" + e + " in a label value: " + line);
                        i += 2;
                    } else {
                        value.append(c);
                        i++;
                    }
                }
                i++;
                assertTrue(labels.put(label, value.toString()) == null, "label " + label + " twice: " + line);
                if (line.charAt(i) == ',') i++;
                else assertEquals('}', line.charAt(i), "after label " + label + ": " + line);
            }
            i++;
        }
        assertEquals(' ', line.charAt(i), "a space before the value: " + line);
        String[] rest = line.substring(i + 1).split(" ");
        assertTrue(rest.length == 1 || rest.length == 2 && rest[1].matches("-?\\d+"), "value [timestamp]: " + line);
        assertTrue(FLOAT.matcher(rest[0]).matches(), "value: " + line);
        double v = rest[0].endsWith("Inf") ? (rest[0].startsWith("-") ? Double.NEGATIVE_INFINITY : Double.POSITIVE_INFINITY)
                : Double.parseDouble(rest[0]);
        return new Sample(name.group(), labels, v);
    }

    private static void checkEscapes(String help, boolean quotesToo, String line) {
        for (int i = 0; i < help.length(); i++) {
            if (help.charAt(i) != '\\') continue;
            char e = i + 1 < help.length() ? help.charAt(i + 1) : ' ';
            assertTrue(e == 'n' || e == '\\' || quotesToo && e == '"', "escape in HELP: " + line);
            i++;
        }
    }

    private static String familyOf(String name, Map<String, String> types) {
        if (types.containsKey(name)) return name;
        for (String suffix : List.of("_bucket", "_count", "_sum")) {
            if (!name.endsWith(suffix)) continue;
            String family = name.substring(0, name.length() - suffix.length());
            String type = types.get(family);
            if ("histogram".equals(type) || "summary".equals(type) && !suffix.equals("_bucket")) return family;
        }
        return null;
    }

    private static void checkCounters(Scrape scrape) {
        scrape.types().forEach((family, type) -> {
            if (!type.equals("counter")) return;
            assertTrue(family.endsWith("_total"), "a counter's name ends with _total: " + family);
            for (Sample s : scrape.families().get(family)) {
                assertTrue(s.value() >= 0, "a counter is a non-negative number: " + s);
            }
        });
    }

    private static void checkHistograms(Scrape scrape) {
        scrape.types().forEach((family, type) -> {
            if (!type.equals("histogram")) return;
            Map<String, List<Sample>> buckets = new HashMap<>();
            Map<String, Double> counts = new HashMap<>();
            for (Sample s : scrape.families().get(family)) {
                Map<String, String> rest = new TreeMap<>(s.labels());
                if (s.name().endsWith("_bucket")) {
                    assertNotNull(rest.remove("le"), "a bucket has le: " + s);
                    buckets.computeIfAbsent(rest.toString(), k -> new ArrayList<>()).add(s);
                } else if (s.name().endsWith("_count")) {
                    counts.put(rest.toString(), s.value());
                } else {
                    assertFalse(rest.containsKey("le"), "only buckets have le: " + s);
                }
            }
            assertEquals(counts.keySet(), buckets.keySet(), family + ": every series has buckets and a count");
            buckets.forEach((labels, bs) -> {
                double le = Double.NEGATIVE_INFINITY, n = 0;
                for (Sample b : bs) {
                    String bound = b.labels().get("le");
                    double at = bound.equals("+Inf") ? Double.POSITIVE_INFINITY : Double.parseDouble(bound);
                    assertTrue(at > le, family + ": buckets in order: " + b);
                    assertTrue(b.value() >= n, family + ": cumulative: " + b);
                    le = at;
                    n = b.value();
                }
                assertEquals(Double.POSITIVE_INFINITY, le, family + " " + labels + " ends with +Inf");
                assertEquals(counts.get(labels), n, family + " " + labels + ": +Inf is the count");
            });
        });
    }

    private static final RoomCensus CENSUS = new RoomCensus() {
        @Override
        public int rooms(KVPoll state) {
            return state == KVPoll.Transferring ? 2 : 0;
        }

        @Override
        public int peers() {
            return 1;
        }
    };

    /** Records one of everything a rank records. */
    private static void exercise(RankTelemetry t, long room) {
        t.bootstrapped(2_000_000);
        t.allocated(1_000_000);
        t.polledConcluded(System.nanoTime() - 300_000);
        t.concluded("tcp", 3_000_000, 5_000_000);
        t.concluded("shm+tcp", 1_000_000, 700_000);
        t.concluded(null, -1, -1);
        t.failed(room, KVPoll.Transferring, FailureKind.PEER_LOST, "lost \"it\"\n\\", "sess \"a\"");
        t.failed(room + 1, KVPoll.Bootstrapping, FailureKind.BOOTSTRAP_TIMEOUT, "timed out", null);
        t.failed(room + 2, KVPoll.WaitingForInput, FailureKind.ABORTED, "Aborted", null);
        t.refused(HandshakeRefusal.AUTH);
        t.heartbeatsMissed(2);
        t.heartbeatTimedOut();
        CopyPlan plan = TransferPlanner.planKv(new int[]{0}, new int[]{0}, new long[]{512, 4096, 70_000, 5_000_000});
        t.dataPath("tcp").written(plan);
        t.dataPath("shm").written(plan);
    }

    /** The parser above is strict: what a scraper refuses, it refuses. */
    @Test
    void theParserRefusesWhatAScraperWould() {
        String head = "# HELP a_total A\n# TYPE a_total counter\n";
        parse(head + "a_total{x=\"q\\\"\\\\\\n\"} 1.0\n");
        for (String bad : List.of(
                head + "a_total{x=\"1\"} 1.0\na_total{x=\"1\"} 2.0\n",             // a series twice
                head + "a_total{x=\"\\t\"} 1.0\n",                                   // an escape the format does not have
                head + "a_total NaN\n",                                                // a counter that is not a number
                head + "a_total 1.0\n# TYPE b gauge\nb 1\na_total{y=\"2\"} 1.0\n",   // a family split
                "# TYPE c counter\nc 1\n",                                            // a counter not named _total
                "d 1\n",                                                               // no TYPE
                "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\nh_sum 1\n")) { // not cumulative
            assertThrows(AssertionError.class, () -> parse(bad), bad);
        }
    }

    @Test
    void theScrapeIsValidTextFormatAndItsCountersOnlyGoUp() throws Exception {
        PrometheusMeterRegistry registry = Ops.newRegistry();
        try (BootstrapRegistryServer bootstrap = BootstrapRegistryServer.start("127.0.0.1", 0, RegistryOptions.defaults("t"))) {
            RegistryOps.mount(bootstrap, registry, List.of());
            RankTelemetry prefill = new RankTelemetry(registry, new RankIdentity("prefill", 0, 0, 0, 0), CENSUS);
            RankTelemetry prefill1 = new RankTelemetry(registry, new RankIdentity("prefill", 1, 0, 0, 0), CENSUS);
            RankTelemetry decode = new RankTelemetry(registry, new RankIdentity("decode", 0, 0, 0, 0), CENSUS);
            exercise(prefill, 1);
            exercise(prefill1, 10);
            exercise(decode, 20);
            Scrape first = parse(registry.scrape());
            for (String family : List.of("kvferry_rooms", "kvferry_peer_links", "kvferry_kv_transfer_latency_ms",
                    "kvferry_kv_poll_lag_seconds", "kvferry_datapath_ops_by_size_total", "kvferry_num_transfer_failed_reqs_total",
                    RegistryOps.REGISTERED)) {
                assertFalse(first.families().getOrDefault(family, List.of()).isEmpty(), family + " is in the scrape");
            }
            // A rank torn down and created again with the same coordinates, as a restarted rank or the bench's next wave.
            prefill.close();
            RankTelemetry again = new RankTelemetry(registry, new RankIdentity("prefill", 0, 0, 0, 0), CENSUS);
            exercise(again, 30);
            Scrape second = parse(registry.scrape());
            Map<String, Double> after = second.counters();
            first.counters().forEach((series, before) -> {
                Double now = after.get(series);
                assertNotNull(now, "a counter series disappeared: " + series);
                assertTrue(now >= before, "a counter went down: " + series + " " + before + " -> " + now);
            });
            again.close();
            prefill1.close();
            decode.close();
            parse(registry.scrape());
        }
    }
}
