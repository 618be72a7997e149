package io.kvferry.transfer;

import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.api.KVTransferException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

/**
 * A room one prefill rank sends to several decode ranks (MLA, prefill TP 1 → decode TP 2): when one
 * decode rank aborts it, the prefill fails the room and tells the other decode rank at once, rather
 * than leaving it waiting for bytes that will never come until its own timeout.
 */
@Timeout(60)
class AbortTellsOtherDecodeRanksTest extends TransferTestBase {

    private static final int[] PAGES = {3, 4};
    private static final int[][] STATE = {{2}};

    /** An MLA prefill rank (TP 1), registered. */
    private KVManager mlaPrefill() {
        KVManager p = KVFerry.createManager("tcp", rank().args(0, PAGE_SIZE), DisaggregationMode.PREFILL, cfg(1, 0).mla(true).build());
        closeables.add(p);
        p.registerToBootstrap();
        return p;
    }

    /** The room's receivers on two MLA decode ranks (TP 2), bootstrapped; no metadata sent yet. */
    private List<KVReceiver> twoDecodeRanks(long room) {
        List<KVReceiver> receivers = new ArrayList<>();
        for (int r = 0; r < 2; r++) {
            KVManager d = decode(rank(), "tcp", cfg(2, r).mla(true).build(), r, PAGE_SIZE);
            KVReceiver recv = d.createReceiver(addr, room);
            bootstrap(recv, 0);
            receivers.add(recv);
        }
        return receivers;
    }

    @Test
    void anAbortFromOneDecodeRankFailsTheRoomOnTheOthers() {
        KVManager p = mlaPrefill();
        List<KVReceiver> receivers = twoDecodeRanks(31);
        for (KVReceiver recv : receivers) recv.sendMetadata(PAGES, 1, STATE, 0);
        KVSender s = p.createSender(addr, 31);
        await(s::poll, KVPoll.WaitingForInput); // both decode ranks' infos arrived

        receivers.get(0).abort();
        await(s::poll, KVPoll.Failed);
        assertEquals(FailureKind.ABORTED, assertThrows(KVTransferException.class, s::failureException).kind());
        await(receivers.get(1)::poll, KVPoll.Failed); // before the fix: WaitingForInput until its waiting timeout
        assertEquals(FailureKind.ABORTED, assertThrows(KVTransferException.class, receivers.get(1)::failureException).kind());
    }

    /**
     * The room fails on the prefill while it still waits for its second destination: the failure
     * notice goes to the one destination it has (the only link it holds a slot on), and the decode
     * rank whose transfer info comes after that is told when it comes, not left waiting for its timeout.
     */
    @Test
    void aDecodeRankWhoseInfoComesAfterTheRoomFailedIsToldWhenItComes() {
        KVManager p = mlaPrefill();
        List<KVReceiver> receivers = twoDecodeRanks(32);
        receivers.get(0).sendMetadata(PAGES, 1, STATE, 0);
        KVSender s = p.createSender(addr, 32);
        await(receivers.get(0)::poll, KVPoll.WaitingForInput);
        s.abort(); // one of its two destinations known
        await(s::poll, KVPoll.Failed);
        await(receivers.get(0)::poll, KVPoll.Failed);
        assertEquals(FailureKind.ABORTED, assertThrows(KVTransferException.class, receivers.get(0)::failureException).kind());

        receivers.get(1).sendMetadata(PAGES, 1, STATE, 0);
        await(receivers.get(1)::poll, KVPoll.Failed); // before the fix: WaitingForInput until its waiting timeout
        assertEquals(FailureKind.ABORTED, assertThrows(KVTransferException.class, receivers.get(1)::failureException).kind());
    }
}
