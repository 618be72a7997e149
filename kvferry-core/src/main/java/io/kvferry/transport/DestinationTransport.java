package io.kvferry.transport;

import java.io.IOException;

/** A decode rank's memory as one transport exposes it to remote writers. Owned by the decode manager. */
public interface DestinationTransport extends AutoCloseable {
    String name();

    /**
     * The offer for a new connection to one prefill rank, or null when none can be made now (the
     * link then uses TCP).
     */
    LinkOffer offer(String peer) throws IOException;

    /** Releases what the transport registered; offers made earlier stop working. */
    @Override
    void close();
}
