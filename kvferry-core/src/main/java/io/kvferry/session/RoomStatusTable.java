package io.kvferry.session;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVPoll;

import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.BooleanSupplier;

/**
 * Status of every room on one manager, with SGLang's rules: a status only moves forward; Failed is
 * sticky and keeps the first kind and reason recorded; only Bootstrapping and WaitingForInput may
 * create a room; a cleared (removed) room is never resurrected; a missing room reads as Failed.
 *
 * <p>Thread-safe: every change is one atomic {@code compute} on the map, so the scheduler thread,
 * reader threads and transfer workers may all update it. Every change is reported to the table's
 * {@link Listener} after it was made (metrics, the failure log line and the recent-failures ring
 * hang there: this is the one place rooms change state, so they are counted once).
 */
public final class RoomStatusTable {
    /**
     * One room's state; immutable. Kind and reason are set exactly when the status is Failed.
     *
     * @param createdNanos when the room entered the table ({@link System#nanoTime()})
     * @param sinceNanos   when it entered this status
     */
    public record Entry(KVPoll status, FailureKind kind, String reason, long createdNanos, long sinceNanos) {}

    /** Told of every status change, on the thread that made it, after it was made. */
    @FunctionalInterface
    public interface Listener {
        /**
         * @param from the status before ({@code null}: the room was just created)
         * @param to   the room's entry now
         */
        void changed(long room, KVPoll from, Entry to);
    }

    private final ConcurrentHashMap<Long, Entry> rooms = new ConcurrentHashMap<>();
    private final Listener listener;

    public RoomStatusTable() {
        this(null);
    }

    /** @param listener told of every change; null for none */
    public RoomStatusTable(Listener listener) {
        this.listener = listener;
    }
    /** Rooms whose writers asked for a {@link #failedFlag}; set when the room fails. */
    private final ConcurrentHashMap<Long, FailedFlag> flags = new ConcurrentHashMap<>();

    /** True once its room failed (or was cleared): what a writer checks between ops, without a map lookup. */
    public static final class FailedFlag implements BooleanSupplier {
        private volatile boolean failed;

        @Override
        public boolean getAsBoolean() {
            return failed;
        }
    }

    /** Applies a non-Failed status. Returns the room's status afterwards (Failed if absent). */
    public KVPoll update(long room, KVPoll status) {
        return apply(room, status, null);
    }

    /** Applies a non-Failed status; true when this call moved the room to it (false: absent, failed, or there already). */
    public boolean advance(long room, KVPoll status) {
        boolean[] moved = {false};
        apply(room, status, moved);
        return moved[0];
    }

    private KVPoll apply(long room, KVPoll status, boolean[] moved) {
        if (status == KVPoll.Failed) throw new IllegalArgumentException("use fail(room, kind, reason) for Failed");
        KVPoll[] from = new KVPoll[1];
        boolean[] changed = {false};
        Entry e = rooms.compute(room, (k, old) -> {
            if (old == null) {
                if (status != KVPoll.Bootstrapping && status != KVPoll.WaitingForInput) return null;
                changed[0] = true;
                long now = System.nanoTime();
                return new Entry(status, null, null, now, now);
            }
            if (old.status() == KVPoll.Failed || old.status().value() >= status.value()) return old;
            from[0] = old.status();
            changed[0] = true;
            return new Entry(status, null, null, old.createdNanos(), System.nanoTime());
        });
        if (changed[0] && listener != null) listener.changed(room, from[0], e);
        if (moved != null) moved[0] = changed[0];
        return e == null ? KVPoll.Failed : e.status();
    }

    /**
     * Fails a room that exists, keeping the first kind and reason. Returns true when this call moved
     * the room to Failed (false: absent or already Failed).
     */
    public boolean fail(long room, FailureKind kind, String reason) {
        if (kind == null) throw new IllegalArgumentException("a failure needs a kind");
        boolean[] changed = {false};
        KVPoll[] from = new KVPoll[1];
        Entry e = rooms.computeIfPresent(room, (k, old) -> {
            if (old.status() == KVPoll.Failed) return old;
            changed[0] = true;
            from[0] = old.status();
            return new Entry(KVPoll.Failed, kind, reason, old.createdNanos(), System.nanoTime());
        });
        if (changed[0]) {
            raise(room);
            if (listener != null) listener.changed(room, from[0], e);
        }
        return changed[0];
    }

    /**
     * The room's flag, made on first request. Either this call sees the room Failed or absent and
     * sets the flag, or a later {@link #fail} / {@link #remove} finds the flag and sets it.
     */
    public BooleanSupplier failedFlag(long room) {
        FailedFlag f = flags.computeIfAbsent(room, k -> new FailedFlag());
        if (status(room) == KVPoll.Failed) f.failed = true;
        return f;
    }

    private void raise(long room) {
        FailedFlag f = flags.get(room);
        if (f != null) f.failed = true;
    }

    public KVPoll status(long room) {
        Entry e = rooms.get(room);
        return e == null ? KVPoll.Failed : e.status();
    }

    /** The recorded failure reason, or null. */
    public String reason(long room) {
        Entry e = rooms.get(room);
        return e == null ? null : e.reason();
    }

    /** The recorded failure kind, or null (not failed, or unknown here). */
    public FailureKind kind(long room) {
        Entry e = rooms.get(room);
        return e == null ? null : e.kind();
    }

    /** The room's whole entry, or null when absent. */
    public Entry entry(long room) {
        return rooms.get(room);
    }

    public boolean contains(long room) {
        return rooms.containsKey(room);
    }

    public void remove(long room) {
        rooms.remove(room);
        FailedFlag f = flags.remove(room);
        if (f != null) f.failed = true; // a cleared room's writers stop too
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
        for (Entry e : rooms.values()) if (e.status() == status) n++;
        return n;
    }

    /** Every room with its entry, as a copy (for status pages). */
    public Map<Long, Entry> snapshot() {
        return Map.copyOf(rooms);
    }
}
