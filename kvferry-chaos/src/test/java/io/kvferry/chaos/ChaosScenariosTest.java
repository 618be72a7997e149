package io.kvferry.chaos;

import io.kvferry.api.ChecksumMode;
import io.kvferry.api.FailureKind;
import io.kvferry.protocol.FrameCodec;
import io.kvferry.protocol.ProtocolException;
import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.ModelShape;
import io.kvferry.testkit.RoleReport;
import io.kvferry.testkit.Workload;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The scenario classes on their own (the processes they strike at are ChaosTest's, in kvferry-cli). */
class ChaosScenariosTest {
    @Test
    void everyScenarioHasItsOwnClassAndAUniqueName() {
        assertEquals(11, ChaosScenarios.ALL.size());
        assertEquals(ChaosScenarios.ALL.size(), new HashSet<>(ChaosRunner.SCENARIOS).size());
        for (ChaosScenario s : ChaosScenarios.ALL) assertEquals(s, ChaosScenarios.byName(s.name()));
        assertEquals(ChaosScenarios.ALL.size(), ChaosScenarios.ALL.stream().map(Object::getClass).distinct().count());
        assertNull(ChaosScenarios.byName("meteor"));
        assertEquals(0.25, ChaosRunner.faultsFor("abort-storm").abortProbability());
        assertEquals(BenchConfig.Faults.NONE, ChaosRunner.faultsFor("kill-prefill"));
    }

    @Test
    void onlyTheKilledDecodeIsJudgedByItsPrefill() {
        for (ChaosScenario s : ChaosScenarios.ALL) assertEquals(!s.name().equals("kill-decode"), s.decodeSurvives(), s.name());
    }

    @Test
    void badFramesAreAllRefusedByTheCodec() {
        List<byte[]> attacks = ChaosScenarios.BadFrames.attacks(defaults());
        assertEquals(6, attacks.size());
        int refusedOrOther = 0;
        for (byte[] a : attacks) {
            try {
                FrameCodec.decodeFrame(ByteBuffer.wrap(a));
            } catch (ProtocolException e) {
                refusedOrOther++;
            }
        }
        // The wrong-token HELLO is a well-formed frame: the handshake, not the codec, refuses it.
        assertEquals(5, refusedOrOther);
    }

    @Test
    void corruptUsesTheProxyOnTcpAndTheHookOnOneSidedLinks() {
        ChaosScenario c = ChaosScenarios.byName("corrupt");
        assertEquals(0, c.faults(defaults()).corruptProbability(), "tcp: the proxy damages WRITEs, the library hook is off");
        assertEquals(ChaosScenarios.Corrupt.ROOM_PROBABILITY, c.faults(config("shm", ChecksumMode.FULL)).corruptProbability());
        assertEquals(0.2, c.faults(config("shm", ChecksumMode.FULL).withFaults(new BenchConfig.Faults(0, 0, 0, 0.2)))
                .corruptProbability());
        assertTrue(ChaosScenarios.Corrupt.viaProxy(config("auto", ChecksumMode.FULL)));
        assertTrue(ChaosScenarios.Corrupt.viaHook(config("auto", ChecksumMode.FULL)));
        assertNull(c.netnsUnsupported());
        assertTrue(ChaosScenarios.byName("hostile-peer").netnsUnsupported() != null);
        assertTrue(ChaosScenarios.byName("bad-frames").netnsUnsupported() != null);
    }

    /** What each checksum mode promises, judged from the reports: it must be able to fail. */
    @Test
    void corruptJudgesEachChecksumModesPromise() throws Exception {
        // full: every damaged room failed as integrity, none succeeded with wrong bytes
        assertTrue(judgeCorrupt(ChecksumMode.FULL, 3, 3, 0).holds());
        assertFalse(judgeCorrupt(ChecksumMode.FULL, 3, 2, 1).holds(), "a damaged room succeeded");
        assertFalse(judgeCorrupt(ChecksumMode.FULL, 3, 2, 0).holds(), "a damaged room was not caught");
        assertFalse(judgeCorrupt(ChecksumMode.FULL, 0, 0, 0).holds(), "nothing damaged: nothing shown");
        // off: the damage shows
        assertTrue(judgeCorrupt(ChecksumMode.OFF, 3, 0, 3).holds());
        assertFalse(judgeCorrupt(ChecksumMode.OFF, 3, 0, 0).holds());
        assertFalse(judgeCorrupt(ChecksumMode.OFF, 3, 0, 1).holds(), "two of the three damaged rooms passed the byte check");
        // sampled: each damaged room caught or shown
        assertTrue(judgeCorrupt(ChecksumMode.SAMPLED, 3, 1, 2).holds());
        assertFalse(judgeCorrupt(ChecksumMode.SAMPLED, 3, 1, 1).holds());
        assertEquals("caught", judgeCorrupt(ChecksumMode.FULL, 1, 1, 0).expect());
        // the harness's verdict follows the promise, not corrupted == 0
        ChaosRunner.Result off = new ChaosRunner.Result("corrupt", 10, 7, 3, 0, 3, 0, Map.of(), Map.of(), null, null, 1, List.of(),
                "off", 0, judgeCorrupt(ChecksumMode.OFF, 3, 0, 3), null, null);
        assertTrue(off.passed());
        ChaosRunner.Result plain = new ChaosRunner.Result("kill-decode", 10, 7, 3, 0, 3, 0, Map.of(), Map.of(), null, null, 1, List.of());
        assertFalse(plain.passed(), "outside corrupt, a corrupted request fails the run");
    }

    /** The corrupt verdict for a tcp run where the proxy damaged {@code injected} rooms. */
    private static ChaosRunner.Corruption judgeCorrupt(ChecksumMode mode, int injected, int integrity, int corrupted) throws Exception {
        BenchConfig c = config("tcp", mode);
        ChaosScenario.Setup setup = new ChaosScenario.Setup(c, new ArrayList<>(), ChaosNetwork.loopback());
        setup.corruption = new WriteCorruption(1, 1);
        for (int i = 0; i < injected; i++) assertTrue(setup.corruption.claim(i));
        Map<String, Integer> kinds = integrity == 0 ? Map.of() : Map.of(FailureKind.INTEGRITY.label(), integrity);
        RoleReport decode = new RoleReport("decode", 0, 10 - integrity - corrupted, integrity, corrupted, List.of(), 0, 1,
                null, List.of(), 0, 0, 0, List.of(), null, Map.of(), 0, 0, 0, 0, 0, 0, null, kinds);
        ChaosScenario.Judgement j = new ChaosScenario.Judgement(List.of(), List.of(decode), List.of(decode),
                new ChaosScenario.Timeline(), new HashMap<>(), setup);
        ChaosScenarios.byName("corrupt").judge(j);
        return j.corruption;
    }

    private static BenchConfig config(String transport, ChecksumMode mode) {
        return new BenchConfig(ModelShape.preset("tiny"), new Workload(16, 256, 16, 64, 4, 0, 1L), transport, 1, "t").withChecksum(mode);
    }

    @Test
    void partitionJudgesDetectionInsideTheBlackholeWindow() {
        ChaosScenario p = ChaosScenarios.byName("partition");
        ChaosScenario.Timeline t = new ChaosScenario.Timeline();
        t.faultAt = 1000;
        t.restoreAt = 1000 + ChaosRunner.BLACKHOLE_MS;
        t.recovered = true;
        Map<String, Long> detect = new HashMap<>(Map.of("prefill", 1200L, "decode", 1300L));
        ChaosScenario.Judgement j = new ChaosScenario.Judgement(List.<RoleReport>of(), List.<RoleReport>of(), List.<RoleReport>of(), t, detect);
        p.judge(j);
        assertTrue(j.detected);
        assertTrue(j.recovered);
        detect.put("decode", ChaosRunner.BLACKHOLE_MS + 10);
        j = new ChaosScenario.Judgement(List.of(), List.of(), List.of(), t, detect);
        p.judge(j);
        assertFalse(j.detected, "found only after the restore: heartbeats did not work");
        assertThrows(IllegalArgumentException.class, () -> new ChaosRunner(defaults(), null, 0).run("meteor"));
    }

    private static BenchConfig defaults() {
        return new BenchConfig(ModelShape.preset("tiny"),
                new Workload(128, 1300, 16, 256, 4, 8, 1L), "tcp", 1, "t");
    }
}
