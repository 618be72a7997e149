package io.kvferry.transfer;

import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * MLA with different prefill and decode TP: KV is replicated, so it is copied whole. With D > P
 * one prefill rank feeds D/P decode ranks; with D < P only the first prefill rank of each group
 * writes and the others take dummy transfer infos and still conclude.
 */
@Timeout(60)
class MlaHeteroTpTest extends TransferTestBase {

    @ParameterizedTest(name = "MLA P{0} -> D{1} over {2}")
    @CsvSource({"4,2,tcp", "2,4,tcp", "1,4,tcp", "4,1,tcp", "2,2,tcp", "4,2,shm", "1,4,shm"})
    void everyDecodeRankGetsTheWholeReplicatedKv(int prefillTp, int decodeTp, String backend) {
        List<TestRank> pm = new ArrayList<>(), dm = new ArrayList<>();
        List<KVManager> pre = new ArrayList<>(), dec = new ArrayList<>();
        for (int r = 0; r < prefillTp; r++) {
            TestRank mem = rank();
            pm.add(mem);
            KVManager m = KVFerry.createManager(backend, mem.args(r, PAGE_SIZE), DisaggregationMode.PREFILL,
                    cfg(prefillTp, r).mla(true).build());
            closeables.add(m);
            m.registerToBootstrap();
            pre.add(m);
        }
        for (int r = 0; r < decodeTp; r++) {
            TestRank mem = rank();
            dm.add(mem);
            dec.add(decode(mem, backend, cfg(decodeTp, r).mla(true).build(), r, PAGE_SIZE));
        }
        long room = 4711;
        int[] dst = {3, 4, 5, 9, 10};
        int[] src = {7, 8, 20, 21, 22};
        List<KVReceiver> receivers = new ArrayList<>();
        for (int r = 0; r < decodeTp; r++) {
            KVReceiver recv = dec.get(r).createReceiver(addr, room);
            bootstrap(recv, 0);
            recv.sendMetadata(dst, 1, new int[][]{{2}}, 0);
            receivers.add(recv);
        }
        List<KVSender> senders = new ArrayList<>();
        for (int r = 0; r < prefillTp; r++) {
            KVSender s = pre.get(r).createSender(addr, room);
            await(s::poll, KVPoll.WaitingForInput);
            TestRank mem = pm.get(r);
            for (int j = 0; j < src.length; j++) mem.fillPage(src[j], room, j); // identical on every rank: replicated
            mem.fillRow(mem.aux, mem.auxItem, 0, room);
            mem.fillRow(mem.state, mem.stateItem, 0, room);
            s.init(src.length, 0);
            s.send(new int[]{7, 8}, null);
            s.send(new int[]{20, 21, 22}, new int[][]{{0}});
            senders.add(s);
        }
        for (KVReceiver r : receivers) await(r::poll, KVPoll.Success);
        for (KVSender s : senders) await(s::poll, KVPoll.Success);
        for (int r = 0; r < decodeTp; r++) {
            TestRank mem = dm.get(r);
            for (int j = 0; j < dst.length; j++) assertTrue(mem.pageMatches(dst[j], room, j), "decode rank " + r + " page " + j);
            assertTrue(mem.rowMatches(mem.aux, mem.auxItem, 1, room, 0));
            assertTrue(mem.rowMatches(mem.state, mem.stateItem, 2, room, 0));
            assertTrue(mem.canariesIntact());
        }
        // With D < P only one prefill rank per decode rank moves bytes; the others are dummies.
        long writers = senders.stream().filter(s -> s.getTransferMetric().transferTotalBytes() > 0).count();
        assertTrue(writers == Math.min(prefillTp, decodeTp) || (decodeTp > prefillTp && writers == prefillTp),
                "ranks that moved bytes: " + writers);
    }
}
