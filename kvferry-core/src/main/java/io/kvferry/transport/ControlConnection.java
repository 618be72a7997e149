package io.kvferry.transport;

import io.kvferry.api.ChecksumMode;
import io.kvferry.api.FailureKind;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.memory.SegmentCrc;
import io.kvferry.plan.CopyPlan;
import io.kvferry.protocol.ControlMessage;
import io.kvferry.protocol.FrameCodec;
import io.kvferry.protocol.Heartbeat;
import io.kvferry.protocol.ProtocolException;
import io.kvferry.protocol.Region;
import io.kvferry.protocol.Wire;
import io.kvferry.protocol.MessageType;
import io.kvferry.protocol.WriteHeader;

import java.io.EOFException;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import jdk.net.ExtendedSocketOptions;
import java.net.SocketOption;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.Arrays;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.BooleanSupplier;

/**
 * One framed TCP connection between a decode rank and a prefill rank (blocking NIO).
 *
 * <p>Ownership: writes may come from any thread and are serialized by {@code writeLock} (a frame
 * and its payload are never interleaved with another frame); reads belong to the single reader
 * thread of whoever owns the connection. Payload bytes move between the socket and native
 * segments through direct {@link ByteBuffer} views of those segments, never through the heap.
 */
public final class ControlConnection implements AutoCloseable {
    private static final int SOCKET_BUFFER_BYTES = 4 << 20;
    /** WRITE frames per gathering syscall: fewer syscalls for fragmented (small-run) plans. */
    static final int WRITE_BATCH = 16;
    private static final int WRITE_FRAME_BYTES = Wire.HEADER_BYTES + WriteHeader.BODY_BYTES;

    private final SocketChannel channel;
    private final String peer;
    private final ReentrantLock writeLock = new ReentrantLock();
    /** Guarded by writeLock. */
    private final ByteBuffer writeFrame = ByteBuffer.allocateDirect(Wire.HEADER_BYTES + WriteHeader.BODY_BYTES)
            .order(ByteOrder.LITTLE_ENDIAN);
    /** Guarded by writeLock. */
    private final ByteBuffer[] gather = new ByteBuffer[2];
    /** Guarded by writeLock: reusable WRITE headers and the gather vector for batched writes. */
    private final ByteBuffer[] batchHeaders = new ByteBuffer[WRITE_BATCH];
    private final ByteBuffer[] batchVector = new ByteBuffer[2 * WRITE_BATCH];
    /**
     * Reader thread only: bytes read ahead of the current frame. It never holds more than
     * {@link #WRITE_FRAME_BYTES} bytes counted from a frame's start, so a read-ahead can pick up a
     * whole WRITE header in one syscall but never a byte of a WRITE payload (the smallest frame plus
     * a WRITE header is already longer), which therefore always lands straight in its destination.
     */
    private final ByteBuffer ahead = ByteBuffer.allocateDirect(WRITE_FRAME_BYTES).order(ByteOrder.LITTLE_ENDIAN).flip();
    /** Bodies up to this size are read into a kept buffer; a larger one gets its own, dropped after it is decoded. */
    private static final int KEPT_BODY_BYTES = 4096;
    /** Reader thread only: the body being read; grows as a large body's bytes arrive. */
    private ByteBuffer readBody = ByteBuffer.allocate(KEPT_BODY_BYTES).order(ByteOrder.LITTLE_ENDIAN);
    /** Reader thread only: a WRITE's fixed body and the header it is decoded into (no allocation per frame). */
    private final ByteBuffer writeBody = ByteBuffer.allocate(WriteHeader.BODY_BYTES).order(ByteOrder.LITTLE_ENDIAN);
    private final WriteHeader writeHeader = WriteHeader.reusable();
    /** Reader thread only: see {@link #acceptOnly}. */
    private MessageType onlyType;
    private int onlyMaxBody = Integer.MAX_VALUE;
    /** Reader thread only. */
    private ByteBuffer skipScratch;
    /** Guarded by writeLock / reader thread only: staging for strided (head-sliced) writes, made on first use. */
    private MemorySegment sendStaging;
    /** Guarded by writeLock: the CRC of WRITE payloads as they leave. */
    private final SegmentCrc sendCrc = new SegmentCrc();
    private MemorySegment recvStaging;
    private ByteBuffer recvStagingView;
    private volatile boolean closed;
    /** Why this side closed the connection (e.g. missed heartbeats), or null. */
    private volatile String closeReason;
    private volatile FailureKind closeKind;
    /** nanoTime of the last read that returned bytes (any frame or payload byte proves the peer alive). */
    private volatile long lastReadNanos = System.nanoTime();
    /** nanoTime of the last completed write of any frame. */
    private volatile long lastWriteNanos = System.nanoTime();
    private static final ByteBuffer HEARTBEAT_FRAME = FrameCodec.encode(new Heartbeat());
    /** nanoTime when the current write syscall loop started, 0 when no write is in progress. */
    private volatile long writingSince;
    /** Owner's timer thread only: the silence (its last read) and its intervals already reported by {@link #newlyMissedHeartbeats}. */
    private long missesSilenceStart;
    private long missesReported;

    public ControlConnection(SocketChannel channel) throws IOException {
        this.channel = channel;
        channel.configureBlocking(true);
        channel.setOption(StandardSocketOptions.TCP_NODELAY, true);
        channel.setOption(StandardSocketOptions.SO_KEEPALIVE, true);
        // A peer that vanishes without a FIN/RST (host down, partition) is noticed in ~8 s instead of
        // the kernel's default two hours; a killed process is seen at once through its RST/FIN.
        trySet(channel, ExtendedSocketOptions.TCP_KEEPIDLE, KEEPALIVE_IDLE_SECONDS);
        trySet(channel, ExtendedSocketOptions.TCP_KEEPINTERVAL, 1);
        trySet(channel, ExtendedSocketOptions.TCP_KEEPCOUNT, 3);
        channel.setOption(StandardSocketOptions.SO_SNDBUF, SOCKET_BUFFER_BYTES);
        channel.setOption(StandardSocketOptions.SO_RCVBUF, SOCKET_BUFFER_BYTES);
        this.peer = String.valueOf(channel.getRemoteAddress());
        for (int i = 0; i < WRITE_BATCH; i++) {
            batchHeaders[i] = ByteBuffer.allocateDirect(WRITE_FRAME_BYTES).order(ByteOrder.LITTLE_ENDIAN);
        }
    }

    private static final int KEEPALIVE_IDLE_SECONDS = 5;

    private static void trySet(SocketChannel channel, SocketOption<Integer> option, int value) {
        try {
            if (channel.supportedOptions().contains(option)) channel.setOption(option, value);
        } catch (IOException | UnsupportedOperationException e) {
            // not available on this platform: the default keepalive timing applies
        }
    }

    /** Opens a connection, failing after {@code timeout} if the peer does not accept. */
    public static ControlConnection connect(InetSocketAddress address, Duration timeout) throws IOException {
        SocketChannel ch = SocketChannel.open();
        try {
            ch.setOption(StandardSocketOptions.SO_RCVBUF, SOCKET_BUFFER_BYTES);
            ch.socket().connect(address, (int) Math.max(1, timeout.toMillis()));
            return new ControlConnection(ch);
        } catch (IOException | RuntimeException e) {
            ch.close();
            throw e;
        }
    }

    /** Seconds of idleness before TCP keepalive probes start (-1 when the platform does not tell). */
    public int keepAliveIdleSeconds() {
        try {
            return channel.supportedOptions().contains(ExtendedSocketOptions.TCP_KEEPIDLE)
                    ? channel.getOption(ExtendedSocketOptions.TCP_KEEPIDLE) : -1;
        } catch (IOException e) {
            return -1;
        }
    }

    public String peer() {
        return peer;
    }

    public boolean isClosed() {
        return closed;
    }

    /** Sends one control message (not a WRITE). */
    public void send(ControlMessage message) throws IOException {
        ByteBuffer frame = FrameCodec.encode(message);
        writeLock.lock();
        try {
            writeFully(frame);
        } finally {
            writeLock.unlock();
        }
    }

    /**
     * Sends a WRITE: the header, then the bytes of {@code source}, straight from its native memory
     * to the socket (gathering write). The peer lands them at {@code dstOffset} of the named buffer.
     */
    public void write(long room, Region region, int component, int buffer, long dstOffset, MemorySegment source)
            throws IOException {
        ByteBuffer payload = source.asByteBuffer();
        writeLock.lock();
        try {
            writeFrame.clear();
            FrameCodec.putWriteFrame(writeFrame, room, region, component, buffer, dstOffset, source.byteSize());
            writeFrame.flip();
            gather[0] = writeFrame;
            gather[1] = payload;
            writingSince = System.nanoTime();
            while (writeFrame.hasRemaining() || payload.hasRemaining()) {
                if (channel.write(gather) > 0) writingSince = System.nanoTime();
            }
        } catch (IOException e) {
            closeQuietly();
            throw e;
        } finally {
            writingSince = 0;
            lastWriteNanos = System.nanoTime();
            gather[1] = null;
            writeLock.unlock();
        }
    }

    /**
     * Sends every op of {@code plan} as a WRITE frame, {@value #WRITE_BATCH} frames per gathering
     * syscall, straight from the registered source memory. Checks {@code cancelled} between batches
     * so an aborted room stops within one batch.
     */
    public void writePlan(long room, CopyPlan plan, RegisteredMemory source, BooleanSupplier cancelled)
            throws IOException {
        writePlan(room, plan, source, cancelled, ChecksumMode.OFF);
    }

    /**
     * As {@link #writePlan(long, CopyPlan, RegisteredMemory, BooleanSupplier)}, each WRITE that
     * {@code checksum} selects carrying the CRC32C of its payload, computed as it leaves.
     */
    public void writePlan(long room, CopyPlan plan, RegisteredMemory source, BooleanSupplier cancelled, ChecksumMode checksum)
            throws IOException {
        int op = 0;
        while (op < plan.size()) {
            if (cancelled.getAsBoolean()) throw new IOException("room " + room + " failed during the transfer");
            if (plan.strided(op)) {
                writeStrided(room, plan, op, source, checksum);
                op++;
                continue;
            }
            int n = 0;
            while (n < WRITE_BATCH && op + n < plan.size() && !plan.strided(op + n)) n++;
            writeBatch(room, plan, op, n, source, checksum);
            op += n;
        }
    }

    /** Whether a WRITE to {@code (region, component, buffer, offset)} of a room carries a CRC in this mode. */
    private static boolean crcFor(ChecksumMode mode, long room, Region region, int component, int buffer, long offset) {
        return mode != ChecksumMode.OFF && PageDigest.sampled(mode, room, region, PageDigest.key(region, component, buffer, offset));
    }

    /** Up to {@value #WRITE_BATCH} contiguous ops in one gathering syscall, straight from source memory. */
    private void writeBatch(long room, CopyPlan plan, int first, int n, RegisteredMemory source, ChecksumMode checksum)
            throws IOException {
        writeLock.lock();
        try {
            long remaining = 0;
            for (int i = 0; i < n; i++) {
                int op = first + i;
                ByteBuffer h = batchHeaders[i];
                h.clear();
                boolean withCrc = crcFor(checksum, room, plan.region(op), plan.component(op), plan.dstBuffer(op), plan.dstOffset(op));
                int crc = 0;
                if (withCrc) {
                    sendCrc.reset();
                    sendCrc.update(source.segmentOrNull(plan.region(op), plan.component(op), plan.buffer(op)), plan.srcOffset(op),
                            plan.length(op));
                    crc = sendCrc.value();
                }
                FrameCodec.putWriteFrame(h, room, plan.region(op), plan.component(op), plan.dstBuffer(op),
                        plan.dstOffset(op), plan.length(op), plan.length(op), plan.length(op), withCrc, crc);
                h.flip();
                batchVector[2 * i] = h;
                batchVector[2 * i + 1] = source.slice(plan.region(op), plan.component(op), plan.buffer(op),
                        plan.srcOffset(op), plan.length(op)).asByteBuffer();
                remaining += WRITE_FRAME_BYTES + plan.length(op);
            }
            gatherWrite(2 * n, remaining);
        } finally {
            Arrays.fill(batchVector, null);
            writeLock.unlock();
        }
    }

    /** Writes the first {@code count} buffers of the gather vector, {@code bytes} in all (write lock held). */
    private void gatherWrite(int count, long bytes) throws IOException {
        try {
            writingSince = System.nanoTime();
            while (bytes > 0) {
                long w = channel.write(batchVector, 0, count);
                if (w > 0) writingSince = System.nanoTime();
                bytes -= w;
            }
        } catch (IOException e) {
            closeQuietly();
            throw e;
        } finally {
            writingSince = 0;
            lastWriteNanos = System.nanoTime();
        }
    }

    /**
     * A strided op (head-sliced KV): its pieces are gathered into a native staging buffer (one
     * memory copy, no heap) and sent as one WRITE, so a slice moves in one large operation rather
     * than one per token per head.
     */
    private void writeStrided(long room, CopyPlan plan, int op, RegisteredMemory source, ChecksumMode checksum) throws IOException {
        long length = plan.length(op), piece = plan.pieceLength(op), stride = plan.srcStride(op);
        MemorySegment src = source.slice(plan.region(op), plan.component(op), plan.buffer(op), plan.srcOffset(op),
                plan.srcSpan(op));
        writeLock.lock();
        try {
            if (sendStaging == null) sendStaging = Arena.ofAuto().allocate(CopyPlan.MAX_OP_BYTES, 64);
            for (long i = 0, n = length / piece; i < n; i++) {
                MemorySegment.copy(src, i * stride, sendStaging, i * piece, piece);
            }
            ByteBuffer h = batchHeaders[0];
            h.clear();
            boolean withCrc = crcFor(checksum, room, plan.region(op), plan.component(op), plan.dstBuffer(op), plan.dstOffset(op));
            int crc = 0;
            if (withCrc) {
                sendCrc.reset();
                sendCrc.update(sendStaging, 0, length);
                crc = sendCrc.value();
            }
            FrameCodec.putWriteFrame(h, room, plan.region(op), plan.component(op), plan.dstBuffer(op), plan.dstOffset(op),
                    length, piece, plan.dstStride(op), withCrc, crc);
            h.flip();
            batchVector[0] = h;
            batchVector[1] = sendStaging.asSlice(0, length).asByteBuffer();
            gatherWrite(2, WRITE_FRAME_BYTES + length);
        } finally {
            Arrays.fill(batchVector, null);
            writeLock.unlock();
        }
    }

    /**
     * Reads a strided WRITE's payload into a native staging buffer and scatters its pieces into
     * {@code target} (reader thread only); with {@code crc}, the payload's CRC32C goes into it.
     */
    public void readStridedPayload(WriteHeader w, MemorySegment target, long at, SegmentCrc crc) throws IOException {
        if (w.length() > CopyPlan.MAX_OP_BYTES) {
            throw new ProtocolException("strided WRITE of " + w.length() + " bytes exceeds " + CopyPlan.MAX_OP_BYTES);
        }
        if (recvStaging == null) {
            recvStaging = Arena.ofAuto().allocate(CopyPlan.MAX_OP_BYTES, 64);
            recvStagingView = recvStaging.asByteBuffer();
        }
        recvStagingView.clear().limit((int) w.length());
        readPayload(recvStagingView);
        if (crc != null) crc.update(recvStaging, 0, w.length());
        long piece = w.pieceLength();
        for (long i = 0, n = w.pieces(); i < n; i++) {
            MemorySegment.copy(recvStaging, i * piece, target, at + i * w.dstStride(), piece);
        }
    }

    /** Milliseconds the current write has made no progress (0 when not writing). */
    public long writeStalledFor() {
        long since = writingSince;
        return since == 0 ? 0 : (System.nanoTime() - since) / 1_000_000L;
    }

    private void writeFully(ByteBuffer buf) throws IOException {
        try {
            writingSince = System.nanoTime();
            while (buf.hasRemaining()) {
                if (channel.write(buf) > 0) writingSince = System.nanoTime();
            }
        } catch (IOException e) {
            closeQuietly();
            throw e;
        } finally {
            writingSince = 0;
            lastWriteNanos = System.nanoTime();
        }
    }

    /**
     * Liveness upkeep, called periodically by the owner's timer: sends a HEARTBEAT when nothing was
     * written for {@code intervalNanos} (skipped while another thread is writing: its bytes are proof
     * enough), and closes the connection when nothing arrived for {@code timeoutNanos}.
     *
     * @return false when the connection was declared dead by this call
     */
    public boolean heartbeat(long intervalNanos, long timeoutNanos) {
        if (closed) return true;
        long now = System.nanoTime();
        long silent = now - lastReadNanos;
        if (silent > timeoutNanos) {
            close(FailureKind.HEARTBEAT_TIMEOUT, "no heartbeat or data from " + peer + " for " + silent / 1_000_000L + " ms");
            return false;
        }
        if (now - lastWriteNanos >= intervalNanos && writeLock.tryLock()) {
            try {
                writeFully(HEARTBEAT_FRAME.duplicate());
            } catch (IOException e) {
                // the reader sees the broken connection
            } finally {
                writeLock.unlock();
            }
        }
        return true;
    }

    /** Nanoseconds since the last byte arrived (a status page's "silent for"). */
    public long silentNanos() {
        return System.nanoTime() - lastReadNanos;
    }

    /**
     * Heartbeat intervals of the current silence not reported by an earlier call (the owner's timer
     * calls it beside {@link #heartbeat}, for the heartbeat-miss counter); 0 once bytes arrive again.
     */
    public int newlyMissedHeartbeats(long intervalNanos) {
        long lastRead = lastReadNanos;
        if (lastRead != missesSilenceStart) { // bytes arrived since: a new silence starts
            missesSilenceStart = lastRead;
            missesReported = 0;
        }
        // A peer's heartbeat may come up to 1.5 intervals after its last write (its timer runs every half
        // interval), so the first interval of silence is not a miss; each further one is.
        long missed = Math.max(0, (System.nanoTime() - lastRead) / Math.max(1, intervalNanos) - 1);
        int fresh = (int) Math.min(Integer.MAX_VALUE, missed - missesReported);
        missesReported = missed;
        return fresh;
    }

    /** Why this side closed the connection, or null when it did not (or not for a stated reason). */
    public String closeReason() {
        return closeReason;
    }

    /** What kind of failure this side closed the connection for, or null when it stated none. */
    public FailureKind closeKind() {
        return closeKind;
    }

    /** Closes with a reason the owner reports instead of the reader's I/O error (kind: peer lost). */
    public void close(String reason) {
        close(FailureKind.PEER_LOST, reason);
    }

    /** Closes with a kind and reason the owner reports instead of the reader's I/O error; the first one stays. */
    public synchronized void close(FailureKind kind, String reason) {
        if (closeReason == null) {
            closeKind = kind;
            closeReason = reason;
        }
        closeQuietly();
    }

    /**
     * Until {@link #acceptAll}: only {@code type} frames of at most {@code maxBodyBytes} are read; any
     * other frame ends the read with a ProtocolException before its body is read. A listener sets it
     * on every accepted connection, so an unauthenticated peer can make this side hold no more than
     * one small HELLO (reader thread, or before the reader starts).
     */
    public void acceptOnly(MessageType type, int maxBodyBytes) {
        onlyType = type;
        onlyMaxBody = maxBodyBytes;
    }

    /** The peer is authenticated: every frame type within its own size limit is read from now on. */
    public void acceptAll() {
        onlyType = null;
        onlyMaxBody = Integer.MAX_VALUE;
    }

    /**
     * Reads the next message (reader thread only). For a {@link WriteHeader} the payload is still on
     * the stream: the caller must consume exactly its length with {@link #readPayload} or
     * {@link #skipPayload} before reading again; the header itself is this connection's reused one,
     * valid until the next read. A body is read into a buffer that grows as its bytes arrive (never
     * sized from the header alone), so a peer that announces a large frame and stalls costs nothing.
     */
    public ControlMessage read() throws IOException {
        fillAhead(Wire.HEADER_BYTES);
        long header = FrameCodec.readHeaderPacked(ahead);
        MessageType type = FrameCodec.packedType(header);
        int bodyLength = FrameCodec.packedBodyLength(header);
        if (onlyType != null) {
            if (type != onlyType) throw new ProtocolException("expected " + onlyType + " from an unauthenticated peer, got " + type);
            if (bodyLength > onlyMaxBody) {
                throw new ProtocolException(type + " of " + bodyLength + " bytes from an unauthenticated peer exceeds " + onlyMaxBody);
            }
        }
        if (type == MessageType.WRITE) {
            writeBody.clear();
            int fromAhead = Math.min(ahead.remaining(), WriteHeader.BODY_BYTES);
            writeBody.put(0, ahead, ahead.position(), fromAhead).position(fromAhead);
            ahead.position(ahead.position() + fromAhead);
            readFully(writeBody); // never past this frame: the payload lands in its destination
            writeBody.flip();
            return FrameCodec.decodeWriteInto(writeBody, writeHeader);
        }
        readBody.clear().limit(Math.min(bodyLength, readBody.capacity()));
        int fromAhead = Math.min(ahead.remaining(), bodyLength);
        readBody.put(0, ahead, ahead.position(), fromAhead).position(fromAhead);
        ahead.position(ahead.position() + fromAhead);
        while (true) {
            readFully(readBody); // the rest of the body, read directly: never past this frame
            if (readBody.position() == bodyLength) break;
            // Full, and the frame is longer: grow by doubling, only as far as bytes have arrived.
            ByteBuffer larger = ByteBuffer.allocate((int) Math.min(bodyLength, 2L * readBody.capacity())).order(ByteOrder.LITTLE_ENDIAN);
            readBody.flip();
            larger.put(readBody);
            larger.limit(larger.capacity());
            readBody = larger;
        }
        readBody.flip();
        ControlMessage m = FrameCodec.decodeBody(type, readBody);
        if (readBody.capacity() > KEPT_BODY_BYTES) readBody = ByteBuffer.allocate(KEPT_BODY_BYTES).order(ByteOrder.LITTLE_ENDIAN);
        return m;
    }

    /** At a frame start: makes at least {@code need} unread bytes available in {@link #ahead}. */
    private void fillAhead(int need) throws IOException {
        if (ahead.remaining() >= need) return;
        ahead.compact(); // kept bytes move to 0 = this frame's start; reads stop at the buffer's capacity
        while (ahead.position() < need) {
            int n = channel.read(ahead);
            if (n > 0) lastReadNanos = System.nanoTime();
            if (n < 0) {
                boolean clean = ahead.position() == 0;
                ahead.flip();
                if (clean) throw new EOFException("connection closed by " + peer);
                throw new ProtocolException("connection closed by " + peer + " in the middle of a frame");
            }
        }
        ahead.flip();
    }

    /** Reads a WRITE payload straight into {@code destination} (its whole size). */
    public void readPayload(MemorySegment destination) throws IOException {
        readPayload(destination.asByteBuffer());
    }

    /** Reads a WRITE payload straight into {@code destination}'s remaining bytes. */
    public void readPayload(ByteBuffer destination) throws IOException {
        if (ahead.hasRemaining()) throw new IllegalStateException("read-ahead holds payload bytes: framing bug");
        readFully(destination);
    }

    /** Discards {@code length} payload bytes of a rejected WRITE, keeping the stream in step. */
    public void skipPayload(long length) throws IOException {
        if (skipScratch == null) skipScratch = ByteBuffer.allocateDirect(64 << 10);
        long left = length;
        while (left > 0) {
            skipScratch.clear().limit((int) Math.min(skipScratch.capacity(), left));
            readFully(skipScratch);
            left -= skipScratch.limit();
        }
    }

    private void readFully(ByteBuffer buf) throws IOException {
        while (buf.hasRemaining()) {
            int n = channel.read(buf);
            if (n > 0) lastReadNanos = System.nanoTime();
            if (n < 0) {
                throw new ProtocolException("connection closed by " + peer + " in the middle of a frame");
            }
        }
    }

    private void closeQuietly() {
        closed = true;
        try {
            channel.close();
        } catch (IOException ignored) {
            // already broken
        }
    }

    @Override
    public void close() {
        closeQuietly();
    }

    @Override
    public String toString() {
        return "ControlConnection[" + peer + "]";
    }
}
