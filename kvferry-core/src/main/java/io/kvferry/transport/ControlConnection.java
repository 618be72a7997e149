package io.kvferry.transport;

import io.kvferry.api.FailureKind;
import io.kvferry.protocol.ControlMessage;
import io.kvferry.protocol.FrameCodec;
import io.kvferry.protocol.Heartbeat;
import io.kvferry.protocol.MessageType;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import jdk.net.ExtendedSocketOptions;
import java.net.SocketOption;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.EnumSet;
import java.util.Set;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.locks.ReentrantLock;

/**
 * One framed TCP connection between a decode rank and a prefill rank (blocking NIO): framing and
 * liveness only. What the frames carry is up to their owners; tcp's data path
 * ({@code io.kvferry.transport.tcp}) builds WRITE/WRITE_LIST frames and lands their payloads through
 * {@link #writeFrames} and {@link #readPayload(ByteBuffer[], int)}.
 *
 * <p>Ownership: writes may come from any thread and are serialized by {@code writeLock} (a frame
 * and its payload are never interleaved with another frame); reads belong to the single reader
 * thread of whoever owns the connection. Payload bytes move between the socket and native
 * segments through direct {@link ByteBuffer} views of those segments, never through the heap.
 *
 * <p>Reads go through the connection's {@link FrameReader} (a 16 KiB read-ahead: many small frames
 * per syscall); the writer side encodes control frames into one reused buffer. Liveness: every
 * byte read refreshes the peer's clock, {@link #heartbeat} keeps an idle link alive and declares a
 * silent one dead.
 */
public final class ControlConnection implements AutoCloseable {
    private static final int SOCKET_BUFFER_BYTES = 4 << 20;
    /** The read-ahead: every body up to this size is decoded in place from it. */
    static final int AHEAD_BYTES = FrameReader.AHEAD_BYTES;

    private final SocketChannel channel;
    private final String peer;
    private final ReentrantLock writeLock = new ReentrantLock();
    /** Guarded by writeLock: where control frames are encoded. */
    private final FrameCodec.FrameBuffer sendBuffer = new FrameCodec.FrameBuffer();
    /** The reading half (reader thread only): read-ahead, frames, payloads. */
    private final FrameReader reader;
    /** Reader thread only: see {@link #acceptOnly}. */
    private Set<MessageType> onlyTypes;
    private int onlyMaxBody = Integer.MAX_VALUE;
    private volatile boolean closed;
    /** Why this side closed the connection (e.g. missed heartbeats), or null. */
    private volatile String closeReason;
    private volatile FailureKind closeKind;
    /** nanoTime of the last read that returned bytes (any frame or payload byte proves the peer alive). */
    private volatile long lastReadNanos = System.nanoTime();
    /** nanoTime of the last completed write of any frame. */
    private volatile long lastWriteNanos = System.nanoTime();
    private static final ByteBuffer HEARTBEAT_FRAME = FrameCodec.encode(new Heartbeat());
    /** Set while a heartbeat is on its way out (at most one at a time, see {@link #heartbeat}). */
    private final AtomicBoolean heartbeatInFlight = new AtomicBoolean();
    /** nanoTime when the current write syscall loop started, 0 when no write is in progress. */
    private volatile long writingSince;
    /**
     * Buffers handed to vectored writes (under the write lock) so far. The JDK allocates a small
     * releaser per segment-backed buffer per vectored call (sun.nio.ch.IOUtil), so tests tell that
     * garbage from kvferry's own by this count.
     */
    private long vectoredWritten;
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
        this.reader = new FrameReader(channel, peer, this);
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

    /** Sends one control message (not a WRITE or WRITE_LIST), encoded into this connection's reused buffer. */
    public void send(ControlMessage message) throws IOException {
        writeLock.lock();
        try {
            writeFully(sendBuffer.encode(message));
        } finally {
            writeLock.unlock();
        }
    }

    /**
     * Writes the first {@code count} buffers of {@code vector} from {@code offset}, {@code bytes} in
     * all, as one uninterrupted stretch of the stream (gathering writes under the write lock): the
     * way frames with payloads (tcp's WRITE and WRITE_LIST) go out. A failure closes the connection.
     */
    public void writeFrames(ByteBuffer[] vector, int offset, int count, long bytes) throws IOException {
        writeLock.lock();
        try {
            writingSince = System.nanoTime();
            int first = offset, end = offset + count;
            while (bytes > 0) {
                while (first < end && !vector[first].hasRemaining()) first++;
                int last = window(vector, first, end);
                vectoredWritten += last - first;
                long w = channel.write(vector, first, last - first);
                if (w > 0) writingSince = System.nanoTime();
                bytes -= w;
            }
        } catch (IOException e) {
            closeQuietly();
            throw e;
        } finally {
            writingSince = 0;
            lastWriteNanos = System.nanoTime();
            writeLock.unlock();
        }
    }

    /**
     * Bytes one vectored call is offered: the JDK prepares (and on a partial transfer prepares again)
     * every buffer it is handed, so a call gets the buffers up to about this many bytes rather than a
     * whole list of a thousand small pieces.
     */
    static final long VECTOR_WINDOW_BYTES = 512 << 10;

    /** The end of the buffers from {@code first} (at least one) whose bytes stay within {@link #VECTOR_WINDOW_BYTES}. */
    static int window(ByteBuffer[] vector, int first, int end) {
        int last = first;
        long bytes = 0;
        while (last < end && (last == first || bytes + vector[last].remaining() <= VECTOR_WINDOW_BYTES)) {
            bytes += vector[last].remaining();
            last++;
        }
        return last;
    }

    /** Buffers handed to vectored writes so far: each costs a few bytes of JDK garbage per call. */
    public long vectoredWritten() {
        return vectoredWritten;
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
        if (now - lastWriteNanos >= intervalNanos && !writeLock.isLocked() && heartbeatInFlight.compareAndSet(false, true)) {
            // Written on a virtual thread of its own: with this side's send buffer full and the peer no longer
            // reading (a frozen process), the write blocks, and the caller's timer thread (every link's liveness,
            // the deadlines, the stall watchdog that cuts such a peer) must never block on one link.
            Thread.ofVirtual().name("kvferry-heartbeat").start(this::writeHeartbeat);
        }
        return true;
    }

    private void writeHeartbeat() {
        try {
            if (!writeLock.tryLock()) return; // another writer is busy: its bytes are proof enough
            try {
                if (!closed) writeFully(HEARTBEAT_FRAME.duplicate());
            } catch (IOException e) {
                // the reader sees the broken connection
            } finally {
                writeLock.unlock();
            }
        } finally {
            heartbeatInFlight.set(false);
        }
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
        acceptOnly(EnumSet.of(type), maxBodyBytes);
    }

    /**
     * As {@link #acceptOnly(MessageType, int)} for a few types, e.g. a reply and the heartbeats that may
     * precede it; each type's own limit still applies, so {@code maxBodyBytes} only lowers it.
     */
    public void acceptOnly(Set<MessageType> types, int maxBodyBytes) {
        if (types.isEmpty()) throw new IllegalArgumentException("acceptOnly needs at least one type");
        onlyTypes = EnumSet.copyOf(types);
        onlyMaxBody = maxBodyBytes;
    }

    /** The peer is authenticated: every frame type within its own size limit is read from now on. */
    public void acceptAll() {
        onlyTypes = null;
        onlyMaxBody = Integer.MAX_VALUE;
    }

    /**
     * Reads the next message (reader thread only). For a {@link io.kvferry.protocol.WriteHeader} or
     * {@link io.kvferry.protocol.WriteList} the payload is still on the stream: the caller must consume exactly its length with
     * {@link #readPayload} or {@link #skipPayload} before reading again; the header or list itself is
     * this connection's reused one, valid until the next read. See {@link FrameReader}.
     */
    public ControlMessage read() throws IOException {
        return reader.read(onlyTypes, onlyMaxBody);
    }

    /** Reads a WRITE payload into {@code destination} (its whole size). */
    public void readPayload(MemorySegment destination) throws IOException {
        reader.readPayload(destination.asByteBuffer());
    }

    /** Reads payload bytes into {@code destination}'s remaining bytes. */
    public void readPayload(ByteBuffer destination) throws IOException {
        reader.readPayload(destination);
    }

    /**
     * Fills the remaining bytes of the first {@code count} buffers of {@code vector}, in order, with
     * the payload that follows the last frame read (reader thread only): from the read-ahead, then
     * with scattering reads straight into them. {@code vector[count]} must be free: the read-ahead
     * takes that slot during the reads, so the frames after this payload arrive with it.
     */
    public void readPayload(ByteBuffer[] vector, int count) throws IOException {
        reader.readPayload(vector, count);
    }

    /** Discards {@code length} payload bytes of a rejected write, keeping the stream in step. */
    public void skipPayload(long length) throws IOException {
        reader.skipPayload(length);
    }

    /** Buffers handed to vectored reads so far (see {@link #vectoredWritten}); reader thread. */
    public long vectoredRead() {
        return reader.vectoredRead();
    }

    /** Any byte arrived: proof the peer is alive (the reader's calls). */
    void markRead() {
        lastReadNanos = System.nanoTime();
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
