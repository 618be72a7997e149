package io.kvferry.chaos;


import io.kvferry.protocol.FrameCodec;
import io.kvferry.protocol.Region;
import io.kvferry.protocol.Wire;
import io.kvferry.protocol.WriteHeader;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.io.InputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketException;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The fault proxy: forwards, blackholes without closing, restores for new connections, resets with RST, corrupts WRITE payloads. */
class FaultProxyTest {
    /** Echoes every connection until it closes. */
    private static ServerSocket echoServer() throws IOException {
        ServerSocket ss = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        Thread.ofPlatform().daemon().start(() -> {
            while (!ss.isClosed()) {
                try {
                    Socket s = ss.accept();
                    Thread.ofPlatform().daemon().start(() -> {
                        try (s) {
                            s.getInputStream().transferTo(s.getOutputStream());
                        } catch (IOException ignored) {
                            // peer went away
                        }
                    });
                } catch (IOException e) {
                    return;
                }
            }
        });
        return ss;
    }

    private static Socket connect(FaultProxy p) throws IOException {
        Socket s = new Socket(InetAddress.getLoopbackAddress(), p.port());
        s.setSoTimeout(2000);
        return s;
    }

    private static byte[] roundTrip(Socket s, String msg) throws IOException {
        s.getOutputStream().write(msg.getBytes());
        s.getOutputStream().flush();
        return s.getInputStream().readNBytes(msg.length());
    }

    @Test
    @Timeout(30)
    void forwardsBlackholesRestoresAndResets() throws Exception {
        try (ServerSocket echo = echoServer(); FaultProxy proxy = new FaultProxy("test")) {
            Socket early = connect(proxy); // accepted before the upstream is known: waits for it
            proxy.upstream(new InetSocketAddress(InetAddress.getLoopbackAddress(), echo.getLocalPort()));
            assertArrayEquals("hello".getBytes(), roundTrip(early, "hello"));

            proxy.blackhole();
            early.setSoTimeout(500);
            early.getOutputStream().write("lost".getBytes());
            assertThrows(SocketTimeoutException.class, () -> early.getInputStream().read(), "no byte may pass a blackhole");
            Socket during = connect(proxy); // a new connection is accepted but goes nowhere
            during.setSoTimeout(300);
            during.getOutputStream().write("x".getBytes());
            assertThrows(SocketTimeoutException.class, () -> during.getInputStream().read());
            assertEquals(2, proxy.open(), "blackholed connections stay open");

            assertEquals(2, proxy.restore());
            assertEquals(-1, readOrEof(early.getInputStream()), "restore closes the blackholed connections");
            Socket after = connect(proxy);
            assertArrayEquals("again".getBytes(), roundTrip(after, "again"));

            assertEquals(1, proxy.reset());
            IOException e = assertThrows(IOException.class, () -> {
                for (int i = 0; i < 50; i++) {
                    after.getOutputStream().write(new byte[1024]);
                    if (after.getInputStream().read() < 0) throw new IOException("eof");
                    Thread.sleep(10);
                }
            });
            assertTrue(e instanceof SocketException && e.getMessage().toLowerCase().contains("reset"),
                    () -> "a reset must reach the peer as a TCP RST, got " + e);
            assertEquals(3, proxy.accepted());
            early.close();
            during.close();
            after.close();
        }
    }

    /** A paced proxy keeps to its pace (a lower bound only: a loaded machine can make it slower, never faster). */
    @Test
    @Timeout(30)
    void pacedProxyForwardsEveryByteNoFasterThanItsPace() throws Exception {
        long rate = 4L << 20;
        byte[] data = new byte[1 << 20];
        new Random(7).nextBytes(data);
        try (ServerSocket echo = echoServer(); FaultProxy proxy = new FaultProxy("paced", rate)) {
            proxy.upstream(new InetSocketAddress(InetAddress.getLoopbackAddress(), echo.getLocalPort()));
            try (Socket s = connect(proxy)) {
                s.setSoTimeout(10_000);
                long start = System.nanoTime();
                Thread writer = Thread.ofPlatform().start(() -> {
                    try {
                        s.getOutputStream().write(data);
                    } catch (IOException ignored) {
                        // the read below fails then
                    }
                });
                byte[] back = s.getInputStream().readNBytes(data.length);
                long millis = (System.nanoTime() - start) / 1_000_000;
                writer.join();
                assertArrayEquals(data, back);
                // 1 MiB at 4 MiB/s each way: at least ~250 ms, less a 64 KiB read of slack.
                assertTrue(millis >= 200, () -> "1 MiB through a 4 MiB/s proxy took only " + millis + " ms");
            }
        }
        assertThrows(IllegalArgumentException.class, () -> new FaultProxy("bad", -1));
    }

    /** A corrupting proxy damages what the upstream (a prefill) sends: one payload byte per chosen room, nothing else. */
    @Test
    @Timeout(30)
    void aCorruptingProxyFlipsOnePayloadBytePerRoomOnTheWayToTheClient() throws Exception {
        byte[] payload = new byte[100_000];
        new Random(3).nextBytes(payload);
        ByteBuffer frames = ByteBuffer.allocate(2 * (Wire.HEADER_BYTES + WriteHeader.BODY_BYTES + payload.length));
        for (long room : new long[]{7, 8}) {
            frames.put(FrameCodec.encode(new WriteHeader(room, Region.KV, 0, 0, 0, payload.length)));
            frames.put(payload);
        }
        byte[] sent = frames.array();
        WriteCorruption everyRoom = new WriteCorruption(1, 1);
        try (ServerSocket prefill = new ServerSocket(0, 1, InetAddress.getLoopbackAddress());
             FaultProxy proxy = new FaultProxy("corrupt", "127.0.0.1", 0, everyRoom)) {
            Thread server = Thread.ofPlatform().start(() -> {
                try (Socket s = prefill.accept()) {
                    s.getOutputStream().write(sent);
                } catch (IOException ignored) {
                    // the assertions below fail then
                }
            });
            proxy.upstream(new InetSocketAddress(InetAddress.getLoopbackAddress(), prefill.getLocalPort()));
            assertEquals("127.0.0.1", proxy.host());
            byte[] got;
            try (Socket decode = connect(proxy)) {
                decode.setSoTimeout(10_000);
                got = decode.getInputStream().readNBytes(sent.length);
            }
            server.join();
            int frame = Wire.HEADER_BYTES + WriteHeader.BODY_BYTES + payload.length;
            for (int i = 0; i < sent.length; i++) {
                int inFrame = i % frame;
                boolean flipped = inFrame == Wire.HEADER_BYTES + WriteHeader.BODY_BYTES + payload.length / 2;
                assertEquals(flipped ? (byte) (sent[i] ^ WriteCorruption.FLIP_MASK) : sent[i], got[i], "byte " + i);
            }
            assertEquals(2, everyRoom.rooms());
        }
    }

    private static int readOrEof(InputStream in) throws IOException {
        try {
            return in.read();
        } catch (SocketException e) {
            return -1; // reset also ends it
        }
    }
}
