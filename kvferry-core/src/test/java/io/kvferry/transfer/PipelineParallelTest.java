package io.kvferry.transfer;

import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import org.junit.jupiter.api.Assertions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Pipeline-parallel prefill: each stage sends only its own layers, paired with the decode's buffers
 * by global layer id. Decode PP = 1 talks to every stage and counts one Success per stage; decode PP
 * equal to prefill PP pairs stage with stage.
 */
@Timeout(60)
class PipelineParallelTest extends TransferTestBase {
    static final int LAYERS = 4;
    static final int STAGES = 2;

    /** MHA buffer order [K_l..., V_l...] for layers [first, first+n). */
    static KVArgs stageArgs(TestRank mem, int first, int n, int ppRank) {
        KVArgs a = mem.args(0, PAGE_SIZE);
        for (int kv = 0; kv < 2; kv++) for (int l = 0; l < n; l++) a.kvLayerIds.add(first + l);
        a.ppRank = ppRank;
        a.prefillStartLayer = first;
        a.prefillEndLayer = first + n;
        return a;
    }

    /** Index of (layer, K or V) in a full-model decode buffer list. */
    static int fullIndex(int layer, int kv) {
        return kv * LAYERS + layer;
    }

    @ParameterizedTest(name = "prefill PP2 -> decode PP{0}")
    @ValueSource(ints = {1, 2})
    void eachStageWritesItsOwnLayers(int decodePp) {
        int perStage = LAYERS / STAGES;
        List<TestRank> stages = new ArrayList<>();
        List<KVManager> pre = new ArrayList<>();
        for (int s = 0; s < STAGES; s++) {
            TestRank mem = new TestRank(2 * perStage, PAGES, PAGE_BYTES, ROWS);
            closeables.add(mem);
            stages.add(mem);
            KVManager m = KVFerry.createManager("tcp", stageArgs(mem, s * perStage, perStage, s), DisaggregationMode.PREFILL,
                    cfg(1, 0).ppSize(STAGES).build());
            closeables.add(m);
            m.registerToBootstrap();
            pre.add(m);
        }
        List<TestRank> dms = new ArrayList<>();
        List<KVManager> dec = new ArrayList<>();
        if (decodePp == 1) {
            TestRank mem = new TestRank(2 * LAYERS, PAGES, PAGE_BYTES, ROWS);
            closeables.add(mem);
            dms.add(mem);
            KVArgs full = stageArgs(mem, 0, LAYERS, 0); // all layers: [K_0..K_3, V_0..V_3]
            KVManager m = KVFerry.createManager("tcp", full, DisaggregationMode.DECODE, cfg(1, 0).build());
            closeables.add(m);
            dec.add(m);
        } else {
            for (int s = 0; s < STAGES; s++) {
                TestRank mem = new TestRank(2 * perStage, PAGES, PAGE_BYTES, ROWS);
                closeables.add(mem);
                dms.add(mem);
                KVManager m = KVFerry.createManager("tcp", stageArgs(mem, s * perStage, perStage, s), DisaggregationMode.DECODE,
                        cfg(1, 0).ppSize(STAGES).build());
                closeables.add(m);
                dec.add(m);
            }
        }
        long room = 31337;
        int[] dst = {8, 9, 30};
        int[] src = {1, 2, 3};
        List<KVReceiver> receivers = new ArrayList<>();
        for (KVManager d : dec) {
            KVReceiver r = d.createReceiver(addr, room);
            bootstrap(r, 0);
            await(r::poll, KVPoll.WaitingForInput);
            r.sendMetadata(dst, 0, null, 0);
            receivers.add(r);
        }
        for (int s = 0; s < STAGES; s++) {
            TestRank mem = stages.get(s);
            // Local buffer i of stage s holds (layer, kv); fill it with what the full model's buffer would hold.
            for (int i = 0; i < mem.kv.length; i++) {
                int kv = i / perStage, layer = s * perStage + i % perStage;
                fill(mem.kv[i], src, room, fullIndex(layer, kv));
            }
            KVSender snd = pre.get(s).createSender(addr, room);
            await(snd::poll, KVPoll.WaitingForInput);
            snd.init(src.length, 0);
            snd.send(src);
            await(snd::poll, KVPoll.Success);
        }
        for (KVReceiver r : receivers) await(r::poll, KVPoll.Success);
        for (int d = 0; d < dms.size(); d++) {
            TestRank mem = dms.get(d);
            for (int i = 0; i < mem.kv.length; i++) {
                int full = decodePp == 1 ? i : fullIndex(d * perStage + i % perStage, i / perStage);
                for (int j = 0; j < dst.length; j++) {
                    MemorySegment page = mem.kv[i].asSlice(dst[j] * PAGE_BYTES, PAGE_BYTES);
                    for (long o = 0; o < PAGE_BYTES; o += 8) {
                        if (page.get(ValueLayout.JAVA_LONG_UNALIGNED, o) != TestRank.value(room, full, j, o)) {
                            throw new AssertionError("decode " + d + " buffer " + i + " page " + dst[j] + " has the wrong layer's bytes");
                        }
                    }
                }
            }
            assertTrue(mem.canariesIntact());
        }
    }

    static void fill(MemorySegment buffer, int[] pages, long room, int fullBuffer) {
        for (int j = 0; j < pages.length; j++) {
            MemorySegment page = buffer.asSlice(pages[j] * PAGE_BYTES, PAGE_BYTES);
            for (long o = 0; o < PAGE_BYTES; o += 8) page.set(ValueLayout.JAVA_LONG_UNALIGNED, o, TestRank.value(room, fullBuffer, j, o));
        }
    }

    @Test
    void aPipelineStageWithoutLayerIdsIsRefusedRatherThanMisplaced() {
        TestRank mem = new TestRank(2, PAGES, PAGE_BYTES, ROWS);
        closeables.add(mem);
        KVArgs args = mem.args(0, PAGE_SIZE);
        args.ppRank = 1;
        IllegalArgumentException e = Assertions.assertThrows(IllegalArgumentException.class,
                () -> KVFerry.createManager("tcp", args, DisaggregationMode.PREFILL, cfg(1, 0).ppSize(2).build()));
        assertTrue(e.getMessage().contains("kvLayerIds"));
    }
}
