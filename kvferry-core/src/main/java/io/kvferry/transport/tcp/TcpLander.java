package io.kvferry.transport.tcp;

import io.kvferry.api.ChecksumMode;
import io.kvferry.api.FailureKind;
import io.kvferry.memory.SegmentCrc;
import io.kvferry.plan.CopyPlan;
import io.kvferry.protocol.ProtocolException;
import io.kvferry.protocol.WriteHeader;
import io.kvferry.protocol.WriteList;
import io.kvferry.transport.ControlConnection;
import io.kvferry.transport.WriteRejectedException;
import io.kvferry.transport.WriteSink;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;

/**
 * The decode's side of tcp on one connection, owned by that connection's reader thread: each
 * WRITE or WRITE_LIST it read passes the write gate, then its payload is read from the socket
 * straight into the destination pages (a WRITE_LIST with one scattering read into a view per
 * piece), its CRC32C checked right after the bytes landed while they are still in cache. Nothing is
 * allocated per frame: the landing, the views, the vector, the CRC and the strided staging are this
 * lander's and reused.
 */
public final class TcpLander {
    private final ControlConnection connection;
    private final WriteSink gate;
    private final WriteSink.Landing landing;
    private final BufferViews views = new BufferViews();
    /** One view per piece, plus the slot the connection's read-ahead takes. */
    private final ByteBuffer[] vector = new ByteBuffer[WriteList.MAX_PIECES + 1];
    private final SegmentCrc crc = new SegmentCrc();
    private MemorySegment staging;
    private ByteBuffer stagingView;

    TcpLander(ControlConnection connection, WriteSink gate, WriteSink.Landing landing) {
        this.connection = connection;
        this.gate = gate;
        this.landing = landing;
    }

    /**
     * Lands one WRITE whose header was just read from the connection.
     *
     * @return null when the bytes landed; the gate's refusal otherwise, with the payload already
     *         skipped unless the refusal is {@linkplain WriteRejectedException#fatal() fatal}
     *         (then the stream cannot be trusted and the caller ends the link)
     */
    public WriteRejectedException land(WriteHeader w) throws IOException {
        if (!w.hasCrc() && landing.checksum() == ChecksumMode.FULL && w.length() > 0) {
            connection.skipPayload(w.length());
            return uncheckedOnFullLink("a WRITE of room " + w.room() + " (" + w.region() + " buffer " + w.buffer() + " at offset "
                    + w.offset() + ")");
        }
        try {
            gate.begin(landing, w.room(), w.region(), w.component(), w.buffer(), w.offset(), w.span(), w.length(), w.pieceLength(),
                    w.dstStride());
        } catch (WriteRejectedException e) {
            if (!e.fatal()) connection.skipPayload(w.length());
            return e;
        }
        boolean landed = false;
        if (w.hasCrc()) crc.reset();
        try {
            if (w.strided()) {
                readStrided(w, landing.buffer(), landing.offset());
            } else {
                views.reset();
                connection.readPayload(views.view(landing.buffer(), landing.offset(), w.length()));
                if (w.hasCrc()) crc.update(landing.buffer(), landing.offset(), w.length());
            }
            landed = true;
        } finally {
            gate.end(landing, landed);
        }
        if (w.hasCrc() && crc.value() != w.crc()) {
            // Checked right after landing, while the bytes are still in cache; the room fails, the stream stays in step.
            return mismatch("a WRITE of room " + w.room() + " (" + w.region() + " buffer " + w.buffer() + ", " + w.length()
                    + " bytes at offset " + w.offset() + ")", w.crc()).judgedAgainst(landing.token());
        }
        return null;
    }

    /**
     * Lands one WRITE_LIST whose list was just read from the connection: one gate admission for the
     * whole list (each piece checked against the room), one scattering read, one CRC over the payload.
     *
     * @return as {@link #land(WriteHeader)}
     */
    public WriteRejectedException land(WriteList list) throws IOException {
        if (!list.hasCrc() && landing.checksum() == ChecksumMode.FULL) {
            connection.skipPayload(list.payloadLength());
            return uncheckedOnFullLink("a WRITE_LIST of room " + list.room() + " (" + list.count() + " pieces)");
        }
        try {
            gate.beginList(landing, list);
        } catch (WriteRejectedException e) {
            if (!e.fatal()) connection.skipPayload(list.payloadLength());
            return e;
        }
        boolean landed = false;
        int n = list.count();
        try {
            views.reset();
            for (int i = 0; i < n; i++) vector[i] = views.view(landing.pieceBuffer(i), list.offset(i), list.length(i));
            connection.readPayload(vector, n);
            if (list.hasCrc()) {
                crc.reset();
                for (int i = 0; i < n; i++) crc.update(landing.pieceBuffer(i), list.offset(i), list.length(i));
            }
            landed = true;
        } finally {
            gate.end(landing, landed);
        }
        if (list.hasCrc() && crc.value() != list.crc()) {
            return mismatch("a WRITE_LIST of room " + list.room() + " (" + n + " pieces, " + list.payloadLength() + " bytes)",
                    list.crc()).judgedAgainst(landing.token());
        }
        return null;
    }

    /** Reads a strided WRITE's payload into the staging buffer and scatters its pieces into {@code target}. */
    private void readStrided(WriteHeader w, MemorySegment target, long at) throws IOException {
        if (w.length() > CopyPlan.MAX_OP_BYTES) {
            throw new ProtocolException("strided WRITE of " + w.length() + " bytes exceeds " + CopyPlan.MAX_OP_BYTES);
        }
        if (staging == null) {
            staging = Arena.ofAuto().allocate(CopyPlan.MAX_OP_BYTES, 64);
            stagingView = staging.asByteBuffer();
        }
        stagingView.clear().limit((int) w.length());
        connection.readPayload(stagingView);
        if (w.hasCrc()) crc.update(staging, 0, w.length());
        long piece = w.pieceLength();
        for (long i = 0, n = w.pieces(); i < n; i++) {
            MemorySegment.copy(staging, i * piece, target, at + i * w.dstStride(), piece);
        }
    }

    private static WriteRejectedException uncheckedOnFullLink(String what) {
        return new WriteRejectedException(what + " carries no checksum on a checksum=full link", false, FailureKind.INTEGRITY);
    }

    private WriteRejectedException mismatch(String what, int sent) {
        return new WriteRejectedException("checksum mismatch on " + what + ": CRC32C sent " + Integer.toHexString(sent)
                + ", landed " + Integer.toHexString(crc.value()), false, FailureKind.INTEGRITY);
    }
}
