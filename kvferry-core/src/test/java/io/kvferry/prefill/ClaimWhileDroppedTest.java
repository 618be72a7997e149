package io.kvferry.prefill;

import io.kvferry.ThreadStates;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVSender;
import io.kvferry.api.KVTransferException;
import io.kvferry.api.SmallRankArgs;
import io.kvferry.session.RoomStatusTable;
import io.kvferry.transport.Backend;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import static io.kvferry.PlayedPrefill.awaitUntil;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A sender created for a room whose transfer info this rank held unclaimed, while that record is
 * being dropped (its info expired): the sender must end with the drop's failure, not lose its
 * record under it. The interleaving is forced: the test holds the room's status slot, so the
 * worker that drops the record stops inside the drop, and the sender is created right then.
 */
class ClaimWhileDroppedTest {
    private static final long ROOM = 4242;
    private final Arena arena = Arena.ofShared();
    private final PrefillKVManager manager;

    ClaimWhileDroppedTest() {
        KVArgs args = SmallRankArgs.of(arena, 16);
        manager = new PrefillKVManager(args, KVManagerConfig.builder().attnTp(1, 0).bootstrap("127.0.0.1", 1)
                .authToken("claim-test-token").build(), Backend.of("tcp"));
    }

    @AfterEach
    void close() {
        manager.teardown();
        arena.close();
    }

    @Test
    void aSenderCreatedWhileItsUnclaimedRecordIsDroppedFailsWithTheDropsReason() throws Exception {
        PrefillRooms rooms = manager.rooms;
        // What a decode's transfer info leaves for a request this rank's scheduler has not started.
        PrefillRoom record = rooms.room(ROOM);
        RoomStatusTable.Slot slot = record.slot; // made with the record, in Bootstrapping

        // Hold the room's worker, so the drop the expiry queues runs only when the test lets it.
        CountDownLatch letWorkerGo = new CountDownLatch(1);
        AtomicReference<Thread> worker = new AtomicReference<>();
        rooms.workers().enqueue(ROOM, () -> {
            worker.set(Thread.currentThread());
            awaitQuietly(letWorkerGo);
        });
        assertEquals(1, rooms.expireUnclaimed(0), "the held info expires");

        AtomicReference<KVSender> sender = new AtomicReference<>();
        Thread creator = Thread.ofPlatform().unstarted(() -> sender.set(manager.createSender("127.0.0.1:1", ROOM, List.of(0), 0, false)));
        synchronized (slot) {
            letWorkerGo.countDown();
            awaitUntil(() -> ThreadStates.blockedOn(worker.get(), slot), "the drop stops at the held slot");
            creator.start();
            awaitUntil(() -> ThreadStates.blockedOn(creator, record), "the sender's creation meets the drop");
        }
        creator.join(TimeUnit.SECONDS.toMillis(30));
        assertTrue(sender.get() != null, "createSender returned");
        CountDownLatch drained = new CountDownLatch(1);
        rooms.workers().enqueue(ROOM, drained::countDown);
        assertTrue(drained.await(30, TimeUnit.SECONDS));

        KVSender s = sender.get();
        assertEquals(KVPoll.Failed, s.poll(), "its decode was told the room failed: the sender must not wait for it");
        KVTransferException e = assertThrows(KVTransferException.class, s::failureException);
        assertEquals(FailureKind.WAITING_TIMEOUT, e.kind(), e.getMessage());
        assertTrue(e.getMessage().contains("no request for room " + ROOM), e.getMessage());
    }

    private static void awaitQuietly(CountDownLatch l) {
        try {
            l.await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
