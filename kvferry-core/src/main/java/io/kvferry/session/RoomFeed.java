package io.kvferry.session;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;

/**
 * The handles (senders or receivers) of one manager whose {@code poll()} may answer something new,
 * so a scheduler holding thousands of requests polls the few that moved instead of all of them
 * (one step over 10,000 rooms' statuses ~11 µs, against ~0.75 µs for 16 that moved; below a few
 * hundred in flight a sweep is cheaper: PERFORMANCE.md, "The change feed").
 *
 * <p>A handle is fed when (1) its room's status changed, on whatever thread changed it; (2) a
 * deadline its poll checks has passed on the manager's deadline clock; (3) it has scheduler-side
 * work that only its poll drives (a decode bootstrap retry), on every drain until that is done;
 * (4) it just joined, or {@link Entry#signal()} was called for it. Polling what a drain hands out
 * shows exactly what polling every handle would, a deadline at most one clock refresh late.
 *
 * <p>Ownership: the changed-queue is the only part other threads touch (lock-free, one flag per
 * entry so an entry is queued at most once). Deadlines and the retry list belong to the scheduler
 * thread — the one thread that creates, polls and clears the handles and calls {@link #drain};
 * deadlines are an intrusive list ordered by deadline (rooms arm theirs in creation order with one
 * timeout, so an insert is at the tail), so arming, disarming and expiring are O(1) with no
 * allocation beyond the entry.
 *
 * @param <H> the handle type handed to the drain's sink
 */
public final class RoomFeed<H> {
    /** One handle's membership: what a handle (and its room's status slot) keeps to feed itself. */
    public static final class Entry<H> implements Runnable {
        private static final VarHandle QUEUED;

        static {
            try {
                QUEUED = MethodHandles.lookup().findVarHandle(Entry.class, "queued", int.class);
            } catch (ReflectiveOperationException e) {
                throw new ExceptionInInitializerError(e);
            }
        }

        private final RoomFeed<H> feed;
        private final H handle;
        /** 1 while in the changed-queue (any thread sets it, the drain clears it). */
        @SuppressWarnings("unused")
        private volatile int queued;
        // Scheduler thread only:
        private Entry<H> prev, next;
        private long deadline;
        private boolean armed, retrying, left;

        private Entry(RoomFeed<H> feed, H handle) {
            this.feed = feed;
            this.handle = handle;
        }

        /** Queues the handle for the next drain (any thread; a queued handle is not queued twice). */
        public void signal() {
            if (QUEUED.compareAndSet(this, 0, 1)) {
                feed.changed.offer(this);
                feed.queuedCount.incrementAndGet();
            }
        }

        /** As a status slot's watcher: a status change feeds the handle. */
        @Override
        public void run() {
            signal();
        }

        /** Feeds the handle once {@code deadlineTick} (deadline-clock time) has passed, unless disarmed first. Scheduler thread. */
        public void arm(long deadlineTick) {
            if (left) return;
            if (armed) feed.unlink(this);
            deadline = deadlineTick;
            armed = true;
            feed.insert(this);
        }

        /** The deadline no longer matters (the room moved past the state it guards). Scheduler thread. */
        public void disarm() {
            if (armed) {
                feed.unlink(this);
                armed = false;
            }
        }

        /** Feeds the handle on every drain until {@link #stopRetrying()} (work only its poll drives). Scheduler thread. */
        public void retryEveryDrain() {
            if (left || retrying) return;
            retrying = true;
            feed.retries.add(this);
        }

        /** Scheduler thread. */
        public void stopRetrying() {
            retrying = false; // dropped from the list by the next drain
        }

        /** The handle was cleared: it is never fed again and its deadline is dropped. Scheduler thread. */
        public void leave() {
            disarm();
            retrying = false;
            left = true;
        }
    }

    /**
     * A manager's feed, off until its scheduler turns it on (then handles created afterwards join it).
     * Scheduler thread only, as the feed itself.
     */
    public static final class Switch<H> {
        private final String side;
        private RoomFeed<H> feed;

        /** @param side the manager's side, for the refusal of a drain while off ("prefill", "decode") */
        public Switch(String side) {
            this.side = side;
        }

        public void enable() {
            if (feed == null) feed = new RoomFeed<>();
        }

        /** The feed, or null while off (then every handle is polled). */
        public RoomFeed<H> feed() {
            return feed;
        }

        /** {@link RoomFeed#drain}; refused while off. */
        public int drain(long now, Consumer<? super H> sink) {
            if (feed == null) throw new IllegalStateException("call enableChangeFeed() before draining the " + side + " change feed");
            return feed.drain(now, sink);
        }
    }

    private final ConcurrentLinkedQueue<Entry<H>> changed = new ConcurrentLinkedQueue<>();
    private final AtomicInteger queuedCount = new AtomicInteger();
    /** Scheduler thread only: armed deadlines, earliest first. */
    private Entry<H> head, tail;
    private final List<Entry<H>> retries = new ArrayList<>();
    private int armedCount;

    /** A new member for {@code handle}; it is fed on the next drain (a status may have changed before its slot was watched). */
    public Entry<H> join(H handle) {
        Entry<H> e = new Entry<>(this, handle);
        e.signal();
        return e;
    }

    /**
     * Hands {@code sink} every handle fed since the last drain, each at most once per reason: expired
     * deadlines first, then changes, then retries. A change made while the sink polls a handle feeds it
     * again on the next drain. Scheduler thread only.
     *
     * @param now the deadline clock's reading
     * @return how many handles were handed out
     */
    public int drain(long now, Consumer<? super H> sink) {
        int n = 0;
        while (head != null && now - head.deadline > 0) {
            Entry<H> e = head;
            e.disarm();
            sink.accept(e.handle);
            n++;
        }
        // At most what was queued when the drain began: a sink whose poll changes its own room (an injected
        // failure, a timeout) re-queues it for the next drain instead of keeping this one going.
        for (int budget = queuedCount.get(); budget > 0; budget--) {
            Entry<H> e = changed.poll();
            if (e == null) break;
            queuedCount.decrementAndGet();
            Entry.QUEUED.setVolatile(e, 0);
            if (e.left) continue;
            sink.accept(e.handle);
            n++;
        }
        if (!retries.isEmpty()) {
            for (int i = 0, size = retries.size(); i < size; i++) {
                Entry<H> e = retries.get(i);
                if (!e.retrying) continue;
                sink.accept(e.handle);
                n++;
            }
            retries.removeIf(e -> !e.retrying);
        }
        return n;
    }

    /** Armed deadlines (for tests and inspection). Scheduler thread. */
    public int armedDeadlines() {
        return armedCount;
    }

    /** Handles queued by a change and not drained yet (any thread; a moment's figure). */
    public int queued() {
        return queuedCount.get();
    }

    private void insert(Entry<H> e) {
        Entry<H> after = tail;
        while (after != null && after.deadline - e.deadline > 0) after = after.prev; // a later timeout config: rare
        e.prev = after;
        e.next = after == null ? head : after.next;
        if (e.next != null) e.next.prev = e;
        else tail = e;
        if (after != null) after.next = e;
        else head = e;
        armedCount++;
    }

    private void unlink(Entry<H> e) {
        if (e.prev != null) e.prev.next = e.next;
        else head = e.next;
        if (e.next != null) e.next.prev = e.prev;
        else tail = e.prev;
        e.prev = e.next = null;
        armedCount--;
    }
}
