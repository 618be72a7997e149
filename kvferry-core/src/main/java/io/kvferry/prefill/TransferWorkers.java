package io.kvferry.prefill;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.atomic.LongAdder;

/**
 * The prefill's transfer workers and what they measured. Each worker drains its own FIFO and a
 * room is pinned to one worker ({@code room mod n}), so a room's chunks, its final status and any
 * abort-ack leave in order. Started by the manager's constructor, interrupted and joined by its
 * teardown; a task that throws never kills its worker.
 */
final class TransferWorkers {
    private static final Logger log = LoggerFactory.getLogger(TransferWorkers.class);

    private final Worker[] workers;
    private volatile boolean closed;
    private final LongAdder bytes = new LongAdder();
    private final LongAdder busyNanos = new LongAdder();
    private final LongAdder ops = new LongAdder();
    private final ActiveWrites activeWrites = new ActiveWrites();

    TransferWorkers(int count, String namePrefix) {
        workers = new Worker[count];
        for (int i = 0; i < count; i++) workers[i] = new Worker(namePrefix + i);
        for (Worker w : workers) w.thread.start();
    }

    /** The worker a room is pinned to. */
    int workerOf(long room) {
        return (int) Math.floorMod(room, (long) workers.length);
    }

    /** Queues a task on a room's worker, behind the room's earlier chunks. */
    void enqueue(long room, Runnable task) {
        workers[workerOf(room)].queue.add(task);
    }

    /** Marks a write entering a data path; pass the result to {@link #exited}. */
    long entered() {
        return activeWrites.begin();
    }

    /** A write left its data path; {@code movedBytes}/{@code movedOps} are 0 when it failed (its time still counts). */
    void exited(long enteredAt, long movedBytes, int movedOps) {
        busyNanos.add(activeWrites.end() - enteredAt);
        bytes.add(movedBytes);
        ops.add(movedOps);
    }

    long bytes() {
        return bytes.sum();
    }

    long busyNanos() {
        return busyNanos.sum();
    }

    long ops() {
        return ops.sum();
    }

    long activeNanos() {
        return activeWrites.activeNanos();
    }

    /** Writes inside a data path right now (a failed room's write may still be stopping). */
    int writesInDataPath() {
        return activeWrites.active();
    }

    /** Stops every worker (the running task is interrupted) and joins each for up to {@code millis}. */
    void close(long millis) throws InterruptedException {
        closed = true;
        for (Worker w : workers) w.thread.interrupt();
        for (Worker w : workers) w.thread.join(millis);
    }

    private final class Worker {
        final BlockingQueue<Runnable> queue = new LinkedBlockingQueue<>();
        final Thread thread;

        Worker(String name) {
            thread = Thread.ofPlatform().daemon().name(name).unstarted(this::run);
        }

        private void run() {
            while (!closed) {
                Runnable task;
                try {
                    task = queue.take();
                } catch (InterruptedException e) {
                    return;
                }
                try {
                    task.run();
                } catch (Throwable e) {
                    // Tasks fail their own room; anything escaping must not kill the worker and strand its queue.
                    log.error("transfer task failed unexpectedly", e);
                }
            }
        }
    }

    /**
     * Wall time with at least one write inside a data path (the union of the workers' busy
     * intervals). Entered once per plan (a chunk of a room), not per page, so a lock is cheap here.
     */
    private static final class ActiveWrites {
        private int active;
        private long since;
        private long total;

        /** The clock is read under the lock, so no other write's interval can fall between it and the count. */
        synchronized long begin() {
            long now = System.nanoTime();
            if (active++ == 0) since = now;
            return now;
        }

        synchronized long end() {
            long now = System.nanoTime();
            if (--active == 0) total += now - since;
            return now;
        }

        synchronized int active() {
            return active;
        }

        synchronized long activeNanos() {
            return active > 0 ? total + (System.nanoTime() - since) : total;
        }
    }
}
