package io.kvferry.transfer;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.api.KVTransferException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

/**
 * A decode that clears a room before it concluded (its scheduler dropped the request without abort())
 * tells the room's prefill rank over tcp too, which then fails the room at once instead of holding it
 * (and, once its request comes, sending bytes the decode drops) until its own timeouts. Before, only
 * one-sided links were told (they must be, before the pages are reused).
 */
@Timeout(60)
class ClearTellsThePrefillTest extends TransferTestBase {

    @Test
    void clearingAnUnfinishedRoomAbortsItOnThePrefill() {
        KVManager p = prefill(rank(), "tcp", 1, 0, PAGE_SIZE);
        KVManager d = decode(rank(), "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        KVReceiver recv = d.createReceiver(addr, 61);
        bootstrap(recv, 0);
        KVSender s = p.createSender(addr, 61);
        recv.sendMetadata(new int[]{1, 2}, 0);
        await(s::poll, KVPoll.WaitingForInput); // the prefill holds the room for its decode; no request runs it yet
        recv.clear();
        await(s::poll, KVPoll.Failed); // before: WaitingForInput until the prefill's own timeouts
        assertEquals(FailureKind.ABORTED, assertThrows(KVTransferException.class, s::failureException).kind());
    }
}
