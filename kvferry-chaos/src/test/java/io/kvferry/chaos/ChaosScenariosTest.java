package io.kvferry.chaos;

import io.kvferry.protocol.FrameCodec;
import io.kvferry.protocol.ProtocolException;
import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.ModelShape;
import io.kvferry.testkit.RoleReport;
import io.kvferry.testkit.Workload;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
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
        assertEquals(9, ChaosScenarios.ALL.size());
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
