package io.kvferry.tools;

import io.kvferry.api.ChecksumMode;
import io.kvferry.api.RoomChoice;
import io.kvferry.chaos.ChaosRunner;
import io.kvferry.chaos.net.LinkImpairment;
import io.kvferry.chaos.net.Netns;
import io.kvferry.chaos.net.NetnsLink;
import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.ModelShape;
import io.kvferry.testkit.RoleReport;
import io.kvferry.testkit.Workload;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertAll;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/** Short forms of the kvferry chaos scenarios, with the pass condition asserted. */
class ChaosTest {
    @ParameterizedTest
    @ValueSource(strings = {"kill-prefill", "kill-decode", "bad-frames", "abort-storm", "slow-decode", "failure-injection",
            "restart-prefill", "restart-decode", "partition"})
    @Timeout(240)
    void scenarioPasses(String scenario) throws Exception {
        // partition spends ~8 requests on the blackhole and the reset and must still see requests succeed after each.
        Workload w = scenario.equals("partition") ? new Workload(32, 256, 16, 128, 4, 0, 3L) : new Workload(16, 512, 16, 128, 4, 0, 3L);
        BenchConfig c = new BenchConfig(ModelShape.preset("llama-3.1-8b"), w, "tcp", 1, "chaos-token")
                .withFaultTimeouts(2000, 90_000);
        ChaosRunner.Result r = new ChaosRunner(c, new PrintStream(OutputStream.nullOutputStream()), 100).run(scenario);
        assertTrue(r.passed(), () -> r.toString());
        assertEquals(0, r.hung());
        assertEquals(0, r.corrupted());
        assertEquals(0, r.leaked());
        assertEquals(NO_LEAKS, r.leaks(), r::toString);
        if (scenario.equals("bad-frames") || scenario.equals("slow-decode")) {
            assertEquals(16, r.succeeded(), () -> "these faults must not fail real requests: " + r);
        } else if (scenario.startsWith("restart-")) {
            assertEquals(Boolean.TRUE, r.recovered(), () -> "no request succeeded through the restarted process: " + r);
        } else if (scenario.startsWith("kill-")) {
            String survivor = scenario.equals("kill-prefill") ? "decode" : "prefill";
            Long detect = r.detectMs().get(survivor);
            // A kill that lands while every one of the survivor's rooms still waits for its peer's first message (the
            // prefill's rooms are Bootstrapping until the decode's metadata arrives) leaves nothing bound to the dead
            // peer: those rooms end by the bootstrap timeout, which is not a detection (a race of the strike moment,
            // seen once in CI with faster transfers). Anything bound to it must fail within 3 s: a room whose
            // peer's death went unnoticed would hang (hung == 0 above) or fail late.
            boolean onlyBackstop = detect == null && !r.firstFailures().isEmpty()
                    && r.firstFailures().stream().allMatch(f -> f.startsWith(survivor + ": ") && RoleReport.isBackstopTimeout(f));
            // The kill must meet requests (11-12 of the 16 were in flight in every run measured): a run that failed none tested nothing.
            assertTrue(r.failed() > 0, () -> "the kill met no request: " + r);
            if (!onlyBackstop) {
                assertTrue(detect != null && detect < 3000, () -> survivor + " detected the death after " + detect + " ms: " + r);
            }
        } else if (scenario.equals("partition")) {
            // Both sides failed the blackholed rooms by heartbeat (1 s here), before the link came back ...
            assertEquals(Boolean.TRUE, r.detected(), () -> "a blackholed link was not detected on both sides: " + r);
            Long p = r.detectMs().get("prefill"), d = r.detectMs().get("decode");
            assertNotNull(p, r::toString);
            assertNotNull(d, r::toString);
            assertTrue(p < ChaosRunner.BLACKHOLE_MS && d < ChaosRunner.BLACKHOLE_MS, r::toString);
            // ... and requests succeeded again through the restored link and after the reset, nothing restarted.
            assertEquals(Boolean.TRUE, r.recovered(), () -> "no request succeeded after the partition healed: " + r);
            assertTrue(r.failed() > 0, () -> "the partition hit no request: " + r);
        }
    }

    /**
     * kill-prefill where every room's DP group goes through the registry: rooms the dead prefill never
     * published fail within the prefill info timeout (they once waited for as long as the decode asked: hung).
     * The decode is paced as bad-frames paces it (100 ms per request): unpaced, the 24 tiny requests had all
     * concluded before the kill (failed=0, succeeded=24 in each of 3 runs), so no room was left to fail.
     */
    @Test
    @Timeout(240)
    void killPrefillWithDpGroupsPublishedThroughTheRegistry() throws Exception {
        Workload w = new Workload(24, 256, 16, 128, 4, 0, 5L, 0, true);
        BenchConfig c = new BenchConfig(ModelShape.preset("tiny"), w, "tcp", 1, 1, 1, 1, 1, false, 2, "chaos-token", 0)
                .withFaultTimeouts(2000, 90_000).withFaults(new BenchConfig.Faults(0, 100, 0));
        ChaosRunner.Result r = new ChaosRunner(c, new PrintStream(OutputStream.nullOutputStream()), 100).run("kill-prefill");
        assertTrue(r.passed(), () -> r.toString());
        assertTrue(r.failed() > 0, () -> "the kill met no request: " + r);
        assertEquals(0, r.hung(), r::toString);
        assertEquals(NO_LEAKS, r.leaks(), r::toString);
    }

    private static final Map<String, Long> NO_LEAKS = Map.of("rooms", 0L, "pages", 0L, "threads", 0L, "sockets", 0L,
            "native_bytes", 0L, "unreported_ranks", 0L);

    /**
     * corrupt: bytes flipped in flight (the fault proxy on tcp, the prefill's hook on shm). With full
     * checksums no damaged room succeeds, each fails with kind integrity; with them off the damage
     * shows as rooms that succeeded with wrong bytes.
     */
    @ParameterizedTest(name = "{0} checksum={1}")
    @CsvSource({"tcp,full", "tcp,off", "shm,full", "shm,off"})
    @Timeout(180)
    void corruptionIsCaughtWithChecksumsAndShowsWithout(String transport, String checksum) throws Exception {
        Workload w = new Workload(12, 256, 16, 128, 4, 0, 5L);
        BenchConfig c = new BenchConfig(ModelShape.preset("llama-3.1-8b"), w, transport, 1,
                "chaos-token").withFaultTimeouts(2000, 90_000).withChecksum(ChecksumMode.parse(checksum));
        // The prefill's hook (shm) damages the rooms RoomChoice picks: which ones is fixed by the workload, so the count is known.
        long hooked = w.generate().stream().filter(q -> RoomChoice.chosen(q.room(), RoomChoice.PREFILL_HOOK_SALT, 0.5)).count();
        assertTrue(hooked > 0 && hooked < w.totalRequests(), () -> "the workload should have damaged and undamaged rooms: " + hooked);
        ChaosRunner.Result r = new ChaosRunner(c, new PrintStream(OutputStream.nullOutputStream()), 100).run("corrupt");
        assertTrue(r.passed(), r::toString);
        assertEquals(0, r.hung(), r::toString);
        assertEquals(NO_LEAKS, r.leaks(), r::toString);
        assertNotNull(r.corruption(), r::toString);
        assertEquals(transport.equals("tcp") ? "proxy" : "hook", r.corruption().via());
        if (checksum.equals("full")) {
            assertEquals(0, r.corrupted(), () -> "a damaged room reported Success: " + r);
            assertTrue(r.integrityFailures() > 0, () -> "nothing was caught (or nothing damaged): " + r);
            if (transport.equals("tcp")) {
                assertTrue(r.corruption().injected() > 0, r::toString);
                assertEquals(r.corruption().injected(), r.integrityFailures(), () -> "each damaged room fails once, as integrity: " + r);
            } else {
                assertEquals(hooked, r.integrityFailures(), () -> "each room the hook damaged fails once, as integrity: " + r);
            }
            assertEquals(r.failed(), r.integrityFailures(), () -> "only the damaged rooms fail: " + r);
        } else {
            assertTrue(r.corrupted() > 0, () -> "the damage must show without checksums: " + r);
            assertEquals(0, r.integrityFailures(), r::toString);
            assertEquals(transport.equals("tcp") ? r.corruption().injected() : hooked, r.corrupted(), r::toString);
        }
    }

    /**
     * hostile-peer: every attack of issue 13's list that can be played from outside, against the live
     * prefill and registry while a paced workload runs; each must be refused as the issue says, every
     * legitimate request must succeed, and the prefill's memory and threads must stay bounded.
     */
    @Test
    @Timeout(240)
    void aHostilePeerIsRefusedEverywhereWhileTheWorkloadSucceeds() throws Exception {
        BenchConfig c = new BenchConfig(ModelShape.preset("tiny"), new Workload(64, 128, 16, 64, 4, 0, 9L), "tcp", 1, "chaos-token")
                .withFaultTimeouts(2000, 120_000);
        ChaosRunner.Result r = new ChaosRunner(c, new PrintStream(OutputStream.nullOutputStream()), 100).run("hostile-peer");
        assertNotNull(r.hostile(), r::toString);
        assertEquals(64, r.succeeded(), r::toString);
        assertEquals(NO_LEAKS, r.leaks(), r::toString);
        assertTrue(r.hostile().rssMb().before() > 0 && r.hostile().threads().before() > 0, r::toString);
        List<String> attacks = r.hostile().attacks().stream().map(ChaosRunner.Hostile.Attack::name).toList();
        assertTrue(attacks.containsAll(List.of("preauth-amplification", "stalled-handshakes", "registry-slowloris", "unsigned-hello",
                "wrong-token-hello", "forged-offers", "session-takeover", "forged-stripe", "unstarted-rooms", "abort-flood",
                "log-injection", "registry-slowloris-cut", "under-load", "legitimate-requests", "bounded-memory", "bounded-threads")),
                attacks::toString);
        assertAll(r.hostile().attacks().stream().map(a -> () -> assertTrue(a.ok(), a.name() + ": " + a.outcome())));
        assertTrue(r.passed(), r::toString);
    }

    /**
     * Faults on a real link (root only): registry and prefill in one network namespace, the decode in
     * another, a 1 ms round trip and 0.1 % loss between them (netem, or the harness's TUN link where
     * the kernel has no netem); partition takes the link down, corrupt damages tcp WRITEs in a proxy
     * on the decode's side with full checksums on.
     */
    @ParameterizedTest
    @ValueSource(strings = {"kill-prefill", "kill-decode", "partition", "corrupt"})
    @Timeout(240)
    void scenariosHoldOnALossyLinkBetweenNetworkNamespaces(String scenario) throws Exception {
        String why = Netns.unavailableReason();
        assumeTrue(why == null, () -> "skipped: chaos in network namespaces needs root: " + why);
        Workload w = scenario.equals("partition") ? new Workload(32, 256, 16, 128, 4, 0, 3L) : new Workload(16, 256, 16, 128, 4, 0, 3L);
        BenchConfig c = new BenchConfig(ModelShape.preset("llama-3.1-8b"), w, "tcp", 1, "chaos-token").withFaultTimeouts(2000, 90_000);
        if (scenario.equals("corrupt")) c = c.withChecksum(ChecksumMode.FULL);
        BenchConfig config = c;
        ChaosRunner.Result r = new ChaosRunner(config, new PrintStream(OutputStream.nullOutputStream()), 100)
                .withNetns(LinkImpairment.parse(LinkImpairment.DEFAULT_SPEC), NetnsLink.Kind.AUTO).run(scenario);
        assertTrue(r.passed(), r::toString);
        assertEquals(0, r.hung(), r::toString);
        assertEquals(0, r.corrupted(), r::toString);
        assertEquals(0, r.leaked(), r::toString);
        assertNotNull(r.link(), r::toString);
        assertNotNull(r.link().rttMs(), r::toString);
        assertTrue(r.link().rttMs() >= 0.9, () -> "the link adds 0.5 ms each way: " + r.link());
        if (scenario.equals("partition")) {
            assertEquals(Boolean.TRUE, r.detected(), r::toString);
            assertEquals(Boolean.TRUE, r.recovered(), r::toString);
        }
        if (scenario.equals("corrupt")) assertTrue(r.integrityFailures() > 0, r::toString);
        String mine = Netns.PREFIX + ProcessHandle.current().pid() + "-";
        try (Stream<Path> names = Files.list(Path.of("/run/netns"))) {
            List<String> left = names.map(n -> n.getFileName().toString()).filter(n -> n.startsWith(mine)).toList();
            assertEquals(List.of(), left, "namespaces of this run left behind");
        }
    }

    /** The verdict must be able to fail: any hung, corrupted or leaked request, or a missing recovery or detection. */
    @Test
    void verdictFailsOnAnyViolation() {
        assertTrue(result(0, 0, 0, null, null).passed());
        assertTrue(result(0, 0, 0, true, true).passed());
        assertFalse(result(1, 0, 0, null, null).passed());
        assertFalse(result(0, 1, 0, null, null).passed());
        assertFalse(result(0, 0, 1, null, null).passed());
        assertFalse(result(0, 0, 0, false, true).passed());
        assertFalse(result(0, 0, 0, true, false).passed());
        ChaosRunner.Result soak = ChaosRunner.aggregate(List.of(result(0, 0, 0, true, true), result(0, 0, 1, false, true)));
        assertEquals(2, soak.cycles());
        assertEquals(1, soak.leaked());
        assertEquals(Boolean.FALSE, soak.recovered());
        assertFalse(soak.passed());
    }

    private static ChaosRunner.Result result(int hung, int corrupted, int leaked, Boolean recovered, Boolean detected) {
        return new ChaosRunner.Result("partition", 10, 10 - hung, hung, hung, corrupted, leaked, Map.of("threads", (long) leaked),
                Map.of(), recovered, detected, 1, List.of());
    }
}
