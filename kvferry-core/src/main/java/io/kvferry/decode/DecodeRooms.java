package io.kvferry.decode;

import io.kvferry.session.RoomStatusTable;

import java.util.concurrent.ConcurrentHashMap;

/**
 * The rooms of one decode rank and their status table. Rooms are added by the scheduler thread
 * (createReceiver) and removed by {@link RoomRelease}; readers and the write gate look them up.
 */
final class DecodeRooms {
    final RoomStatusTable statuses;
    private final ConcurrentHashMap<Long, DecodeRoom> rooms = new ConcurrentHashMap<>();

    /** Without a listener (tests of the parts). */
    DecodeRooms() {
        this(null);
    }

    /** @param listener told of every status change (the manager's telemetry) */
    DecodeRooms(RoomStatusTable.Listener listener) {
        statuses = new RoomStatusTable(listener);
    }

    /** Adds a room; false when one with that id is in flight already. */
    boolean add(DecodeRoom room) {
        return rooms.putIfAbsent(room.room, room) == null;
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
