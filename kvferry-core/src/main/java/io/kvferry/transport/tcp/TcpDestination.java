package io.kvferry.transport.tcp;

import io.kvferry.protocol.WriteHeader;
import io.kvferry.transport.ControlConnection;
import io.kvferry.transport.DestinationTransport;
import io.kvferry.transport.LinkOffer;
import io.kvferry.transport.WriteRejectedException;
import io.kvferry.transport.WriteSink;

import java.io.IOException;

/**
 * The decode's side of tcp: each WRITE frame a link reader reads passes the decode's write gate,
 * then its payload is read from the socket straight into the pages (no heap copy). Called by the
 * link reader threads; holds no state of its own besides the gate it was handed.
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

    /**
     * Lands one WRITE whose header was just read from {@code connection}, using the reader's own
     * reused {@code landing}.
     *
     * @return null when the bytes landed; the gate's refusal otherwise, with the payload already
     *         skipped unless the refusal is {@linkplain WriteRejectedException#fatal() fatal}
     *         (then the stream cannot be trusted and the caller ends the link)
     */
    public WriteRejectedException land(ControlConnection connection, WriteHeader w, WriteSink.Landing landing) throws IOException {
        try {
            gate.begin(landing, w.room(), w.region(), w.component(), w.buffer(), w.offset(), w.span(), w.length());
        } catch (WriteRejectedException e) {
            if (!e.fatal()) connection.skipPayload(w.length());
            return e;
        }
        boolean landed = false;
        try {
            if (w.strided()) connection.readStridedPayload(w, landing.buffer(), landing.offset());
            else connection.readPayload(landing.target());
            landed = true;
        } finally {
            gate.end(landing, landed);
        }
        return null;
    }

    @Override
    public void close() {
        // the gate belongs to the decode manager
    }
}
