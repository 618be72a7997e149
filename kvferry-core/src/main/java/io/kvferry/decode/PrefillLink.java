package io.kvferry.decode;

import io.kvferry.api.ChecksumMode;
import io.kvferry.protocol.Coverage;
import io.kvferry.api.FailureKind;
import io.kvferry.transport.ControlConnection;
import io.kvferry.transport.LinkOffer;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * A decode rank's connection to one prefill rank (the decode's view of the link; the prefill's is
 * {@code io.kvferry.prefill.DecodeLink}), registered (HELLO accepted) by {@link LinkDirectory} and
 * read by its own {@link LinkReader} thread(s). Shared by every room that targets that rank.
 */
final class PrefillLink {
    final String bootstrapAddr;
    final String endpoint;
    final ControlConnection connection;
    final int prefillUniqueRank;
    final Set<Long> rooms = ConcurrentHashMap.newKeySet();
    volatile Thread reader;
    /** Extra TCP data connections (tcpStripes > 1), each read by its own thread; closed with the link. */
    final List<ControlConnection> stripes = new CopyOnWriteArrayList<>();
    final List<Thread> stripeReaders = new CopyOnWriteArrayList<>();
    /** The data path the prefill chose (tcp, inproc, shm, ucx). Set once at registration. */
    volatile String dataPath = "tcp";
    /** The prefill's HELLO_ACK fallback text (why offers were passed over, or why the kept one is slower than tcp), log-safe; empty when none. */
    volatile String dataPathNote = "";
    /**
     * The offer the prefill chose, one-sided or not (inproc's too); null for tcp. Set once at registration;
     * a two-sided one is closed when the link is lost or torn down ({@link #closeTwoSidedOffer}).
     */
    volatile LinkOffer offer;
    /** Which of this rank's bytes the prefill rank writes for every room (its HELLO_ACK). Set once at registration. */
    volatile Coverage coverage = Coverage.NONE;
    /** The coverage cut into the granules the write gate admits and tracks (set with {@link #coverage}). */
    volatile LinkGranules granules = LinkGranules.NONE;
    /** What this link verifies: the stronger of the two sides' checksum settings (HELLO_ACK). */
    volatile ChecksumMode checksum = ChecksumMode.OFF;
    /** Whether the prefill's STATUS carries the room's page digest (every data path but tcp, whose WRITEs carry CRCs). */
    volatile boolean digestInStatus;
    /** The session key both sides derived (never sent): extra stripes and a later resumption prove it. */
    volatile byte[] sessionKey;

    PrefillLink(String bootstrapAddr, String endpoint, ControlConnection connection, int prefillUniqueRank) {
        this.bootstrapAddr = bootstrapAddr;
        this.endpoint = endpoint;
        this.connection = connection;
        this.prefillUniqueRank = prefillUniqueRank;
    }

    /** Closes the control connection and every stripe. */
    void closeAll(FailureKind kind, String reason) {
        connection.close(kind, reason);
        for (ControlConnection c : stripes) c.close(kind, reason);
    }

    /** The permission a one-sided transport (shm, ucx) writes under: the chosen offer when one-sided; null for tcp and inproc. */
    LinkOffer oneSided() {
        LinkOffer o = offer;
        return o != null && o.oneSided() ? o : null;
    }

    /**
     * Releases the chosen offer when it is two-sided (inproc: its key in the JVM's table, which holds the
     * decode's write gate); idempotent. One-sided offers are revoked instead, and closed by their transport.
     */
    void closeTwoSidedOffer() {
        LinkOffer o = offer;
        if (o != null && !o.oneSided()) o.close();
    }

    /** Every reader thread of this link (control and stripes), for joining. */
    List<Thread> readers() {
        List<Thread> all = new ArrayList<>(stripeReaders);
        if (reader != null) all.add(reader);
        return all;
    }

    @Override
    public String toString() {
        return "prefill rank " + prefillUniqueRank + " at " + endpoint;
    }
}
