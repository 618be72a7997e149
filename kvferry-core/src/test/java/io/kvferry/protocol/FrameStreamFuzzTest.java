package io.kvferry.protocol;

import io.kvferry.transport.ControlConnection;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.lifecycle.AfterContainer;
import net.jqwik.api.lifecycle.BeforeContainer;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.constraints.Size;

import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import static io.kvferry.protocol.ProtocolSamples.all;
import static io.kvferry.protocol.ProtocolSamples.encoded;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * {@link FrameFuzzTest} decodes whole frames held in memory; this one sends streams of frames — valid,
 * mutated, truncated, with payloads and with bodies larger than the reader's 16 KiB read-ahead (its
 * growing-buffer path) — through a real loopback socket into a {@link ControlConnection}, as a peer
 * would. Reading them yields messages until the stream ends, and the only ways it may end are
 * {@link EOFException} (a clean end between frames) and {@link ProtocolException} (anything else): no
 * IndexOutOfBounds, BufferUnderflow, IllegalArgument, NegativeArraySize or OutOfMemory from the reader.
 */
class FrameStreamFuzzTest {
    private static final int TRIES = 400;
    private static ServerSocketChannel server;

    @BeforeContainer
    static void listen() throws IOException {
        server = ServerSocketChannel.open().bind(new InetSocketAddress("127.0.0.1", 0));
    }

    @AfterContainer
    static void stopListening() throws IOException {
        server.close();
    }

    /** Frames with their payloads, back to back, as a sender puts them on the stream. */
    private static byte[] stream(List<Integer> picks, List<byte[]> frames) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        for (int p : picks) out.writeBytes(frames.get(p % frames.size()));
        return out.toByteArray();
    }

    private static List<byte[]> frames() {
        List<byte[]> out = new ArrayList<>();
        for (ControlMessage m : all()) {
            byte[] f = encoded(m);
            long payload = m instanceof WriteHeader w ? w.length() : m instanceof WriteList l ? l.payloadLength() : 0;
            if (payload > 64 << 10) continue; // a stream of it would be mostly payload
            out.add(ProtocolSamples.concat(f, new byte[(int) payload]));
        }
        // Larger than the read-ahead: read through the buffer that grows as the body arrives.
        int[] pages = new int[20_000];
        for (int i = 0; i < pages.length; i++) pages[i] = i;
        out.add(encoded(new TransferInfo(5L, pages, 3, new int[][]{{1, 2}}, 1, 0, false)));
        return out;
    }

    private static final List<byte[]> FRAMES = frames();

    /**
     * Sends {@code bytes} into a fresh connection (then closes the sending side) and reads until the
     * stream ends; returns how many messages were read. Fails on any throwable but the two allowed.
     */
    static int readAll(byte[] bytes, boolean onlyHello) throws Exception {
        try (SocketChannel client = SocketChannel.open(server.getLocalAddress());
             ControlConnection conn = new ControlConnection(server.accept())) {
            if (onlyHello) conn.acceptOnly(MessageType.HELLO, 1 << 20);
            Thread writer = Thread.ofVirtual().start(() -> {
                try {
                    ByteBuffer b = ByteBuffer.wrap(bytes);
                    while (b.hasRemaining()) client.write(b);
                    client.shutdownOutput();
                } catch (IOException e) {
                    // the reader closed first (a refused frame): nothing more to send
                }
            });
            int read = 0;
            try {
                while (true) {
                    ControlMessage m = conn.read();
                    assertNotNull(m);
                    if (onlyHello) assertTrue(m instanceof Hello, "an unauthenticated peer got a " + m.type() + " read");
                    read++;
                    if (m instanceof WriteHeader w) conn.skipPayload(w.length());
                    else if (m instanceof WriteList l) conn.skipPayload(l.payloadLength());
                }
            } catch (EOFException | ProtocolException e) {
                assertNotNull(e.getMessage(), "an exception without a message");
            } catch (Throwable t) {
                fail("the reader failed with " + t + " instead of a ProtocolException", t);
            } finally {
                conn.close();
                writer.join();
            }
            return read;
        }
    }

    @Property(seed = "20261207", tries = 20)
    void validStreamsAreReadWhole(@ForAll @Size(min = 1, max = 12) List<@IntRange(min = 0, max = 1000) Integer> picks) throws Exception {
        byte[] s = stream(picks, FRAMES);
        int n = readAll(s, false);
        assertTrue(n == picks.size(), "read " + n + " of " + picks.size() + " frames");
    }

    @Property(seed = "20261207", tries = TRIES)
    void mutatedStreamsEndOnlyInProtocolErrors(@ForAll @Size(min = 1, max = 8) List<@IntRange(min = 0, max = 1000) Integer> picks,
                                               @ForAll @Size(min = 1, max = 8) List<@IntRange(min = 0, max = 1 << 22) Integer> positions,
                                               @ForAll @Size(min = 1, max = 8) List<@IntRange(min = 1, max = 255) Integer> xors,
                                               @ForAll @IntRange(min = 0, max = 1 << 22) int cut, @ForAll boolean truncate) throws Exception {
        byte[] s = stream(picks, FRAMES);
        for (int i = 0; i < positions.size(); i++) s[positions.get(i) % s.length] ^= (byte) (int) xors.get(i % xors.size());
        if (truncate) s = Arrays.copyOf(s, cut % s.length);
        readAll(s, false);
        readAll(s, true);
    }

    /** Headers of any type and declared length, followed by a few random bytes, then the end of the stream. */
    @Property(seed = "20261207", tries = TRIES)
    void anyHeaderThenTheEnd(@ForAll("types") int type, @ForAll("lengths") int declared, @ForAll @Size(max = 64) byte[] tail,
                             @ForAll boolean onlyHello) throws Exception {
        byte[] s = ProtocolSamples.concat(ProtocolSamples.header(Wire.MAGIC, Wire.VERSION, type, 0, declared), tail);
        readAll(s, onlyHello);
    }

    @Property(seed = "20261207", tries = TRIES)
    void randomNoise(@ForAll @Size(max = 2048) byte[] noise, @ForAll boolean onlyHello) throws Exception {
        readAll(noise, onlyHello);
    }

    @Provide
    Arbitrary<Integer> types() {
        return Arbitraries.integers().between(0, 12);
    }

    @Provide
    Arbitrary<Integer> lengths() {
        return Arbitraries.oneOf(Arbitraries.integers().between(0, 70_000), Arbitraries.of(-1, Integer.MIN_VALUE, Integer.MAX_VALUE,
                WriteHeader.BODY_BYTES, WriteList.bodyBytes(1), WriteList.bodyBytes(511), 16 << 10, (16 << 10) + 1, 16 << 20, (16 << 20) + 1));
    }
}
