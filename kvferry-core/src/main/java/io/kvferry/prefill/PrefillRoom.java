package io.kvferry.prefill;

import io.kvferry.protocol.TransferInfo;
import io.kvferry.session.RoomStatusTable;

import java.util.List;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.BooleanSupplier;

/**
 * Prefill-side bookkeeping of one room. Destinations are added by connection reader threads and
 * frozen once {@code requiredDstInfoNum} arrived (the room is then WaitingForInput); the send
 * cursor belongs to the scheduler thread that drives the sender; the byte/timing figures belong to
 * the transfer worker the room is pinned to and are published through volatile fields.
 */
final class PrefillRoom {
    /** Where one decode rank wants this room's KV. */
    record Destination(DecodeLink link, TransferInfo info) {}

    final long room;
    final int worker;
    /** When the room was created, on the manager's {@link io.kvferry.api.Ticker} (its bootstrap deadline counts from here). */
    final long createdTick;
    final ConcurrentHashMap<String, Destination> destinations = new ConcurrentHashMap<>();
    volatile int requiredDstInfoNum = Integer.MAX_VALUE;
    volatile int decodePrefixLen;
    final AtomicBoolean failureNotified = new AtomicBoolean();

    // scheduler thread
    int numPages = -1;
    int auxIndex = -1;
    int sentPages;
    boolean prefixPopped;

    // transfer worker, read by the scheduler through the metric
    volatile long bytesSent;
    /** Set once the room fails or is cleared; the data paths check it between ops (made on the first write). */
    private volatile BooleanSupplier failed;
    volatile long firstSendNanos;
    volatile long doneNanos;

    BooleanSupplier failed(RoomStatusTable statuses) {
        BooleanSupplier f = failed;
        if (f == null) failed = f = statuses.failedFlag(room);
        return f;
    }

    PrefillRoom(long room, int worker, long createdTick) {
        this.room = room;
        this.worker = worker;
        this.createdTick = createdTick;
    }

    /** The destinations in a stable order, fixed once the room is WaitingForInput. */
    private volatile List<Destination> frozen;

    void freezeDestinations() {
        frozen = sorted();
    }

    /** Destinations in a stable order (by session id), so every chunk visits them the same way. */
    List<Destination> orderedDestinations() {
        List<Destination> f = frozen;
        return f != null ? f : sorted();
    }

    private List<Destination> sorted() {
        return destinations.values().stream()
                .sorted((a, b) -> a.link().sessionId().compareTo(b.link().sessionId()))
                .toList();
    }
}
