package io.kvferry.transfer;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.api.KVTransferException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** An embedding engine calling a sender out of order gets an error naming the room, and no byte moves for it. */
@Timeout(60)
class SenderCallOrderTest extends TransferTestBase {

    /**
     * A last chunk sent twice (or any chunk after the last) once the decode has its room: the decode
     * may have given the room's aux row and state slot to another request. Before, the chunk was
     * queued and, on shm, its aux row and state were copied into them again.
     */
    @ParameterizedTest
    @ValueSource(strings = {"tcp", "inproc", "shm"})
    void aChunkAfterTheLastIsRefusedAndWritesNothing(String backend) {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, backend, 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, backend, cfg(1, 0).build(), 0, PAGE_SIZE);
        Transfer t = start(p, pm, d, 900, new int[]{1, 2}, new int[]{3, 4}, 0, 0, 0);
        await(t.receiver()::poll, KVPoll.Success);
        await(t.sender()::poll, KVPoll.Success);
        t.receiver().clear();
        // The decode hands row 0 and slot 0 (and pages 3, 4) to its next request, which has not written them yet.
        MemorySegment reusedRow = dm.aux[0].asSlice(0, dm.auxItem[0]);
        MemorySegment reusedSlot = dm.state[0].asSlice(0, dm.stateItem[0]);
        reusedRow.fill((byte) 0x77);
        reusedSlot.fill((byte) 0x77);

        KVSender s = t.sender();
        RuntimeException again = refusal(() -> s.send(new int[0], new int[][]{{0}}));

        // A room after it lands whole (its chunks ride the same links and workers, after any queued by the calls above).
        assertLanded(start(p, pm, d, 901, new int[]{5}, new int[]{6}, 1, 1, 0), dm);
        assertTrue(isAll(reusedRow, (byte) 0x77), "the reused aux row was written again");
        assertTrue(isAll(reusedSlot, (byte) 0x77), "the reused state slot was written again");
        assertTrue(dm.canariesIntact());
        assertInstanceOf(IllegalStateException.class, again, "a second last chunk is refused");
        assertTrue(again.getMessage().contains("room 900 after its last chunk"), again.getMessage());
        assertThrows(IllegalStateException.class, () -> s.send(new int[]{5}), "a chunk after the last is refused");
        assertEquals(KVPoll.Success, s.poll(), "the refused calls leave the room as it was");
    }

    /** The same before the first last chunk concluded: the second one would follow it on the room's strand. */
    @ParameterizedTest
    @ValueSource(strings = {"tcp", "shm"})
    void aSecondLastChunkWhileTheFirstIsUnderWayIsRefused(String backend) {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, backend, 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, backend, cfg(1, 0).build(), 0, PAGE_SIZE);
        KVReceiver r = d.createReceiver(addr, 910);
        bootstrap(r, 0);
        r.sendMetadata(new int[]{7}, 2, new int[][]{{2}}, 0);
        KVSender s = p.createSender(addr, 910);
        await(s::poll, KVPoll.WaitingForInput);
        s.init(1, 2);
        s.send(new int[]{4}, new int[][]{{2}});
        assertThrows(IllegalStateException.class, () -> s.send(new int[0], new int[][]{{2}}));
        await(r::poll, KVPoll.Success);
        await(s::poll, KVPoll.Success);
    }

    /**
     * failure_exception() on a sender whose room has not failed (an engine producing the error text of a
     * request it gives up on its own): SGLang's clears the room, so the room is given up as by clear() and
     * its decode told. Before, the prefill dropped the room silently and raised "an unknown reason"; the
     * decode held the room's pages until its waiting timeout (300 s here).
     */
    @Test
    void failureExceptionOnARoomInFlightGivesItUpOnBothSides() {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        KVReceiver r = d.createReceiver(addr, 920);
        bootstrap(r, 0);
        r.sendMetadata(new int[]{1, 2}, 0, new int[][]{{0}}, 0);
        KVSender s = p.createSender(addr, 920);
        await(s::poll, KVPoll.WaitingForInput);

        KVTransferException onPrefill = failed(s::failureException);
        assertEquals(FailureKind.ABORTED, onPrefill.kind(), onPrefill.getMessage());
        assertTrue(onPrefill.getMessage().contains("failure_exception() was called for room 920 before its transfer concluded"),
                onPrefill.getMessage());
        assertEquals(KVPoll.Failed, s.poll());
        await(r::poll, KVPoll.Failed);
        KVTransferException onDecode = failed(r::failureException);
        assertEquals(FailureKind.ABORTED, onDecode.kind(), onDecode.getMessage());
        assertEquals(0, p.stats().trackedRooms());
        assertLanded(start(p, pm, d, 921, new int[]{3}, new int[]{4}, 1, 1, 0), dm);

        // The same on the decode: the room is given up naming the call (it said "an unknown reason from another rank").
        KVReceiver r2 = d.createReceiver(addr, 922);
        bootstrap(r2, 0);
        r2.sendMetadata(new int[]{5}, 2, new int[][]{{2}}, 0);
        KVSender s2 = p.createSender(addr, 922);
        await(s2::poll, KVPoll.WaitingForInput);
        KVTransferException onDecode2 = failed(r2::failureException);
        assertEquals(FailureKind.ABORTED, onDecode2.kind(), onDecode2.getMessage());
        assertTrue(onDecode2.getMessage().contains("failure_exception() was called for room 922 before its transfer concluded"),
                onDecode2.getMessage());
        assertEquals(KVPoll.Failed, r2.poll());
        await(s2::poll, KVPoll.Failed); // the prefill was told
    }

    /**
     * pop_decode_prefix_len() asked before the decode's metadata came (still Bootstrapping): 0, and the prefix
     * the metadata brings can still be popped, as from SGLang's dict. Before, the early call consumed it: the
     * later one answered 0, the engine sent the pages the decode already held, and the room failed on a page
     * count mismatch.
     */
    @Test
    void anEarlyPopOfTheDecodePrefixDoesNotConsumeIt() {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        KVSender s = p.createSender(addr, 930);
        assertEquals(0, s.popDecodePrefixLen(), "nothing to pop before the decode's metadata");
        KVReceiver r = d.createReceiver(addr, 930);
        bootstrap(r, 0);
        r.sendMetadata(new int[]{6}, 0, new int[][]{{0}}, PAGE_SIZE); // the decode holds the first page already
        await(s::poll, KVPoll.WaitingForInput);
        assertEquals(PAGE_SIZE, s.popDecodePrefixLen());
        assertEquals(0, s.popDecodePrefixLen(), "popped once");
        pm.fillPage(2, 930, 1);
        s.init(1, 0);
        s.send(new int[]{2}, new int[][]{{0}});
        await(r::poll, KVPoll.Success);
        assertTrue(dm.pageMatches(6, 930, 1));
    }

    /**
     * A sender whose init named no aux row while its decode asked for one: the row would stay unwritten. The
     * room fails on both sides naming it, as a missing state index does. Before, the prefill reported Success
     * and only the decode failed, with a byte count short.
     */
    @Test
    void anInitWithoutTheAuxRowTheDecodeAskedForFailsBothSides() {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        KVReceiver r = d.createReceiver(addr, 940);
        bootstrap(r, 0);
        r.sendMetadata(new int[]{1}, 3, new int[][]{{0}}, 0);
        KVSender s = p.createSender(addr, 940);
        await(s::poll, KVPoll.WaitingForInput);
        s.init(1);
        s.send(new int[]{2}, new int[][]{{0}});
        await(s::poll, KVPoll.Failed);
        await(r::poll, KVPoll.Failed);
        KVTransferException onPrefill = failed(s::failureException);
        assertEquals(FailureKind.BAD_REQUEST, onPrefill.kind(), onPrefill.getMessage());
        assertTrue(onPrefill.getMessage().contains("the decode asked for aux row 3 but this prefill rank's init named no aux row"),
                onPrefill.getMessage());
        assertTrue(failure(r::failureException).contains("aux row 3"));
    }

    /** A chunk of null page ids fails the room naming them, as the decode's send_metadata does (it was a NullPointerException). */
    @Test
    void aNullChunkFailsTheRoomNamingIt() {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        KVReceiver r = d.createReceiver(addr, 950);
        bootstrap(r, 0);
        r.sendMetadata(new int[]{1}, 0, new int[][]{{0}}, 0);
        KVSender s = p.createSender(addr, 950);
        await(s::poll, KVPoll.WaitingForInput);
        s.init(1, 0);
        s.send(null, new int[][]{{0}});
        assertEquals(KVPoll.Failed, s.poll());
        KVTransferException e = failed(s::failureException);
        assertEquals(FailureKind.BAD_REQUEST, e.kind());
        assertTrue(e.getMessage().contains("send: kv indices are null"), e.getMessage());
        await(r::poll, KVPoll.Failed);
    }

    /** What {@code call} threw, or null. */
    private static RuntimeException refusal(Runnable call) {
        try {
            call.run();
            return null;
        } catch (RuntimeException e) {
            return e;
        }
    }

    private static boolean isAll(MemorySegment s, byte value) {
        for (long o = 0; o < s.byteSize(); o++) if (s.get(ValueLayout.JAVA_BYTE, o) != value) return false;
        return true;
    }
}
