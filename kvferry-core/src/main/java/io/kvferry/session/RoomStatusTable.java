package io.kvferry.session;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManagerInspection;
import io.kvferry.api.KVPoll;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.BooleanSupplier;
import java.util.function.Function;

/**
 * Status of every room on one manager, with SGLang's rules: a status only moves forward; Failed is
 * sticky and keeps the first kind and reason recorded; only Bootstrapping and WaitingForInput may
 * create a room; a cleared (removed) room is never resurrected; a missing room reads as Failed.
 *
 * <p>Each room's status lives in one {@link Slot}, which the room's own objects (its sender or
 * receiver, its record) keep: polling a room, or a writer checking it failed between ops, reads a
 * volatile field — no map lookup, no boxed id. The map is touched to create, find (by a frame's
 * room id) and remove a room. Outside this package a room's status changes only through its slot:
 * by id, the table only looks up, so a thread holding an id that was cleared and taken by a newer
 * request (a retry of the same room) cannot change, or remove, that newer room.
 *
 * <p>Thread-safe: a slot changes under its own lock and a removed slot stays removed, so the
 * scheduler thread, reader threads and transfer workers may all update it. Every change is reported
 * to the table's {@link Listener} after it was made (metrics, the failure log line and the
 * recent-failures ring hang there: this is the one place rooms change state, so they are counted once).
 */
public final class RoomStatusTable {
    /**
     * One room's state, a snapshot. Kind and reason are set exactly when the status is Failed.
     *
     * @param createdNanos when the room entered the table ({@link System#nanoTime()})
     * @param sinceNanos   when it entered this status
     */
    public record Entry(KVPoll status, FailureKind kind, String reason, long createdNanos, long sinceNanos) {}

    /**
     * Told of every status change, on the thread that made it, after it was made: by then another
     * thread that saw the change may have cleared the room (and a newer request may hold its id), so
     * what the listener needs of the room comes from the slot (its {@link Slot#owner()}), not by id.
     */
    @FunctionalInterface
    public interface Listener {
        /**
         * @param slot the room's slot ({@link Slot#room()}, {@link Slot#owner()})
         * @param from the status before ({@code null}: the room was just created)
         * @param to   the room's entry now
         */
        void changed(Slot slot, KVPoll from, Entry to);
    }

    /**
     * One room's live status. As a {@link BooleanSupplier} it is the room's failed flag: true once
     * the room failed or was cleared, what a writer checks between ops.
     */
    public static final class Slot implements BooleanSupplier {
        private final long room;
        private final Listener listener;
        private final long createdNanos;
        /** Written under the slot's lock; read without it. Kind and reason are written before a Failed status. */
        private volatile KVPoll status;
        private volatile FailureKind kind;
        private volatile String reason;
        private volatile long sinceNanos;
        /** Set once the room was removed (cleared): the slot then reads as Failed and never changes. */
        private volatile boolean removed;
        /** The status the room failed from (null until it fails); written before the Failed status. */
        private volatile KVPoll failedFrom;
        /** Run after every change of this room (its handle's {@link RoomFeed} entry); null for none. */
        private volatile Runnable watcher;
        /** The room's record that keeps this slot (set once by its owner); null for none. */
        private volatile Object owner;

        private Slot(long room, KVPoll status, Listener listener) {
            this.room = room;
            this.listener = listener;
            this.status = status;
            this.createdNanos = this.sinceNanos = System.nanoTime();
        }

        /** The room's id. */
        public long room() {
            return room;
        }

        /**
         * Names the record this slot belongs to, for the table's listener: it stays this room's once
         * the room was cleared, as a lookup by id does not.
         */
        public void own(Object record) {
            owner = record;
        }

        /** The record named by {@link #own}, or null. */
        public Object owner() {
            return owner;
        }

        /** The room's status (Failed once removed). */
        public KVPoll status() {
            return removed ? KVPoll.Failed : status;
        }

        /** When the room entered its status ({@link System#nanoTime()}); -1 once removed. */
        public long sinceNanos() {
            return removed ? -1 : sinceNanos;
        }

        /**
         * Whether the room reached Success, whatever happened to it since (a later local failure, its
         * removal): a concluded transfer whose peer must not be told it failed. Atomic with the change
         * that failed it, since the slot records what it failed from.
         */
        public boolean reachedSuccess() {
            return status == KVPoll.Success || failedFrom == KVPoll.Success; // failedFrom is written before status
        }

        @Override
        public boolean getAsBoolean() {
            return removed || status == KVPoll.Failed;
        }

        /**
         * Runs {@code w} after every later change of this room, on the thread that made it (after the
         * table's listener). A change made before this call is not reported: the caller checks the status after.
         */
        public void watch(Runnable w) {
            watcher = w;
        }

        private void changed(KVPoll from, Entry now) {
            if (now != null) listener.changed(this, from, now);
            Runnable w = watcher;
            if (w != null) w.run();
        }

        /** A snapshot; null once removed (as for a room the table does not know). */
        public Entry entry() {
            return removed ? null : current();
        }

        /** A snapshot whether or not the room was removed since (what it was when removed, once it was). */
        public Entry current() {
            synchronized (this) {
                return snapshot();
            }
        }

        /**
         * The room's failure as recorded, also once the room was removed (the slot is this room's
         * alone, so this is never a newer request's): what its peers are to be told, which the
         * scheduler may clear as soon as it sees Failed. Null while the room has not failed.
         */
        public Entry failure() {
            Entry e = current();
            return e.status() == KVPoll.Failed ? e : null;
        }

        private Entry snapshot() {
            KVPoll s = status;
            return s == KVPoll.Failed ? new Entry(s, kind, reason, createdNanos, sinceNanos)
                    : new Entry(s, null, null, createdNanos, sinceNanos);
        }

        /** Applies a non-Failed status (forward only); returns the status afterwards. */
        public KVPoll update(KVPoll next) {
            advance(next);
            return status();
        }

        /** Applies a non-Failed status; true when this call moved the room to it (false: removed, failed, or there already). */
        public boolean advance(KVPoll next) {
            if (next == KVPoll.Failed) throw new IllegalArgumentException("use fail(kind, reason) for Failed");
            KVPoll from;
            Entry now = null;
            synchronized (this) {
                from = status;
                if (removed || from == KVPoll.Failed || from.value() >= next.value()) return false;
                sinceNanos = System.nanoTime();
                status = next;
                if (listener != null) now = snapshot();
            }
            changed(from, now);
            return true;
        }

        /** Fails the room, keeping the first kind and reason; true when this call moved it to Failed. */
        public boolean fail(FailureKind failureKind, String why) {
            return fail(failureKind, why, false);
        }

        /**
         * Fails the room unless it already concluded (Success or Failed), atomically: for a failure found
         * off the room's own path, after the fact, which must not turn a success into a failure.
         */
        public boolean failIfUnfinished(FailureKind failureKind, String why) {
            return fail(failureKind, why, true);
        }

        private boolean fail(FailureKind failureKind, String why, boolean unlessSucceeded) {
            if (failureKind == null) throw new IllegalArgumentException("a failure needs a kind");
            KVPoll from;
            Entry now = null;
            synchronized (this) {
                from = status;
                if (removed || from == KVPoll.Failed || (unlessSucceeded && from == KVPoll.Success)) return false;
                kind = failureKind;
                reason = why;
                failedFrom = from;
                sinceNanos = System.nanoTime();
                status = KVPoll.Failed;
                if (listener != null) now = snapshot();
            }
            changed(from, now);
            return true;
        }

        private void markRemoved() {
            synchronized (this) {
                removed = true;
            }
        }
    }

    /** What every unknown room's flag reads: failed. */
    private static final BooleanSupplier UNKNOWN = () -> true;

    private final ConcurrentHashMap<Long, Slot> rooms = new ConcurrentHashMap<>();
    private final Listener listener;

    public RoomStatusTable() {
        this(null);
    }

    /** @param listener told of every change; null for none */
    public RoomStatusTable(Listener listener) {
        this.listener = listener;
    }

    /** Applies a non-Failed status. Returns the room's status afterwards (Failed if absent). */
    KVPoll update(long room, KVPoll status) {
        advance(room, status);
        return status(room);
    }

    /** Applies a non-Failed status; true when this call moved the room to it (false: absent, failed, or there already). */
    boolean advance(long room, KVPoll status) {
        if (status == KVPoll.Failed) throw new IllegalArgumentException("use fail(room, kind, reason) for Failed");
        Slot s = rooms.get(room);
        if (s != null) return s.advance(status);
        boolean[] made = {false};
        s = create(room, status, made);
        return s != null && (made[0] || s.advance(status));
    }

    /**
     * Creates an absent room in {@code status} (Bootstrapping or WaitingForInput only, else null) and
     * tells the listener; {@code made} says whether this call created it (another may have raced it).
     */
    private Slot create(long room, KVPoll status, boolean[] made) {
        if (status != KVPoll.Bootstrapping && status != KVPoll.WaitingForInput) return rooms.get(room);
        Slot s = rooms.computeIfAbsent(room, k -> {
            made[0] = true;
            return new Slot(k, status, listener);
        });
        // Not entry(): another thread may have removed the room already, and entry() then reads null.
        if (made[0] && listener != null) listener.changed(s, null, s.current());
        return s;
    }

    /** The room's slot, or null when absent. */
    public Slot slot(long room) {
        return rooms.get(room);
    }

    /**
     * Fails a room that exists, keeping the first kind and reason. Returns true when this call moved
     * the room to Failed (false: absent or already Failed).
     */
    boolean fail(long room, FailureKind kind, String reason) {
        if (kind == null) throw new IllegalArgumentException("a failure needs a kind");
        Slot s = rooms.get(room);
        return s != null && s.fail(kind, reason);
    }

    /**
     * Fails a room that exists and has not concluded (Success or Failed), atomically; true when this
     * call moved it to Failed. For a failure found off the room's own path (a peer's abort, a lost link).
     */
    boolean failIfUnfinished(long room, FailureKind kind, String reason) {
        if (kind == null) throw new IllegalArgumentException("a failure needs a kind");
        Slot s = rooms.get(room);
        return s != null && s.failIfUnfinished(kind, reason);
    }

    /**
     * The room's failed flag: its slot, or for an unknown room a flag that reads failed. Either way
     * the flag rises when the room fails or is removed, whichever comes first.
     */
    public BooleanSupplier failedFlag(long room) {
        Slot s = rooms.get(room);
        return s == null ? UNKNOWN : s;
    }

    public KVPoll status(long room) {
        Slot s = rooms.get(room);
        return s == null ? KVPoll.Failed : s.status();
    }

    /** The recorded failure reason, or null. */
    public String reason(long room) {
        Entry e = entry(room);
        return e == null ? null : e.reason();
    }

    /** The recorded failure kind, or null (not failed, or unknown here). */
    public FailureKind kind(long room) {
        Entry e = entry(room);
        return e == null ? null : e.kind();
    }

    /** The room's whole entry, or null when absent. */
    public Entry entry(long room) {
        Slot s = rooms.get(room);
        return s == null ? null : s.entry();
    }

    public boolean contains(long room) {
        return rooms.containsKey(room);
    }

    /**
     * Drops the room by id, whichever slot holds it: for this package's tests; the managers remove a
     * room's own slot ({@link #remove(Slot)}).
     */
    void remove(long room) {
        Slot s = rooms.remove(room);
        if (s != null) s.markRemoved();
    }

    /**
     * Drops the room this slot is: it reads Failed from now on (a cleared room's writers stop too) and
     * never changes again. A newer slot that took the id since ({@link #create}) stays in the table.
     */
    public void remove(Slot slot) {
        rooms.remove(slot.room, slot);
        slot.markRemoved();
    }

    /**
     * A new room in Bootstrapping, for a record that is the id's only live one (its owner made sure):
     * a slot still in the table under the id belongs to a record already dropped, whose own removal is
     * under way, and is marked removed now (its removal then leaves this one in place).
     */
    public Slot create(long room) {
        Slot s = new Slot(room, KVPoll.Bootstrapping, listener);
        Slot stale = rooms.put(room, s);
        if (stale != null) stale.markRemoved();
        if (listener != null) listener.changed(s, null, s.current());
        return s;
    }

    public int size() {
        return rooms.size();
    }

    public Set<Long> rooms() {
        return Set.copyOf(rooms.keySet());
    }

    /** Rooms in {@code status} right now (walks the table: for scrapes and status pages, not per request). */
    public int count(KVPoll status) {
        int n = 0;
        for (Slot s : rooms.values()) if (s.status() == status) n++;
        return n;
    }

    /** What a status page shows of the rooms: how many per state, and the oldest in flight. */
    public record Census(Map<String, Integer> byState, List<KVManagerInspection.Room> oldest) {}

    /**
     * Counts the rooms per state and lists the {@code max} oldest in flight (age, time in their
     * state, and {@code peersOf} their slot: its {@link Slot#owner()} names them, also once its id was
     * taken by a newer request), for both managers' {@code inspect()}.
     */
    public Census census(int max, Function<Slot, String> peersOf) {
        long now = System.nanoTime();
        Map<String, Integer> byState = new TreeMap<>();
        List<Map.Entry<Slot, Entry>> inFlight = new ArrayList<>();
        for (Slot slot : rooms.values()) {
            Entry v = slot.entry();
            if (v == null) continue; // removed since the walk reached it
            byState.merge(v.status().name(), 1, Integer::sum);
            if (!v.status().isTerminal()) inFlight.add(Map.entry(slot, v));
        }
        inFlight.sort(Comparator.comparingLong(e -> e.getValue().createdNanos()));
        List<KVManagerInspection.Room> oldest = new ArrayList<>();
        for (Map.Entry<Slot, Entry> e : inFlight.subList(0, Math.min(inFlight.size(), max))) {
            Entry v = e.getValue();
            oldest.add(new KVManagerInspection.Room(e.getKey().room(), v.status().name(), (now - v.createdNanos()) / 1_000_000L,
                    (now - v.sinceNanos()) / 1_000_000L, peersOf.apply(e.getKey())));
        }
        return new Census(byState, oldest);
    }
}
