package io.kvferry.prefill;

import io.kvferry.api.ChecksumMode;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.api.SmallRankArgs;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.protocol.Challenge;
import io.kvferry.protocol.Fingerprint;
import io.kvferry.protocol.Handshake;
import io.kvferry.protocol.Heartbeat;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.HelloAck;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.protocol.Status;
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
import java.util.concurrent.atomic.AtomicLong;

import static io.kvferry.PlayedPrefill.awaitUntil;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * An authenticated decode may send transfer infos as fast as it writes. Two refusals were a WARN line per
 * info: one for a room that already had all its destinations, one for a room bound to another decode
 * instance; so a decode holding the token could flood the prefill's log at wire rate. Now each kind is a
 * warning at most once a second naming how many more came (the rest at debug), as the refusals of
 * unauthenticated peers are. Time is the manager's ticker, held still: however many infos, one warning
 * per kind; the next second, one more.
 */
class AuthenticatedLogFloodTest {
    private static final String TOKEN = "authenticated-log-flood-test-token";
    private static final int FLOOD = 100;
    private final Arena arena = Arena.ofShared();
    private final AtomicLong now = new AtomicLong(1_000_000_000_000L);
    private final PrefillKVManager manager = new PrefillKVManager(SmallRankArgs.of(arena, 16), KVManagerConfig.builder().attnTp(1, 0)
            .bootstrap("127.0.0.1", 1).authToken(TOKEN).ticker(now::get).build(), Backend.of("tcp"));

    @AfterEach
    void close() {
        manager.teardown();
        arena.close();
    }

    private static ControlConnection register(InetSocketAddress at, String session, String instance, MemoryDescriptor memory)
            throws IOException {
        ControlConnection c = ControlConnection.connect(at, Duration.ofSeconds(5));
        Challenge ch = assertInstanceOf(Challenge.class, c.read());
        c.send(new Hello(session, instance, Fingerprint.of("", "bf16", 16, false, 0), "tcp", 0, 1, 0, 0, ChecksumMode.OFF,
                memory, List.of(), Handshake.nonce(), null, null).signed(Handshake.key(TOKEN), ch.nonce()));
        assertTrue(assertInstanceOf(HelloAck.class, c.read()).accepted());
        return c;
    }

    /** Sends {@code n} transfer infos for {@code room} and reads the refusal of each, which names {@code why}. */
    private static void refused(ControlConnection c, long room, int n, String why) throws IOException {
        for (int i = 0; i < n; i++) c.send(new TransferInfo(room, new int[]{2}, -1, new int[0][], 1, 0, false));
        for (int i = 0; i < n; i++) {
            Object m;
            do {
                m = c.read();
            } while (m instanceof Heartbeat);
            Status s = assertInstanceOf(Status.class, m);
            assertEquals(KVPoll.Failed, s.status());
            assertTrue(s.reason().contains(why), s.reason());
        }
    }

    @Test
    void refusedTransferInfosOfAnAuthenticatedDecodeWarnOnceASecondPerKind() throws Exception {
        MemoryDescriptor memory;
        try (Arena decodeArena = Arena.ofConfined()) {
            memory = RegisteredMemory.from(SmallRankArgs.of(decodeArena, 16)).describe();
        }
        InetSocketAddress at = manager.controlEndpoint().orElseThrow();
        try (ControlConnection owner = register(at, "x-1", "instance-x", memory);
             ControlConnection late = register(at, "x-2", "instance-x", memory);
             ControlConnection other = register(at, "y-1", "instance-y", memory)) {
            owner.send(new TransferInfo(600, new int[]{1}, -1, new int[0][], 1, 0, false)); // the room's one destination
            awaitUntil(() -> manager.stats().trackedRooms() == 1, "room 600 is held with its destination");
            refused(late, 600, FLOOD, "already has its 1 destinations");
            refused(other, 600, FLOOD, "belongs to another decode instance");
            assertEquals(1, manager.sessions.lateInfoWarnings(), "warnings for " + FLOOD + " late infos within one second");
            assertEquals(1, manager.sessions.foreignInfoWarnings(), "warnings for " + FLOOD + " foreign infos within one second");
            now.addAndGet(DecodeSessions.UNAUTHENTICATED_WARN_NANOS);
            refused(late, 600, 1, "already has its 1 destinations");
            refused(other, 600, 1, "belongs to another decode instance");
            assertEquals(2, manager.sessions.lateInfoWarnings(), "one more the next second");
            assertEquals(2, manager.sessions.foreignInfoWarnings(), "one more the next second");
        }
    }
}
