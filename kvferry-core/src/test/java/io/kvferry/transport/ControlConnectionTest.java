package io.kvferry.transport;

import io.kvferry.protocol.Abort;
import io.kvferry.protocol.AbortAck;
import io.kvferry.protocol.Region;
import io.kvferry.protocol.Status;
import io.kvferry.protocol.WriteHeader;
import io.kvferry.api.KVPoll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.EOFException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.time.Duration;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
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
            for (int i = 0; i < 4096; i++) src.set(java.lang.foreign.ValueLayout.JAVA_BYTE, i, (byte) i);
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
}
