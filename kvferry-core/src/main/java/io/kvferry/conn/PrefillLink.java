package io.kvferry.conn;

import io.kvferry.transport.ControlConnection;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A decode rank's connection to one prefill rank, registered (HELLO accepted) and read by its own
 * reader thread. Shared by every room that targets that rank.
 */
final class PrefillLink {
    final String bootstrapAddr;
    final String endpoint;
    final ControlConnection connection;
    final int prefillUniqueRank;
    final Set<Long> rooms = ConcurrentHashMap.newKeySet();
    volatile Thread reader;
    /** Extra TCP data connections (tcpStripes > 1), each read by its own thread; closed with the link. */
    final java.util.List<ControlConnection> stripes = new java.util.concurrent.CopyOnWriteArrayList<>();
    final java.util.List<Thread> stripeReaders = new java.util.concurrent.CopyOnWriteArrayList<>();
    /** The data path the prefill chose (tcp, inproc, shm, ucx). Set once at registration. */
    volatile String dataPath = "tcp";
    /** The permission a one-sided transport (shm, ucx) writes under; null for tcp and inproc. */
    volatile io.kvferry.transport.LinkOffer oneSided;

    PrefillLink(String bootstrapAddr, String endpoint, ControlConnection connection, int prefillUniqueRank) {
        this.bootstrapAddr = bootstrapAddr;
        this.endpoint = endpoint;
        this.connection = connection;
        this.prefillUniqueRank = prefillUniqueRank;
    }

    /** Closes the control connection and every stripe. */
    void closeAll(String reason) {
        connection.close(reason);
        for (ControlConnection c : stripes) c.close(reason);
    }

    @Override
    public String toString() {
        return "prefill rank " + prefillUniqueRank + " at " + endpoint;
    }
}
