package io.kvferry.transfer;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.api.KVTransferException;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Room endings around clear(): a prefill scheduler that clears a sender before its room concluded (the
 * decode hears it now, not at its waiting timeout), and a room id used again after both sides cleared it.
 */
class ClearBeforeConclusionTest extends TransferTestBase {
    @Test
    void aPrefillRoomClearedMidTransferFailsItsDecodeAtOnce() {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE); // waiting timeout 300 s
        KVReceiver r = d.createReceiver(addr, 8100);
        bootstrap(r, 0);
        KVSender s = p.createSender(addr, 8100);
        r.sendMetadata(new int[]{1, 2}, 0, null, 0);
        await(s::poll, KVPoll.WaitingForInput);
        s.init(2, 0);
        s.send(new int[]{3}, null); // the first of two chunks
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (r.getTransferMetric().transferTotalBytes() < BUFFERS * PAGE_BYTES) { // it landed: no write of the room is under way
            assertTrue(System.nanoTime() < deadline, "the first chunk did not land");
            Thread.onSpinWait();
        }
        s.clear(); // the request is dropped before its last chunk
        await(r::poll, KVPoll.Failed);
        KVTransferException e = failed(r::failureException);
        assertEquals(FailureKind.ABORTED, e.kind(), e.getMessage());
        assertTrue(e.getMessage().contains("cleared"), e.getMessage());
        assertEquals(0, p.stats().trackedRooms());
    }

    /**
     * A room id used again after its transfer concluded and both sides cleared it: the prefill refuses the
     * decode's new info from the room's tombstone (it cannot tell it from a late one), and a sender its
     * scheduler creates for the id afterwards fails at once with that reason instead of bootstrapping for
     * the bootstrap timeout (300 s) towards a decode that was already told the room failed.
     */
    @Test
    void aRoomIdUsedAgainAfterClearEndsAtOnceOnBothSides() {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        assertLanded(start(p, pm, d, 8200, new int[]{1}, new int[]{2}, 0, 0, 0), dm); // clears both
        KVReceiver again = d.createReceiver(addr, 8200);
        bootstrap(again, 0);
        again.sendMetadata(new int[]{3}, 0, null, 0);
        await(again::poll, KVPoll.Failed);
        String refused = failure(again::failureException);
        assertTrue(refused.contains("already concluded"), refused);
        KVSender late = p.createSender(addr, 8200);
        assertEquals(KVPoll.Failed, late.poll(), "a sender for the id is left bootstrapping towards a decode told it failed");
        String why = failure(late::failureException);
        assertTrue(why.contains("already concluded"), why);
    }
}
