package io.kvferry.prefill;

import io.kvferry.protocol.TransferInfo;
import io.kvferry.session.RoomStatusTable;
import io.kvferry.transport.ControlConnection;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import java.util.stream.IntStream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Rooms' strands on the transfer workers: a room's tasks run one at a time in order; a link admits
 * at most {@code perLink} tasks and a link whose tasks block holds only its own workers; a strand
 * waiting for a link holds no slot of another.
 */
@Timeout(60)
class TransferWorkersTest {
    private final List<TransferWorkers> pools = new ArrayList<>();
    private final CountDownLatch release = new CountDownLatch(1);

    @AfterEach
    void close() throws Exception {
        release.countDown();
        for (TransferWorkers w : pools) w.close(5000);
        for (AutoCloseable c : sockets) c.close();
    }

    private TransferWorkers workers(int perLink) {
        TransferWorkers w = new TransferWorkers(perLink, "strands-test-");
        pools.add(w);
        return w;
    }

    private final List<AutoCloseable> sockets = new ArrayList<>();

    /** A link for tasks that only name it (nothing is written to its connection). */
    private static DecodeLink link() {
        return new DecodeLink(null);
    }

    /** A link with a connection of its own, so its session id (its peer's address) differs from any other's. */
    private DecodeLink connectedLink() throws IOException {
        ServerSocketChannel server = ServerSocketChannel.open().bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
        sockets.add(server);
        SocketChannel client = SocketChannel.open(server.getLocalAddress());
        sockets.add(client);
        sockets.add(server.accept());
        return new DecodeLink(new ControlConnection(client));
    }

    /** A task that blocks until the test ends, counting itself in {@code running} meanwhile. */
    private Runnable blocking(AtomicInteger running, AtomicInteger maxRunning) {
        return () -> {
            maxRunning.accumulateAndGet(running.incrementAndGet(), Math::max);
            try {
                release.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } finally {
                running.decrementAndGet();
            }
        };
    }

    private static void awaitTrue(BooleanSupplier condition, String what) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) throw new AssertionError("timed out waiting until " + what);
            Thread.sleep(1);
        }
    }

    @Test
    void aRoomsTasksRunOneAtATimeInOrderWhicheverWorkerRunsThem() throws Exception {
        TransferWorkers w = workers(4);
        DecodeLink a = link();
        List<Integer> order = Collections.synchronizedList(new ArrayList<>());
        AtomicInteger inside = new AtomicInteger(), overlaps = new AtomicInteger(), unseen = new AtomicInteger();
        int[] plain = new int[1]; // no synchronization of its own: each task must see the one before it
        Set<Thread> threads = ConcurrentHashMap.newKeySet();
        CountDownLatch done = new CountDownLatch(1);
        int n = 5000;
        for (int i = 0; i < n; i++) {
            int k = i;
            Runnable task = () -> {
                if (inside.incrementAndGet() != 1) overlaps.incrementAndGet();
                if (plain[0] != k) unseen.incrementAndGet();
                plain[0] = k + 1;
                threads.add(Thread.currentThread());
                order.add(k);
                inside.decrementAndGet();
                if (k == n - 1) done.countDown();
            };
            // Alternating kinds: tasks on the link and tasks on no link still form one strand.
            if (i % 2 == 0) w.enqueue(7, a, task);
            else w.enqueue(7, task);
            if (i % 500 == 0) Thread.sleep(1); // let the strand retire and start again now and then
        }
        assertTrue(done.await(30, TimeUnit.SECONDS));
        assertEquals(0, overlaps.get(), "two tasks of one room ran at once");
        assertEquals(0, unseen.get(), "a task did not see the write of the task before it");
        assertTrue(threads.size() >= 1, "workers: " + threads);
        assertEquals(IntStream.range(0, n).boxed().toList(), order);
    }

    @Test
    void aLinkWhoseTasksBlockHoldsOnlyItsOwnSlotsAndOtherLinksGoOn() throws Exception {
        TransferWorkers w = workers(2);
        DecodeLink stalled = link(), healthy = link();
        AtomicInteger running = new AtomicInteger(), maxRunning = new AtomicInteger();
        for (long room = 0; room < 1000; room++) w.enqueue(room, stalled, blocking(running, maxRunning));
        awaitTrue(() -> running.get() == 2 && stalled.writers.parked() == 998, "two rooms run on the stalled link and 998 wait");
        // Only the two admitted rooms were handed to the pool (each hand-over starts at most one thread
        // beside the two core ones): the 998 waiting rooms took none.
        assertTrue(w.workerThreads() <= 4, "rooms waiting for a link took threads: " + w.workerThreads());
        CountDownLatch healthyRan = new CountDownLatch(20);
        for (long room = 5000; room < 5020; room++) w.enqueue(room, healthy, healthyRan::countDown);
        assertTrue(healthyRan.await(30, TimeUnit.SECONDS), "the healthy link's rooms waited for the stalled link");
        assertEquals(2, maxRunning.get(), "more tasks than a link admits ran on it");
        assertEquals(998, stalled.writers.parked());
        release.countDown();
        awaitTrue(() -> stalled.writers.parked() == 0 && stalled.writers.inside() == 0 && running.get() == 0,
                "the stalled link's rooms ran once it was released");
        assertEquals(2, maxRunning.get());
    }

    @Test
    void parkedRoomsAreHandedTheLinkInTheOrderTheyArrived() throws Exception {
        TransferWorkers w = workers(1);
        DecodeLink a = link();
        CountDownLatch first = new CountDownLatch(1);
        w.enqueue(0, a, () -> awaitQuietly(first));
        List<Long> order = Collections.synchronizedList(new ArrayList<>());
        for (long room = 1; room <= 5; room++) {
            long r = room;
            w.enqueue(room, a, () -> order.add(r));
            awaitTrue(() -> a.writers.parked() == r, "room " + r + " parked");
        }
        w.enqueue(6, a, () -> order.add(6L)); // arrives while others wait: it must not overtake them
        awaitTrue(() -> a.writers.parked() == 6, "room 6 parked");
        first.countDown();
        awaitTrue(() -> order.size() == 6, "every parked room ran");
        assertEquals(List.of(1L, 2L, 3L, 4L, 5L, 6L), order);
    }

    /**
     * A room writing to two links takes its slots in order and keeps the one it won while it waits for
     * the next, so rooms that arrive after it on the link it won cannot overtake it (giving slots back
     * and queueing again let a steady stream of single-link rooms starve it).
     */
    @Test
    void aRoomWritingToTwoLinksKeepsTheSlotItWonWhileItWaitsForTheOther() throws Exception {
        TransferWorkers w = workers(1);
        DecodeLink a = connectedLink(), b = connectedLink();
        CountDownLatch blockA = new CountDownLatch(1), blockB = new CountDownLatch(1);
        w.enqueue(1, a, () -> awaitQuietly(blockA)); // fills link a's one slot
        w.enqueue(2, b, () -> awaitQuietly(blockB)); // and link b's
        awaitTrue(() -> a.writers.inside() == 1 && b.writers.inside() == 1, "both links are full");
        PrefillRoom both = new PrefillRoom(3, 0, new RoomStatusTable());
        for (DecodeLink l : List.of(b, a)) both.addDestination(new PrefillRoom.Destination(l, info(3)));
        List<Long> order = Collections.synchronizedList(new ArrayList<>());
        w.enqueue(both, () -> order.add(3L));
        awaitTrue(() -> a.writers.parked() + b.writers.parked() == 1, "the two-link room waits");
        boolean firstIsA = a.writers.parked() == 1; // the link it takes first (its destinations' order)
        DecodeLink first = firstIsA ? a : b;
        CountDownLatch blockFirst = firstIsA ? blockA : blockB, blockSecond = firstIsA ? blockB : blockA;
        for (long room = 10; room < 15; room++) {
            long r = room;
            w.enqueue(room, first, () -> order.add(r)); // arrive after the two-link room on the link it waits for
        }
        awaitTrue(() -> first.writers.parked() == 6, "the later rooms wait behind it");
        blockFirst.countDown(); // the two-link room wins the first link and waits for the second, keeping it
        awaitTrue(() -> first.writers.parked() == 5 && (firstIsA ? b : a).writers.parked() == 1, "it holds the first link");
        blockSecond.countDown();
        awaitTrue(() -> order.size() == 6, "every room ran");
        assertEquals(List.of(3L, 10L, 11L, 12L, 13L, 14L), order);
        awaitTrue(() -> a.writers.inside() == 0 && b.writers.inside() == 0, "both links free");
    }

    /**
     * A task for a room still collecting destinations is handed the destinations its admission took
     * slots for: one added while it waited for its turn is not among them (it holds no slot there).
     */
    @Test
    void aTaskIsHandedTheDestinationsItWasAdmittedTo() throws Exception {
        TransferWorkers w = workers(1);
        DecodeLink a = connectedLink(), b = connectedLink();
        PrefillRoom room = new PrefillRoom(5, 0, new RoomStatusTable());
        room.addDestination(new PrefillRoom.Destination(a, info(5)));
        CountDownLatch blockRoom = new CountDownLatch(1);
        w.enqueue(5, a, () -> awaitQuietly(blockRoom)); // the room's earlier task holds its strand
        List<List<PrefillRoom.Destination>> handed = Collections.synchronizedList(new ArrayList<>());
        w.enqueue(room, handed::add);
        awaitTrue(() -> a.writers.inside() == 1, "the earlier task runs");
        blockRoom.countDown();
        awaitTrue(() -> handed.size() == 1, "the notice ran");
        assertEquals(List.of(a), handed.get(0).stream().map(PrefillRoom.Destination::link).toList());

        // Admitted with one destination, then another one added before it runs: it is handed the one.
        CountDownLatch blockA = new CountDownLatch(1), admitted = new CountDownLatch(1), added = new CountDownLatch(1);
        w.enqueue(6, a, () -> awaitQuietly(blockA)); // fills link a's one slot
        awaitTrue(() -> a.writers.inside() == 1, "link a is full");
        w.enqueue(room, (TransferWorkers.ToAdmitted) got -> {
            admitted.countDown();
            awaitQuietly(added);
            handed.add(got);
        });
        awaitTrue(() -> a.writers.parked() == 1, "the notice waits for link a");
        blockA.countDown();
        assertTrue(admitted.await(30, TimeUnit.SECONDS));
        room.addDestination(new PrefillRoom.Destination(b, info(5)));
        added.countDown();
        awaitTrue(() -> handed.size() == 2, "the second notice ran");
        assertEquals(List.of(a), handed.get(1).stream().map(PrefillRoom.Destination::link).toList());
        assertEquals(0, b.writers.inside() + b.writers.parked(), "nothing took or waited for a slot on link b");
        assertEquals(2, room.orderedDestinations().size());
    }

    private static void awaitQuietly(CountDownLatch latch) {
        try {
            latch.await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    @Test
    void aTaskThatThrowsDoesNotStrandItsRoomsLaterTasks() throws Exception {
        TransferWorkers w = workers(1);
        DecodeLink a = link();
        CountDownLatch later = new CountDownLatch(1);
        w.enqueue(4, a, () -> {
            throw new IllegalStateException("a task's own bug");
        });
        w.enqueue(4, a, later::countDown);
        assertTrue(later.await(30, TimeUnit.SECONDS));
        awaitTrue(() -> a.writers.inside() == 0, "the throwing task gave its slot back");
    }

    @Test
    void closeInterruptsRunningTasksAndEndsEveryWorker() throws Exception {
        TransferWorkers w = workers(2);
        DecodeLink a = link();
        CountDownLatch interrupted = new CountDownLatch(2), sleeping = new CountDownLatch(2);
        for (long room = 0; room < 4; room++) {
            w.enqueue(room, a, () -> {
                sleeping.countDown();
                try {
                    Thread.sleep(60_000);
                } catch (InterruptedException e) {
                    interrupted.countDown();
                }
            });
        }
        assertTrue(sleeping.await(30, TimeUnit.SECONDS), "two rooms run");
        w.close(10_000);
        assertTrue(interrupted.await(1, TimeUnit.SECONDS));
        assertEquals(0, w.workerThreads());
        AtomicInteger ran = new AtomicInteger();
        w.enqueue(9, a, ran::incrementAndGet); // after close: dropped, no worker starts
        assertEquals(0, w.workerThreads());
        assertEquals(0, ran.get());
    }

    private static TransferInfo info(long room) {
        return new TransferInfo(room, new int[]{0}, -1, new int[0][], 1, 0, false);
    }
}
