package io.kvferry.prefill;

import io.kvferry.protocol.TransferInfo;
import io.kvferry.session.RoomStatusTable;

import java.util.ArrayList;
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
    /** The decode instance the room's destinations belong to, fixed by its first transfer info. */
    volatile String boundInstance;
    /** Set once this rank's scheduler created the room's sender; until then the room is held for a decode only. */
    volatile boolean claimed;
    /** Set by the sweep that expires unclaimed rooms (once). */
    volatile boolean expiring;
    volatile int decodePrefixLen;
    final AtomicBoolean failureNotified = new AtomicBoolean();

    // scheduler thread
    int numPages = -1;
    int auxIndex = -1;
    int sentPages;
    boolean prefixPopped;

    // transfer worker, read by the scheduler through the metric
    volatile long bytesSent;
    /** Transfer worker only: bytes written and page digests per destination, in {@link #orderedDestinations()} order. */
    long[] sentTo;
    long[] digestOf;
    /** Transfer worker only: the corruption test hook chose this room and has not struck yet. */
    boolean corruptPending;
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

    /**
     * Binds the room to a decode instance on its first transfer info; returns the instance it is bound
     * to (another instance's infos are refused).
     */
    String bindTo(String instance) {
        synchronized (this) {
            if (boundInstance == null) boundInstance = instance;
            return boundInstance;
        }
    }

    /** Transfer infos held for a decode while no sender claimed the room: what each costs its link. Guarded by this. */
    private final List<Charge> charges = new ArrayList<>(1);

    private record Charge(DecodeLink link, long bytes) {}

    /** Charges a transfer info to its link's budget of unclaimed rooms, unless a sender already claimed the room. */
    void charge(DecodeLink link, TransferInfo info) {
        synchronized (this) {
            if (claimed) return;
            long bytes = PrefillRooms.heldBytes(info);
            charges.add(new Charge(link, bytes));
            link.unclaimedRooms.incrementAndGet();
            link.unclaimedBytes.addAndGet(bytes);
        }
    }

    /** The scheduler created this room's sender: its infos stop counting against their links' budgets. */
    void claim() {
        synchronized (this) {
            claimed = true;
            releaseCharges();
        }
    }

    /** Returns every charge (the room is claimed or dropped). */
    void releaseCharges() {
        synchronized (this) {
            for (Charge c : charges) {
                c.link().unclaimedRooms.decrementAndGet();
                c.link().unclaimedBytes.addAndGet(-c.bytes());
            }
            charges.clear();
        }
    }

    /** Whether every destination the room holds is on {@code link}. */
    boolean heldOnlyBy(DecodeLink link) {
        for (Destination d : destinations.values()) if (d.link() != link) return false;
        return true;
    }

    /** Whether the room has all its destinations (later transfer infos are refused). */
    boolean frozen() {
        return frozen != null;
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
