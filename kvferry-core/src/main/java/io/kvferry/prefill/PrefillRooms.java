package io.kvferry.prefill;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVPoll;
import io.kvferry.api.Ticker;
import io.kvferry.protocol.Status;
import io.kvferry.session.RoomStatusTable;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The rooms of one prefill rank: their records, their status table, and the tombstones of rooms
 * cleared here. Failing a room tells its decodes once, on the room's worker (after its in-flight
 * chunks). Thread-safe: the scheduler thread, the session readers and the workers all use it.
 */
final class PrefillRooms {
    private static final int TOMBSTONES = 16_384;

    final RoomStatusTable statuses;
    private final ConcurrentHashMap<Long, PrefillRoom> rooms = new ConcurrentHashMap<>();
    /**
     * Rooms cleared here, newest last (bounded): a decode's metadata arriving after that (a late
     * info, a restarted decode repeating a request) gets a Failed status instead of re-creating a
     * room nobody will ever send. Guarded by itself.
     */
    private final LinkedHashMap<Long, Tombstone> tombstones = new LinkedHashMap<>() {
        @Override
        protected boolean removeEldestEntry(Map.Entry<Long, Tombstone> eldest) {
            return size() > TOMBSTONES;
        }
    };
    private final TransferWorkers workers;
    private final int uniqueRank;

    /** Why a cleared room cannot be served again. */
    record Tombstone(FailureKind kind, String reason) {}

    private final Ticker ticker;

    PrefillRooms(TransferWorkers workers, int uniqueRank, Ticker ticker, RoomStatusTable.Listener listener) {
        this.statuses = new RoomStatusTable(listener);
        this.ticker = ticker;
        this.workers = workers;
        this.uniqueRank = uniqueRank;
    }

    /** The room's record, created on first use (by its sender or its first transfer info). */
    PrefillRoom room(long room) {
        return rooms.computeIfAbsent(room, r -> new PrefillRoom(r, workers.workerOf(r), ticker.nanoTime()));
    }

    /** The room's record, or null. */
    PrefillRoom get(long room) {
        return rooms.get(room);
    }

    boolean isTracked(long room) {
        return rooms.containsKey(room);
    }

    int size() {
        return rooms.size();
    }

    /** Why a room that is not tracked any more was cleared, or null (never seen, or tracked). */
    Tombstone buried(long room) {
        synchronized (tombstones) {
            return rooms.containsKey(room) ? null : tombstones.get(room);
        }
    }

    /** Drops a room, leaving a tombstone when it had concluded or failed. */
    void forget(long room) {
        RoomStatusTable.Entry e = statuses.entry(room);
        if (e != null) {
            Tombstone t = e.status() == KVPoll.Failed
                    ? new Tombstone(e.kind(), e.reason() == null ? "failed on prefill" : e.reason())
                    : new Tombstone(FailureKind.BAD_REQUEST,
                            "room " + room + " already concluded (" + e.status() + ") and was cleared on this prefill rank");
            synchronized (tombstones) {
                tombstones.put(room, t);
            }
        }
        statuses.remove(room);
        PrefillRoom r = rooms.remove(room);
        if (r != null) {
            for (PrefillRoom.Destination d : r.destinations.values()) d.link().rooms.remove(room);
        }
    }

    /** Fails a room locally and, once, tells every real destination (on the room's worker, after in-flight chunks). */
    void fail(PrefillRoom room, FailureKind kind, String reason) {
        statuses.fail(room.room, kind, reason);
        notifyOnce(room);
    }

    /**
     * Tells the room's destinations its recorded failure, unless that was done already. The entry is
     * read now: the scheduler may clear the room before the worker gets to the notice.
     */
    void notifyOnce(PrefillRoom room) {
        if (!room.failureNotified.compareAndSet(false, true)) return;
        RoomStatusTable.Entry e = statuses.entry(room.room);
        workers.enqueue(room.room, () -> notifyFailure(room, e));
    }

    private void notifyFailure(PrefillRoom room, RoomStatusTable.Entry e) {
        String reason = e == null || e.reason() == null ? "Failed on prefill rank " + uniqueRank : e.reason();
        FailureKind kind = e == null ? FailureKind.UNKNOWN : e.kind();
        for (PrefillRoom.Destination d : room.orderedDestinations()) {
            if (d.info().dummy()) continue;
            d.link().sendQuietly(new Status(room.room, KVPoll.Failed, kind, uniqueRank, reason));
        }
    }
}
