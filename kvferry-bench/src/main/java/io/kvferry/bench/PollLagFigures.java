package io.kvferry.bench;

import io.kvferry.metrics.KVFerryMeters;

import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The schedulers' poll lag ({@value KVFerryMeters#POLL_LAG_SECONDS}: a room's Success or Failed to the
 * first poll that returned it) per role, in ms, read from the roles' final Prometheus scrapes: the mean,
 * and p50 / p99 interpolated within the histogram's buckets as Prometheus' {@code histogram_quantile}
 * does. Every room a role's scheduler polled to its end counts, warm-up included (the meters are cumulative).
 */
final class PollLagFigures {
    private PollLagFigures() {}

    private static final Pattern LINE = Pattern.compile(
            "^" + KVFerryMeters.POLL_LAG_SECONDS + "_(bucket|sum|count)\\{([^}]*)}\\s+(\\S+)");
    private static final Pattern ROLE = Pattern.compile("(?:^|,)role=\"([^\"]*)\"");
    private static final Pattern LE = Pattern.compile("(?:^|,)le=\"([^\"]*)\"");

    /** Per role with at least one room polled: {@code avg}, {@code p50}, {@code p99} in ms (null: no buckets); empty when none. */
    static Map<String, Map<String, Double>> fromScrapes(Collection<String> scrapes) {
        Map<String, double[]> sumCount = new TreeMap<>();
        Map<String, TreeMap<Double, Double>> buckets = new TreeMap<>();
        for (String scrape : scrapes) {
            for (String line : scrape.split("\n")) {
                Matcher m = LINE.matcher(line);
                if (!m.find()) continue;
                Matcher role = ROLE.matcher(m.group(2));
                if (!role.find()) continue;
                double value;
                try {
                    value = Double.parseDouble(m.group(3));
                } catch (NumberFormatException e) {
                    continue;
                }
                String r = role.group(1);
                switch (m.group(1)) {
                    case "sum" -> sumCount.computeIfAbsent(r, k -> new double[2])[0] += value;
                    case "count" -> sumCount.computeIfAbsent(r, k -> new double[2])[1] += value;
                    default -> {
                        Matcher le = LE.matcher(m.group(2));
                        if (!le.find()) continue;
                        double bound = le.group(1).equals("+Inf") ? Double.POSITIVE_INFINITY : Double.parseDouble(le.group(1));
                        buckets.computeIfAbsent(r, k -> new TreeMap<>()).merge(bound, value, Double::sum); // ranks of a role add up
                    }
                }
            }
        }
        Map<String, Map<String, Double>> out = new LinkedHashMap<>();
        for (Map.Entry<String, double[]> e : sumCount.entrySet()) {
            double sum = e.getValue()[0], count = e.getValue()[1];
            if (count <= 0) continue;
            TreeMap<Double, Double> b = buckets.getOrDefault(e.getKey(), new TreeMap<>());
            Map<String, Double> f = new LinkedHashMap<>();
            f.put("avg", ms(sum / count));
            f.put("p50", ms(quantile(0.5, b)));
            f.put("p99", ms(quantile(0.99, b)));
            out.put(e.getKey(), f);
        }
        return out;
    }

    /**
     * The q-quantile of cumulative buckets (upper bound → rooms at or below it), linear within the bucket
     * it falls in; the highest finite bound when it falls beyond it; NaN without buckets.
     */
    static double quantile(double q, TreeMap<Double, Double> cumulative) {
        if (cumulative.isEmpty()) return Double.NaN;
        double total = cumulative.lastEntry().getValue();
        if (total <= 0) return Double.NaN;
        double rank = q * total, lower = 0, below = 0;
        for (Map.Entry<Double, Double> e : cumulative.entrySet()) {
            double upper = e.getKey(), atOrBelow = e.getValue();
            if (atOrBelow >= rank) {
                if (Double.isInfinite(upper)) return lower;
                return atOrBelow == below ? upper : lower + (upper - lower) * (rank - below) / (atOrBelow - below);
            }
            lower = upper;
            below = atOrBelow;
        }
        return lower;
    }

    /** Seconds as ms to three decimals; null for NaN (no buckets), which JSON cannot hold. */
    private static Double ms(double seconds) {
        return Double.isNaN(seconds) ? null : Math.round(seconds * 1e6) / 1000.0;
    }
}
