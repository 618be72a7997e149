package io.kvferry.registry;

import java.util.concurrent.ConcurrentHashMap;
import java.util.function.LongSupplier;

/**
 * {@code room -> dp_rank} with a TTL. Readers drop expired entries themselves, so expiry is exact
 * whatever the sweep period; the periodic {@link #sweep()} only bounds memory for rooms nobody asks about.
 */
final class RoomDpTable {
    private record Entry(int dpRank, long stampNanos) {}

    private final ConcurrentHashMap<Long, Entry> entries = new ConcurrentHashMap<>();
    private final long ttlNanos;
    private final LongSupplier nanoClock;

    RoomDpTable(long ttlNanos, LongSupplier nanoClock) {
        this.ttlNanos = ttlNanos;
        this.nanoClock = nanoClock;
    }

    void put(long room, int dpRank) {
        entries.put(room, new Entry(dpRank, nanoClock.getAsLong()));
    }

    /** The DP rank of a live entry, or null. */
    Integer get(long room) {
        Entry e = entries.get(room);
        if (e == null) return null;
        if (expired(e, nanoClock.getAsLong())) {
            entries.remove(room, e);
            return null;
        }
        return e.dpRank();
    }

    /** Removes expired entries; returns how many went. */
    int sweep() {
        long now = nanoClock.getAsLong();
        int[] removed = {0};
        entries.forEach((room, e) -> {
            if (expired(e, now) && entries.remove(room, e)) removed[0]++;
        });
        return removed[0];
    }

    int size() {
        return entries.size();
    }

    private boolean expired(Entry e, long now) {
        return now - e.stampNanos() >= ttlNanos;
    }
}
