package io.kvferry.prefill;

import io.kvferry.api.ChecksumMode;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVSender;
import io.kvferry.api.KVTransferException;
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

import static io.kvferry.PlayedPrefill.awaitUntil;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Transfer infos for requests this rank has not started are held for their decode within a per-link
 * budget and "dropped with the link" (PROTOCOL.md). One whose info the rank refused (a page outside the
 * decode's pool, a duplicate) failed at once, and its link's loss then skipped it, as it had concluded:
 * it stayed, with its index arrays (up to 16 MiB an info), until the waiting timeout (300 s by default),
 * while the budget came back with the link. A decode that sent 64 MiB of bad infos, reconnected and did
 * it again held that much more each time. Now such a room goes with its link.
 */
class RefusedInfoDroppedWithLinkTest {
    private static final String TOKEN = "refused-info-test-token";
    private final Arena arena = Arena.ofShared();
    private final PrefillKVManager manager = new PrefillKVManager(SmallRankArgs.of(arena, 16), KVManagerConfig.builder().attnTp(1, 0)
            .bootstrap("127.0.0.1", 1).authToken(TOKEN).build(), Backend.of("tcp"));

    @AfterEach
    void close() {
        manager.teardown();
        arena.close();
    }

    private static ControlConnection register(InetSocketAddress at, String session, MemoryDescriptor memory) throws IOException {
        return register(at, session, "instance-" + session, memory);
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

    private static Status status(ControlConnection c) throws IOException {
        Object m;
        do {
            m = c.read();
        } while (m instanceof Heartbeat);
        return assertInstanceOf(Status.class, m);
    }

    @Test
    void roomsWhoseInfoWasRefusedGoWithTheirLink() throws Exception {
        MemoryDescriptor memory;
        try (Arena decodeArena = Arena.ofConfined()) {
            memory = RegisteredMemory.from(SmallRankArgs.of(decodeArena, 16)).describe();
        }
        InetSocketAddress at = manager.controlEndpoint().orElseThrow();
        int[] outside = new int[1 << 20]; // 4 MiB of page ids, the last outside the decode's 8-page pool
        outside[outside.length - 1] = 8;
        for (int round = 0; round < 3; round++) {
            try (ControlConnection c = register(at, "bad-" + round, memory)) {
                long room = 100L * round;
                c.send(new TransferInfo(room, outside, -1, new int[0][], 1, 0, false));
                Status refused = status(c);
                assertEquals(KVPoll.Failed, refused.status());
                assertTrue(refused.reason().contains("outside the decode KV pool"), refused.reason());
                c.send(new TransferInfo(room + 1, new int[]{1}, -1, new int[0][], 1, 0, false));
                c.send(new TransferInfo(room + 1, new int[]{2}, -1, new int[0][], 1, 0, false)); // a duplicate fails the room
                assertTrue(status(c).reason().contains("duplicate transfer info"));
                c.send(new TransferInfo(room + 2, new int[]{3}, -1, new int[0][], 1, 0, false)); // held, waiting for its request
            }
            awaitUntil(() -> manager.sessions.count() == 0, "the link left");
            awaitUntil(() -> manager.stats().trackedRooms() == 0, "round " + round + "'s rooms went with their link (still "
                    + manager.stats().trackedRooms() + ")");
        }
        // A room of two decode ranks of one instance (two sessions), one of whose infos was refused: it goes with the last of them.
        try (ControlConnection a = register(at, "rank-a", "shared", memory);
             ControlConnection b = register(at, "rank-b", "shared", memory)) {
            a.send(new TransferInfo(300, new int[]{1}, -1, new int[0][], 2, 0, false));
            b.send(new TransferInfo(300, new int[]{9}, -1, new int[0][], 2, 0, false)); // outside b's pool: fails the room
            assertTrue(status(b).reason().contains("outside the decode KV pool"));
            assertEquals(KVPoll.Failed, status(a).status(), "a hears the room's failure");
            a.close();
            awaitUntil(() -> manager.sessions.count() == 1, "a's link left");
        }
        awaitUntil(() -> manager.sessions.count() == 0, "b's link left");
        awaitUntil(() -> manager.stats().trackedRooms() == 0, "room 300 went with the last of its links (still "
                + manager.stats().trackedRooms() + ")");
        // A request that reaches this rank later for such a room fails at once with why, as for a held room dropped with its link.
        KVSender late = manager.createSender("127.0.0.1:1", 200);
        assertEquals(KVPoll.Failed, late.poll());
        KVTransferException e = assertThrows(KVTransferException.class, late::failureException);
        assertTrue(e.getMessage().contains("outside the decode KV pool"), e.getMessage());
    }
}
