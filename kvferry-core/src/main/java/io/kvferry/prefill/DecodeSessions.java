package io.kvferry.prefill;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.metrics.HandshakeRefusal;
import io.kvferry.metrics.LogSafe;
import io.kvferry.metrics.WarnLimiter;
import io.kvferry.metrics.RankTelemetry;
import io.kvferry.protocol.Abort;
import io.kvferry.protocol.AbortAck;
import io.kvferry.protocol.Challenge;
import io.kvferry.protocol.ControlMessage;
import io.kvferry.protocol.Handshake;
import io.kvferry.protocol.Heartbeat;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.MessageType;
import io.kvferry.protocol.ProtocolException;
import io.kvferry.protocol.Status;
import io.kvferry.protocol.TransferInfo;
import io.kvferry.protocol.WriteHeader;
import io.kvferry.session.Failures;
import io.kvferry.session.OwnedTaskThread;
import io.kvferry.session.SessionTimer;
import io.kvferry.transport.Backend;
import io.kvferry.transport.ControlConnection;
import io.kvferry.transport.DataPath;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.EOFException;
import java.io.IOException;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The connection side of a prefill rank: accepts decode connections, reads each on its own
 * thread, registers them (HELLO), records their transfer infos and aborts, and fails exactly the
 * rooms of a link that is lost. The acceptor and every reader thread are owned here and joined by
 * {@link #close}; liveness (heartbeats, HELLO deadline, stalled writes) runs on the manager's timer.
 */
final class DecodeSessions {
    private static final Logger log = LoggerFactory.getLogger(DecodeSessions.class);

    private final KVManagerConfig config;
    private final RegisteredMemory memory;
    private final Backend backend;
    private final int engineRank;
    private final int uniqueRank;
    private final HandshakeValidator validator;
    private final OfferNegotiator negotiator;
    private final PrefillRooms rooms;
    private final TransferWorkers workers;
    private final SessionTimer timer;
    private final RankTelemetry telemetry;
    /** Closes failed links' one-sided paths off the reader and timer threads; the manager's teardown joins it. */
    private final OwnedTaskThread unmapper;
    private final ServerSocketChannel listener;
    private final Set<DecodeLink> links = ConcurrentHashMap.newKeySet();
    private final SessionHandshake handshake;
    private final Set<Thread> readers = ConcurrentHashMap.newKeySet();
    private final Thread acceptor;
    private volatile boolean closed;

    DecodeSessions(KVManagerConfig config, RegisteredMemory memory, Backend backend, int engineRank, int uniqueRank,
                   HandshakeValidator validator, OfferNegotiator negotiator, PrefillRooms rooms, TransferWorkers workers,
                   SessionTimer timer, OwnedTaskThread unmapper, ServerSocketChannel listener, RankTelemetry telemetry) {
        this.config = config;
        this.memory = memory;
        this.backend = backend;
        this.engineRank = engineRank;
        this.uniqueRank = uniqueRank;
        this.validator = validator;
        this.negotiator = negotiator;
        this.rooms = rooms;
        this.workers = workers;
        this.timer = timer;
        this.unmapper = unmapper;
        this.listener = listener;
        this.telemetry = telemetry;
        this.unauthenticatedWarn = new WarnLimiter(config.ticker()::nanoTime, "connections that failed before their HELLO was accepted");
        this.lateInfoWarn = new WarnLimiter(config.ticker()::nanoTime, "transfer infos refused after their room had its destinations");
        this.foreignInfoWarn = new WarnLimiter(config.ticker()::nanoTime, "transfer infos refused for rooms of another decode instance");
        this.handshake = new SessionHandshake(config, memory, engineRank, uniqueRank, validator, negotiator, links, telemetry);
        Duration stall = config.writeStallTimeout();
        timer.every(stall.compareTo(Duration.ofSeconds(1)) < 0 ? stall : Duration.ofSeconds(1), () -> {
            // A decode that stops reading would hold the workers admitted to its link (and its own rooms) forever.
            for (DecodeLink s : links) {
                if (s.connection.writeStalledFor() > stall.toMillis()) {
                    log.warn("decode {}: no write progress for {} ms; closing it", s, stall.toMillis());
                    s.connection.close(FailureKind.PEER_LOST, "no write progress for " + stall.toMillis() + " ms");
                }
            }
        });
        long beat = config.heartbeatInterval().toNanos(), dead = config.heartbeatTimeout().toNanos();
        timer.every(Duration.ofNanos(beat / 2), () -> {
            for (DecodeLink s : links) {
                if (s.hello == null) continue; // not registered yet: the HELLO deadline covers it, and HELLO_ACK must come first
                telemetry.heartbeatsMissed(s.connection.newlyMissedHeartbeats(beat));
                if (!s.connection.heartbeat(beat, dead)) {
                    telemetry.heartbeatTimedOut();
                    log.warn("decode {}: {}", s, s.connection.closeReason());
                }
            }
        });
        // A decode waits at most its waiting timeout for a room's KV, so holding its metadata longer is pointless.
        Duration unclaimed = config.waitingTimeout();
        timer.every(unclaimed.compareTo(Duration.ofSeconds(4)) < 0 ? unclaimed.dividedBy(4).plusMillis(1) : Duration.ofSeconds(1),
                () -> {
                    int n = rooms.expireUnclaimed(unclaimed.toNanos());
                    if (n > 0) log.warn("dropped {} transfer infos whose requests never reached this rank", n);
                });
        acceptor = Thread.ofPlatform().daemon().name("kvferry-prefill-accept-" + engineRank).start(this::acceptLoop);
    }

    /** Connected decode links, stripes included. */
    int count() {
        return links.size();
    }

    /** Registered decode links (not their stripes, not handshakes under way), for status pages. */
    List<DecodeLink> registered() {
        List<DecodeLink> out = new ArrayList<>();
        for (DecodeLink l : links) if (l.hello != null && l.stripeOf == null) out.add(l);
        return out;
    }

    /**
     * Connections still in their handshake (no HELLO accepted yet) at once. A new one beyond it
     * evicts the oldest, so peers that connect and stall cannot exhaust threads or memory, nor keep
     * a real decode (whose handshake takes milliseconds) out.
     */
    static final int MAX_PENDING_HANDSHAKES = 64;
    /** Connections per rank (decode links, their stripes and pending handshakes). */
    static final int MAX_CONNECTIONS = 1024;
    /** The largest HELLO an unauthenticated peer may send (a real one is a few KB, with UCX keys some tens). */
    static final int MAX_UNAUTHENTICATED_HELLO_BYTES = 1 << 20;

    private void acceptLoop() {
        long lastRefusalLog = 0;
        while (!closed) {
            SocketChannel ch;
            try {
                ch = listener.accept();
            } catch (ClosedChannelException e) {
                return;
            } catch (IOException | RuntimeException e) {
                if (!closed) log.warn("accept failed: {}", e.getMessage());
                continue;
            }
            try {
                String refusal = admission();
                if (refusal != null) {
                    ch.close();
                    telemetry.refused(HandshakeRefusal.CONNECTION_LIMIT);
                    if (System.nanoTime() - lastRefusalLog > 1_000_000_000L) { // at most one line a second under a flood
                        lastRefusalLog = System.nanoTime();
                        log.warn("refused a connection: {}", refusal);
                    }
                    continue;
                }
                DecodeLink link = new DecodeLink(new ControlConnection(ch));
                link.connection.acceptOnly(MessageType.HELLO, MAX_UNAUTHENTICATED_HELLO_BYTES);
                links.add(link);
                if (closed) {
                    link.connection.close();
                    return;
                }
                // A peer that connects but never registers must not hold a thread forever.
                timer.after(config.connectTimeout(), () -> {
                    if (link.hello == null && !link.connection.isClosed()) {
                        telemetry.refused(HandshakeRefusal.NO_HELLO);
                        link.connection.close(FailureKind.HANDSHAKE_REFUSED, "no HELLO within the connect timeout");
                    }
                });
                Thread reader = Thread.ofPlatform().daemon().name("kvferry-prefill-reader-" + engineRank).unstarted(() -> readLoop(link));
                readers.add(reader);
                try {
                    reader.start();
                } catch (Throwable t) {
                    readers.remove(reader);
                    links.remove(link);
                    link.connection.close();
                    throw t;
                }
            } catch (Throwable t) {
                // Whatever one connection did (or the JVM could not give it), the acceptor keeps serving the others.
                log.warn("cannot set up connection: {}", t.toString());
                try {
                    ch.close();
                } catch (IOException ignored) {
                    // nothing more to do
                }
            }
        }
    }

    /** Null when one more connection may be accepted (evicting the oldest handshake if needed), else why not. */
    private String admission() {
        int pending = 0, total = 0;
        DecodeLink oldest = null;
        for (DecodeLink l : links) {
            total++;
            // An evicted handshake stays in the set until its reader unwinds: it no longer holds a place, and
            // picking it again as the oldest would evict nobody.
            if (l.hello == null && !l.connection.isClosed()) {
                pending++;
                if (oldest == null || l.acceptedNanos < oldest.acceptedNanos) oldest = l;
            }
        }
        if (total >= MAX_CONNECTIONS) return "this rank already holds " + MAX_CONNECTIONS + " connections";
        if (pending >= MAX_PENDING_HANDSHAKES && oldest != null) {
            telemetry.refused(HandshakeRefusal.EVICTED);
            oldest.connection.close(FailureKind.HANDSHAKE_REFUSED, "evicted: " + pending + " handshakes pending and this one is the oldest");
        }
        return null;
    }

    private void readLoop(DecodeLink link) {
        String why = "closed";
        FailureKind kind = FailureKind.PEER_LOST;
        try {
            // Nothing the peer sends is acted on before its HELLO answered this challenge with the cluster key.
            link.challenge = Handshake.nonce();
            link.connection.send(new Challenge(link.challenge));
            while (!closed) {
                ControlMessage m = link.connection.read();
                if (link.hello == null && !(m instanceof Hello)) {
                    throw new ProtocolException("first message must be HELLO, got " + m.type());
                }
                if (link.stripeOf != null && !(m instanceof Heartbeat)) {
                    throw new ProtocolException("a data stripe carries only heartbeats from decode, got " + m.type());
                }
                switch (m) {
                    case Hello h -> handshake.onHello(link, h);
                    case TransferInfo t -> onTransferInfo(link, t);
                    case Abort a -> onAbort(link, a);
                    case WriteHeader w -> throw new ProtocolException("a prefill rank does not accept WRITE frames");
                    case Heartbeat hb -> {
                        // liveness only: the read itself refreshed the connection's clock
                    }
                    default -> throw new ProtocolException("unexpected " + m.type() + " from decode");
                }
            }
        } catch (EOFException e) {
            why = "connection closed by decode";
        } catch (IOException e) {
            why = Failures.message(e);
            // The message may quote the peer's HELLO (a refused kv_cache_dtype): escaped before it is logged.
            if (!closed && !(e instanceof ClosedChannelException)) {
                if (link.hello != null) log.warn("decode {}: {}", link, LogSafe.text(why));
                else unauthenticatedFailure(link, why);
            }
        } finally {
            String reason = link.connection.closeReason();
            if (reason != null && link.connection.closeKind() != null) kind = link.connection.closeKind();
            onLinkLost(link, kind, reason != null ? reason : why);
            readers.remove(Thread.currentThread());
        }
    }

    /** Between two warnings about connections that failed before their HELLO was accepted. */
    static final long UNAUTHENTICATED_WARN_NANOS = WarnLimiter.EVERY_NANOS;
    private final WarnLimiter unauthenticatedWarn;
    /**
     * Transfer infos refused because their room had all its destinations, or belongs to another decode instance:
     * an authenticated decode can send them at wire rate, so each kind is a warning at most once a second too.
     */
    private final WarnLimiter lateInfoWarn;
    private final WarnLimiter foreignInfoWarn;

    /**
     * A connection that failed before its HELLO was accepted (garbage, a forbidden frame, a refused or
     * unsigned HELLO): a warning at most once a second, naming how many more failed since, the others at
     * debug. Anyone who reaches the port can open connections as fast as the acceptor takes them, and a
     * line each would flood the log (and drown the lines that matter), as the acceptor's own refusals are
     * kept from doing.
     */
    private void unauthenticatedFailure(DecodeLink link, String why) {
        unauthenticatedWarn.log(log, "decode {}: {}", link, LogSafe.text(why));
    }

    /** Warnings logged so far about connections that failed before their HELLO was accepted (tests). */
    long unauthenticatedWarnings() {
        return unauthenticatedWarn.warnings();
    }

    /** Warnings logged so far about transfer infos refused after their room had its destinations (tests). */
    long lateInfoWarnings() {
        return lateInfoWarn.warnings();
    }

    /** Warnings logged so far about transfer infos refused for rooms of another decode instance (tests). */
    long foreignInfoWarnings() {
        return foreignInfoWarn.warnings();
    }

    private void onTransferInfo(DecodeLink link, TransferInfo t) {
        PrefillRooms.Tombstone buried = rooms.refuseInfo(t.room());
        if (buried != null) {
            link.sendQuietly(new Status(t.room(), KVPoll.Failed, buried.kind(), uniqueRank, buried.reason()));
            return;
        }
        PrefillRoom existing = rooms.get(t.room());
        if ((existing == null || !existing.claimed) && !rooms.mayHold(link, t)) {
            // A decode's metadata for requests this rank does not have yet is held, within bounds per link.
            link.sendQuietly(new Status(t.room(), KVPoll.Failed, FailureKind.BAD_REQUEST, uniqueRank,
                    "prefill rank " + uniqueRank + " already holds " + link.unclaimedRooms.get()
                            + " transfer infos from this decode for requests it has not started; try again later"));
            return;
        }
        PrefillRoom room = rooms.room(t.room());
        try {
            String bound = room.bindTo(link.instanceId());
            if (!bound.equals(link.instanceId())) {
                foreignInfoWarn.log(log, "room {}: refused a transfer info from decode instance {}; the room belongs to instance {}", t.room(),
                        LogSafe.text(link.instanceId()), LogSafe.text(bound)); // the decodes' HELLO text
                link.sendQuietly(new Status(t.room(), KVPoll.Failed, FailureKind.BAD_REQUEST, uniqueRank,
                        "room " + t.room() + " belongs to another decode instance"));
                return;
            }
            String error = t.dummy() ? null : HandshakeValidator.checkTransferInfo(link.hello.memory(), t);
            boolean duplicate = room.hasDestinationOf(link.sessionId());
            if (!duplicate && room.frozen()) {
                // Its destinations are complete: a late one would get only the chunks still to come.
                lateInfoWarn.log(log, "room {}: refused a transfer info from {} after the room had its {} destinations", t.room(), link,
                        room.destinations().size());
                link.sendQuietly(new Status(t.room(), KVPoll.Failed, FailureKind.BAD_REQUEST, uniqueRank,
                        "room " + t.room() + " already has its " + room.destinations().size() + " destinations"));
                return;
            }
            PrefillRoom.Destination previous = room.addDestination(new PrefillRoom.Destination(link, t));
            if (previous != null) {
                error = "duplicate transfer info for room " + t.room() + " from decode " + link.label();
            } else {
                room.charge(link, t);
            }
            link.rooms.put(t.room(), room);
            if (error != null) {
                log.debug("room {}: {}", t.room(), LogSafe.text(error)); // the room's failure line reports it
                room.slot.failIfUnfinished(FailureKind.BAD_REQUEST, error); // a concluded room stays as it is
                if (previous != null || t.dummy()) {
                    link.sendQuietly(new Status(t.room(), KVPoll.Failed, FailureKind.BAD_REQUEST, uniqueRank, error));
                } else {
                    rooms.fail(room, FailureKind.BAD_REQUEST, error);
                    rooms.notifyLateDestination(room, link); // a room that had failed already: its notice went out without this one
                }
                return;
            }
            // A room that failed while collecting destinations: its notice may have gone out before this one was added.
            if (!t.dummy()) rooms.notifyLateDestination(room, link);
            if (t.decodePrefixLen() > 0 && room.decodePrefixLen == 0) room.decodePrefixLen = t.decodePrefixLen();
            room.requiredDstInfoNum = t.requiredDstInfoNum();
            if (room.destinations().size() >= t.requiredDstInfoNum()) {
                room.freezeDestinations();
                room.slot.advance(KVPoll.WaitingForInput);
            }
        } finally {
            forgetIfOrphaned(link, t.room(), room);
        }
    }

    /**
     * The scheduler may forget a room (clear, expiry, its other decode lost) while its transfer info is
     * being attached to the record: what the info added to that orphaned record (a budget charge, the
     * link's room entry) is undone, so nothing of the room outlives it, and the decode hears the room's
     * end. (Its status went with the record: the info changes only the record's own slot.) Checked after
     * every change the info made: a forget after this check finds the info attached and removes it itself.
     */
    private void forgetIfOrphaned(DecodeLink link, long id, PrefillRoom room) {
        if (rooms.get(id) == room) return;
        room.releaseCharges();
        link.rooms.remove(id, room);
        if (rooms.get(id) != null) return; // a newer request holds the id: it was not this info's
        PrefillRooms.Tombstone buried = rooms.buried(id);
        // A room that concluded with this info attached (transferred, Success, cleared before this reader got
        // here) was answered on its strand: a Failed now would turn the decode's Success into a failure.
        if (buried != null && buried.status() == KVPoll.Success) return;
        if (buried != null && buried.status() == KVPoll.Failed) {
            link.sendQuietly(new Status(id, KVPoll.Failed, buried.kind(), uniqueRank, buried.reason()));
        } else {
            link.sendQuietly(new Status(id, KVPoll.Failed, FailureKind.ABORTED, uniqueRank,
                    "room " + id + " was cleared on prefill rank " + uniqueRank + " while its transfer info arrived"));
        }
    }

    /**
     * ABORT_ACKs one decode link may have queued and not sent yet beyond one per room it holds (a decode
     * may abort every room it has while its link's workers are busy); one more means an ABORT flood,
     * and the link is cut.
     */
    static final int MAX_PENDING_ACKS = 1024;

    private void onAbort(DecodeLink link, Abort a) throws ProtocolException {
        PrefillRoom room = rooms.get(a.room());
        boolean ours = room != null && room.hasDestinationOf(link.sessionId());
        // Only a destination of the room may abort it; anything else is acknowledged and ignored. Every
        // ABORT gets its ACK: a retried request may use its room id again on this link, and its decode's
        // clear() waits for the ACK (a peer that floods without reading is cut below).
        if (link.pendingAcks.incrementAndGet() > MAX_PENDING_ACKS + link.rooms.size()) {
            throw new ProtocolException("ABORT flood: " + link.pendingAcks.get() + " ABORT_ACKs for this link are still unsent ("
                    + link.rooms.size() + " rooms held)");
        }
        // A room that concluded here stays Success (atomically: its last chunk may be finishing right now).
        boolean dropHeld = false;
        boolean tellOthers = false;
        // Through the record's own slot: if the scheduler cleared it meanwhile and a retry took its id, that
        // newer request is not this ABORT's (its slot stays as it is; this one reads Failed once removed).
        if (ours && (room.slot.failIfUnfinished(FailureKind.ABORTED, Failures.ABORTED) || room.slot.status() == KVPoll.Failed)) {
            // The aborting decode knows (the ack below is its answer); the room's other destinations (more
            // decode ranks of its instance) are told here, unless a notice went out or is queued already.
            tellOthers = !room.failureNotified.getAndSet(true) && !room.heldOnlyBy(link);
            // Held only for this decode and never started here: dropped with its ack, not at the waiting timeout (its
            // info counted against the link's budget of held rooms all that while); its tombstone fails a sender created
            // later. Not at once: while its ack waits on the room's strand, the room still counts towards the flood allowance above.
            dropHeld = !room.claimed && room.heldOnlyBy(link);
        }
        PrefillRoom held = dropHeld ? room : null;
        TransferWorkers.ToAdmitted toOthers = tellOthers ? rooms.noticeToOthers(room, link) : null;
        // Through the room's strand, so the ack leaves only after any in-flight chunk of the room stopped.
        TransferWorkers.ToAdmitted answer = admitted -> {
            try {
                if (toOthers != null) toOthers.run(admitted);
                if (held != null) rooms.forgetUnclaimed(held, link);
                link.sendQuietly(new AbortAck(a.room(), uniqueRank));
            } finally {
                link.pendingAcks.decrementAndGet();
            }
        };
        if (toOthers != null) workers.enqueue(room, answer); // admitted to every destination it writes to
        else workers.enqueue(a.room(), link, () -> answer.run(List.of()));
    }

    private void onLinkLost(DecodeLink link, FailureKind kind, String why) {
        links.remove(link);
        link.connection.close();
        DecodeLink owner = link.stripeOf;
        if (owner != null) {
            // A lost data stripe takes its link down: the rooms whose bytes it carried cannot finish.
            owner.connection.close(kind, "data stripe " + link.hello.stripeIndex() + " lost: " + why);
            return;
        }
        for (DecodeLink stripe : link.stripes) stripe.connection.close();
        DataPath path = link.dataPath;
        if (path != null && path.oneSided() && !closed) {
            // Queued before the rooms below fail, but it runs on its own thread once they have: one-sided
            // writers stop at their next op before unmapping, and neither this reader nor the timer
            // (heartbeats!) waits while they wind down. Refused only once teardown began, which closes
            // every link's path itself.
            unmapper.submit(path::close);
        }
        if (closed) return;
        for (PrefillRoom room : link.rooms.values()) {
            // The link's own records, not a lookup by id: a retry that took a cleared room's id is not this link's
            // (a cleared record's entry may still be here for a moment; its slot reads Failed, so it fails nothing).
            // Only a room still under way fails (atomically: one that concluded meanwhile stays as it is).
            if (!room.slot.failIfUnfinished(kind, "Decode instance could be dead: lost connection with decode "
                    + link.label() + " (" + why + ")")) {
                // Concluded already. One that failed while held only for decodes now gone (its info refused: a page
                // outside the pool, a duplicate; or failed by the loss of its other decode ranks' links) goes with the
                // last of them, as an ABORT drops it: else it kept its index arrays (up to 16 MiB an info) for the waiting
                // timeout while the links' budgets came back with the links.
                rooms.forgetFailedOfLostLinks(room, link);
                continue;
            }
            // Held only for this decode and never started here: nobody would ever clear it. A tombstone (bounded)
            // keeps the failure for a sender created for it later.
            if (room.heldOnlyBy(link) && rooms.forgetUnclaimed(room, link)) continue;
            rooms.notifyOnce(room);
        }
    }

    /** Stops accepting, closes every link, joins the acceptor and the readers (bounded), then closes the links' data paths. */
    void close(long joinMillis) throws InterruptedException {
        closed = true;
        try {
            listener.close();
        } catch (IOException ignored) {
            // closing anyway
        }
        List<DecodeLink> open = new ArrayList<>(links);
        for (DecodeLink s : open) s.connection.close();
        acceptor.join(joinMillis);
        long deadline = System.nanoTime() + joinMillis * 1_000_000L;
        for (Thread r : new ArrayList<>(readers)) r.join(Math.max(1, (deadline - System.nanoTime()) / 1_000_000L));
        closedPaths = open;
    }

    /** The links open at {@link #close}, whose data paths teardown closes after the unmapper ended. */
    private volatile List<DecodeLink> closedPaths = List.of();

    void closeDataPaths() {
        for (DecodeLink s : closedPaths) {
            if (s.dataPath != null) s.dataPath.close();
        }
    }
}
