package io.kvferry.chaos;

import io.kvferry.protocol.ControlMessage;
import io.kvferry.protocol.FrameCodec;
import io.kvferry.protocol.Heartbeat;
import io.kvferry.protocol.MessageType;
import io.kvferry.protocol.ProtocolException;
import io.kvferry.protocol.Wire;

import java.io.DataInputStream;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.List;
import java.util.function.LongFunction;

/**
 * A raw kvferry control connection played by the hostile peer: whole frames out through
 * {@link FrameCodec}, frames in with a deadline, and the tests "did the rank close this?" and "is
 * this still open?". Blocking except while flooding ({@link #floodUntilCut}). Not the library's
 * connection class on purpose: the tools see only the public protocol, and a hostile peer breaks
 * rules the library's own connection would not let it break.
 */
final class PeerConnection implements AutoCloseable {
    private final SocketChannel channel;
    private final DataInputStream in;

    private PeerConnection(SocketChannel channel) throws IOException {
        this.channel = channel;
        this.in = new DataInputStream(channel.socket().getInputStream());
    }

    static PeerConnection open(InetSocketAddress at) throws IOException {
        SocketChannel c = SocketChannel.open();
        try {
            c.socket().connect(at, 5000);
            return new PeerConnection(c);
        } catch (IOException e) {
            c.close();
            throw e;
        }
    }

    void send(ControlMessage m) throws IOException {
        sendRaw(FrameCodec.encode(m));
    }

    void sendRaw(ByteBuffer bytes) throws IOException {
        while (bytes.hasRemaining()) channel.write(bytes);
    }

    /** A 12-byte header announcing a body that never comes. */
    void sendHeader(MessageType type, int bodyLength) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(Wire.HEADER_BYTES);
        FrameCodec.putHeader(b, type, bodyLength);
        sendRaw(b.flip());
    }

    /** The next frame other than a HEARTBEAT, or an IOException when none came in time or the rank closed the connection. */
    ControlMessage read(Duration within) throws IOException {
        long deadline = System.nanoTime() + within.toNanos();
        while (true) {
            long left = Math.max(1, (deadline - System.nanoTime()) / 1_000_000);
            channel.socket().setSoTimeout((int) Math.min(Integer.MAX_VALUE, left));
            byte[] header = new byte[Wire.HEADER_BYTES];
            in.readFully(header);
            FrameCodec.Header h;
            try {
                h = FrameCodec.readHeader(ByteBuffer.wrap(header));
            } catch (ProtocolException e) {
                throw new IOException("the rank sent a bad frame: " + e.getMessage(), e);
            }
            byte[] body = new byte[h.bodyLength()];
            in.readFully(body);
            ControlMessage m = FrameCodec.decodeBody(h.type(), ByteBuffer.wrap(body));
            if (!(m instanceof Heartbeat)) return m;
            if (System.nanoTime() > deadline) throw new SocketTimeoutException("only heartbeats for " + within.toMillis() + " ms");
        }
    }

    /** Whether the rank closed (or reset) the connection within {@code within}; what it sends meanwhile is read and dropped. */
    boolean closedByPeer(Duration within) {
        long deadline = System.nanoTime() + within.toNanos();
        byte[] sink = new byte[4096];
        try {
            while (System.nanoTime() < deadline) {
                long left = Math.max(1, (deadline - System.nanoTime()) / 1_000_000);
                channel.socket().setSoTimeout((int) Math.min(Integer.MAX_VALUE, left));
                if (in.read(sink) < 0) return true;
            }
            return false;
        } catch (SocketTimeoutException e) {
            return false;
        } catch (IOException e) {
            return true; // reset
        }
    }

    /**
     * How many of {@code connections} the rank closed, polling them all until at least {@code atLeast}
     * are closed or {@code within} passed (what they send meanwhile is read and dropped).
     */
    static int closedAmong(List<PeerConnection> connections, int atLeast, Duration within) {
        boolean[] closed = new boolean[connections.size()];
        int n = 0;
        long deadline = System.nanoTime() + within.toNanos();
        do {
            for (int i = 0; i < closed.length; i++) {
                if (!closed[i] && connections.get(i).closedByPeer(Duration.ofMillis(1))) {
                    closed[i] = true;
                    n++;
                }
            }
        } while (n < atLeast && System.nanoTime() < deadline);
        return n;
    }

    /**
     * Writes frames from {@code frames} (called with the index of each frame; it returns the frame's
     * bytes) without reading anything until the rank cuts the connection or {@code within} passed.
     * Returns about how many frames went out before the cut, or -1 if it was never cut.
     */
    long floodUntilCut(LongFunction<ByteBuffer> frames, int framesPerBatch, Duration within) throws IOException {
        int frameBytes = frames.apply(0).remaining();
        ByteBuffer batch = ByteBuffer.allocate(frameBytes * framesPerBatch);
        channel.configureBlocking(false);
        long sent = 0, deadline = System.nanoTime() + within.toNanos();
        try {
            while (System.nanoTime() < deadline) {
                batch.clear();
                for (int i = 0; i < framesPerBatch; i++) batch.put(frames.apply(sent + i));
                batch.flip();
                while (batch.hasRemaining() && System.nanoTime() < deadline) {
                    // Full socket buffers: wait without reading (a cut shows as an error of a later write: RST).
                    if (channel.write(batch) == 0) sleepMillis(1);
                }
                sent += framesPerBatch;
            }
            return -1;
        } catch (IOException reset) {
            return sent;
        } finally {
            if (channel.isOpen()) channel.configureBlocking(true);
        }
    }

    private static void sleepMillis(long ms) throws IOException {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted", e);
        }
    }

    @Override
    public void close() {
        try {
            channel.close();
        } catch (IOException ignored) {
            // closing
        }
    }
}
