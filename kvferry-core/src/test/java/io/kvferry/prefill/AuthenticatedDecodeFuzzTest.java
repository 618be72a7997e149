package io.kvferry.prefill;

import io.kvferry.api.ChecksumMode;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.SmallRankArgs;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.protocol.Abort;
import io.kvferry.protocol.AbortAck;
import io.kvferry.protocol.Challenge;
import io.kvferry.protocol.ControlMessage;
import io.kvferry.protocol.Fingerprint;
import io.kvferry.protocol.Handshake;
import io.kvferry.protocol.Heartbeat;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.HelloAck;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.protocol.TransferInfo;
import io.kvferry.transport.Backend;
import io.kvferry.transport.ControlConnection;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.List;
import java.util.Queue;
import java.util.Random;
import java.util.concurrent.ConcurrentLinkedQueue;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A decode that holds the token (broken, or hostile) sends a real prefill rank random sequences of
 * transfer infos (pages, aux rows and state indices inside and outside its pool, any destination count,
 * dummy or not, repeated, for rooms it shares with its other sessions), aborts and heartbeats, over
 * several sessions of one instance at once. The rank answers with Failed STATUSes or cuts a link for a
 * protocol error; none of its reader threads may die of an unexpected exception (which would leave a
 * stack trace on stderr instead of a failure its peer hears), and the rank serves on.
 */
class AuthenticatedDecodeFuzzTest {
    private static final String TOKEN = "authenticated-fuzz-token";
    private static final int SEQUENCES = 40;
    private final Arena arena = Arena.ofShared();
    private final PrefillKVManager manager = new PrefillKVManager(SmallRankArgs.of(arena, 16), KVManagerConfig.builder().attnTp(1, 0)
            .bootstrap("127.0.0.1", 1).authToken(TOKEN).build(), Backend.of("tcp"));
    private final Queue<Throwable> uncaught = new ConcurrentLinkedQueue<>();
    private final Thread.UncaughtExceptionHandler previous = Thread.getDefaultUncaughtExceptionHandler();

    @AfterEach
    void close() {
        Thread.setDefaultUncaughtExceptionHandler(previous);
        manager.teardown();
        arena.close();
    }

    private static Hello hello(String session, MemoryDescriptor memory) {
        return new Hello(session, "one-instance", Fingerprint.of("", "bf16", 16, false, 0), "tcp", 0, 1, 0, 0, ChecksumMode.OFF, memory,
                List.of(), Handshake.nonce(), null, null);
    }

    private static ControlConnection register(InetSocketAddress at, String session, MemoryDescriptor memory) throws IOException {
        ControlConnection c = ControlConnection.connect(at, Duration.ofSeconds(5));
        Challenge ch = assertInstanceOf(Challenge.class, c.read());
        c.send(hello(session, memory).signed(Handshake.key(TOKEN), ch.nonce()));
        HelloAck ack = assertInstanceOf(HelloAck.class, c.read());
        assertTrue(ack.accepted(), ack.error());
        return c;
    }

    private static int[] ints(Random rnd, int max, int low, int high) {
        int[] out = new int[rnd.nextInt(max + 1)];
        for (int i = 0; i < out.length; i++) out[i] = low + rnd.nextInt(high - low + 1);
        return out;
    }

    /** A frame for one of six rooms of sequence {@code seq} (rooms of earlier sequences are buried by now). */
    private static ControlMessage frame(Random rnd, int seq) {
        long room = seq * 100L + 1 + rnd.nextInt(6);
        return switch (rnd.nextInt(8)) {
            case 0 -> new Abort(room);
            case 1 -> new Heartbeat();
            default -> {
                int[][] state = new int[rnd.nextInt(3)][];
                for (int c = 0; c < state.length; c++) state[c] = ints(rnd, 3, -2, 9);
                yield new TransferInfo(room, ints(rnd, 12, -2, 10), -1 + rnd.nextInt(11), state,
                        1 + rnd.nextInt(3), rnd.nextInt(40), rnd.nextInt(5) == 0);
            }
        };
    }

    private static void awaitAck(ControlConnection c, long room) {
        try {
            c.send(new Abort(room));
            while (!(c.read() instanceof AbortAck a && a.room() == room)) {
                // statuses of the sequence's rooms, heartbeats, other acks
            }
        } catch (IOException cut) {
            // cut for a protocol error, or closed with the rank's answer on the way: either way it was read
        }
    }

    @Test
    void randomInfosAndAbortsFromAuthenticatedDecodesNeverKillAReader() throws Exception {
        Thread.setDefaultUncaughtExceptionHandler((t, e) -> uncaught.add(e));
        InetSocketAddress at = manager.controlEndpoint().orElseThrow();
        MemoryDescriptor memory;
        try (Arena decodeArena = Arena.ofConfined()) {
            memory = RegisteredMemory.from(SmallRankArgs.of(decodeArena, 16)).describe();
        }
        for (int seq = 0; seq < SEQUENCES; seq++) {
            Random rnd = new Random(seq);
            ControlConnection[] sessions = new ControlConnection[1 + rnd.nextInt(3)];
            for (int s = 0; s < sessions.length; s++) sessions[s] = register(at, "seq" + seq + "-s" + s, memory);
            try {
                for (int f = 0, n = 1 + rnd.nextInt(30); f < n; f++) {
                    ControlConnection c = sessions[rnd.nextInt(sessions.length)];
                    try {
                        c.send(frame(rnd, seq));
                    } catch (IOException cut) {
                        // the rank cut this session for a protocol error: its others go on
                    }
                }
                // Every ABORT is acknowledged, after what came before it on its link: once each session has its
                // ack (or was cut), the rank read and handled all of the sequence.
                for (int s = 0; s < sessions.length; s++) awaitAck(sessions[s], 999_000 + s);
            } finally {
                for (ControlConnection c : sessions) c.close();
            }
            // Each sequence ends with the rank still taking and registering a decode.
            register(at, "probe-" + seq, memory).close();
        }
        assertEquals(List.of(), List.copyOf(uncaught), "threads died of unexpected exceptions");
    }
}
