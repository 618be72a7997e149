package io.kvferry.conn;

import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Attention-DP on prefill (DP rank from the room, the registry or a hint) and dummy CP ranks. */
@Timeout(60)
class DataAndContextParallelTest extends TransferTestBase {

    KVManager prefillRank(TestRank mem, KVManagerConfig config) {
        KVManager m = KVFerry.createManager("tcp", mem.args(0, PAGE_SIZE), DisaggregationMode.PREFILL, config);
        closeables.add(m);
        m.registerToBootstrap();
        return m;
    }

    @Test
    void followBootstrapRoomPicksTheDpGroupFromTheRoom() {
        TestRank p0 = rank(), p1 = rank(), dm = rank();
        KVManager dp0 = prefillRank(p0, cfg(1, 0).dp(2, 0).build());
        KVManager dp1 = prefillRank(p1, cfg(1, 0).dp(2, 1).build());
        DecodeKVManager d = (DecodeKVManager) decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        long room = 1001; // odd: DP group 1
        assertEquals(1, d.resolvePrefillDpRank(addr, room, null));
        assertEquals(0, d.resolvePrefillDpRank(addr, room, 0), "a router hint wins");
        KVReceiver recv = d.createReceiver(addr, room);
        recv.init(1);
        recv.sendMetadata(new int[]{4, 5}, 0, null, 0);
        KVSender s = dp1.createSender(addr, room);
        await(s::poll, KVPoll.WaitingForInput);
        p1.fillPage(9, room, 0);
        p1.fillPage(10, room, 1);
        s.init(2, 0);
        s.send(new int[]{9, 10});
        await(recv::poll, KVPoll.Success);
        assertTrue(dm.pageMatches(4, room, 0) && dm.pageMatches(5, room, 1));
        // The scheduler put the room on the wrong group: a clear routing error, not a hang.
        KVSender wrong = dp0.createSender(addr, 2003);
        assertEquals(KVPoll.Failed, wrong.poll());
        assertTrue(failure(wrong::failureException).contains("follow_bootstrap_room conflict: dispatched to dp_rank 0 but bootstrap_room 2003 implies dp_rank 1"));
    }

    @Test
    void otherBalancersPublishTheDpRankThroughTheRegistry() {
        TestRank p0 = rank(), p1 = rank(), dm = rank();
        prefillRank(p0, cfg(1, 0).dp(2, 0).loadBalanceMethod("round_robin").build());
        KVManager dp1 = prefillRank(p1, cfg(1, 0).dp(2, 1).loadBalanceMethod("round_robin").build());
        DecodeKVManager d = (DecodeKVManager) decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        long room = 4000; // even, but placed on group 1
        assertEquals(-1, d.resolvePrefillDpRank(addr, room, null), "not known before the prefill took the request");
        KVSender s = dp1.createSender(addr, room);
        assertEquals(1, d.resolvePrefillDpRank(addr, room, null));
        KVReceiver recv = d.createReceiver(addr, room);
        recv.init(1);
        recv.sendMetadata(new int[]{6}, 0, null, 0);
        await(s::poll, KVPoll.WaitingForInput);
        s.init(1, 0);
        s.send(new int[]{3});
        await(recv::poll, KVPoll.Success);
    }

    @Test
    void nonZeroContextParallelRanksAreDummiesThatStillConclude() {
        TestRank c0 = rank(), c1 = rank(), dm = rank();
        KVManager cp0 = prefillRank(c0, cfg(1, 0).attnCp(2, 0).build());
        KVManager cp1 = prefillRank(c1, cfg(1, 0).attnCp(2, 1).build());
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        long room = 77;
        KVSender dummy = cp1.createSender(addr, room);
        assertEquals(KVPoll.WaitingForInput, dummy.poll(), "a dummy CP rank waits for no decode");
        KVReceiver recv = d.createReceiver(addr, room);
        recv.init(0);
        recv.sendMetadata(new int[]{1, 2}, 0, null, 0);
        KVSender real = cp0.createSender(addr, room);
        await(real::poll, KVPoll.WaitingForInput);
        for (KVSender s : new KVSender[]{real, dummy}) {
            s.init(2, 0);
            s.send(new int[]{11});
            s.send(new int[]{12});
        }
        await(dummy::poll, KVPoll.Success);
        await(real::poll, KVPoll.Success);
        await(recv::poll, KVPoll.Success);
        assertEquals(0L, dummy.getTransferMetric().transferTotalBytes());
    }
}
