package io.kvferry.decode;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVPoll;
import io.kvferry.protocol.Abort;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * Releasing a decode room so its pages can be reused: no write of the room may land afterwards.
 * Two-sided writes are drained through the room's landing count; one-sided writers (shm, ucx)
 * bypass this rank, so each of their prefill ranks must confirm with ABORT_ACK — or lose its link
 * and its permission — first.
 */
final class RoomRelease {
    private static final Logger log = LoggerFactory.getLogger(RoomRelease.class);
    /** How long clear() waits for a landing write before cutting the link it comes on. */
    static final long LANDING_DRAIN_MILLIS = 2000;

    private final DecodeRooms rooms;
    private final Duration abortAckTimeout;

    RoomRelease(DecodeRooms rooms, Duration abortAckTimeout) {
        this.rooms = rooms;
        this.abortAckTimeout = abortAckTimeout;
    }

    /**
     * Drops a room. Returns only when no write of the room can land any more: writes in flight are
     * waited for, and a link stuck mid-write (a stalled peer) is closed, which stops its reader.
     */
    void forget(DecodeRoom room) {
        if (room.slot.status() != KVPoll.Success) {
            // Every prefill rank of an unfinished room hears it is given up (over tcp too: else it goes on
            // sending a room this side drops, and holds it until its own timeouts).
            notifyAbort(room);
            quiesceOneSided(room);
        }
        if (!room.closeAndDrain(LANDING_DRAIN_MILLIS)) {
            log.warn("room {}: a write is still landing after {} ms; closing its links", room.room, LANDING_DRAIN_MILLIS);
            for (DecodeRoom.Target t : room.targets) t.link().closeAll(FailureKind.PEER_LOST, "a write of room " + room.room + " is stuck");
            room.closeAndDrain(Long.MAX_VALUE / 2_000_000L);
        }
        rooms.statuses.remove(room.slot);
        rooms.remove(room);
        for (DecodeRoom.Target t : room.targets) t.link().rooms.remove(room.room);
    }

    /**
     * Before an unfinished room's pages are reused: every one-sided prefill rank of the room must
     * confirm with ABORT_ACK that none of its writes is in flight; a rank that does not within
     * abortAckTimeout has its link cut, and a lost link's permission is revoked (which waits for
     * copies in progress).
     */
    private void quiesceOneSided(DecodeRoom room) {
        List<PrefillLink> oneSided = new ArrayList<>();
        for (DecodeRoom.Target t : room.targets) {
            if (!t.dummy() && t.link().oneSided() != null && !oneSided.contains(t.link())) oneSided.add(t.link());
        }
        if (oneSided.isEmpty()) return;
        long timeout = abortAckTimeout.toMillis();
        for (PrefillLink silent : room.awaitAbortAcks(oneSided, timeout)) {
            log.warn("room {}: {} sent no ABORT_ACK within {} ms; cutting the link before the pages are reused", room.room,
                    silent, timeout);
            silent.connection.close(FailureKind.PEER_LOST, "no ABORT_ACK for room " + room.room + " within " + timeout + " ms");
        }
        for (PrefillLink l : oneSided) {
            if (l.connection.isClosed() && !l.oneSided().revoke(abortAckTimeout)) {
                log.error("room {}: could not confirm that {} stopped writing ({} ms); releasing the room anyway", room.room, l, timeout);
            }
        }
    }

    /** Sends ABORT for a room to each of its prefill ranks, once (a dead link fails or revokes the room anyway). */
    void notifyAbort(DecodeRoom room) {
        if (!room.abortSent.compareAndSet(false, true)) return;
        for (DecodeRoom.Target t : room.targets) {
            try {
                t.link().connection.send(new Abort(room.room));
            } catch (IOException e) {
                // best effort
            }
        }
    }
}
