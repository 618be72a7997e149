package io.kvferry.decode;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVPoll;
import io.kvferry.api.Ticker;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.metrics.LogSafe;
import io.kvferry.metrics.WarnLimiter;
import io.kvferry.memory.SegmentCrc;
import io.kvferry.protocol.AbortAck;
import io.kvferry.protocol.ControlMessage;
import io.kvferry.protocol.Heartbeat;
import io.kvferry.protocol.ProtocolException;
import io.kvferry.protocol.Region;
import io.kvferry.protocol.Status;
import io.kvferry.protocol.WriteHeader;
import io.kvferry.protocol.WriteList;
import io.kvferry.session.Failures;
import io.kvferry.session.OwnedTaskThread;
import io.kvferry.transport.ControlConnection;
import io.kvferry.transport.LinkOffer;
import io.kvferry.transport.WriteRejectedException;
import io.kvferry.transport.WriteSink;
import io.kvferry.transport.tcp.TcpDestination;
import io.kvferry.transport.tcp.TcpLander;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.EOFException;
import java.io.IOException;
import java.lang.foreign.ValueLayout;
import java.time.Duration;

/**
 * Reads what prefill ranks send a decode rank, one thread per connection of a {@link PrefillLink}:
 * WRITEs and WRITE_LISTs land through the reader's {@link TcpLander} (tcp's, through the {@link WriteGate} it was
 * handed), STATUSes conclude rooms (behind the metadata gate),
 * ABORT_ACKs release rooms waiting in {@link RoomRelease}. A lost link fails exactly the rooms it
 * still owed and has its one-sided permission revoked on the owned revoker thread.
 */
final class LinkReader {
    private static final Logger log = LoggerFactory.getLogger(LinkReader.class);
    /** How long a stripe that saw the prefill close waits for the link's other stripes to drain. */
    private static final long STRIPE_DRAIN_MILLIS = 500;

    private final DecodeRooms rooms;
    private final TcpDestination tcp;
    private final RegisteredMemory memory;
    private final LinkDirectory directory;
    private final OwnedTaskThread revoker;
    private final Duration abortAckTimeout;
    private final String threadPrefix;
    private volatile boolean closed;
    /** Statuses from a link that is not one of the room's prefill ranks. */
    private final WarnLimiter strangerStatusWarn;
    /** Each reader thread's CRC for page digests. */
    private final ThreadLocal<SegmentCrc> crcs = ThreadLocal.withInitial(SegmentCrc::new);

    LinkReader(DecodeRooms rooms, TcpDestination tcp, RegisteredMemory memory, LinkDirectory directory, OwnedTaskThread revoker,
               Duration abortAckTimeout, int engineRank, Ticker ticker) {
        this.strangerStatusWarn = new WarnLimiter(ticker::nanoTime, "statuses from links that are not one of their room's prefill ranks");
        this.rooms = rooms;
        this.tcp = tcp;
        this.memory = memory;
        this.directory = directory;
        this.revoker = revoker;
        this.abortAckTimeout = abortAckTimeout;
        this.threadPrefix = "kvferry-decode-reader-" + engineRank + "-";
    }

    /** Starts the link's reader threads (its control connection and each stripe); the link keeps them for joining. */
    void start(PrefillLink link) {
        link.reader = Thread.ofPlatform().daemon().name(threadPrefix + link.endpoint).start(() -> readLoop(link, link.connection));
        for (ControlConnection stripe : link.stripes) {
            link.stripeReaders.add(Thread.ofPlatform().daemon().name(threadPrefix + "stripe-" + link.endpoint)
                    .start(() -> readLoop(link, stripe)));
        }
    }

    /** Teardown began: lost links fail nothing more (teardown fails every room itself). */
    void close() {
        closed = true;
    }

    private void readLoop(PrefillLink link, ControlConnection conn) {
        String why = "connection closed";
        boolean cleanClose = false;
        RuntimeException readerFailed = null;
        // This reader's, reused for every WRITE it lands: the gate counts each against the link it came on.
        TcpLander lander = tcp.lander(conn, new WriteSink.Landing(link.endpoint, link.checksum));
        try {
            while (!closed) {
                ControlMessage m = conn.read();
                switch (m) {
                    case WriteList l -> onWrite(link, l.room(), lander.land(l));
                    case WriteHeader w -> onWrite(link, w.room(), lander.land(w));
                    case Status s -> onStatus(link, s);
                    case Heartbeat hb -> {
                        // liveness only
                    }
                    case AbortAck a -> {
                        // Only the answer to an ABORT this room sent: a stray ACK (a buggy peer, a retry's
                        // id) must not stand in for the one a release of the room will wait for.
                        DecodeRoom r = rooms.get(a.room());
                        if (r != null && r.abortSent.get() && r.targetIndexOf(link) >= 0) r.abortAcked(link);
                    }
                    default -> throw new ProtocolException("unexpected " + m.type() + " from prefill");
                }
            }
        } catch (EOFException e) {
            why = "connection closed by prefill";
            cleanClose = true;
        } catch (IOException e) {
            why = Failures.message(e);
            if (!closed) log.warn("connection to {}: {}", link, why);
        } catch (RuntimeException e) {
            // This side's own failure (e.g. the engine closed its pools' arena while a room still expected writes): the
            // link cannot go on, but its rooms must say what happened, not that the prefill went away.
            readerFailed = e;
            why = "the decode's reader of this link failed: " + e;
            log.error("the reader of the link to {} failed; its rooms fail with it", link, e);
        } finally {
            String reason = conn.closeReason();
            FailureKind kind = readerFailed != null ? FailureKind.TRANSFER_ERROR
                    : reason != null && conn.closeKind() != null ? conn.closeKind() : FailureKind.PEER_LOST;
            String roomReason = readerFailed == null ? "Lost connection with prefill instance (bootstrap_addr: " + link.bootstrapAddr + ")"
                    : "the decode's reader of the link to prefill instance (bootstrap_addr: " + link.bootstrapAddr + ") failed: " + readerFailed;
            onLinkLost(link, kind, readerFailed == null && reason != null ? reason : why, cleanClose && reason == null, roomReason);
        }
    }

    /** After a WRITE or WRITE_LIST was landed (rejected null) or refused. */
    private void onWrite(PrefillLink link, long room, WriteRejectedException rejected) throws IOException {
        if (rejected == null) return;
        if (rejected.fatal()) throw new ProtocolException("write from " + link + " rejected: " + rejected.getMessage());
        rejectWrite(link, room, rejected);
    }

    private void rejectWrite(PrefillLink link, long room, WriteRejectedException rejected) {
        String from = link.toString();
        // The record the write was judged against, not a lookup now: a cleared room's id may have been taken
        // by a retry since, which this rejection is not about. Refused before any lookup: the room's record now.
        DecodeRoom r = rejected.judged() ? (rejected.room() instanceof DecodeRoom judged ? judged : null) : rooms.get(room);
        if (r == null || r.slot.status().isTerminal()) {
            log.debug("dropped a write for inactive room {} from {}: {}", room, from, rejected.getMessage());
            return;
        }
        if (rejected.fromStranger() || r.targetIndexOf(link) < 0) { // as a STATUS from such a link: the room is not that link's to fail
            // Debug, not warn: every such frame lands here, and a linked peer could flood the log with them.
            log.debug("dropped a write for room {} from {}: {}", room, from, rejected.getMessage());
            return;
        }
        String reason = (rejected.kind() == FailureKind.INTEGRITY ? "" : "Rejected a write from " + from + ": ") + rejected.getMessage();
        log.debug("room {}: {}", room, reason); // the room's failure line (io.kvferry.failures) reports it
        // Atomically unfinished: another reader (another prefill rank's) may conclude the room right now.
        r.slot.failIfUnfinished(rejected.kind(), reason);
    }

    /** Warnings logged so far about statuses from a link that is not one of the room's prefill ranks (tests). */
    long strangerStatusWarnings() {
        return strangerStatusWarn.warnings();
    }

    private void onStatus(PrefillLink link, Status s) {
        DecodeRoom room = rooms.get(s.room());
        if (room == null) return; // cleared: never resurrect
        int target = room.targetIndexOf(link);
        if (target < 0) {
            // A linked prefill can send these at wire rate: a warning at most once a second, the rest at debug.
            strangerStatusWarn.log(log, "ignored a status for room {} from {}, which is not one of its prefill ranks", s.room(), link);
            return;
        }
        if (s.status() == KVPoll.Success) {
            if (room.targets.get(target).dummy()) {
                // A dummy rank (MLA, decode TP below prefill TP) owes nothing, so its count would check out, and the room
                // waits for one Success in all: it must not stand in for the writing rank's (no prefill sends one).
                String dummy = "prefill rank " + link.prefillUniqueRank + " at " + link.endpoint + " reported Success for room "
                        + s.room() + ", of which it writes nothing (it got a dummy transfer info); the room's KV comes from another rank";
                if (room.slot.failIfUnfinished(FailureKind.INTEGRITY, dummy)) log.warn("room {}: {}", s.room(), dummy); // once a room
                return;
            }
            String incomplete = checkComplete(room, target, link, s);
            if (incomplete != null) {
                log.warn("room {}: {}", s.room(), incomplete);
                room.slot.fail(FailureKind.INTEGRITY, incomplete);
                return;
            }
            if (room.respond(link.prefillUniqueRank) >= room.requiredResponses) {
                String corrupt = checkMetadataRoom(room);
                if (corrupt != null) {
                    room.slot.fail(FailureKind.INTEGRITY, corrupt);
                    return;
                }
                if (room.slot.status() != KVPoll.Failed) room.successNanos = System.nanoTime();
                rooms.succeed(room);
            }
        } else if (s.status() == KVPoll.Failed) {
            // The prefill's words: escaped, they become the room's reason and reach logs, exceptions and pages.
            // A room already verified complete here stays Success: its bytes landed, whatever the prefill did since.
            room.slot.failIfUnfinished(s.kind(), s.reason().isEmpty() ? Failures.DEFAULT_PREFILL_FAILURE : LogSafe.text(s.reason()));
        }
    }

    /**
     * Success means complete: the rank reports every byte its coverage says it owes the room, on a
     * two-sided path those bytes also landed here, and where checksums travel in STATUS the digest
     * of what landed matches the prefill's. Returns why not, or null.
     */
    private String checkComplete(DecodeRoom room, int i, PrefillLink link, Status s) {
        DecodeRoom.Allowance a = room.allowance;
        if (a == null) return "Success from " + link + " for room " + room.room + " before its metadata was sent";
        long owed = a.owed()[i];
        if (s.bytes() != owed) {
            return "incomplete transfer: " + from(link) + " reports " + s.bytes() + " of the " + owed + " bytes it owes room " + room.room;
        }
        if (link.oneSided() == null) {
            long landed = room.landedFrom.get(i);
            if (landed != owed) return "incomplete transfer: landed " + landed + " of " + owed + " bytes from " + from(link);
        }
        if (link.digestInStatus) {
            String from = from(link);
            if (!s.hasDigest()) return "integrity: " + from + " sent no digest on a checksum=" + link.checksum.label() + " link";
            long expected = Completeness.digest(link.coverage, memory, a.pagesOf()[i], a.auxIndex(), a.state(), room.room,
                    link.checksum, crcs.get());
            if (expected != s.digest()) {
                return "checksum mismatch: the KV of room " + room.room + " from " + from + " does not match the prefill's digest"
                        + " (" + Long.toHexString(s.digest()) + " sent, " + Long.toHexString(expected) + " landed)";
            }
        }
        return null;
    }

    private static String from(PrefillLink link) {
        return link + " (" + link.dataPath + ")";
    }

    /**
     * SGLang's metadata gate: the aux row's bootstrap_room column must hold this room once every
     * prefill rank reported Success. Writes precede their STATUS on the connection, so a column
     * still 0 here will not be filled later. Returns the failure reason, or null.
     */
    private String checkMetadataRoom(DecodeRoom room) {
        int buffer = memory.auxRoomBuffer();
        DecodeRoom.Allowance a = room.allowance;
        if (buffer < 0 || a == null || a.auxIndex() < 0) return null;
        long found = memory.slice(Region.AUX, 0, buffer, a.auxIndex() * memory.auxItemLen(buffer), 8)
                .get(ValueLayout.JAVA_LONG_UNALIGNED, 0);
        if (found == room.room) return null;
        if (found == 0) {
            return "Metadata not written: the bootstrap_room column of aux row " + a.auxIndex()
                    + " is still 0 after every prefill rank reported Success";
        }
        return "Metadata corruption detected - bootstrap_room mismatch (expected " + room.room + ", found " + found + ")";
    }

    private void onLinkLost(PrefillLink link, FailureKind kind, String why, boolean cleanClose, String roomReason) {
        if (cleanClose && !link.stripes.isEmpty()) {
            // A clean close can overtake a room's last frames still queued on another stripe (its STATUS):
            // let the other readers reach their own end of stream before anything is failed.
            for (Thread r : link.readers()) {
                if (r == Thread.currentThread()) continue;
                try {
                    r.join(STRIPE_DRAIN_MILLIS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
        }
        link.closeAll(kind, why);
        directory.remove(link);
        link.closeTwoSidedOffer(); // its writes passed the gate, which fences them: nothing to wait for
        if (closed) return;
        // Cached lookups may point at a dead or replaced instance: look them up again next time.
        directory.forgetPrefill(link.bootstrapAddr);
        int affected = 0;
        for (Long r : link.rooms) {
            DecodeRoom room = rooms.get(r);
            // A newer request that took the id of a room this link held (cleared meanwhile) is not this link's to fail.
            if (room == null || room.targetIndexOf(link) < 0 || room.slot.status().isTerminal()) continue;
            // This rank already delivered everything for the room (its Success follows its bytes); the room
            // waits only on other ranks (e.g. other PP stages, whose process may just be exiting too).
            if (room.hasResponded(link.prefillUniqueRank)) continue;
            // Atomically unfinished: another reader (a stripe's, another rank's) may conclude the room right now.
            if (room.slot.failIfUnfinished(kind, roomReason)) {
                affected++;
            }
        }
        if (affected > 0) log.warn("Lost connection with {} ({}): {} requests affected", link, why, affected);
        LinkOffer offer = link.oneSided();
        if (offer != null) {
            // Revoked at once, off this reader thread; a clear() of the link's rooms waits for it (revoke is idempotent).
            boolean queued = revoker.submit(() -> {
                if (!offer.revoke(abortAckTimeout)) {
                    log.warn("could not confirm that {} stopped writing after the connection was lost", link);
                }
            });
            // Refused only once teardown began: it deregisters every destination's memory itself.
            if (!queued) log.debug("revoke of {} left to teardown", link);
        }
    }
}
