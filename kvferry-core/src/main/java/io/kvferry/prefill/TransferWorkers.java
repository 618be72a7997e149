package io.kvferry.prefill;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Queue;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.LongAdder;

/**
 * The prefill's transfer workers and what they measured.
 *
 * <p>Each room has a strand: its tasks (chunks, final status, failure notice, abort-ack) run one at a
 * time in the order they were queued, on whichever worker is free, so they leave in order. A task
 * runs only once it is admitted to every decode link it writes to, and at most {@code perLink}
 * tasks are admitted to one link at a time; a strand that cannot be admitted waits on that link
 * without a thread and is resumed when a task leaves the link. So a decode that stops reading holds
 * at most {@code perLink} workers (until the write-stall timeout cuts it) and the rooms of every
 * other decode go on. A strand is admitted before it takes a worker, so at most {@code perLink}
 * strands per link plus {@code perLink} for tasks that write to no link hold workers at once,
 * however many rooms are queued; a worker is started when none is idle, and those beyond
 * {@code perLink} end after {@link #IDLE_KEEP_ALIVE_SECONDS} idle. Started by the manager's
 * constructor, interrupted and awaited by its teardown; a task that throws never strands its
 * room's later tasks.
 */
final class TransferWorkers {
    private static final Logger log = LoggerFactory.getLogger(TransferWorkers.class);
    /** How long a worker beyond the core {@code perLink} waits for work before it ends. */
    static final long IDLE_KEEP_ALIVE_SECONDS = 30;

    private final int perLink;
    private final String namePrefix;
    /** Strands holding their slots (or handed one), waiting for a worker; workers take them in order. */
    private final LinkedBlockingQueue<Strand> ready = new LinkedBlockingQueue<>();
    /** Guarded by this: strands queued in {@link #ready} or running, the workers alive, and their threads. */
    private int owed;
    private int alive;
    private int started;
    private final Set<Thread> threads = new HashSet<>();
    /** The strand of each room with queued tasks; a strand leaves the map when its last task ran. */
    private final ConcurrentHashMap<Long, Strand> strands = new ConcurrentHashMap<>();
    /** Admission for tasks that write to no link (e.g. dropping an expired room), so they too are bounded. */
    private final LinkSlots unlinked = new LinkSlots();
    private volatile boolean closed;
    private final LongAdder bytes = new LongAdder();
    private final LongAdder busyNanos = new LongAdder();
    private final LongAdder ops = new LongAdder();
    private final ActiveWrites activeWrites = new ActiveWrites();

    TransferWorkers(int perLink, String namePrefix) {
        if (perLink < 1) throw new IllegalArgumentException("transfer workers per link must be >= 1, got " + perLink);
        this.perLink = perLink;
        this.namePrefix = namePrefix;
        synchronized (this) {
            for (int i = 0; i < perLink; i++) startWorker();
        }
    }

    /**
     * Queues a task that writes to the room's destinations, behind the room's earlier tasks: for a room
     * whose destinations are complete (frozen), whose list cannot change between admission and run.
     */
    void enqueue(PrefillRoom room, Runnable task) {
        add(room.room, new Task(task, null, room, null));
    }

    /**
     * Queues a task that writes to the room's destinations as they were when it was admitted, which
     * it is handed: for a room that may still be collecting destinations (a failure notice), so it
     * never writes to a link it holds no slot on. A destination added after the admission is the
     * adder's to tell.
     */
    void enqueue(PrefillRoom room, ToAdmitted task) {
        add(room.room, new Task(null, task, room, null));
    }

    /** Queues a task that writes to {@code link} only, behind the room's earlier tasks. */
    void enqueue(long room, DecodeLink link, Runnable task) {
        add(room, new Task(task, null, null, link));
    }

    /** Queues a task that writes to no link, behind the room's earlier tasks. */
    void enqueue(long room, Runnable task) {
        add(room, new Task(task, null, null, null));
    }

    /** A task handed the room's destinations its admission holds slots for. */
    @FunctionalInterface
    interface ToAdmitted {
        void run(List<PrefillRoom.Destination> admitted);
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

    /** Worker threads alive now (tests: the pool grows past {@code perLink} only while links hold workers). */
    synchronized int workerThreads() {
        return alive;
    }

    /** Stops every worker (a running task is interrupted; queued tasks are dropped) and waits up to {@code millis}. */
    void close(long millis) throws InterruptedException {
        List<Thread> all;
        synchronized (this) {
            closed = true;
            all = new ArrayList<>(threads);
        }
        for (Thread t : all) t.interrupt();
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis);
        for (Thread t : all) t.join(Math.max(1, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime())));
    }

    /** Guarded by this. */
    private void startWorker() {
        Thread t = Thread.ofPlatform().daemon().name(namePrefix + started++).unstarted(this::work);
        t.start();
        threads.add(t);
        alive++;
    }

    /**
     * A worker: takes ready strands in order. One beyond the first {@code perLink} ends after
     * {@link #IDLE_KEEP_ALIVE_SECONDS} without work.
     */
    private void work() {
        try {
            while (!closed) {
                Strand s;
                try {
                    s = ready.poll(IDLE_KEEP_ALIVE_SECONDS, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    continue; // only close() ends a worker (the loop checks it); a stray interrupt does not
                }
                if (s == null) {
                    // Ends only while the others outnumber what is queued or running (decided under the lock submit takes).
                    if (endIfSpare()) return; // counted out already
                    continue;
                }
                try {
                    if (s.granted != null) resume(s); // handed a slot while parked: its other slots are still to take
                    else run(s);
                } finally {
                    synchronized (this) {
                        owed--;
                    }
                }
            }
            countOut();
        } catch (RuntimeException | Error e) {
            countOut();
            throw e;
        }
    }

    private synchronized void countOut() {
        alive--;
        threads.remove(Thread.currentThread());
    }

    private synchronized boolean endIfSpare() {
        if (alive <= perLink || owed >= alive) return false;
        alive--;
        threads.remove(Thread.currentThread());
        return true;
    }

    private void add(long room, Task task) {
        if (closed) return;
        Strand[] start = new Strand[1];
        strands.compute(room, (id, s) -> {
            if (s == null) s = new Strand(id);
            s.tasks.add(task);
            if (!s.scheduled) {
                s.scheduled = true;
                start[0] = s;
            }
            return s;
        });
        // Admitted on the caller's thread: only a strand holding its slots takes a worker, so the workers
        // are bounded by the links' slots, not by how many rooms are queued.
        if (start[0] != null && admit(start[0], task)) submit(start[0]);
    }

    /**
     * Hands a strand to the workers. A worker is started when the strands queued or running would
     * outnumber the workers, so a strand never waits behind workers held by a stalled link; only
     * strands holding slots come here, so the workers stay bounded by the links' slots.
     */
    private void submit(Strand s) {
        synchronized (this) {
            if (closed) return; // the manager's teardown fails what is left
            owed++;
            ready.add(s);
            if (owed > alive) {
                try {
                    startWorker();
                } catch (OutOfMemoryError e) {
                    // No thread to be had: the strand waits in the queue for a worker already running.
                    log.error("transfer workers: could not start a worker ({} alive): {}", alive, e.toString());
                }
            }
        }
    }

    /** A parked strand was handed a slot: it takes the rest of its head task's slots, or parks again. */
    private void resume(Strand s) {
        if (admit(s, s.tasks.peek())) run(s);
    }

    /** Runs an admitted strand's tasks in order until it has none left or its next task must wait for a link. */
    private void run(Strand s) {
        Task t = s.tasks.peek();
        while (!closed) {
            try {
                if (t.toAdmitted != null) t.toAdmitted.run(s.admitted);
                else t.body.run();
            } catch (Throwable e) {
                // Tasks fail their own room; anything escaping must not strand the room's later tasks.
                log.error("transfer task failed unexpectedly", e);
            } finally {
                s.tasks.poll();
                leaveAll(s);
            }
            t = s.tasks.peek();
            if (t == null) {
                if (retire(s)) return;
                t = s.tasks.peek(); // queued while it was retiring
            }
            if (!admit(s, t)) return; // parked on a link: resumed by the task that leaves it
        }
    }

    /** Ends the strand's run if it has no task left; false when one was queued meanwhile. */
    private boolean retire(Strand s) {
        boolean[] retired = new boolean[1];
        strands.compute(s.room, (id, current) -> {
            if (!s.tasks.isEmpty()) return current;
            s.scheduled = false;
            retired[0] = true;
            return null;
        });
        return retired[0];
    }

    /**
     * Takes a slot on every link the task writes to, in one global order (a room's destinations are
     * sorted by session id, which no two links of one room share), keeping the slots taken while it
     * waits for the next: a link with no free slot parks the strand there, to be handed the next slot
     * freed in its turn. Taking slots in one order means no two strands can wait on each other, and
     * keeping them means a room writing to several links is not overtaken forever by single-link
     * rooms. Once parked the strand belongs to the link: this worker leaves it alone.
     */
    private boolean admit(Strand s, Task t) {
        List<LinkSlots> need = s.links;
        if (s.granted == null) { // a new head task: what it needs (a resumed strand keeps its list)
            need.clear();
            s.taken = 0;
            s.admitted = List.of();
            if (t.link != null) {
                need.add(t.link.writers);
            } else if (t.room != null) {
                List<PrefillRoom.Destination> destinations = t.room.orderedDestinations(); // immutable, replaced whole
                s.admitted = destinations;
                for (int i = 0; i < destinations.size(); i++) {
                    PrefillRoom.Destination d = destinations.get(i);
                    if (!d.info().dummy() && !need.contains(d.link().writers)) need.add(d.link().writers);
                }
            }
            if (need.isEmpty()) need.add(unlinked);
        }
        for (; s.taken < need.size(); s.taken++) {
            LinkSlots slots = need.get(s.taken);
            if (s.granted == slots) {
                s.granted = null; // handed over by the task that left it
            } else if (!slots.enterOrPark(s, perLink)) {
                return false;
            }
        }
        return true;
    }

    private void leaveAll(Strand s) {
        for (int i = 0; i < s.taken; i++) handOn(s.links.get(i).leave());
        s.links.clear();
        s.taken = 0;
        s.admitted = List.of();
    }

    private void handOn(Strand waiting) {
        if (waiting != null) submit(waiting);
    }

    /** One room's queued tasks, run in order by at most one worker at a time. */
    private static final class Strand {
        final long room;
        final Queue<Task> tasks = new ConcurrentLinkedQueue<>();
        /** Guarded by the strands map's entry: set while a worker runs the strand or it waits on a link. */
        boolean scheduled;
        /** The links the head task needs slots on, in the order they are taken (owned by whoever holds the strand). */
        final List<LinkSlots> links = new ArrayList<>(1);
        /** A slot a leaving task handed this waiting strand (it is taken already). */
        LinkSlots granted;
        /** How many of {@link #links} the head task holds slots on (the first ones, in order). */
        int taken;
        /** The room's destinations {@link #links} were taken for (the head task's; empty for a one-link task). */
        List<PrefillRoom.Destination> admitted = List.of();

        Strand(long room) {
            this.room = room;
        }
    }

    /** A task (one of the two bodies) and what it writes to: the room's destinations, one link, or neither. */
    private record Task(Runnable body, ToAdmitted toAdmitted, PrefillRoom room, DecodeLink link) {}

    /**
     * The admission of tasks to one decode link: at most {@code perLink} inside, the rest parked in
     * arrival order. A leaving task hands its slot straight to the first parked strand, so strands
     * that arrive later cannot overtake it.
     */
    static final class LinkSlots {
        private int inside;
        private final ArrayDeque<Strand> parked = new ArrayDeque<>();

        /** Enters if a slot is free (parked strands are first in line for freed slots, so there is none while any waits). */
        synchronized boolean tryEnter(int max) {
            if (inside < max && parked.isEmpty()) {
                inside++;
                return true;
            }
            return false;
        }

        /** Enters if a slot is free, else parks {@code s} to be handed the next slot freed in its turn. */
        synchronized boolean enterOrPark(Strand s, int max) {
            if (tryEnter(max)) return true;
            parked.add(s);
            return false;
        }

        /** Leaves the link; returns the parked strand the slot was handed to (to be resumed), or null. */
        synchronized Strand leave() {
            Strand next = parked.poll();
            if (next == null) {
                inside--;
                return null;
            }
            next.granted = this;
            return next;
        }

        synchronized int inside() {
            return inside;
        }

        synchronized int parked() {
            return parked.size();
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
