package io.kvferry.decode;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVPoll;
import io.kvferry.session.RoomStatusTable;

import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Consumer;

/**
 * The rooms of one decode rank and their status table. Rooms are added by the scheduler thread
 * (createReceiver) and removed by {@link RoomRelease}; readers and the write gate look them up.
 */
final class DecodeRooms {
    final RoomStatusTable statuses;
    private final ConcurrentHashMap<Long, DecodeRoom> rooms = new ConcurrentHashMap<>();
    /** Set once, by {@link #shutDown}: why every room fails from then on. */
    private volatile String shutDownReason;

    /** Told of each room {@link #succeed} moved to Success, with its record. */
    private final Consumer<DecodeRoom> onSuccess;

    /** Without a listener (tests of the parts). */
    DecodeRooms() {
        this(null, r -> { });
    }

    /**
     * @param listener  told of every status change (the manager's telemetry)
     * @param onSuccess told of each room that reached Success, with its record in hand
     */
    DecodeRooms(RoomStatusTable.Listener listener, Consumer<DecodeRoom> onSuccess) {
        statuses = new RoomStatusTable(listener);
        this.onSuccess = onSuccess;
    }

    /**
     * Every prefill rank reported Success: the room's status moves and its figures are recorded from the
     * record in hand (the scheduler may clear the room as soon as it sees Success).
     */
    void succeed(DecodeRoom room) {
        if (room.slot.advance(KVPoll.Success)) onSuccess.accept(room);
    }

    /**
     * A new room for {@code id}, made together with its own status slot (Bootstrapping), or null when a
     * room with that id is in flight already: the id's one live record owns the id's one live slot.
     */
    DecodeRoom create(long id, String bootstrapAddr) {
        DecodeRoom[] made = {null};
        rooms.computeIfAbsent(id, k -> made[0] = new DecodeRoom(k, bootstrapAddr, statuses.create(k)));
        // Made after shutDown's sweep (a createReceiver racing teardown): failed here, or it would stay Bootstrapping.
        String shutDown = shutDownReason;
        if (made[0] != null && shutDown != null) made[0].slot.failIfUnfinished(FailureKind.SHUTDOWN, shutDown);
        return made[0];
    }

    /**
     * Teardown: every unfinished room fails as {@code SHUTDOWN}, those listed now and any made later,
     * and each listed one is handed to {@code each} (its landings drained). The reason is published
     * before the sweep reads the map and {@link #create} reads it after listing, so a room made
     * concurrently is seen by one of the two (both volatile orders).
     */
    void shutDown(String reason, Consumer<DecodeRoom> each) {
        shutDownReason = reason;
        for (DecodeRoom r : rooms.values()) {
            r.slot.failIfUnfinished(FailureKind.SHUTDOWN, reason); // a room that succeeded stays so
            each.accept(r);
        }
    }

    DecodeRoom get(long room) {
        return rooms.get(room);
    }

    boolean isTracked(long room) {
        return rooms.containsKey(room);
    }

    void remove(DecodeRoom room) {
        rooms.remove(room.room, room);
    }

    Iterable<DecodeRoom> all() {
        return rooms.values();
    }

    int size() {
        return rooms.size();
    }
}
