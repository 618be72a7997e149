package io.kvferry.bench;

import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Scrapes hold seconds (a Micrometer timer); the figures are ms. */
class PollLagFiguresTest {
    private static String rank(String role, int tp, double[] les, long[] cumulative, double sum) {
        StringBuilder b = new StringBuilder("# HELP kvferry_kv_poll_lag_seconds lag\n# TYPE kvferry_kv_poll_lag_seconds histogram\n");
        String labels = "cp_rank=\"0\",dp_rank=\"0\",pp_rank=\"0\",role=\"" + role + "\",tp_rank=\"" + tp + "\"";
        for (int i = 0; i < les.length; i++) {
            b.append("kvferry_kv_poll_lag_seconds_bucket{").append(labels).append(",le=\"").append(les[i]).append("\"} ").append(cumulative[i]).append('\n');
        }
        long count = cumulative[cumulative.length - 1];
        b.append("kvferry_kv_poll_lag_seconds_bucket{").append(labels).append(",le=\"+Inf\"} ").append(count).append('\n');
        b.append("kvferry_kv_poll_lag_seconds_count{").append(labels).append("} ").append(count).append('\n');
        b.append("kvferry_kv_poll_lag_seconds_sum{").append(labels).append("} ").append(sum).append('\n');
        b.append("kvferry_kv_poll_lag_seconds_max{").append(labels).append("} 0.009\n");
        return b.toString();
    }

    @Test
    void averagesAndInterpolatesPerRoleAddingUpItsRanks() {
        double[] les = {0.001, 0.002, 0.005, 0.010}; // 1, 2, 5, 10 ms
        // decode: two ranks in one process, 100 rooms each; prefill in another process.
        String decodeProcess = rank("decode", 0, les, new long[]{50, 90, 100, 100}, 0.080)
                + rank("decode", 1, les, new long[]{50, 90, 100, 100}, 0.080);
        String prefillProcess = rank("prefill", 0, les, new long[]{0, 0, 10, 20}, 0.140)
                + "kvferry_kv_transfer_latency_ms_sum{role=\"prefill\"} 12345.0\n";
        Map<String, Map<String, Double>> lag = PollLagFigures.fromScrapes(List.of(decodeProcess, prefillProcess, "# the registry's: none\n"));
        assertEquals(List.of("decode", "prefill"), List.copyOf(lag.keySet()));
        assertEquals(0.8, lag.get("decode").get("avg"));
        assertEquals(1.0, lag.get("decode").get("p50"), "rank 100 of 200 is the first bucket's top");
        assertEquals(4.7, lag.get("decode").get("p99"), 1e-9, "rank 198 of 200: 2 + 3 × (198 − 180) / 20");
        assertEquals(7.0, lag.get("prefill").get("avg"));
        assertEquals(5.0, lag.get("prefill").get("p50"), "rank 10 of 20: the top of (2, 5]");
        assertEquals(9.9, lag.get("prefill").get("p99"), 1e-9);
    }

    @Test
    void roomsBeyondTheLastBoundReadAsThatBoundAndNothingPolledIsLeftOut() {
        TreeMap<Double, Double> beyond = new TreeMap<>(Map.of(0.001, 0.0, 1.0, 1.0, Double.POSITIVE_INFINITY, 10.0));
        assertEquals(1.0, PollLagFigures.quantile(0.99, beyond), "in seconds");
        assertTrue(Double.isNaN(PollLagFigures.quantile(0.5, new TreeMap<>())));
        String none = rank("decode", 0, new double[]{0.001}, new long[]{0}, 0);
        assertTrue(PollLagFigures.fromScrapes(List.of(none)).isEmpty(), "count 0: no figures");
        String noBuckets = "kvferry_kv_poll_lag_seconds_count{role=\"decode\"} 3\nkvferry_kv_poll_lag_seconds_sum{role=\"decode\"} 0.006\n";
        Map<String, Double> d = PollLagFigures.fromScrapes(List.of(noBuckets)).get("decode");
        assertEquals(2.0, d.get("avg"));
        assertNull(d.get("p99"), "no buckets: unknown, not NaN");
    }
}
