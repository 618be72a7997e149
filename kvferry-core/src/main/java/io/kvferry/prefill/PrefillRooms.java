package io.kvferry.prefill;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVPoll;
import io.kvferry.api.Ticker;
import io.kvferry.protocol.Status;
import io.kvferry.protocol.TransferInfo;
import io.kvferry.session.RoomStatusTable;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Consumer;

/**
 * The rooms of one prefill rank: their records, their status table, and the tombstones of rooms
 * cleared here. Failing a room tells its decodes once, on the room's strand (after its in-flight
 * chunks). Thread-safe: the scheduler thread, the session readers and the workers all use it.
 */
final class PrefillRooms {
    private static final int TOMBSTONES = 16_384;

    final RoomStatusTable statuses;
    private final ConcurrentHashMap<Long, PrefillRoom> rooms = new ConcurrentHashMap<>();
    /** Set once, by {@link #shutDown}: why every room fails from then on. */
    private volatile String shutDownReason;
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

    /**
     * Why a cleared room cannot be served again: how it ended (the reason of a concluded room is
     * worded only when a late info asks, not for every room cleared).
     *
     * @param failsLaterSender a sender created for the room later fails at once with this reason: the room was
     *                         dropped before this rank's scheduler started it (its decode went away, or its info
     *                         expired), or a decode's info for it was refused since ({@link #refuseInfo})
     */
    record Tombstone(long room, KVPoll status, FailureKind failureKind, String failure, boolean failsLaterSender) {
        FailureKind kind() {
            return status == KVPoll.Failed ? failureKind : FailureKind.BAD_REQUEST;
        }

        String reason() {
            if (status == KVPoll.Failed) return failure == null ? "failed on prefill" : failure;
            return "room " + room + " already concluded (" + status + ") and was cleared on this prefill rank";
        }
    }

    private final Ticker ticker;

    /** Told of each room {@link #succeed} moved to Success, with its record. */
    private final Consumer<PrefillRoom> onSuccess;

    PrefillRooms(TransferWorkers workers, int uniqueRank, Ticker ticker, RoomStatusTable.Listener listener,
                 Consumer<PrefillRoom> onSuccess) {
        this.onSuccess = onSuccess;
        this.statuses = new RoomStatusTable(listener);
        this.ticker = ticker;
        this.workers = workers;
        this.uniqueRank = uniqueRank;
    }

    /**
     * The room's record, created on first use (by its sender or its first transfer info) together with its
     * status slot, atomically: the id's one live record owns the id's one live slot.
     */
    PrefillRoom room(long room) {
        PrefillRoom r = rooms.get(room);
        if (r == null) r = rooms.computeIfAbsent(room, id -> new PrefillRoom(id, ticker.nanoTime(), statuses));
        // Listed after shutDown's sweep (a createSender racing teardown): failed here, or it would stay Bootstrapping.
        String shutDown = shutDownReason;
        if (shutDown != null) r.slot.failIfUnfinished(FailureKind.SHUTDOWN, shutDown);
        return r;
    }

    /** Every room tracked now. */
    Iterable<PrefillRoom> all() {
        return rooms.values();
    }

    /**
     * Teardown: every unfinished room fails as {@code SHUTDOWN}, those listed now and any listed later.
     * The reason is published before the sweep reads the map and {@link #room} reads it after listing,
     * so a room listed concurrently is seen by one of the two (both volatile orders).
     */
    void shutDown(String reason) {
        shutDownReason = reason;
        for (PrefillRoom r : rooms.values()) r.slot.failIfUnfinished(FailureKind.SHUTDOWN, reason);
    }

    /** The workers that run rooms' strands. */
    TransferWorkers workers() {
        return workers;
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

    /**
     * A decode's transfer info for a room cleared here (not tracked, a tombstone left): the tombstone it is
     * refused with, or null when the room is tracked or was never seen. The decode is told the room failed and
     * sends no other info for it, so a sender this rank's scheduler creates for that id afterwards (the id used
     * again) could never be served: the tombstone now fails it at once, instead of it bootstrapping until its
     * timeout. A sender created before the info keeps the record tracked, and that info is taken.
     */
    Tombstone refuseInfo(long room) {
        synchronized (tombstones) {
            if (rooms.containsKey(room)) return null;
            Tombstone t = tombstones.get(room);
            if (t != null && !t.failsLaterSender()) {
                tombstones.put(room, t = new Tombstone(t.room(), t.status(), t.failureKind(), t.failure(), true));
            }
            return t;
        }
    }

    /** Rooms one decode link may hold transfer infos for while this rank has no request for them yet. */
    static final int MAX_UNCLAIMED_ROOMS_PER_LINK = 16_384;
    /** The memory those held infos may take per link (their page and state index arrays). */
    static final long MAX_UNCLAIMED_BYTES_PER_LINK = 64L << 20;

    /** What a transfer info held for a decode costs in memory. */
    static long heldBytes(TransferInfo t) {
        long bytes = 64L + 4L * t.dstKvIndices().length;
        for (int[] s : t.stateIndices()) bytes += 16L + 4L * (s == null ? 0 : s.length);
        return bytes;
    }

    /** Whether {@code link} may have one more transfer info held for a room no sender claimed yet. */
    boolean mayHold(DecodeLink link, TransferInfo t) {
        return link.unclaimedRooms.get() < MAX_UNCLAIMED_ROOMS_PER_LINK
                && link.unclaimedBytes.get() + heldBytes(t) <= MAX_UNCLAIMED_BYTES_PER_LINK;
    }

    /**
     * Rooms held for a decode whose request never reached this rank within {@code timeoutNanos} (the
     * waiting timeout: the decode gives up on the room by then anyway):
     * failed (the decode is told) and dropped, so a decode's stray metadata cannot pin memory.
     */
    int expireUnclaimed(long timeoutNanos) {
        long now = ticker.nanoTime();
        int expired = 0;
        for (PrefillRoom r : rooms.values()) {
            if (r.claimed || r.expiring || now - r.createdTick < timeoutNanos) continue;
            r.expiring = true;
            fail(r, FailureKind.WAITING_TIMEOUT, "no request for room " + r.room + " reached prefill rank " + uniqueRank
                    + " within " + timeoutNanos / 1_000_000_000L + " s of its transfer info (the waiting timeout)");
            // Dropped on the room's strand, after the failure notice it queued went out (unless a sender claimed it by then).
            workers.enqueue(r.room, () -> forgetUnclaimed(r));
            expired++;
        }
        return expired;
    }

    /**
     * The failure a sender created now for {@code room} starts with: the room was dropped before this
     * rank started it (its decode left, or its info expired), or a decode's info for it was refused since
     * it was cleared. Null when it was never seen, or was started and no info was refused since.
     */
    Tombstone droppedBeforeStart(long room) {
        synchronized (tombstones) {
            Tombstone t = tombstones.get(room);
            return t != null && t.failsLaterSender() ? t : null;
        }
    }

    /**
     * Drops a record no sender claimed (held for a decode only), atomically with {@link PrefillRoom#claim}:
     * a sender created meanwhile either claimed it first (then it stays, with its failure) or finds it
     * dropped and takes a fresh record and the tombstone this leaves. Before, the check and the drop were
     * apart, and a sender that claimed the record in between lost it (its slot removed under it, the
     * failure's reason gone) or, created between the tombstone and the drop, started a fresh room that
     * waited out the bootstrap timeout for a decode that had already been told it failed.
     * True when it dropped the record.
     */
    boolean forgetUnclaimed(PrefillRoom r) {
        return forgetUnclaimed(r, null);
    }

    /**
     * {@link #forgetUnclaimed(PrefillRoom)} of a room held only for {@code onlyHolder}'s decode: checked again
     * under the record's lock (atomically with {@link PrefillRoom#addDestination}), since another decode
     * session may have attached its transfer info after the caller looked; then the room stays for it.
     */
    boolean forgetUnclaimed(PrefillRoom r, DecodeLink onlyHolder) {
        synchronized (r) {
            if (onlyHolder != null && !r.heldOnlyBy(onlyHolder)) return false;
            if (rooms.get(r.room) != r || !r.markDroppedUnlessClaimed()) return false;
            forget(r);
            return true;
        }
    }

    /**
     * {@link #forgetUnclaimed(PrefillRoom)} of a failed room held only for decode links that are gone:
     * {@code lost} and links closed before it (a room of several decode ranks of one instance outlives the
     * first loss). Checked again under the record's lock, as {@link #forgetUnclaimed(PrefillRoom, DecodeLink)}.
     */
    boolean forgetFailedOfLostLinks(PrefillRoom r, DecodeLink lost) {
        synchronized (r) {
            if (r.slot.status() != KVPoll.Failed || !r.heldOnlyByGone(lost)) return false;
            if (rooms.get(r.room) != r || !r.markDroppedUnlessClaimed()) return false;
            forget(r);
            return true;
        }
    }

    /**
     * Drops a room's record and its status, leaving a tombstone of how it ended. Only while it is the id's
     * record: a record dropped before (a sender's clear after the unclaimed sweep, say) has left its
     * tombstone, and a newer request may hold the id by now, whose record, status and link entries stay.
     */
    void forget(PrefillRoom r) {
        if (rooms.get(r.room) != r) {
            statuses.remove(r.slot); // removed with the record already; this changes nothing in a newer slot
            return;
        }
        RoomStatusTable.Entry e = r.slot.current();
        Tombstone t = new Tombstone(r.room, e.status(), e.kind(), e.reason(), e.status() == KVPoll.Failed && !r.claimed);
        synchronized (tombstones) {
            tombstones.put(r.room, t); // before the record goes: a late info finds the one or the other
        }
        // The record goes before its slot and its links' entries: a transfer info being attached meanwhile then
        // either finds the record gone and takes out what it added (DecodeSessions.forgetIfOrphaned), or added
        // its destination before the walk below. Each entry goes only with this record: a retry may hold the id.
        if (!rooms.remove(r.room, r)) return; // another forget of this record got there first
        statuses.remove(r.slot);
        r.releaseCharges();
        for (PrefillRoom.Destination d : r.destinations()) d.link().rooms.remove(r.room, r);
    }

    /**
     * The room reached Success (its last chunk's bytes and statuses went out): its status moves, and the
     * manager's telemetry records its figures from the record in hand (a scheduler that saw Success may
     * clear the room at once, so nothing is looked up by id afterwards).
     */
    void succeed(PrefillRoom room) {
        if (room.slot.advance(KVPoll.Success)) onSuccess.accept(room);
    }

    /**
     * Fails a room locally and, once, tells every real destination (on the room's strand, after in-flight
     * chunks). A room that had reached Success fails here only (SGLang's abort() latches its own state):
     * its bytes and statuses all went out, so its decodes are not told (see {@link #notifyOnce}). A record
     * cleared meanwhile (a chunk or a sender still holding it) fails nothing here: if a newer request holds
     * its id by now, that request's status and its decode are not this record's to touch; if none does,
     * the old destinations are still told (unless the room had succeeded).
     */
    void fail(PrefillRoom room, FailureKind kind, String reason) {
        PrefillRoom current = rooms.get(room.room);
        if (current != room) {
            if (current == null) notifyOnce(room);
            return;
        }
        room.slot.fail(kind, reason); // a slot cleared in between stays as it is
        notifyOnce(room);
    }

    /**
     * Fails a room that is still this record and has not concluded: for a failure found off the room's
     * path after the fact (its DP group's publication), which must not turn a room that succeeded
     * meanwhile, or a newer request that took its id, into a failure. True when it failed the room.
     */
    boolean failIfUnfinished(PrefillRoom room, FailureKind kind, String reason) {
        if (rooms.get(room.room) != room || !room.slot.failIfUnfinished(kind, reason)) return false;
        notifyOnce(room);
        return true;
    }

    /**
     * Tells the room's destinations its recorded failure, unless that was done already or the room had
     * reached Success before it failed: a concluded transfer's decodes may hold it complete and verified
     * by now, and a Failed STATUS must not reach them. The failure is read from the room's own slot, which
     * keeps it once the scheduler cleared the room (it may, the moment it sees Failed).
     */
    void notifyOnce(PrefillRoom room) {
        if (room.slot.reachedSuccess()) return;
        if (!room.failureNotified.compareAndSet(false, true)) return;
        RoomStatusTable.Entry e = room.slot.failure();
        workers.enqueue(room, admitted -> notifyFailure(room, e, null, admitted));
    }

    /**
     * Tells a destination added to a room whose failure notice was queued already (a decode rank's
     * transfer info can arrive after the room failed while it still collected destinations): the
     * notice went to the destinations it was admitted with, which may not include this one, so this
     * one is told on its own link, on the room's strand, which tells each link once (the notice may
     * have been admitted with this destination after all). A room that had reached Success tells no one.
     */
    void notifyLateDestination(PrefillRoom room, DecodeLink link) {
        if (!room.failureNotified.get() || room.slot.reachedSuccess()) return;
        RoomStatusTable.Entry e = room.slot.failure();
        workers.enqueue(room.room, link, () -> {
            if (room.firstFailureNoticeTo(link)) sendFailure(room.room, e, link);
        });
    }

    /**
     * The notice that tells the room's destinations other than {@code aborting} that it failed (a decode
     * rank that aborted a room with several destinations knows; its peers would otherwise wait out their
     * own timeouts), to be run on the room's strand; null when the room had reached Success. The failure
     * is read from the room's slot, as in {@link #notifyOnce}.
     */
    TransferWorkers.ToAdmitted noticeToOthers(PrefillRoom room, DecodeLink aborting) {
        if (room.slot.reachedSuccess()) return null; // Success is final across the link (see notifyOnce)
        RoomStatusTable.Entry e = room.slot.failure();
        return admitted -> notifyFailure(room, e, aborting, admitted);
    }

    /** Sends the failure to the destinations the notice was admitted to (not to one added since: see notifyLateDestination). */
    private void notifyFailure(PrefillRoom room, RoomStatusTable.Entry e, DecodeLink except, List<PrefillRoom.Destination> admitted) {
        for (PrefillRoom.Destination d : admitted) {
            if (d.info().dummy() || d.link() == except || !room.firstFailureNoticeTo(d.link())) continue;
            sendFailure(room.room, e, d.link());
        }
    }

    private void sendFailure(long room, RoomStatusTable.Entry e, DecodeLink link) {
        String reason = e == null || e.reason() == null ? "Failed on prefill rank " + uniqueRank : e.reason();
        FailureKind kind = e == null ? FailureKind.UNKNOWN : e.kind();
        link.sendQuietly(new Status(room, KVPoll.Failed, kind, uniqueRank, reason));
    }
}
