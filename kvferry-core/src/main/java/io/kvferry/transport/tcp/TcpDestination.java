package io.kvferry.transport.tcp;

import io.kvferry.api.ChecksumMode;
import io.kvferry.api.FailureKind;
import io.kvferry.memory.SegmentCrc;
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
        if (!w.hasCrc() && landing.checksum() == ChecksumMode.FULL && w.length() > 0) {
            connection.skipPayload(w.length());
            return new WriteRejectedException("a WRITE of room " + w.room() + " (" + w.region() + " buffer " + w.buffer()
                    + " at offset " + w.offset() + ") carries no checksum on a checksum=full link", false, FailureKind.INTEGRITY);
        }
        try {
            gate.begin(landing, w.room(), w.region(), w.component(), w.buffer(), w.offset(), w.span(), w.length());
        } catch (WriteRejectedException e) {
            if (!e.fatal()) connection.skipPayload(w.length());
            return e;
        }
        boolean landed = false;
        SegmentCrc crc = w.hasCrc() ? this.crc.get() : null;
        if (crc != null) crc.reset();
        try {
            if (w.strided()) {
                connection.readStridedPayload(w, landing.buffer(), landing.offset(), crc);
            } else {
                connection.readPayload(landing.target());
                if (crc != null) crc.update(landing.buffer(), landing.offset(), w.length());
            }
            landed = true;
        } finally {
            gate.end(landing, landed);
        }
        if (crc != null && crc.value() != w.crc()) {
            // Checked right after landing, while the bytes are still in cache; the room fails, the stream stays in step.
            return new WriteRejectedException("checksum mismatch on a WRITE of room " + w.room() + " (" + w.region() + " buffer "
                    + w.buffer() + ", " + w.length() + " bytes at offset " + w.offset() + "): CRC32C sent "
                    + Integer.toHexString(w.crc()) + ", landed " + Integer.toHexString(crc.value()), false, FailureKind.INTEGRITY);
        }
        return null;
    }

    /** Each reader thread's CRC. */
    private final ThreadLocal<SegmentCrc> crc = ThreadLocal.withInitial(SegmentCrc::new);

    @Override
    public void close() {
        // the gate belongs to the decode manager
    }
}
