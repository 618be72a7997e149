package io.kvferry.prefill;

import io.kvferry.metrics.DataPathMeters;
import io.kvferry.metrics.LogSafe;
import io.kvferry.api.ChecksumMode;
import io.kvferry.plan.HeadSlice;
import io.kvferry.protocol.ControlMessage;
import io.kvferry.protocol.Hello;
import io.kvferry.transport.ControlConnection;
import io.kvferry.transport.DataPath;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A decode rank connected to this prefill rank (the prefill's view of the link; the decode's is
 * {@code io.kvferry.decode.PrefillLink}): its accepted connection, what it registered in HELLO, and
 * how bytes reach it. Registered and closed by the connection's reader thread in {@link DecodeSessions}.
 */
final class DecodeLink {
    private static final Logger log = LoggerFactory.getLogger(DecodeLink.class);

    final ControlConnection connection;
    /** When the connection was accepted (the oldest unfinished handshake is evicted first). */
    final long acceptedNanos = System.nanoTime();
    /** The nonce this rank challenged the connection with (its HELLO must answer it). Reader thread. */
    byte[] challenge;
    volatile Hello hello;
    /** {@link #label()}, once {@link #hello} is set (it is set once); a race computes the same text twice. */
    private volatile String label;
    /** The session key both sides derived at registration (never sent); stripes and resumptions prove it. */
    volatile byte[] sessionKey;
    /** What this link verifies: the stronger of the two sides' checksum settings. */
    volatile ChecksumMode checksum = ChecksumMode.OFF;
    /** Whether this link's checksums travel as a page digest in STATUS (its data path carries none itself). */
    volatile boolean digestInStatus;
    /** ABORT_ACKs queued on workers and not sent yet: a peer that floods ABORTs past a cap is cut. */
    final AtomicInteger pendingAcks = new AtomicInteger();
    /** Rooms this link holds a transfer info for that no sender has claimed yet (bounded per link). */
    final AtomicInteger unclaimedRooms = new AtomicInteger();
    /** What those transfer infos hold in memory (page and state index arrays), in bytes. */
    final AtomicLong unclaimedBytes = new AtomicLong();
    volatile DataPath dataPath;
    /** HELLO_ACK's fallback text for this link (why offers were passed over, or why the kept one is slower than tcp); empty when none. */
    volatile String dataPathNote = "";
    /** The meters of {@link #dataPath} on this rank, resolved at registration (recorded into per write). */
    volatile DataPathMeters meters;
    /** Per KV buffer head slice when this decode's attention TP differs (MHA); null for page copies. */
    volatile HeadSlice[] kvSlices;
    /** Decode KV buffer of each local KV buffer, paired by layer id (PP stages hold a subset). */
    volatile int[] kvBufferMap;
    /** For an extra TCP data stripe: the link it belongs to (its loss is that link's loss); else null. */
    volatile DecodeLink stripeOf;
    /** The data stripes attached to this link (closed with it). */
    final Set<DecodeLink> stripes = ConcurrentHashMap.newKeySet();
    /** Admission of transfer tasks writing to this link (a link that stopped reading holds only its own slots). */
    final TransferWorkers.LinkSlots writers = new TransferWorkers.LinkSlots();
    /**
     * Rooms that hold a destination on this link, by id, each with its record, so its loss fails exactly
     * them: an entry is removed only with its own record ({@code remove(id, record)}), and a retried
     * request that took a cleared room's id is never this link's by mistake.
     */
    final ConcurrentHashMap<Long, PrefillRoom> rooms = new ConcurrentHashMap<>();

    DecodeLink(ControlConnection connection) {
        this.connection = connection;
    }

    /** The connection a room's success status must follow its writes on. */
    ControlConnection statusConnection(long room) {
        ControlConnection c = dataPath == null ? null : dataPath.connectionFor(room);
        return c == null ? connection : c;
    }

    /** Sends a control message; a broken connection is the reader's to report, so it is only logged. */
    void sendQuietly(ControlMessage m) {
        try {
            connection.send(m);
        } catch (IOException e) {
            log.debug("could not send {} to {}: {}", m.type(), this, e.getMessage());
        }
    }

    /** The decode instance this link's rank belongs to ("" before registration). */
    String instanceId() {
        Hello h = hello;
        return h == null ? "" : h.instanceId();
    }

    String sessionId() {
        Hello h = hello;
        return h == null ? "unregistered@" + connection.peer() : h.sessionId();
    }

    /**
     * How the session shows in logs, failure reasons and the status page: a digest of its id ({@link LogSafe#session}),
     * never the id itself.
     */
    String label() {
        String l = label;
        if (l != null) return l;
        Hello h = hello;
        if (h == null) return "unregistered session";
        // Once: a lost link's every room names it in its failure reason (thousands at once), each a SHA-256 otherwise.
        label = l = LogSafe.session(h.sessionId());
        return l;
    }

    /** For logs and failure reasons: the session's label and the peer's address. */
    @Override
    public String toString() {
        return label() + " (" + connection.peer() + ")";
    }
}
