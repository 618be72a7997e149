package io.kvferry.transport.tcp;

import io.kvferry.transport.ControlConnection;
import io.kvferry.transport.DestinationTransport;
import io.kvferry.transport.LinkOffer;
import io.kvferry.transport.WriteSink;

/**
 * The decode's side of tcp: hands each link reader thread its own {@link TcpLander}, which lands the
 * WRITE and WRITE_LIST frames it reads through the decode's write gate. Holds no state of its own
 * besides the gate it was handed.
 */
public final class TcpDestination implements DestinationTransport {
    private final WriteSink gate;

    TcpDestination(WriteSink gate) {
        this.gate = gate;
    }

    @Override
    public String name() {
        return TcpTransportProvider.NAME;
    }

    /** Nothing: tcp needs no offer, every link can fall back to it. */
    @Override
    public LinkOffer offer(String peer) {
        return null;
    }

    /** The lander of one reader thread: frames read from {@code connection} land through {@code landing} (that reader's). */
    public TcpLander lander(ControlConnection connection, WriteSink.Landing landing) {
        return new TcpLander(connection, gate, landing);
    }

    @Override
    public void close() {
        // the gate belongs to the decode manager
    }
}
