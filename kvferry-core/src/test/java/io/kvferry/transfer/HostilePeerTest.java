package io.kvferry.transfer;

import io.kvferry.api.KVManager;
import io.kvferry.protocol.FrameCodec;
import io.kvferry.protocol.MessageType;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Unauthenticated peers on a prefill rank's control port (issue 13, hostile input 1): frames that
 * announce huge bodies, frames other than HELLO, and connections that never finish the handshake
 * neither cost the rank memory nor keep a real decode out.
 */
class HostilePeerTest extends TransferTestBase {
    private static final int FLOOD = 300;

    private static SocketChannel connect(InetSocketAddress at) throws IOException {
        SocketChannel c = SocketChannel.open(at);
        c.socket().setSoTimeout(0);
        return c;
    }

    private static void sendHeader(SocketChannel c, MessageType type, int bodyLength) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(12);
        FrameCodec.putHeader(b, type, bodyLength);
        b.flip();
        while (b.hasRemaining()) c.write(b);
    }

    /** Whether the rank closed {@code c} within {@code within} (a read sees end of stream or a reset). */
    private static boolean closedByPeer(SocketChannel c, Duration within) throws IOException {
        c.configureBlocking(false);
        ByteBuffer sink = ByteBuffer.allocate(256);
        long deadline = System.nanoTime() + within.toNanos();
        while (System.nanoTime() < deadline) {
            try {
                if (c.read(sink) < 0) return true;
            } catch (IOException reset) {
                return true;
            }
            sink.clear();
            try {
                Thread.sleep(5);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            }
        }
        return false;
    }

    @Test
    void hugeAnnouncedFramesBeforeHelloAreRefusedUnreadAndTheRankKeepsServing() throws Exception {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        InetSocketAddress at = p.controlEndpoint().orElseThrow();
        List<SocketChannel> flood = new ArrayList<>();
        try {
            for (int i = 0; i < FLOOD; i++) {
                SocketChannel c = connect(at);
                flood.add(c);
                // 16 MiB TRANSFER_INFO before HELLO (sized from the header this would pin 4.8 GiB), or a HELLO over the pre-auth cap
                if (i % 2 == 0) sendHeader(c, MessageType.TRANSFER_INFO, 16 << 20);
                else sendHeader(c, MessageType.HELLO, 2 << 20);
            }
            int closed = 0;
            for (SocketChannel c : flood) if (closedByPeer(c, Duration.ofSeconds(5))) closed++;
            assertEquals(FLOOD, closed, "every connection that sent a forbidden frame before HELLO is closed");
        } finally {
            for (SocketChannel c : flood) c.close();
        }
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        assertLanded(start(p, pm, d, 900, new int[]{1, 2, 3}, new int[]{4, 5, 6}, 0, 0, 0), dm);
    }

    @Test
    void stalledHandshakesAreCappedAndARealDecodeStillGetsIn() throws Exception {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        InetSocketAddress at = p.controlEndpoint().orElseThrow();
        List<SocketChannel> stalled = new ArrayList<>();
        int extra = 20;
        try {
            for (int i = 0; i < 64 + extra; i++) {
                SocketChannel c = connect(at);
                stalled.add(c);
                // a HELLO header within the cap whose body never comes: the rank holds only the bytes that arrived
                sendHeader(c, MessageType.HELLO, 1 << 20);
                Thread.sleep(1); // accept order = age order
            }
            // The 20 oldest were evicted by the newer ones.
            for (int i = 0; i < extra; i++) {
                assertTrue(closedByPeer(stalled.get(i), Duration.ofSeconds(5)), "stalled handshake " + i + " evicted");
            }
            // While the newest 64 still stall, a real decode registers (evicting one more) and transfers.
            KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
            assertLanded(start(p, pm, d, 901, new int[]{7, 8}, new int[]{9, 10}, 0, 0, 0), dm);
        } finally {
            for (SocketChannel c : stalled) c.close();
        }
    }
}
