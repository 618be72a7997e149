package io.kvferry.engine.serving;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Rooms aborted before this engine had a request for them. The router sends /abort on its own
 * connection when the other engine failed fast, so it may overtake the room's /generate; without this
 * the request, once queued, would wait for its peer until kvferry's timeouts (minutes), holding its
 * client, an aux row and pages. Remembered for {@link #TTL_NANOS}, at most {@link #MAX_ROOMS} of them
 * (oldest dropped first). Scheduler thread only.
 */
final class RecentAborts {
    static final long TTL_NANOS = 60_000_000_000L;
    static final int MAX_ROOMS = 4096;

    private final LinkedHashMap<Long, Long> abortedAt = new LinkedHashMap<>() {
        @Override
        protected boolean removeEldestEntry(Map.Entry<Long, Long> eldest) {
            return size() > MAX_ROOMS;
        }
    };

    /** An abort that matched no request here. */
    void remember(long room, long nowNanos) {
        abortedAt.remove(room); // re-inserted last: eviction stays oldest-first
        abortedAt.put(room, nowNanos);
    }

    /** Whether a request for {@code room} arriving now was aborted already (consumed: a later request with the id runs). */
    boolean take(long room, long nowNanos) {
        Long at = abortedAt.remove(room);
        return at != null && nowNanos - at <= TTL_NANOS;
    }
}
