package io.kvferry.prefill;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVPoll;
import io.kvferry.api.Ticker;
import io.kvferry.protocol.Status;
import io.kvferry.protocol.TransferInfo;
import io.kvferry.transport.ControlConnection;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;

/** The prefill's room records: a record that was cleared never changes the request that uses its id next. */
class PrefillRoomsTest {
    private final TransferWorkers workers = new TransferWorkers(1, "rooms-test-");
    private final PrefillRooms rooms = new PrefillRooms(workers, 0, Ticker.SYSTEM, null, r -> { });

    @AfterEach
    void close() throws InterruptedException {
        workers.close(1000);
    }

    @Test
    void aRecordIsMadeWithItsOwnSlot() {
        PrefillRoom r = rooms.room(4);
        assertSame(r, rooms.room(4));
        assertSame(r.slot, rooms.statuses.slot(4));
        assertSame(r, r.slot.owner());
        assertEquals(KVPoll.Bootstrapping, r.status());
    }

    /**
     * Teardown's sweep fails the rooms listed then; a room a createSender (or a late transfer info)
     * lists after it fails too, instead of staying Bootstrapping with no thread left to move it.
     */
    @Test
    void aRoomListedAfterShutDownFailsAsShutdownAndOneThatSucceededStaysSo() {
        PrefillRoom before = rooms.room(1);
        PrefillRoom done = rooms.room(2);
        done.slot.advance(KVPoll.Success);
        rooms.shutDown("torn down (test)");
        assertEquals(KVPoll.Failed, before.slot.status());
        assertEquals(FailureKind.SHUTDOWN, before.slot.current().kind());
        assertEquals(KVPoll.Success, done.slot.status());
        PrefillRoom after = rooms.room(3);
        assertEquals(KVPoll.Failed, after.slot.status());
        assertEquals(FailureKind.SHUTDOWN, after.slot.current().kind());
        assertEquals("torn down (test)", after.slot.current().reason());
    }

    @Test
    void aClearedRecordFailingLateLeavesTheNewRequestOfItsIdAlone() {
        PrefillRoom old = rooms.room(5);
        rooms.forget(old); // cleared while, say, its last chunk was still in a write
        PrefillRoom retried = rooms.room(5);
        retried.slot.advance(KVPoll.WaitingForInput);
        rooms.fail(old, FailureKind.TRANSFER_ERROR, "the old chunk's write failed");
        assertEquals(KVPoll.WaitingForInput, retried.slot.status());
        assertEquals(KVPoll.WaitingForInput, rooms.statuses.status(5));
        assertSame(retried, rooms.get(5));
        assertEquals(KVPoll.Failed, old.slot.status(), "a cleared record's slot reads Failed: its writers stop");
    }

    /**
     * A record forgotten twice (its sender's clear after the unclaimed-room sweep dropped it, or two
     * threads that each saw it fail) once a retry took its id: the second forget leaves the retry's
     * record, its status and its link entries in place (by id, it removed them all).
     */
    @Test
    void forgettingARecordAgainAfterARetryTookItsIdLeavesTheRetryInPlace() throws Exception {
        try (ServerSocketChannel server = ServerSocketChannel.open().bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
             SocketChannel client = SocketChannel.open(server.getLocalAddress());
             SocketChannel accepted = server.accept()) {
            DecodeLink link = new DecodeLink(new ControlConnection(accepted));
            PrefillRoom old = rooms.room(6);
            rooms.forget(old);
            PrefillRoom retried = rooms.room(6);
            retried.addDestination(new PrefillRoom.Destination(link, new TransferInfo(6, new int[]{0}, -1, new int[0][], 1, 0, false)));
            link.rooms.put(6L, retried);
            rooms.forget(old);
            assertSame(retried, rooms.get(6));
            assertSame(retried.slot, rooms.statuses.slot(6));
            assertEquals(KVPoll.Bootstrapping, retried.status());
            assertSame(retried, link.rooms.get(6L), "the retry's link entry stays");
            rooms.fail(old, FailureKind.TRANSFER_ERROR, "late");
            assertEquals(KVPoll.Bootstrapping, retried.status());
        }
    }

    /**
     * A room failed on one thread (an ABORT on a link's reader) is cleared by the scheduler the moment
     * it sees Failed, which may come before the failure notice reads the failure: the notice still
     * tells the room's destinations what failed it (it read "UNKNOWN" from the cleared table before).
     */
    @Test
    @Timeout(30)
    void aFailureNoticeCarriesTheFailureAfterTheSchedulerClearedTheRoom() throws Exception {
        try (ServerSocketChannel server = ServerSocketChannel.open().bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
             SocketChannel client = SocketChannel.open(server.getLocalAddress());
             SocketChannel accepted = server.accept()) {
            DecodeLink link = new DecodeLink(new ControlConnection(client));
            PrefillRoom r = rooms.room(8);
            r.addDestination(new PrefillRoom.Destination(link, new TransferInfo(8, new int[]{0}, -1, new int[0][], 1, 0, false)));
            r.slot.fail(FailureKind.ABORTED, "Aborted by AbortReq.");
            rooms.forget(r); // the scheduler saw Failed and cleared the room
            rooms.notifyOnce(r);
            Status s = assertInstanceOf(Status.class, new ControlConnection(accepted).read());
            assertEquals(KVPoll.Failed, s.status());
            assertEquals(FailureKind.ABORTED, s.kind());
            assertEquals("Aborted by AbortReq.", s.reason());
        }
    }

    /**
     * The same race for a room no sender claimed yet (held for two decode ranks): one rank's ABORT fails it on its link's reader and takes the notice for the other rank;
     * the unclaimed-room sweep, finding it past the waiting timeout, drops it on its strand before the
     * reader builds that notice. The other rank is still told ABORTED (it was told UNKNOWN, read from
     * the table the drop had emptied).
     */
    @Test
    @Timeout(30)
    void aNoticeForAnUnclaimedRoomCarriesTheFailureAfterTheSweepDroppedIt() throws Exception {
        try (ServerSocketChannel server = ServerSocketChannel.open().bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
             SocketChannel aborting = SocketChannel.open(server.getLocalAddress());
             SocketChannel abortingAccepted = server.accept();
             SocketChannel other = SocketChannel.open(server.getLocalAddress());
             SocketChannel otherAccepted = server.accept()) {
            // The prefill's ends (an unregistered link's session id names its peer, which differs for these two).
            DecodeLink abortingLink = new DecodeLink(new ControlConnection(abortingAccepted));
            DecodeLink otherLink = new DecodeLink(new ControlConnection(otherAccepted));
            PrefillRoom r = rooms.room(9); // transfer infos' record, no sender yet
            r.addDestination(new PrefillRoom.Destination(abortingLink, new TransferInfo(9, new int[]{0}, -1, new int[0][], 2, 0, false)));
            r.addDestination(new PrefillRoom.Destination(otherLink, new TransferInfo(9, new int[]{1}, -1, new int[0][], 2, 0, false)));
            // The aborting rank's reader (DecodeSessions.onAbort): fails the room, takes the notice for the others.
            r.slot.failIfUnfinished(FailureKind.ABORTED, "Aborted by AbortReq.");
            r.failureNotified.set(true);
            // The sweep: the room is past the waiting timeout; it is dropped on its strand.
            rooms.expireUnclaimed(0);
            long deadline = System.nanoTime() + 20_000_000_000L;
            while (rooms.isTracked(9) && System.nanoTime() - deadline < 0) Thread.onSpinWait();
            assertEquals(false, rooms.isTracked(9));
            // The reader goes on: the notice to the room's other rank.
            rooms.noticeToOthers(r, abortingLink).run(r.destinations());
            Status s = assertInstanceOf(Status.class, new ControlConnection(other).read());
            assertEquals(KVPoll.Failed, s.status());
            assertEquals(FailureKind.ABORTED, s.kind());
            assertEquals("Aborted by AbortReq.", s.reason());
        }
    }

    @Test
    void theCurrentRecordFailsThroughItsSlot() {
        PrefillRoom r = rooms.room(7);
        rooms.fail(r, FailureKind.ABORTED, "Aborted by AbortReq.");
        assertEquals(KVPoll.Failed, rooms.statuses.status(7));
        assertEquals(FailureKind.ABORTED, rooms.statuses.kind(7));
    }
}
