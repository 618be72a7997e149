package io.kvferry.prefill;

import io.kvferry.api.KVArgs;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.SmallRankArgs;
import io.kvferry.protocol.FrameCodec;
import io.kvferry.protocol.MessageType;
import io.kvferry.transport.Backend;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.util.concurrent.atomic.AtomicLong;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * Anyone who reaches a prefill rank's control port can open connections as fast as its acceptor takes
 * them and make each fail before HELLO (a forbidden frame, garbage, an unsigned HELLO). Each such failure
 * was one WARN line: a flood of connections was a flood of the log. Now one warning a second names how
 * many more failed; the rest go to debug. Time is the manager's ticker, held still here: however many
 * connections fail within one tick, one warning; the next second, one more.
 */
class UnauthenticatedLogFloodTest {
    private static final int FLOOD = 40;
    private final Arena arena = Arena.ofShared();
    private final AtomicLong now = new AtomicLong(1_000_000_000_000L);
    private final PrefillKVManager manager;

    UnauthenticatedLogFloodTest() {
        KVArgs args = SmallRankArgs.of(arena, 16);
        manager = new PrefillKVManager(args, KVManagerConfig.builder().attnTp(1, 0).bootstrap("127.0.0.1", 1)
                .authToken("log-flood-test-token").ticker(now::get).build(), Backend.of("tcp"));
    }

    @AfterEach
    void close() {
        manager.teardown();
        arena.close();
    }

    /** Connects, sends a frame header no unauthenticated peer may send, and waits until the rank closed the connection. */
    private static void forbiddenFrame(InetSocketAddress at) throws IOException {
        try (SocketChannel c = SocketChannel.open(at)) {
            ByteBuffer b = ByteBuffer.allocate(12);
            FrameCodec.putHeader(b, MessageType.TRANSFER_INFO, 64);
            b.flip();
            while (b.hasRemaining()) c.write(b);
            ByteBuffer sink = ByteBuffer.allocate(256); // the CHALLENGE, then the end of the stream
            try {
                while (c.read(sink.clear()) >= 0) {
                    // the rank logs before it closes: once the stream ends, this connection's line was decided
                }
            } catch (IOException reset) {
                // closed with unread bytes: as good as an end of stream
            }
        }
    }

    @Test
    void connectionsFailingBeforeHelloWarnOnceASecond() throws Exception {
        InetSocketAddress at = manager.controlEndpoint().orElseThrow();
        for (int i = 0; i < FLOOD; i++) forbiddenFrame(at);
        assertEquals(1, manager.sessions.unauthenticatedWarnings(), "warnings for " + FLOOD + " failed connections within one second");
        now.addAndGet(DecodeSessions.UNAUTHENTICATED_WARN_NANOS);
        for (int i = 0; i < FLOOD; i++) forbiddenFrame(at);
        assertEquals(2, manager.sessions.unauthenticatedWarnings(), "one more warning the next second");
    }
}
