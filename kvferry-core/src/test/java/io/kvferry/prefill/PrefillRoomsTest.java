package io.kvferry.prefill;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVPoll;
import io.kvferry.api.Ticker;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;

/** The prefill's room records: a record that was cleared never changes the request that uses its id next. */
class PrefillRoomsTest {
    private final TransferWorkers workers = new TransferWorkers(1, "rooms-test-");
    private final PrefillRooms rooms = new PrefillRooms(workers, 0, Ticker.SYSTEM, null, r -> { });

    @AfterEach
    void close() throws InterruptedException {
        workers.close(1000);
    }

    private PrefillRoom opened(long id) {
        PrefillRoom r = rooms.room(id);
        r.slot = rooms.statuses.open(id, KVPoll.Bootstrapping);
        return r;
    }

    @Test
    void aClearedRecordFailingLateLeavesTheNewRequestOfItsIdAlone() {
        PrefillRoom old = opened(5);
        rooms.forget(5); // cleared while, say, its last chunk was still in a write
        PrefillRoom retried = opened(5);
        rooms.statuses.update(5, KVPoll.WaitingForInput);
        rooms.fail(old, FailureKind.TRANSFER_ERROR, "the old chunk's write failed");
        assertEquals(KVPoll.WaitingForInput, retried.slot.status());
        assertEquals(KVPoll.WaitingForInput, rooms.statuses.status(5));
        assertSame(retried, rooms.get(5));
    }

    @Test
    void aRecordWithoutASlotFailingAfterItWasForgottenLeavesTheNewRecordAlone() {
        PrefillRoom old = rooms.room(6); // a transfer info's record, no sender yet
        rooms.statuses.update(6, KVPoll.Bootstrapping);
        rooms.forget(6);
        PrefillRoom retried = opened(6);
        rooms.fail(old, FailureKind.BAD_REQUEST, "late");
        assertEquals(KVPoll.Bootstrapping, retried.slot.status());
    }

    @Test
    void theCurrentRecordFailsThroughItsSlot() {
        PrefillRoom r = opened(7);
        rooms.fail(r, FailureKind.ABORTED, "Aborted by AbortReq.");
        assertEquals(KVPoll.Failed, rooms.statuses.status(7));
        assertEquals(FailureKind.ABORTED, rooms.statuses.kind(7));
    }
}
