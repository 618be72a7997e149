package io.kvferry.transport;

import io.kvferry.protocol.MemoryDescriptor;

import java.io.IOException;

/** A prefill rank's side of one transport: connects to decode offers. Owned by the prefill manager. */
public interface SourceTransport extends AutoCloseable {
    String name();

    /**
     * A data path into the memory a decode offered, checked against the shape it declared in HELLO.
     *
     * @throws TransportUnavailableException when this offer cannot be used from here (the link falls back to TCP)
     */
    DataPath connect(byte[] offer, MemoryDescriptor destination, PeerLink link) throws TransportUnavailableException, IOException;

    @Override
    void close();
}
