package io.kvferry.session;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVPoll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.function.BooleanSupplier;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import static io.kvferry.api.KVPoll.Bootstrapping;
import static io.kvferry.api.KVPoll.Failed;
import static io.kvferry.api.KVPoll.Success;
import static io.kvferry.api.KVPoll.Transferring;
import static io.kvferry.api.KVPoll.WaitingForInput;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** SGLang's status rules (reference §1.3, §7.1 TestUpdateStatus / TestConcludeTransfer). */
class RoomStatusTableTest {
    private final RoomStatusTable table = new RoomStatusTable();

    /**
     * A room's owner makes a new slot for its id while the slot of a cleared request of that id may still
     * be in the table (its removal under way): the new slot takes the id, the old one reads Failed at once,
     * and the old one's removal leaves the new one in place (removing by id took the new request's status).
     */
    @Test
    void aNewSlotTakesItsIdAndTheOldOnesRemovalLeavesItInPlace() {
        List<String> events = new ArrayList<>();
        RoomStatusTable t = new RoomStatusTable((slot, from, to) -> events.add(slot.room() + ":" + from + "->" + to.status()));
        RoomStatusTable.Slot old = t.create(5);
        old.advance(Transferring);
        RoomStatusTable.Slot retry = t.create(5);
        assertEquals(Failed, old.status(), "the stale slot's writers stop");
        assertEquals(Bootstrapping, retry.status());
        t.remove(old);
        assertEquals(retry, t.slot(5));
        assertEquals(Bootstrapping, t.status(5));
        assertFalse(old.fail(FailureKind.TRANSFER_ERROR, "late"), "a removed slot never changes");
        assertEquals(Bootstrapping, t.status(5));
        assertEquals(List.of("5:null->Bootstrapping", "5:Bootstrapping->Transferring", "5:null->Bootstrapping"), events);
        t.remove(retry);
        assertNull(t.slot(5));
        assertEquals(Failed, retry.status());
        assertEquals(Transferring, old.current().status(), "what it was when removed");
    }

    /** The status page's census names a room's peers from its slot (its owner), not by id. */
    @Test
    void theCensusHandsEachRoomsSlotToItsPeersLookUp() {
        RoomStatusTable.Slot a = table.create(1);
        a.own("peers of a");
        RoomStatusTable.Slot b = table.create(2);
        b.advance(Success);
        RoomStatusTable.Census c = table.census(10, slot -> String.valueOf(slot.owner()));
        assertEquals(Map.of("Bootstrapping", 1, "Success", 1), c.byState());
        assertEquals(1, c.oldest().size());
        assertEquals("peers of a", c.oldest().get(0).peers());
    }

    @Test
    void statusMovesForwardThroughEveryState() {
        assertEquals(Bootstrapping, table.update(1, Bootstrapping));
        assertEquals(WaitingForInput, table.update(1, WaitingForInput));
        assertEquals(Transferring, table.update(1, Transferring));
        assertEquals(Success, table.update(1, Success));
        assertEquals(Success, table.status(1));
        assertNull(table.reason(1));
    }

    @Test
    void aFailureFoundAfterTheFactNeverTurnsASuccessIntoAFailure() {
        RoomStatusTable.Slot done = table.create(1), waiting = table.create(2);
        assertTrue(done.advance(Success));
        assertFalse(done.failIfUnfinished(FailureKind.ROUTING, "late"));
        assertEquals(Success, table.status(1));
        assertTrue(waiting.failIfUnfinished(FailureKind.ROUTING, "could not register"));
        assertEquals(Failed, table.status(2));
        assertEquals("could not register", table.reason(2));
        assertFalse(waiting.failIfUnfinished(FailureKind.PEER_LOST, "second"), "the first failure stays");
        assertTrue(table.create(3).fail(FailureKind.ROUTING, "plain fail"), "fail() as before");
        // By id too: a peer's abort or a lost link that races the room's last chunk.
        table.create(4).advance(Success);
        assertFalse(table.failIfUnfinished(4, FailureKind.ABORTED, "late abort"));
        assertEquals(Success, table.status(4));
        table.create(5);
        assertTrue(table.failIfUnfinished(5, FailureKind.ABORTED, "abort"));
        assertFalse(table.failIfUnfinished(5, FailureKind.PEER_LOST, "second"), "the first failure stays");
        assertEquals(FailureKind.ABORTED, table.kind(5));
        assertFalse(table.failIfUnfinished(6, FailureKind.ABORTED, "unknown room"), "nothing is created");
        assertFalse(table.contains(6));
    }

    /** A room that succeeded and failed locally afterwards (its sender's abort) still says it succeeded, removed or not. */
    @Test
    void aSlotRemembersItReachedSuccessThroughALaterFailureAndItsRemoval() {
        RoomStatusTable.Slot done = table.create(1), failed = table.create(2);
        assertFalse(done.reachedSuccess());
        done.advance(Success);
        assertTrue(done.reachedSuccess());
        assertTrue(done.fail(FailureKind.ABORTED, "aborted after Success"), "a local abort still fails it");
        assertEquals(Failed, done.status());
        assertTrue(done.reachedSuccess());
        table.remove(1);
        assertTrue(done.reachedSuccess());
        failed.advance(Transferring);
        failed.fail(FailureKind.TRANSFER_ERROR, "mid-transfer");
        table.remove(2);
        assertFalse(failed.reachedSuccess(), "failed under way");
    }

    @Test
    void statusNeverMovesBackward() {
        table.update(1, Bootstrapping);
        table.update(1, Transferring);
        assertEquals(Transferring, table.update(1, WaitingForInput));
        assertEquals(Transferring, table.update(1, Bootstrapping));
        assertEquals(Transferring, table.status(1));
        assertEquals(Success, table.update(1, Success));
        for (KVPoll p : List.of(Bootstrapping, WaitingForInput, Transferring)) {
            assertEquals(Success, table.update(1, p));
        }
        assertEquals(Success, table.status(1));
    }

    @Test
    void forwardJumpsSkipStates() {
        table.update(1, Bootstrapping);
        assertEquals(Success, table.update(1, Success));
        table.update(2, WaitingForInput);
        assertEquals(WaitingForInput, table.status(2));
    }

    @Test
    void repeatedUpdateIsIdempotent() {
        table.update(1, WaitingForInput);
        assertEquals(WaitingForInput, table.update(1, WaitingForInput));
        assertEquals(1, table.size());
    }

    @ParameterizedTest
    @EnumSource(value = KVPoll.class, names = {"Bootstrapping", "WaitingForInput", "Transferring", "Success"})
    void failedIsStickyAndNeverPromoted(KVPoll later) {
        table.update(7, Bootstrapping);
        assertTrue(table.fail(7, FailureKind.INTERNAL, "boom"));
        assertEquals(Failed, table.update(7, later));
        assertEquals(Failed, table.status(7));
        assertEquals("boom", table.reason(7));
        assertTrue(table.contains(7));
    }

    @ParameterizedTest
    @EnumSource(value = KVPoll.class, names = {"Bootstrapping", "WaitingForInput", "Transferring", "Success"})
    void failOverwritesAnyLiveState(KVPoll before) {
        table.update(3, Bootstrapping);
        table.update(3, before);
        assertTrue(table.fail(3, FailureKind.INTERNAL, "late failure"));
        assertEquals(Failed, table.status(3));
        assertEquals("late failure", table.reason(3));
    }

    @Test
    void firstFailureReasonIsKept() {
        table.update(1, Bootstrapping);
        assertTrue(table.fail(1, FailureKind.INTERNAL, "root cause"));
        assertFalse(table.fail(1, FailureKind.INTERNAL, "consequence"));
        assertFalse(table.fail(1, FailureKind.INTERNAL, null));
        assertEquals("root cause", table.reason(1));
        assertEquals(Failed, table.status(1));
    }

    @Test
    void onlyBootstrappingAndWaitingForInputCreateARoom() {
        assertEquals(Bootstrapping, table.update(1, Bootstrapping));
        assertTrue(table.contains(1));
        assertEquals(WaitingForInput, table.update(2, WaitingForInput));
        assertTrue(table.contains(2));
        assertEquals(Set.of(1L, 2L), table.rooms());
    }

    @ParameterizedTest
    @EnumSource(value = KVPoll.class, names = {"Transferring", "Success"})
    void laterStatesOnAnUnknownRoomAreNoOps(KVPoll status) {
        assertEquals(Failed, table.update(9, status), "an absent room reads as Failed");
        assertFalse(table.contains(9));
        assertEquals(0, table.size());
        assertTrue(table.rooms().isEmpty());
        assertNull(table.reason(9));
    }

    @Test
    void failOnAnAbsentRoomIsIgnored() {
        assertFalse(table.fail(5, FailureKind.INTERNAL, "never existed"));
        assertFalse(table.contains(5));
        assertEquals(0, table.size());
    }

    @Test
    void removedRoomIsNotResurrectedByLateUpdates() {
        table.update(5, Bootstrapping);
        table.update(5, Transferring);
        table.remove(5);
        assertFalse(table.fail(5, FailureKind.INTERNAL, "late failure"));
        assertFalse(table.contains(5));
        assertEquals(Failed, table.update(5, Success));
        assertEquals(Failed, table.update(5, Transferring));
        assertFalse(table.contains(5));
        assertEquals(Failed, table.status(5));
        assertNull(table.reason(5));
    }

    @Test
    void missingRoomReadsAsFailedWithANullReasonAndIsNotCreated() {
        assertEquals(Failed, table.status(42));
        assertNull(table.reason(42));
        assertFalse(table.contains(42));
        assertEquals(0, table.size());
    }

    @Test
    void updateWithFailedIsRejected() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> table.update(1, Failed));
        assertTrue(e.getMessage().contains("fail"), e.getMessage());
        assertFalse(table.contains(1));
        table.update(2, Bootstrapping);
        assertThrows(IllegalArgumentException.class, () -> table.update(2, Failed));
        assertEquals(Bootstrapping, table.status(2));
    }

    @Test
    void roomsAreIndependent() {
        table.update(1, Bootstrapping);
        table.update(2, Bootstrapping);
        table.fail(1, FailureKind.INTERNAL, "x");
        table.update(2, Success);
        assertEquals(Failed, table.status(1));
        assertEquals(Success, table.status(2));
        assertNull(table.reason(2));
        table.remove(1);
        assertEquals(Set.of(2L), table.rooms());
        assertEquals(1, table.size());
    }

    @Test
    void roomsIsASnapshot() {
        table.update(1, Bootstrapping);
        Set<Long> snap = table.rooms();
        table.update(2, Bootstrapping);
        assertEquals(Set.of(1L), snap);
        assertThrows(UnsupportedOperationException.class, () -> snap.add(3L));
    }

    @Test
    void extremeRoomIds() {
        table.update(Long.MIN_VALUE, Bootstrapping);
        table.update(-1, WaitingForInput);
        table.update(Long.MAX_VALUE, Bootstrapping);
        assertEquals(Bootstrapping, table.status(Long.MIN_VALUE));
        assertEquals(WaitingForInput, table.status(-1));
        assertEquals(3, table.size());
    }

    // ------------------------------------------------------------------ concurrency

    /** Order in which a reader may observe a live room: forward only; Failed may come at any point and is final. */
    private static int rank(KVPoll p) {
        return p == Failed ? 100 : p.value();
    }

    @Test
    @Timeout(20)
    void racingUpdatesAndFailuresEndInALegalState() throws Exception {
        final int rooms = 200, writers = 4, opsPerWriter = 10_000;
        for (long r = 0; r < rooms; r++) table.update(r, Bootstrapping);

        KVPoll[] forward = {Bootstrapping, WaitingForInput, Transferring, Success};
        ConcurrentHashMap<Long, String> winningReason = new ConcurrentHashMap<>();
        ConcurrentHashMap<Long, AtomicInteger> maxRequested = new ConcurrentHashMap<>();
        for (long r = 0; r < rooms; r++) maxRequested.put(r, new AtomicInteger(Bootstrapping.value()));
        AtomicInteger wins = new AtomicInteger();
        AtomicBoolean writing = new AtomicBoolean(true);
        CyclicBarrier start = new CyclicBarrier(writers + 1);
        List<String> readerErrors = Collections.synchronizedList(new ArrayList<>());

        ExecutorService pool = Executors.newFixedThreadPool(writers + 1);
        try {
            List<Future<?>> futures = new ArrayList<>();
            for (int w = 0; w < writers; w++) {
                final int id = w;
                futures.add(pool.submit(() -> {
                    Random rnd = new Random(1234 + id);
                    start.await();
                    for (int i = 0; i < opsPerWriter; i++) {
                        long room = rnd.nextInt(rooms);
                        if (rnd.nextInt(50) == 0) {
                            String reason = "writer " + id + " op " + i;
                            if (table.fail(room, FailureKind.INTERNAL, reason)) {
                                wins.incrementAndGet();
                                String prev = winningReason.putIfAbsent(room, reason);
                                if (prev != null) throw new AssertionError("room " + room + " failed twice: " + prev + ", " + reason);
                            }
                        } else {
                            KVPoll s = forward[rnd.nextInt(forward.length)];
                            maxRequested.get(room).accumulateAndGet(s.value(), Math::max);
                            KVPoll after = table.update(room, s);
                            if (after != Failed && after.value() < s.value()) {
                                throw new AssertionError("update(" + room + ", " + s + ") returned " + after);
                            }
                        }
                    }
                    return null;
                }));
            }
            // a reader checking that every room only moves forward and Failed is final
            futures.add(pool.submit(() -> {
                int[] last = new int[rooms];
                start.await();
                while (writing.get()) {
                    for (int r = 0; r < rooms; r++) {
                        int now = rank(table.status(r));
                        if (now < last[r]) readerErrors.add("room " + r + " went back from " + last[r] + " to " + now);
                        last[r] = now;
                    }
                }
                return null;
            }));
            for (int i = 0; i < writers; i++) futures.get(i).get(15, TimeUnit.SECONDS);
            writing.set(false);
            futures.get(writers).get(5, TimeUnit.SECONDS);
        } finally {
            pool.shutdownNow();
        }

        assertTrue(readerErrors.isEmpty(), readerErrors.toString());
        assertEquals(rooms, table.size(), "no room created or lost");
        assertEquals(winningReason.size(), wins.get());
        for (long r = 0; r < rooms; r++) {
            KVPoll s = table.status(r);
            if (winningReason.containsKey(r)) {
                assertEquals(Failed, s, "room " + r);
                assertEquals(winningReason.get(r), table.reason(r), "room " + r + " keeps the first (winning) reason");
            } else {
                assertTrue(s != Failed, "room " + r + " failed without a winning fail() call");
                assertEquals(maxRequested.get(r).get(), s.value(), "room " + r + " ends at the highest status requested");
                assertNull(table.reason(r));
            }
        }
    }

    @Test
    @Timeout(20)
    void racingFailAndRemoveNeverResurrects() throws Exception {
        final int rooms = 2000;
        for (long r = 0; r < rooms; r++) table.update(r, Bootstrapping);
        CountDownLatch go = new CountDownLatch(1);
        ExecutorService pool = Executors.newFixedThreadPool(4);
        try {
            List<Future<?>> futures = new ArrayList<>();
            futures.add(pool.submit(() -> {
                go.await();
                for (long r = 0; r < rooms; r++) table.remove(r);
                return null;
            }));
            for (int t = 0; t < 2; t++) {
                futures.add(pool.submit(() -> {
                    go.await();
                    for (long r = 0; r < rooms; r++) table.fail(r, FailureKind.INTERNAL, "late");
                    return null;
                }));
            }
            futures.add(pool.submit(() -> {
                go.await();
                for (long r = rooms - 1; r >= 0; r--) {
                    table.update(r, Transferring);
                    table.update(r, Success);
                }
                return null;
            }));
            go.countDown();
            for (Future<?> f : futures) f.get(15, TimeUnit.SECONDS);
        } finally {
            pool.shutdownNow();
        }
        assertEquals(0, table.size(), "fail/Transferring/Success after remove must not re-create a room: " + table.rooms());
    }

    @Test
    void theFailedFlagRisesWhenTheRoomFailsOrIsClearedWhicheverComesFirst() {
        RoomStatusTable t = new RoomStatusTable();
        t.update(1, KVPoll.Bootstrapping);
        BooleanSupplier early = t.failedFlag(1);
        assertFalse(early.getAsBoolean());
        t.update(1, KVPoll.Transferring);
        assertFalse(early.getAsBoolean());
        t.fail(1, FailureKind.ABORTED, "aborted");
        assertTrue(early.getAsBoolean(), "asked before the failure, raised by it");
        assertTrue(t.failedFlag(1).getAsBoolean(), "asked after the failure");
        t.update(2, KVPoll.WaitingForInput);
        BooleanSupplier cleared = t.failedFlag(2);
        t.remove(2);
        assertTrue(cleared.getAsBoolean(), "a cleared room's writers stop");
        assertTrue(t.failedFlag(3).getAsBoolean(), "an unknown room reads as failed");
    }
}
