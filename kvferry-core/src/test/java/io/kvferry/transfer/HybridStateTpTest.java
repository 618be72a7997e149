package io.kvferry.transfer;

import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.api.StateType;
import org.junit.jupiter.api.Assertions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * Hybrid models with different attention TP: each decode rank's mamba slot must hold exactly its
 * entries of the TP-sharded dimension, in every row, whichever prefill ranks held them.
 */
@Timeout(60)
class HybridStateTpTest extends TransferTestBase {
    static final int HEADS = 4;
    static final long HEAD_BYTES = 32;
    static final int[] OUTER = {2, 1};
    static final int[] GLOBAL_DIM = {8, 16};
    static final int[] INNER = {4, 8};
    static final int SLOTS = 4;

    static final class Rank {
        final Arena arena = Arena.ofShared();
        final int tp;
        final MemorySegment kv;
        final MemorySegment[] state = new MemorySegment[2];

        Rank(int tp) {
            this.tp = tp;
            kv = arena.allocate(8 * PAGE_SIZE * (HEADS / tp) * HEAD_BYTES, 64);
            for (int t = 0; t < 2; t++) state[t] = arena.allocate(SLOTS * item(t), 64);
        }

        long item(int t) {
            return (long) OUTER[t] * (GLOBAL_DIM[t] / tp) * INNER[t];
        }

        KVArgs args(int rank) {
            KVArgs a = new KVArgs();
            a.engineRank = rank;
            a.pageSize = PAGE_SIZE;
            a.kvCacheDtypeStr = "bf16";
            a.kvHeadNum = HEADS / tp;
            a.totalKvHeadNum = HEADS;
            a.addKvBuffer(kv, PAGE_SIZE * (HEADS / tp) * HEAD_BYTES);
            a.addStateComponent(StateType.MAMBA, List.of(state[0], state[1]), List.of(item(0), item(1)));
            a.stateDimPerTensor.add(List.of(GLOBAL_DIM[0] / tp, GLOBAL_DIM[1] / tp));
            a.stateSliceOuterCounts.add(List.of(OUTER[0], OUTER[1]));
            return a;
        }
    }

    static byte value(long room, int tensor, int row, int globalEntry, int b) {
        return (byte) (room * 31 + tensor * 17 + row * 7 + globalEntry * 3 + b);
    }

    @ParameterizedTest(name = "mamba state P{0} -> D{1}")
    @CsvSource({"1,2", "2,1", "2,4", "4,2", "1,4", "4,1"})
    void eachDecodeRankGetsItsShareOfTheShardedDimension(int prefillTp, int decodeTp) {
        List<Rank> pr = new ArrayList<>(), dr = new ArrayList<>();
        List<KVManager> pm = new ArrayList<>(), dm = new ArrayList<>();
        for (int r = 0; r < prefillTp; r++) {
            Rank rank = new Rank(prefillTp);
            closeables.add(rank.arena);
            pr.add(rank);
            KVManager m = KVFerry.createManager("tcp", rank.args(r), DisaggregationMode.PREFILL, cfg(prefillTp, r).build());
            closeables.add(m);
            m.registerToBootstrap();
            pm.add(m);
        }
        for (int r = 0; r < decodeTp; r++) {
            Rank rank = new Rank(decodeTp);
            closeables.add(rank.arena);
            dr.add(rank);
            KVManager m = KVFerry.createManager("tcp", rank.args(r), DisaggregationMode.DECODE, cfg(decodeTp, r).build());
            closeables.add(m);
            dm.add(m);
        }
        long room = 55;
        int srcSlot = 1, dstSlot = 3;
        List<KVReceiver> receivers = new ArrayList<>();
        for (KVManager m : dm) {
            KVReceiver r = m.createReceiver(addr, room);
            bootstrap(r, 0);
            assertEquals(KVPoll.WaitingForInput, r.poll());
            r.sendMetadata(new int[]{2}, -1, new int[][]{{dstSlot}}, 0);
            receivers.add(r);
        }
        for (int p = 0; p < prefillTp; p++) {
            Rank rank = pr.get(p);
            for (int t = 0; t < 2; t++) {
                int dim = GLOBAL_DIM[t] / prefillTp;
                MemorySegment slot = rank.state[t].asSlice(srcSlot * rank.item(t), rank.item(t));
                for (int o = 0; o < OUTER[t]; o++) {
                    for (int e = 0; e < dim; e++) {
                        for (int b = 0; b < INNER[t]; b++) {
                            slot.set(ValueLayout.JAVA_BYTE, ((long) o * dim + e) * INNER[t] + b, value(room, t, o, p * dim + e, b));
                        }
                    }
                }
            }
            KVSender s = pm.get(p).createSender(addr, room);
            await(s::poll, KVPoll.WaitingForInput);
            s.init(1);
            s.send(new int[]{5}, new int[][]{{srcSlot}});
        }
        for (KVReceiver r : receivers) await(r::poll, KVPoll.Success);
        for (int d = 0; d < decodeTp; d++) {
            Rank rank = dr.get(d);
            for (int t = 0; t < 2; t++) {
                int dim = GLOBAL_DIM[t] / decodeTp;
                MemorySegment slot = rank.state[t].asSlice(dstSlot * rank.item(t), rank.item(t));
                for (int o = 0; o < OUTER[t]; o++) {
                    for (int e = 0; e < dim; e++) {
                        for (int b = 0; b < INNER[t]; b++) {
                            byte got = slot.get(ValueLayout.JAVA_BYTE, ((long) o * dim + e) * INNER[t] + b);
                            assertEquals(value(room, t, o, d * dim + e, b), got,
                                    "decode rank " + d + " tensor " + t + " row " + o + " entry " + (d * dim + e));
                        }
                    }
                }
                // Other slots untouched.
                for (int other = 0; other < SLOTS; other++) {
                    if (other == dstSlot) continue;
                    MemorySegment o = rank.state[t].asSlice(other * rank.item(t), rank.item(t));
                    for (long i = 0; i < o.byteSize(); i++) assertEquals(0, o.get(ValueLayout.JAVA_BYTE, i));
                }
            }
        }
    }

    @Test
    void aStateLayoutThatCannotBeReshardedIsRefusedAtRegistration() {
        Rank p = new Rank(2), d = new Rank(1);
        closeables.add(p.arena);
        closeables.add(d.arena);
        KVManager pm = KVFerry.createManager("tcp", p.args(0), DisaggregationMode.PREFILL, cfg(2, 0).build());
        closeables.add(pm);
        pm.registerToBootstrap();
        KVManager pm1 = KVFerry.createManager("tcp", new Rank(2).args(1), DisaggregationMode.PREFILL, cfg(2, 1).build());
        closeables.add(pm1);
        pm1.registerToBootstrap();
        KVArgs bad = d.args(0);
        bad.stateData.set(0, List.of(d.state[0])); // one tensor where prefill has two
        bad.stateItemLens.set(0, List.of(d.item(0)));
        bad.stateDimPerTensor.set(0, List.of(GLOBAL_DIM[0]));
        bad.stateSliceOuterCounts.set(0, List.of(OUTER[0]));
        KVManager dm = KVFerry.createManager("tcp", bad, DisaggregationMode.DECODE, cfg(1, 0).build());
        closeables.add(dm);
        KVReceiver r = dm.createReceiver(addr, 3);
        bootstrap(r, 0);
        assertEquals(KVPoll.Failed, r.poll());
        String why = failure(r::failureException);
        Assertions.assertTrue(why.contains("tensor count differs"), why);
    }
}
