package io.kvferry.prefill;

import io.kvferry.api.KVPoll;
import io.kvferry.protocol.TransferInfo;
import io.kvferry.session.RoomStatusTable;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.BooleanSupplier;

/**
 * Prefill-side bookkeeping of one room. Destinations are added by connection reader threads and
 * frozen once {@code requiredDstInfoNum} arrived (the room is then WaitingForInput); the send
 * cursor belongs to the scheduler thread that drives the sender; the byte/timing figures belong to
 * the room's transfer strand (one task at a time, see {@link TransferWorkers}) and are published
 * through volatile fields.
 */
final class PrefillRoom {
    /** Where one decode rank wants this room's KV. */
    record Destination(DecodeLink link, TransferInfo info) {}

    final long room;
    /** When the room was created, on the manager's {@link io.kvferry.api.Ticker} (its bootstrap deadline counts from here). */
    final long createdTick;
    /** Its destinations, sorted by session id; replaced whole under this room's lock (most rooms have one). */
    private volatile List<Destination> destinations = List.of();
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
    /** The chunk reaching {@link #numPages} was queued: any later one would write the room's aux and state again. */
    boolean lastChunkSent;
    boolean prefixPopped;

    // transfer worker, read by the scheduler through the metric
    volatile long bytesSent;
    /** Transfer worker only: bytes written and page digests per destination, in {@link #orderedDestinations()} order. */
    long[] sentTo;
    long[] digestOf;
    /** Transfer worker only: the corruption test hook chose this room and has not struck yet. */
    boolean corruptPending;
    /** The room's strand only: the links its Failed STATUS went to, so each is told once. */
    private List<DecodeLink> failureToldTo;
    /**
     * The room's status, made with the record (the one live record of its id: {@link PrefillRooms#room}) and
     * removed with it: every change of this room goes through it, never by id, so nothing done to this
     * record reaches a newer request that took its id. As a flag it is the room's failed flag, which the
     * data paths check between ops.
     */
    final RoomStatusTable.Slot slot;

    /** The room's status. */
    KVPoll status() {
        return slot.status();
    }
    volatile long firstSendNanos;
    volatile long doneNanos;

    /** Set once the room fails or is cleared: what the data paths check between ops. */
    BooleanSupplier failed() {
        return slot;
    }

    PrefillRoom(long room, long createdTick, RoomStatusTable statuses) {
        this.room = room;
        this.createdTick = createdTick;
        this.slot = statuses.create(room);
        slot.own(this); // the failure record names this room's peers, even once it was cleared
    }

    /** The destinations in a stable order, fixed once the room is WaitingForInput. */
    private volatile List<Destination> frozen;

    void freezeDestinations() {
        frozen = destinations;
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
    private List<Charge> charges;

    private record Charge(DecodeLink link, long bytes) {}

    /** Charges a transfer info to its link's budget of unclaimed rooms, unless a sender already claimed the room. */
    void charge(DecodeLink link, TransferInfo info) {
        synchronized (this) {
            if (claimed) return;
            long bytes = PrefillRooms.heldBytes(info);
            if (charges == null) charges = new ArrayList<>(1);
            charges.add(new Charge(link, bytes));
            link.unclaimedRooms.incrementAndGet();
            link.unclaimedBytes.addAndGet(bytes);
        }
    }

    /** Set (under this record's lock) once the record is being dropped unclaimed: no sender may claim it then. */
    private boolean dropped;

    /**
     * The scheduler created this room's sender: its infos stop counting against their links' budgets.
     * False when the record was dropped unclaimed ({@link PrefillRooms#forgetUnclaimed}): the sender takes
     * a fresh record, and the drop's tombstone, which is in place by then. A record a sender claimed already
     * is a room in flight: a second sender would take its transfer over (the first request's pages, its
     * decode's destinations), so it is refused.
     *
     * @throws IllegalArgumentException when a sender claimed the room already
     */
    boolean claim() {
        synchronized (this) {
            if (dropped) return false;
            if (claimed) throw new IllegalArgumentException("bootstrap_room " + room + " is already in flight on this prefill rank");
            claimed = true;
            releaseCharges();
            return true;
        }
    }

    /** Marks the record dropped unless a sender claimed it first; true when marked. */
    boolean markDroppedUnlessClaimed() {
        synchronized (this) {
            if (claimed) return false;
            dropped = true;
            return true;
        }
    }

    /** Returns every charge (the room is claimed or dropped). */
    void releaseCharges() {
        synchronized (this) {
            if (charges == null) return;
            for (Charge c : charges) {
                c.link().unclaimedRooms.decrementAndGet();
                c.link().unclaimedBytes.addAndGet(-c.bytes());
            }
            charges.clear();
        }
    }

    /** The room's strand only: true the first time for {@code link}, when it is to be told the room failed. */
    boolean firstFailureNoticeTo(DecodeLink link) {
        if (failureToldTo == null) failureToldTo = new ArrayList<>(2);
        if (failureToldTo.contains(link)) return false;
        failureToldTo.add(link);
        return true;
    }

    /** Whether every destination the room holds is on {@code link}. */
    boolean heldOnlyBy(DecodeLink link) {
        for (Destination d : destinations) if (d.link() != link) return false;
        return true;
    }

    /** Whether every destination so far is on {@code lost} or on a link already closed (held for no live decode). */
    boolean heldOnlyByGone(DecodeLink lost) {
        for (Destination d : destinations) if (d.link() != lost && !d.link().connection.isClosed()) return false;
        return true;
    }

    /** The room's destinations so far, sorted by session id. */
    List<Destination> destinations() {
        return destinations;
    }

    /** Whether a destination of decode session {@code sessionId} was added. */
    boolean hasDestinationOf(String sessionId) {
        for (Destination d : destinations) if (d.link().sessionId().equals(sessionId)) return true;
        return false;
    }

    /** Adds a destination unless its session has one already; returns that earlier one, or null when added. */
    Destination addDestination(Destination d) {
        synchronized (this) {
            String id = d.link().sessionId();
            List<Destination> now = destinations;
            int at = 0;
            for (Destination e : now) {
                int c = e.link().sessionId().compareTo(id);
                if (c == 0) return e;
                if (c < 0) at++;
            }
            if (now.isEmpty()) {
                destinations = List.of(d);
            } else {
                List<Destination> next = new ArrayList<>(now.size() + 1);
                next.addAll(now);
                next.add(at, d);
                destinations = List.copyOf(next);
            }
            return null;
        }
    }

    /** Whether the room has all its destinations (later transfer infos are refused). */
    boolean frozen() {
        return frozen != null;
    }

    /** Destinations in a stable order (by session id), so every chunk visits them the same way. */
    List<Destination> orderedDestinations() {
        List<Destination> f = frozen;
        return f != null ? f : destinations;
    }
}
