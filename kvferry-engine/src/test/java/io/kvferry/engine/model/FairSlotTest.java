package io.kvferry.engine.model;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The compile slot's turns: round-robin between clients, each client's in arrival order, a bounded wait that leaves the
 * queue. Threads queue in a known order (each started once the one before is seen waiting: the slot's own counts), each
 * records its name while it holds the slot, so the order of the records is the order of the turns. No timing.
 */
@Timeout(60)
class FairSlotTest {
    private final FairSlot slot = new FairSlot();
    private final List<String> turns = Collections.synchronizedList(new ArrayList<>());
    private final List<Thread> threads = new ArrayList<>();

    /** A waiter of {@code client} named {@code name}, started and seen queued (its client's waiters one more). */
    private void queue(String client, String name) {
        int before = slot.waiting(client);
        threads.add(Thread.ofPlatform().name(name).start(() -> {
            try {
                assertTrue(slot.acquire(client, Long.MAX_VALUE));
                turns.add(name);
                slot.release();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }));
        while (slot.waiting(client) == before) Thread.yield(); // its state, not a time
    }

    private void releaseAndJoin() throws InterruptedException {
        slot.release();
        for (Thread t : threads) t.join();
    }

    /**
     * A client with many specs queued delays another by one turn at most: B's one spec, queued after A's three, goes next
     * (a fair lock, as before, took them in arrival order: A2, A3, A4, then B1, three compilations late).
     */
    @Test
    void anotherClientIsServedBeforeAClientsQueuedSpecs() throws InterruptedException {
        assertTrue(slot.acquire("A", 0), "free: taken at once");
        assertEquals("A", slot.holder());
        queue("A", "A2");
        queue("A", "A3");
        queue("A", "A4");
        queue("B", "B1");
        assertEquals(Map.of("A", 3, "B", 1), slot.queued());
        releaseAndJoin();
        assertEquals(List.of("B1", "A2", "A3", "A4"), turns);
        assertNull(slot.holder(), "free again");
        assertEquals(0, slot.waiting());
    }

    /** Three clients with two each, behind a fourth: one of each in turn, in the order the clients came. */
    @Test
    void theClientsTakeTurns() throws InterruptedException {
        assertTrue(slot.acquire("H", 0));
        for (String n : new String[]{"A1", "A2", "B1", "B2", "C1", "C2"}) queue(n.substring(0, 1), n);
        releaseAndJoin();
        assertEquals(List.of("A1", "B1", "C1", "A2", "B2", "C2"), turns);
    }

    /** The holder's own next spec goes on when nobody else waits. */
    @Test
    void theHolderGoesOnWhereNobodyElseWaits() throws InterruptedException {
        assertTrue(slot.acquire("A", 0));
        queue("A", "A2");
        releaseAndJoin();
        assertEquals(List.of("A2"), turns);
    }

    /**
     * A null client (a caller of the public {@code Compiler.compile} that names none) is one client like any other: its
     * waiter queued, the slot handed on past it. Its key once made the hand-off throw (null.equals) and the slot stayed
     * held for good: every later compilation busy.
     */
    @Test
    void aNullClientIsAClientLikeAnyOther() throws InterruptedException {
        assertTrue(slot.acquire("H", 0));
        queue(null, "N1");
        queue("A", "A1");
        queue(null, "N2");
        releaseAndJoin();
        assertEquals(List.of("N1", "A1", "N2"), turns);
        assertNull(slot.holder(), "free again");
        assertEquals(0, slot.waiting());
    }

    /** A wait that runs out is refused and leaves its queue; nothing is handed to it later. */
    @Test
    void aWaitThatRunsOutLeavesTheQueue() throws InterruptedException {
        assertTrue(slot.acquire("A", 0));
        assertFalse(slot.acquire("B", 0), "no wait: refused at once");
        assertFalse(slot.acquire("B", 1), "a wait of 1 ns runs out");
        assertEquals(0, slot.waiting());
        assertEquals(Map.of(), slot.queued());
        slot.release();
        assertNull(slot.holder());
        assertTrue(slot.acquire("B", 0), "free: taken at once");
        slot.release();
        assertThrows(IllegalStateException.class, slot::release, "not held");
    }

    /** An interrupted waiter leaves its queue and gets the interrupt; the slot goes to the next. */
    @Test
    void anInterruptedWaiterLeavesTheQueue() throws Exception {
        assertTrue(slot.acquire("A", 0));
        CountDownLatch started = new CountDownLatch(1);
        CompletableFuture<Throwable> interrupted = new CompletableFuture<>();
        Thread t = Thread.ofPlatform().start(() -> {
            started.countDown();
            try {
                slot.acquire("B", Long.MAX_VALUE);
                interrupted.complete(null);
            } catch (InterruptedException e) {
                interrupted.complete(e);
            }
        });
        started.await();
        while (slot.waiting("B") == 0) Thread.yield();
        queue("C", "C1");
        t.interrupt();
        assertInstanceOf(InterruptedException.class, interrupted.get(60, TimeUnit.SECONDS));
        assertEquals(Map.of("C", 1), slot.queued());
        releaseAndJoin();
        assertEquals(List.of("C1"), turns);
    }

    /** Many threads of a few clients: every one gets a turn, one at a time. */
    @Test
    void everyWaiterGetsItsTurnOneAtATime() throws InterruptedException, ExecutionException, TimeoutException {
        int[] inside = {0};
        int[] most = {0};
        List<CompletableFuture<Void>> all = new ArrayList<>();
        for (int i = 0; i < 32; i++) {
            String client = "c" + i % 4;
            all.add(CompletableFuture.runAsync(() -> {
                try {
                    assertTrue(slot.acquire(client, Long.MAX_VALUE));
                    synchronized (most) {
                        most[0] = Math.max(most[0], ++inside[0]);
                    }
                    synchronized (most) {
                        inside[0]--;
                    }
                    slot.release();
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
            }, r -> Thread.ofPlatform().start(r)));
        }
        CompletableFuture.allOf(all.toArray(CompletableFuture[]::new)).get(60, TimeUnit.SECONDS);
        assertEquals(1, most[0]);
        assertNull(slot.holder());
        assertEquals(0, slot.waiting());
    }
}
