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

/** A prefill scheduler that clears a sender before its room concluded: the decode hears it now, not at its waiting timeout. */
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
}
