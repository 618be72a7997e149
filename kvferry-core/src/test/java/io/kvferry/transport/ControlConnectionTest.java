package io.kvferry.transport;

import io.kvferry.api.KVPoll;
import io.kvferry.protocol.Abort;
import io.kvferry.protocol.AbortAck;
import io.kvferry.protocol.FrameCodec;
import io.kvferry.protocol.ProtocolException;
import io.kvferry.protocol.Region;
import io.kvferry.protocol.Status;
import io.kvferry.protocol.Wire;
import io.kvferry.protocol.WriteHeader;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.EOFException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.time.Duration;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Framing over a real loopback connection: read-ahead, payloads in and past it, skips, keepalive, EOF. */
@Timeout(30)
class ControlConnectionTest {
    /** A WRITE frame of {@code payload}, sent as one uninterrupted stretch. */
    private static void sendWrite(ControlConnection c, long room, long offset, MemorySegment payload) throws Exception {
        ByteBuffer frame = ByteBuffer.allocateDirect(Wire.HEADER_BYTES + WriteHeader.BODY_BYTES).order(ByteOrder.LITTLE_ENDIAN);
        FrameCodec.putWriteFrame(frame, room, Region.KV, 0, 2, offset, payload.byteSize());
        ByteBuffer[] v = {frame.flip(), payload.asByteBuffer()};
        c.writeFrames(v, 0, 2, frame.remaining() + payload.byteSize());
    }

    private static MemorySegment pattern(Arena arena, int bytes, int seed) {
        MemorySegment s = arena.allocate(bytes);
        for (int i = 0; i < bytes; i++) s.set(ValueLayout.JAVA_BYTE, i, (byte) (i * 31 + seed));
        return s;
    }

    @Test
    void framesAndPayloadsSurviveTheReadAheadAndKeepaliveIsShortened() throws Exception {
        try (ServerSocketChannel server = ServerSocketChannel.open(); Arena arena = Arena.ofShared()) {
            server.bind(new InetSocketAddress("127.0.0.1", 0));
            ControlConnection client = ControlConnection.connect((InetSocketAddress) server.getLocalAddress(), Duration.ofSeconds(5));
            ControlConnection peer = new ControlConnection(server.accept());
            if (client.keepAliveIdleSeconds() != -1) assertEquals(5, client.keepAliveIdleSeconds());
            MemorySegment src = pattern(arena, 4096, 0);
            // Small frames back to back around a WRITE: the read-ahead takes them all in one read; the payload
            // comes out of it, whole, into the destination, and the frames after it are still there.
            client.send(new Abort(1));
            sendWrite(client, 7, 64, src);
            client.send(new Status(7, KVPoll.Success, 3, ""));
            client.send(new AbortAck(1, 0));
            assertEquals(new Abort(1), peer.read());
            WriteHeader w = assertInstanceOf(WriteHeader.class, peer.read());
            assertEquals(new WriteHeader(7, Region.KV, 0, 2, 64, 4096), w);
            MemorySegment dst = arena.allocate(4096);
            peer.readPayload(dst);
            assertEquals(-1, dst.mismatch(src));
            assertEquals(new Status(7, KVPoll.Success, 3, ""), peer.read());
            assertEquals(new AbortAck(1, 0), peer.read());
            client.close();
            assertThrows(EOFException.class, peer::read);
            assertTrue(client.isClosed());
            peer.close();
        }
    }

    /**
     * The owner's timer calls heartbeat() for every link; a peer that stopped reading (a frozen
     * process) while this side's send buffer is full must not block that thread: the HEARTBEAT goes
     * out on a thread of its own, which shows as a stalled write (what the stall watchdog cuts) and
     * ends when the connection closes.
     */
    @Test
    void aHeartbeatToAPeerThatStoppedReadingDoesNotBlockTheCaller() throws Exception {
        try (ServerSocketChannel server = ServerSocketChannel.open()) {
            server.bind(new InetSocketAddress("127.0.0.1", 0));
            SocketChannel raw = SocketChannel.open((InetSocketAddress) server.getLocalAddress());
            ControlConnection client = new ControlConnection(raw);
            try (SocketChannel silent = server.accept()) {
                // Fill the send buffer (and the peer's receive buffer, which nobody reads) with no writer left holding it.
                raw.configureBlocking(false);
                ByteBuffer junk = ByteBuffer.allocateDirect(1 << 20);
                long deadline = System.nanoTime() + 10_000_000_000L;
                int idle = 0;
                while (idle < 50 && System.nanoTime() < deadline) {
                    if (raw.write(junk.clear()) == 0) {
                        idle++;
                        Thread.sleep(2); // the kernel may still move bytes to the peer's buffer
                    } else {
                        idle = 0;
                    }
                }
                raw.configureBlocking(true);
                assertTimeoutPreemptively(Duration.ofSeconds(5), () -> assertTrue(client.heartbeat(0, Long.MAX_VALUE)),
                        "the caller's thread was held by a write to a peer that does not read");
                long waited = System.nanoTime() + 5_000_000_000L;
                while (client.writeStalledFor() == 0 && System.nanoTime() < waited) Thread.sleep(5);
                assertTrue(client.writeStalledFor() > 0, "the heartbeat is on its way, blocked, as a stalled write");
                client.close();
                waited = System.nanoTime() + 5_000_000_000L;
                while (client.writeStalledFor() > 0 && System.nanoTime() < waited) Thread.sleep(5);
                assertEquals(0, client.writeStalledFor(), "closing the connection ends the blocked heartbeat");
            } finally {
                client.close();
            }
        }
    }

    /**
     * Payloads larger than the read-ahead land partly from it and partly straight from the socket,
     * scattered over several buffers; a skipped payload leaves the stream in step; the frames after
     * each come with the payload's last read.
     */
    @Test
    void largePayloadsScatteredOrSkippedKeepTheStreamInStep() throws Exception {
        int big = 3 * ControlConnection.AHEAD_BYTES + 123;
        try (ServerSocketChannel server = ServerSocketChannel.open(); Arena arena = Arena.ofShared()) {
            server.bind(new InetSocketAddress("127.0.0.1", 0));
            ControlConnection client = ControlConnection.connect((InetSocketAddress) server.getLocalAddress(), Duration.ofSeconds(5));
            ControlConnection peer = new ControlConnection(server.accept());
            MemorySegment first = pattern(arena, big, 1), second = pattern(arena, big, 2), third = pattern(arena, 100, 3);
            Thread sender = Thread.ofPlatform().start(() -> {
                try {
                    for (int round = 0; round < 20; round++) {
                        sendWrite(client, round, 0, first);
                        client.send(new Abort(round));
                        sendWrite(client, round, 0, second);
                        sendWrite(client, round, 0, third);
                    }
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
            MemorySegment a = arena.allocate(1000), b = arena.allocate(big - 1000 - 7), c = arena.allocate(7);
            MemorySegment small = arena.allocate(100);
            ByteBuffer[] vector = new ByteBuffer[4];
            for (int round = 0; round < 20; round++) {
                assertEquals(big, assertInstanceOf(WriteHeader.class, peer.read()).length());
                vector[0] = a.asByteBuffer();
                vector[1] = b.asByteBuffer();
                vector[2] = c.asByteBuffer();
                peer.readPayload(vector, 3);
                assertEquals(null, vector[3], "the read-ahead's slot is handed back");
                assertEquals(-1, a.mismatch(first.asSlice(0, 1000)));
                assertEquals(-1, b.mismatch(first.asSlice(1000, big - 1007)));
                assertEquals(-1, c.mismatch(first.asSlice(big - 7, 7)));
                assertEquals(new Abort(round), peer.read());
                assertEquals(big, assertInstanceOf(WriteHeader.class, peer.read()).length());
                peer.skipPayload(big);
                assertEquals(100, assertInstanceOf(WriteHeader.class, peer.read()).length());
                peer.readPayload(small);
                assertEquals(-1, small.mismatch(third), "round " + round);
            }
            sender.join();
            client.close();
            assertThrows(EOFException.class, peer::read);
            peer.close();
        }
    }

    @Test
    void aStreamThatEndsInsideAFrameIsAProtocolErrorNotAnOrderlyClose() throws Exception {
        try (ServerSocketChannel server = ServerSocketChannel.open()) {
            server.bind(new InetSocketAddress("127.0.0.1", 0));
            SocketChannel raw = SocketChannel.open(server.getLocalAddress());
            ControlConnection peer = new ControlConnection(server.accept());
            ByteBuffer frame = FrameCodec.encode(new Status(7, KVPoll.Success, 3, ""));
            frame.limit(frame.limit() - 2); // the header and most of the body, then the end of the stream
            while (frame.hasRemaining()) raw.write(frame);
            raw.close();
            ProtocolException e = assertThrows(ProtocolException.class, peer::read);
            assertTrue(e.getMessage().contains("in the middle of a frame"), e.getMessage());
            peer.close();
        }
    }
}
