package io.kvferry.transport;

import com.sun.management.ThreadMXBean;
import io.kvferry.api.KVPoll;
import io.kvferry.protocol.Abort;
import io.kvferry.protocol.AbortAck;
import io.kvferry.protocol.Region;
import io.kvferry.protocol.Status;
import io.kvferry.protocol.WriteHeader;
import io.kvferry.transport.tcp.TcpDestination;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.EOFException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.management.ManagementFactory;
import java.net.InetSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.time.Duration;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Framing over a real loopback connection: read-ahead, payload landing, keepalive, EOF. */
@Timeout(30)
class ControlConnectionTest {
    @Test
    void framesAndPayloadsSurviveTheReadAheadAndKeepaliveIsShortened() throws Exception {
        try (ServerSocketChannel server = ServerSocketChannel.open(); Arena arena = Arena.ofConfined()) {
            server.bind(new InetSocketAddress("127.0.0.1", 0));
            ControlConnection client = ControlConnection.connect((InetSocketAddress) server.getLocalAddress(), Duration.ofSeconds(5));
            ControlConnection peer = new ControlConnection(server.accept());
            if (client.keepAliveIdleSeconds() != -1) assertEquals(5, client.keepAliveIdleSeconds());
            MemorySegment src = arena.allocate(4096);
            for (int i = 0; i < 4096; i++) src.set(ValueLayout.JAVA_BYTE, i, (byte) i);
            // Small frames back to back around a WRITE: the read-ahead must never swallow payload bytes.
            client.send(new Abort(1));
            client.write(7, Region.KV, 0, 2, 64, src);
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

    /** Bytes allocated by the current thread while running {@code r}, or -1 when the JVM cannot say. */
    private static long allocatedBy(IoAction r) throws IOException {
        if (!(ManagementFactory.getThreadMXBean() instanceof ThreadMXBean mx)
                || !mx.isThreadAllocatedMemorySupported() || !mx.isThreadAllocatedMemoryEnabled()) {
            r.run();
            return -1;
        }
        long before = mx.getCurrentThreadAllocatedBytes();
        r.run();
        return mx.getCurrentThreadAllocatedBytes() - before;
    }

    private interface IoAction {
        void run() throws IOException;
    }

    /** The decode's tcp hot path: reading a WRITE frame, admitting it and landing its payload allocates nothing per frame. */
    @Test
    void landingWriteFramesAllocatesNothingPerFrame() throws Exception {
        int frames = 12000, measured = 2000;
        long piece = 256;
        try (ServerSocketChannel server = ServerSocketChannel.open(); Arena arena = Arena.ofShared()) {
            server.bind(new InetSocketAddress("127.0.0.1", 0));
            ControlConnection client = ControlConnection.connect((InetSocketAddress) server.getLocalAddress(), Duration.ofSeconds(5));
            ControlConnection peer = new ControlConnection(server.accept());
            MemorySegment src = arena.allocate(piece), pool = arena.allocate(64 * piece);
            for (int i = 0; i < piece; i++) src.set(ValueLayout.JAVA_BYTE, i, (byte) (i + 1));
            Thread sender = Thread.ofPlatform().start(() -> {
                try {
                    for (int f = 0; f < frames; f++) client.write(f, Region.KV, 0, 0, (f % 64) * piece, src);
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            });
            WriteSink gate = new WriteSink() {
                @Override
                public void begin(Landing into, long room, Region region, int component, int buffer, long offset, long span,
                                  long payload) {
                    into.admit(this, 0, pool, offset, span, payload);
                }

                @Override
                public void end(Landing landing, boolean landed) {
                    assertTrue(landed);
                }
            };
            TcpDestination tcp = Transports.fallback().openDestination(null, 0, null, gate, why -> { });
            WriteSink.Landing landing = new WriteSink.Landing("peer", null);
            IoAction landSome = () -> {
                for (int f = 0; f < measured; f++) {
                    WriteHeader w = (WriteHeader) peer.read();
                    assertNull(tcp.land(peer, w, landing));
                }
            };
            for (int round = 0; round < 5; round++) landSome.run(); // warm-up: views made, code compiled
            long bytes = allocatedBy(landSome);
            sender.join();
            assertEquals(-1, pool.asSlice(63 * piece, piece).mismatch(src), "the last page landed intact");
            if (bytes >= 0) {
                assertTrue(bytes < measured * 16L, bytes + " bytes allocated for " + measured + " WRITE frames");
            }
            client.close();
            peer.close();
        }
    }
}
