package io.kvferry.metrics;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManagerInspection;
import io.kvferry.api.KVPoll;
import io.kvferry.plan.CopyPlan;
import io.kvferry.plan.TransferPlanner;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import io.micrometer.core.instrument.distribution.CountAtBucket;
import org.junit.jupiter.api.Test;

import java.util.Arrays;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

class RankTelemetryTest {
    private final SimpleMeterRegistry registry = new SimpleMeterRegistry();
    private final EnumMap<KVPoll, Integer> rooms = new EnumMap<>(KVPoll.class);

    private final RoomCensus census = new RoomCensus() {
        @Override
        public int rooms(KVPoll state) {
            return rooms.getOrDefault(state, 0);
        }

        @Override
        public int peers() {
            return 2;
        }
    };

    private RankTelemetry telemetry(String role, int tp) {
        return new RankTelemetry(registry, new RankIdentity(role, tp, 0, 0, 0), census);
    }

    private double count(String name, String... tags) {
        Counter c = registry.find(name).tags(tags).counter();
        assertNotNull(c, name + " " + Arrays.toString(tags));
        return c.count();
    }

    @Test
    void failuresAreCountedByKindAndStageAndKeptNewestFirst() {
        RankTelemetry t = telemetry("decode", 0);
        t.failed(1, KVPoll.Bootstrapping, FailureKind.PREFILL_UNREACHABLE, "registry down", null);
        t.failed(2, KVPoll.WaitingForInput, FailureKind.WAITING_TIMEOUT, "Request 2 timed out", "prefill rank 0 at h:1");
        t.failed(3, KVPoll.Transferring, FailureKind.ABORTED, "Aborted by AbortReq.", "prefill rank 0 at h:1");
        t.failed(4, KVPoll.Bootstrapping, FailureKind.BOOTSTRAP_TIMEOUT, "Request 4 timed out", null);
        assertEquals(1, count(KVFerryMeters.BOOTSTRAP_FAILED, "kind", "prefill_unreachable", "role", "decode"));
        assertEquals(1, count(KVFerryMeters.BOOTSTRAP_FAILED, "kind", "bootstrap_timeout"));
        assertEquals(1, count(KVFerryMeters.TRANSFER_FAILED, "kind", "waiting_timeout"));
        assertEquals(1, count(KVFerryMeters.TRANSFER_FAILED, "kind", "aborted"));
        assertEquals(0, count(KVFerryMeters.TRANSFER_FAILED, "kind", "injected"));
        assertEquals(1, count(KVFerryMeters.TIMEOUTS, "stage", "waiting_for_input"));
        assertEquals(1, count(KVFerryMeters.TIMEOUTS, "stage", "bootstrapping"));
        assertEquals(0, count(KVFerryMeters.TIMEOUTS, "stage", "transferring"));
        assertEquals(1, count(KVFerryMeters.ABORTS));
        List<KVManagerInspection.Failure> recent = t.recentFailures();
        assertEquals(List.of(4L, 3L, 2L, 1L), recent.stream().map(KVManagerInspection.Failure::room).toList());
        assertEquals("waiting_for_input", recent.get(2).stage());
        assertEquals("prefill rank 0 at h:1", recent.get(2).peer());
        assertEquals(Map.of("prefill_unreachable", 1L, "waiting_timeout", 1L, "aborted", 1L, "bootstrap_timeout", 1L),
                t.failuresByKind());
    }

    @Test
    void theRingKeepsTheLatestFailuresOnly() {
        RankTelemetry t = telemetry("prefill", 0);
        for (int i = 0; i < KVManagerInspection.MAX_FAILURES + 10; i++) t.failed(i, KVPoll.Transferring, FailureKind.PEER_LOST, "lost", null);
        assertEquals(KVManagerInspection.MAX_FAILURES, t.recentFailures().size());
        assertEquals(KVManagerInspection.MAX_FAILURES + 9, t.recentFailures().getFirst().room());
        assertEquals(KVManagerInspection.MAX_FAILURES + 10L, t.failuresByKind().get("peer_lost"));
    }

    @Test
    void aFailureLineIsOneLineOfKeyValueFieldsWhateverTheReasonHolds() {
        RankTelemetry t = telemetry("decode", 1);
        String forged = "boom\nroom failed: room=666 role=prefill kind=forged";
        String line = t.failureLine(7, "transferring", FailureKind.TRANSFER_ERROR, forged, "sess \"x\"");
        assertFalse(line.contains("\n"), line);
        assertTrue(line.startsWith("room failed: room=7 role=decode tp_rank=1 pp_rank=0 dp_rank=0 cp_rank=0 stage=transferring "
                + "kind=transfer_error peer=\"sess \\\"x\\\"\" reason=\"boom\\nroom failed: room=666"), line);
        // The ring holds the escaped text too (pages render it).
        t.failed(7, KVPoll.Transferring, FailureKind.TRANSFER_ERROR, forged, null);
        assertEquals("boom\\nroom failed: room=666 role=prefill kind=forged", t.recentFailures().getFirst().reason());
    }

    @Test
    void concludedRoomsFillSGLangsBucketsPerTransport() {
        RankTelemetry t = telemetry("prefill", 0);
        t.concluded("tcp", 3_000_000L, 10_000_000L); // 3 ms, 10 MB -> 3.33 GB/s
        t.concluded("shm", 30_000_000L, 2_000_000L);
        t.concluded(null, -1, -1);
        DistributionSummary lat = registry.find(KVFerryMeters.TRANSFER_LATENCY_MS).tag("transport", "tcp").summary();
        assertNotNull(lat);
        assertEquals(1, lat.count());
        assertEquals(3.0, lat.totalAmount(), 1e-9);
        double[] bounds = Arrays.stream(lat.takeSnapshot().histogramCounts()).mapToDouble(CountAtBucket::bucket).toArray();
        assertArrayEquals(KVFerryMeters.LATENCY_MS, bounds);
        DistributionSummary speed = registry.find(KVFerryMeters.TRANSFER_SPEED_GB_S).tag("transport", "tcp").summary();
        assertEquals(10.0 / 3, speed.totalAmount(), 1e-9);
        assertArrayEquals(KVFerryMeters.SPEED_GB_S,
                Arrays.stream(speed.takeSnapshot().histogramCounts()).mapToDouble(CountAtBucket::bucket).toArray());
        assertEquals(10.0, registry.find(KVFerryMeters.TRANSFER_TOTAL_MB).tag("transport", "tcp").summary().totalAmount(), 1e-9);
        assertEquals(0, registry.find(KVFerryMeters.TRANSFER_LATENCY_MS).tag("transport", "unknown").summary().count());
        assertEquals(3, t.roomsConcluded());
        assertEquals(12_000_000L, t.concludedBytes());
    }

    @Test
    void dataPathWritesCountBytesOpsAndEachOpsSize() {
        RankTelemetry t = telemetry("prefill", 0);
        DataPathMeters m = t.dataPath("tcp");
        CopyPlan plan = TransferPlanner.planKv(new int[]{0}, new int[]{0}, new long[]{4096, 4096, 70_000});
        m.written(plan);
        m.written(plan);
        assertEquals(2 * 78_192, count(KVFerryMeters.DATAPATH_BYTES, "transport", "tcp"));
        assertEquals(6, count(KVFerryMeters.DATAPATH_OPS, "transport", "tcp"));
        // Cumulative by size: four ops of 4096 bytes are at most 4096, all six at most 262144 (70000 is in that bucket).
        assertEquals(0, sizeBucket("1024"));
        assertEquals(4, sizeBucket("4096"));
        assertEquals(4, sizeBucket("65536"));
        assertEquals(6, sizeBucket("262144"));
        assertEquals(6, sizeBucket("+Inf"));
        assertEquals(2, count(KVFerryMeters.DATAPATH_WRITES, "transport", "tcp"));
        assertTrue(t.dataPath("tcp") == m, "resolved once per transport");
    }

    /**
     * A manager torn down and another with the same coordinates in the same registry (a restarted rank, the
     * bench's waves): the ops-by-size buckets go on counting, like the bytes and ops counters beside them, and
     * never read NaN once the first manager is gone.
     */
    @Test
    void opsBySizeKeepCountingAcrossManagersOfTheSameRank() {
        CopyPlan plan = TransferPlanner.planKv(new int[]{0}, new int[]{0}, new long[]{4096, 70_000});
        RankTelemetry first = telemetry("prefill", 0);
        first.dataPath("tcp").written(plan);
        first.close();
        RankTelemetry second = telemetry("prefill", 0);
        second.dataPath("tcp").written(plan);
        assertEquals(4, count(KVFerryMeters.DATAPATH_OPS, "transport", "tcp"));
        assertEquals(2, sizeBucket("4096"), "the second manager's ops are counted too");
        assertEquals(4, sizeBucket("+Inf"));
        second.close();
    }

    private double sizeBucket(String le) {
        return registry.find(KVFerryMeters.DATAPATH_OPS_BY_SIZE).tags("transport", "tcp", "le", le).functionCounter().count();
    }

    @Test
    void roomGaugesReadTheCensusAtScrapeTimeAndLeaveWithTheLastManager() {
        RankTelemetry a = telemetry("prefill", 0);
        rooms.put(KVPoll.Transferring, 3);
        Gauge g = registry.find(KVFerryMeters.ROOMS).tag("state", "transferring").tag("role", "prefill").gauge();
        assertNotNull(g);
        assertEquals(3, g.value());
        rooms.put(KVPoll.Transferring, 5);
        assertEquals(5, g.value(), "read when scraped, not when registered");
        // A second manager with the same coordinates in this registry: the gauge sums both.
        RankTelemetry b = telemetry("prefill", 0);
        assertEquals(10, g.value());
        assertEquals(4, registry.find(KVFerryMeters.PEERS).gauge().value());
        a.close();
        assertEquals(5, registry.find(KVFerryMeters.ROOMS).tag("state", "transferring").gauge().value());
        b.close();
        assertNull(registry.find(KVFerryMeters.ROOMS).gauge(), "no gauge outlives its managers");
        // Counters stay: they are cumulative.
        assertNotNull(registry.find(KVFerryMeters.TRANSFER_FAILED).counter());
    }

    @Test
    void handshakeRefusalsAndHeartbeatsAreCounted() {
        RankTelemetry t = telemetry("prefill", 0);
        t.refused(HandshakeRefusal.AUTH);
        t.refused(HandshakeRefusal.AUTH);
        t.refused(HandshakeRefusal.of(FailureKind.LAYOUT_REFUSED));
        t.heartbeatsMissed(3);
        t.heartbeatsMissed(0);
        t.heartbeatTimedOut();
        assertEquals(2, count(KVFerryMeters.HANDSHAKE_REFUSALS, "reason", "auth"));
        assertEquals(1, count(KVFerryMeters.HANDSHAKE_REFUSALS, "reason", "layout"));
        assertEquals(0, count(KVFerryMeters.HANDSHAKE_REFUSALS, "reason", "no_hello"));
        assertEquals(3, count(KVFerryMeters.HEARTBEAT_MISSES));
        assertEquals(1, count(KVFerryMeters.HEARTBEAT_TIMEOUTS));
    }

    @Test
    void theDefaultRegistryKeepsNothing() {
        RankTelemetry t = new RankTelemetry(KVFerryMeters.noRegistry(), new RankIdentity("prefill", 0, 0, 0, 0), census);
        t.failed(1, KVPoll.Transferring, FailureKind.PEER_LOST, "x", null);
        t.concluded("tcp", 1, 1);
        assertTrue(KVFerryMeters.noRegistry().getMeters().isEmpty());
        assertEquals(1L, t.failuresByKind().get("peer_lost"), "inspect() still sees it");
        t.close();
    }
}
