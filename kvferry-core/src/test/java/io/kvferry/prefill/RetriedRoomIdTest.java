package io.kvferry.prefill;

import io.kvferry.api.ChecksumMode;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVSender;
import io.kvferry.api.SmallRankArgs;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.protocol.Challenge;
import io.kvferry.protocol.Fingerprint;
import io.kvferry.protocol.Handshake;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.HelloAck;
import io.kvferry.protocol.TransferInfo;
import io.kvferry.transport.Backend;
import io.kvferry.transport.ControlConnection;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.time.Duration;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import static io.kvferry.PlayedPrefill.awaitUntil;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A room id used again by a retried request while something of the cleared request's is still at work
 * on a link's reader: what that reader does to "the room" by id must not reach the retry. Here a lost
 * decode link walks the ids it held; one was cleared and taken by a retry the link has no part in, its
 * entry still in the walk (the clear takes it out after the record). The decode is played over a raw
 * connection.
 */
@Timeout(60)
class RetriedRoomIdTest {
    private static final String TOKEN = "retried-room-test-token";
    private static final int PAGE_SIZE = 16;
    private static final long ROOM = 515;
    private final Arena arena = Arena.ofShared();
    private final KVArgs args = SmallRankArgs.of(arena, PAGE_SIZE);
    private final PrefillKVManager manager = new PrefillKVManager(args, KVManagerConfig.builder().attnTp(1, 0).bootstrap("127.0.0.1", 1)
            .authToken(TOKEN).build(), Backend.of("tcp"));

    @AfterEach
    void close() {
        manager.teardown();
        arena.close();
    }

    /** A decode session, accepted by the prefill. */
    private ControlConnection decodeSession(String sessionId) throws IOException {
        ControlConnection c = ControlConnection.connect(manager.endpoint(), Duration.ofSeconds(5));
        Challenge ch = assertInstanceOf(Challenge.class, c.read());
        Hello h = new Hello(sessionId, "instance-of-" + sessionId, Fingerprint.of("", "bf16", PAGE_SIZE, false, 0), "tcp", 0, 1, 0, 0,
                ChecksumMode.OFF, RegisteredMemory.from(args).describe(), List.of(), Handshake.nonce(), null, null);
        c.send(h.signed(Handshake.key(TOKEN), ch.nonce()));
        assertTrue(assertInstanceOf(HelloAck.class, c.read()).accepted());
        return c;
    }

    @Test
    void aLostDecodeLinkLeavesARetryOfAnIdItHeldAlone() throws Exception {
        Set<Thread> before = Set.copyOf(Thread.getAllStackTraces().keySet());
        try (ControlConnection decode = decodeSession("lost")) {
            Thread reader = newReader(before);
            decode.send(new TransferInfo(ROOM, new int[]{1}, 0, new int[0][], 1, 0, false));
            KVSender first = manager.createSender("127.0.0.1:1", ROOM, List.of(0), 0, false);
            awaitUntil(() -> first.poll() == KVPoll.WaitingForInput, "the room has its destination");
            DecodeLink link = manager.rooms.get(ROOM).destinations().get(0).link();
            PrefillRoom cleared = manager.rooms.get(ROOM);
            first.clear();
            KVSender retry = manager.createSender("127.0.0.1:1", ROOM, List.of(0), 0, false); // no decode has sent its info yet
            assertEquals(KVPoll.Bootstrapping, retry.poll());
            link.rooms.put(ROOM, cleared); // what the lost link's walk may still read: the cleared room's entry
            decode.close();
            reader.join(TimeUnit.SECONDS.toMillis(30));
            assertFalse(reader.isAlive(), "the lost link's reader ended");
            assertEquals(KVPoll.Bootstrapping, retry.poll(), "the link's loss failed a room it had no part in");
        }
    }

    /**
     * A second sender for a room whose sender is still in flight (a duplicate request, a retry sent before
     * the first was cleared) is refused, as the decode refuses a second receiver: it took the first one's
     * record over, and the first request failed or its decode got the second one's KV. Once the first was
     * cleared, the id may be used again.
     */
    @Test
    void aSecondSenderForARoomInFlightIsRefused() {
        KVSender first = manager.createSender("127.0.0.1:1", ROOM, List.of(0), 0, false);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> manager.createSender("127.0.0.1:1", ROOM, List.of(0), 0, false));
        assertTrue(e.getMessage().contains("bootstrap_room " + ROOM + " is already in flight"), e.getMessage());
        assertEquals(KVPoll.Bootstrapping, first.poll(), "the first request is left alone");
        first.clear();
        KVSender again = manager.createSender("127.0.0.1:1", ROOM, List.of(0), 0, false);
        assertEquals(KVPoll.Bootstrapping, again.poll());
    }

    /** The prefill reader thread started since {@code before} was taken (this test connects one link). */
    private static Thread newReader(Set<Thread> before) {
        for (Thread t : Thread.getAllStackTraces().keySet()) {
            if (t.getName().startsWith("kvferry-prefill-reader-") && !before.contains(t)) return t;
        }
        throw new AssertionError("no new prefill reader thread");
    }
}
