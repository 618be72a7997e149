package io.kvferry.session;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVPoll;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.BooleanSupplier;

/**
 * Status of every room on one manager, with SGLang's rules: a status only moves forward; Failed is
 * sticky and keeps the first kind and reason recorded; only Bootstrapping and WaitingForInput may
 * create a room; a cleared (removed) room is never resurrected; a missing room reads as Failed.
 *
 * <p>Each room's status lives in one {@link Slot}, which the room's own objects (its sender or
 * receiver, its record) keep: polling a room, or a writer checking it failed between ops, reads a
 * volatile field — no map lookup, no boxed id. The map is touched to create, find (by a frame's
 * room id) and remove a room.
 *
 * <p>Thread-safe: a slot changes under its own lock, and a removed slot stays removed, so the
 * scheduler thread, reader threads and transfer workers may all update it.
 */
public final class RoomStatusTable {
    /** One room's state, a snapshot. Kind and reason are set exactly when the status is Failed. */
    public record Entry(KVPoll status, FailureKind kind, String reason) {}

    /**
     * One room's live status. As a {@link BooleanSupplier} it is the room's failed flag: true once
     * the room failed or was cleared, what a writer checks between ops.
     */
    public static final class Slot implements BooleanSupplier {
        /** Written under the slot's lock; read without it. Kind and reason are written before a Failed status. */
        private volatile KVPoll status;
        private volatile FailureKind kind;
        private volatile String reason;
        /** Set once the room was removed (cleared): the slot then reads as Failed and never changes. */
        private volatile boolean removed;

        private Slot(KVPoll status) {
            this.status = status;
        }

        /** The room's status (Failed once removed). */
        public KVPoll status() {
            return removed ? KVPoll.Failed : status;
        }

        @Override
        public boolean getAsBoolean() {
            return removed || status == KVPoll.Failed;
        }

        /** A snapshot; null once removed (as for a room the table does not know). */
        public Entry entry() {
            if (removed) return null;
            KVPoll s = status;
            return s == KVPoll.Failed ? new Entry(s, kind, reason) : new Entry(s, null, null);
        }

        /** Applies a non-Failed status (forward only); returns the status afterwards. */
        public KVPoll update(KVPoll next) {
            if (next == KVPoll.Failed) throw new IllegalArgumentException("use fail(kind, reason) for Failed");
            synchronized (this) {
                if (!removed && status != KVPoll.Failed && status.value() < next.value()) status = next;
            }
            return status();
        }

        /** Fails the room, keeping the first kind and reason; true when this call moved it to Failed. */
        public boolean fail(FailureKind failureKind, String why) {
            if (failureKind == null) throw new IllegalArgumentException("a failure needs a kind");
            synchronized (this) {
                if (removed || status == KVPoll.Failed) return false;
                kind = failureKind;
                reason = why;
                status = KVPoll.Failed;
                return true;
            }
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

    /** Applies a non-Failed status. Returns the room's status afterwards (Failed if absent). */
    public KVPoll update(long room, KVPoll status) {
        if (status == KVPoll.Failed) throw new IllegalArgumentException("use fail(room, kind, reason) for Failed");
        Slot s = rooms.get(room);
        if (s == null) {
            if (status != KVPoll.Bootstrapping && status != KVPoll.WaitingForInput) return KVPoll.Failed;
            s = rooms.computeIfAbsent(room, k -> new Slot(status));
        }
        return s.update(status);
    }

    /**
     * The room's slot, created (Bootstrapping or WaitingForInput) if absent: what a sender or receiver
     * keeps to read and change its room's status without lookups.
     */
    public Slot open(long room, KVPoll initial) {
        if (initial != KVPoll.Bootstrapping && initial != KVPoll.WaitingForInput) {
            throw new IllegalArgumentException("only Bootstrapping and WaitingForInput create a room, not " + initial);
        }
        Slot s = rooms.computeIfAbsent(room, k -> new Slot(initial));
        s.update(initial);
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
    public boolean fail(long room, FailureKind kind, String reason) {
        if (kind == null) throw new IllegalArgumentException("a failure needs a kind");
        Slot s = rooms.get(room);
        return s != null && s.fail(kind, reason);
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

    /** Drops the room; its slot reads Failed from now on (a cleared room's writers stop too) and never changes again. */
    public void remove(long room) {
        Slot s = rooms.remove(room);
        if (s != null) s.markRemoved();
    }

    public int size() {
        return rooms.size();
    }

    public Set<Long> rooms() {
        return Set.copyOf(rooms.keySet());
    }
}
