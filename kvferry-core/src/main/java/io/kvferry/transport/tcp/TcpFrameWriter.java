package io.kvferry.transport.tcp;

import io.kvferry.api.ChecksumMode;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.memory.SegmentCrc;
import io.kvferry.plan.CopyPlan;
import io.kvferry.protocol.FrameCodec;
import io.kvferry.protocol.Region;
import io.kvferry.protocol.Wire;
import io.kvferry.protocol.WriteHeader;
import io.kvferry.protocol.WriteList;
import io.kvferry.transport.ControlConnection;
import io.kvferry.transport.PageDigest;
import io.kvferry.transport.RemoteBuffers;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.BooleanSupplier;

/**
 * The prefill's side of tcp on one connection: turns a plan into frames and sends each with one
 * gathering write straight from the registered source memory. Contiguous ops travel as WRITE_LISTs
 * (up to {@link WriteList#MAX_PIECES} pieces and {@link #LIST_PAYLOAD_BYTES} per frame; an op larger
 * than that is a list of its own, up to {@link WriteList#MAX_PAYLOAD_BYTES}); a strided (head-sliced) op is gathered into a native staging buffer and sent as one
 * WRITE. A trailer frame (the room's STATUS) may ride in the same syscall as the plan's last frame.
 *
 * <p>Ownership: any transfer worker may call it; {@code lock} guards the frame buffers, views and
 * staging for one frame at a time, so frames of different rooms interleave only between frames. The
 * connection's own write lock is taken inside it (always in that order).
 */
final class TcpFrameWriter {
    private static final int WRITE_FRAME_BYTES = Wire.HEADER_BYTES + WriteHeader.BODY_BYTES;
    /**
     * Where the prefill cuts a list by payload (the protocol allows up to {@link WriteList#MAX_PAYLOAD_BYTES}).
     * Measured (PERFORMANCE.md, "Piece-list size"): 4 MiB lists moved large (~48 KiB) ops 5-10 % slower
     * than 1 MiB ones, 256 KiB ones were slower again; fragmented 2 KiB pieces fill a list's 511 pieces
     * at ~1 MiB anyway.
     */
    static final long LIST_PAYLOAD_BYTES = 1 << 20;

    private final ControlConnection connection;
    private final ReentrantLock lock = new ReentrantLock();
    /** Guarded by lock: a WRITE_LIST frame (header, fixed body, pieces) and a WRITE frame, reused. */
    private final ByteBuffer listFrame = ByteBuffer.allocateDirect(Wire.HEADER_BYTES + WriteList.MAX_BODY_BYTES)
            .order(ByteOrder.LITTLE_ENDIAN);
    private final ByteBuffer writeFrame = ByteBuffer.allocateDirect(WRITE_FRAME_BYTES).order(ByteOrder.LITTLE_ENDIAN);
    /** Guarded by lock: frame, pieces, trailer. */
    private final ByteBuffer[] vector = new ByteBuffer[WriteList.MAX_PIECES + 2];
    private final BufferViews views = new BufferViews();
    private final SegmentCrc crc = new SegmentCrc();
    /** Guarded by lock: staging for strided writes, made on first use. */
    private MemorySegment staging;

    TcpFrameWriter(ControlConnection connection) {
        this.connection = connection;
    }

    ControlConnection connection() {
        return connection;
    }

    /**
     * Sends every op of {@code plan}, checking {@code cancelled} between frames (an aborted room
     * stops within one frame), each frame that {@code checksum} selects carrying the CRC32C of its
     * payload, computed as it leaves. A non-null {@code trailer} (an encoded control frame) follows
     * the plan's last frame in the same syscall, or goes alone for an empty plan.
     */
    void writePlan(long room, CopyPlan plan, RegisteredMemory source, BooleanSupplier cancelled, ChecksumMode checksum,
                   ByteBuffer trailer) throws IOException {
        int op = 0, n = plan.size();
        if (n == 0 && trailer != null) {
            lock.lock();
            try {
                vector[0] = trailer;
                connection.writeFrames(vector, 0, 1, trailer.remaining());
            } finally {
                vector[0] = null;
                lock.unlock();
            }
            return;
        }
        while (op < n) {
            if (cancelled.getAsBoolean()) throw new IOException("room " + room + " failed during the transfer");
            op = plan.strided(op) ? writeStrided(room, plan, op, source, checksum, trailer)
                    : writeList(room, plan, op, source, checksum, trailer);
        }
    }

    /** Sends the longest WRITE_LIST that starts at op {@code first}; returns the op after it. */
    private int writeList(long room, CopyPlan plan, int first, RegisteredMemory source, ChecksumMode checksum, ByteBuffer trailer)
            throws IOException {
        lock.lock();
        try {
            views.reset();
            listFrame.clear();
            if (checksum != ChecksumMode.OFF) crc.reset();
            boolean withCrc = checksum == ChecksumMode.FULL;
            int count = 0, op = first, n = plan.size();
            long payload = 0, prevEnd = 0;
            int prevRegion = -1, prevComponent = -1, prevBuffer = -1;
            while (op < n && count < WriteList.MAX_PIECES && !plan.strided(op)) {
                long len = plan.length(op);
                if (count > 0 && payload + len > LIST_PAYLOAD_BYTES) break;
                Region region = plan.region(op);
                int component = plan.component(op), buffer = plan.dstBuffer(op);
                long offset = plan.dstOffset(op);
                int order = region.code() != prevRegion ? Integer.compare(region.code(), prevRegion)
                        : component != prevComponent ? Integer.compare(component, prevComponent) : Integer.compare(buffer, prevBuffer);
                // The decode takes only ascending, non-overlapping pieces: anything else starts the next list.
                if (count > 0 && (order < 0 || order == 0 && offset < prevEnd)) break;
                MemorySegment src = RemoteBuffers.checkSource(room, plan, op, source);
                FrameCodec.putWriteListPiece(listFrame, Wire.HEADER_BYTES + WriteList.bodyBytes(count), region, component, buffer,
                        offset, len);
                vector[1 + count] = views.view(src, plan.srcOffset(op), len);
                if (checksum != ChecksumMode.OFF) {
                    crc.update(src, plan.srcOffset(op), len);
                    withCrc |= PageDigest.sampled(checksum, room, region, PageDigest.key(region, component, buffer, offset));
                }
                count++;
                payload += len;
                prevRegion = region.code();
                prevComponent = component;
                prevBuffer = buffer;
                prevEnd = offset + len;
                op++;
            }
            FrameCodec.putWriteListHeader(listFrame, 0, room, count, payload, withCrc, withCrc ? crc.value() : 0);
            listFrame.clear().limit(Wire.HEADER_BYTES + WriteList.bodyBytes(count));
            vector[0] = listFrame;
            int buffers = 1 + count;
            long bytes = listFrame.remaining() + payload;
            if (op == n && trailer != null) {
                vector[buffers++] = trailer;
                bytes += trailer.remaining();
            }
            connection.writeFrames(vector, 0, buffers, bytes);
            return op;
        } finally {
            lock.unlock();
        }
    }

    /**
     * A strided op (head-sliced KV): its pieces are gathered into a native staging buffer (one
     * memory copy, no heap) and sent as one WRITE, so a slice moves in one large operation rather
     * than one per token per head.
     */
    private int writeStrided(long room, CopyPlan plan, int op, RegisteredMemory source, ChecksumMode checksum, ByteBuffer trailer)
            throws IOException {
        long length = plan.length(op), piece = plan.pieceLength(op), stride = plan.srcStride(op);
        MemorySegment src = RemoteBuffers.checkSource(room, plan, op, source);
        long from = plan.srcOffset(op);
        lock.lock();
        try {
            if (staging == null) staging = Arena.ofAuto().allocate(CopyPlan.MAX_OP_BYTES, 64);
            for (long i = 0, n = length / piece; i < n; i++) {
                MemorySegment.copy(src, from + i * stride, staging, i * piece, piece);
            }
            boolean withCrc = checksum != ChecksumMode.OFF && PageDigest.sampled(checksum, room, plan.region(op),
                    PageDigest.key(plan.region(op), plan.component(op), plan.dstBuffer(op), plan.dstOffset(op)));
            int value = 0;
            if (withCrc) {
                crc.reset();
                crc.update(staging, 0, length);
                value = crc.value();
            }
            writeFrame.clear();
            FrameCodec.putWriteFrame(writeFrame, room, plan.region(op), plan.component(op), plan.dstBuffer(op), plan.dstOffset(op),
                    length, piece, plan.dstStride(op), withCrc, value);
            writeFrame.flip();
            views.reset();
            vector[0] = writeFrame;
            vector[1] = views.view(staging, 0, length);
            int buffers = 2;
            long bytes = WRITE_FRAME_BYTES + length;
            if (op + 1 == plan.size() && trailer != null) {
                vector[buffers++] = trailer;
                bytes += trailer.remaining();
            }
            connection.writeFrames(vector, 0, buffers, bytes);
            return op + 1;
        } finally {
            lock.unlock();
        }
    }

    /** Sends one contiguous WRITE of {@code source} to {@code dstOffset} of the named buffer (tests, tools). */
    void write(long room, Region region, int component, int buffer, long dstOffset, MemorySegment source) throws IOException {
        lock.lock();
        try {
            writeFrame.clear();
            FrameCodec.putWriteFrame(writeFrame, room, region, component, buffer, dstOffset, source.byteSize());
            writeFrame.flip();
            views.reset();
            vector[0] = writeFrame;
            vector[1] = views.view(source, 0, source.byteSize());
            connection.writeFrames(vector, 0, 2, WRITE_FRAME_BYTES + source.byteSize());
        } finally {
            lock.unlock();
        }
    }
}
