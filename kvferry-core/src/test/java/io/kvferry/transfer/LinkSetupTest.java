package io.kvferry.transfer;

import io.kvferry.KVFerry;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVTransferException;
import io.kvferry.protocol.Challenge;
import io.kvferry.protocol.FrameCodec;
import io.kvferry.protocol.Handshake;
import io.kvferry.protocol.Heartbeat;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.HelloAck;
import io.kvferry.protocol.MessageType;
import io.kvferry.protocol.Wire;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.PrefillRankRegistration;
import io.kvferry.transport.ControlConnection;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import static io.kvferry.PlayedPrefill.wholeCoverage;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The decode's link set-up to prefill ranks the registry points at, which may be dead, silent or
 * hostile: a failed set-up is remembered briefly so a burst of rooms fails fast, a stalled one holds
 * up only its own endpoint, and before the prefill proves the token the decode reads only a CHALLENGE
 * and then a bounded HELLO_ACK.
 */
@Timeout(60)
class LinkSetupTest extends TransferTestBase {

    /** A prefill rank registered in its own registry whose socket the test plays (or leaves unaccepted). */
    private final class FakeRank implements AutoCloseable {
        final KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, TOKEN);
        final ServerSocketChannel server = ServerSocketChannel.open();
        final String addr;

        FakeRank() throws IOException {
            server.bind(new InetSocketAddress("127.0.0.1", 0));
            addr = "127.0.0.1:" + registry.port();
            new BootstrapClient(addr, TOKEN).registerRank(new PrefillRankRegistration(1, 0, 1, 0, 1, 0, 1, 0, 1, 0,
                    "127.0.0.1", ((InetSocketAddress) server.getLocalAddress()).getPort(), PAGE_SIZE, "bf16",
                    "follow_bootstrap_room", false, 0));
        }

        @Override
        public void close() throws IOException {
            server.close();
            registry.close();
        }
    }

    /**
     * The connect deadline of the frame refusals: a refusal must come well before it (half), which a decode reading the
     * announced body would not. It was 5 s with a bound of 2.5 s, a figure a loaded 2-core machine can reach; the
     * refusals come at once, so the longer deadline costs no time.
     */
    private static final Duration REFUSAL_DEADLINE = Duration.ofSeconds(30);

    private KVManager decodeWith(Duration connectTimeout) {
        return decode(rank(), "tcp", cfg(1, 0).connectTimeout(connectTimeout).build(), 0, PAGE_SIZE);
    }

    /** Runs init() of {@code r} and returns how long it held the caller, in ms. */
    private static long timedInit(KVReceiver r) {
        long t0 = System.nanoTime();
        r.init(0);
        return (System.nanoTime() - t0) / 1_000_000;
    }

    private static void sendHeaderOnly(SocketChannel ch, MessageType type, int bodyLength) throws IOException {
        ByteBuffer header = ByteBuffer.allocate(Wire.HEADER_BYTES);
        FrameCodec.putHeader(header, type, bodyLength);
        header.flip();
        while (header.hasRemaining()) ch.write(header);
    }

    /** Polls {@code r} until it concludes (or 30 s) and returns how long that took, in ms. */
    private static long msToConclude(KVReceiver r) {
        long t0 = System.nanoTime();
        KVPoll st;
        // Parked between polls: a spinning test thread took one of two cores from the resolver thread it waited for.
        while (!(st = r.poll()).isTerminal() && System.nanoTime() - t0 < 30_000_000_000L) LockSupport.parkNanos(200_000);
        assertTrue(st.isTerminal(), "room " + r.bootstrapRoom() + " still " + st);
        return (System.nanoTime() - t0) / 1_000_000;
    }

    @Test
    void silentPrefillRankFailsABurstOfRoomsFastWithTheFirstReason() throws Exception {
        try (FakeRank silent = new FakeRank()) { // never accepts: the kernel's backlog completes the connect
            KVManager d = decodeWith(Duration.ofSeconds(2));
            KVReceiver first = d.createReceiver(silent.addr, 40);
            long initMs = timedInit(first);
            assertTrue(initMs < 1000, "init() waits for no peer (the set-up runs on a resolver thread); it took " + initMs + " ms");
            long firstMs = msToConclude(first);
            assertEquals(KVPoll.Failed, first.poll());
            KVTransferException firstFailure = failed(first::failureException);
            assertEquals(FailureKind.PREFILL_UNREACHABLE, firstFailure.kind());
            assertTrue(firstFailure.getMessage().contains("did not complete the handshake within 2000 ms"), firstFailure.getMessage());
            assertTrue(initMs + firstMs >= 1500, "the first room waited the connect timeout, not " + (initMs + firstMs) + " ms");
            for (long room = 41; room <= 43; room++) {
                KVReceiver next = d.createReceiver(silent.addr, room);
                long ms = timedInit(next) + msToConclude(next);
                // Without the memory of the failed set-up, every room waited the full 2 s.
                assertTrue(ms < 1000, "room " + room + " took " + ms + " ms to fail for a rank that just failed");
                assertEquals(KVPoll.Failed, next.poll());
                KVTransferException e = failed(next::failureException);
                assertEquals(FailureKind.PREFILL_UNREACHABLE, e.kind());
                assertTrue(e.getMessage().contains("did not complete the handshake within 2000 ms"), e.getMessage());
                assertTrue(e.getMessage().contains("not retried for 1000 ms"), e.getMessage());
            }
        }
    }

    @Test
    void silentPrefillRankHoldsUpNeitherTheSchedulerThreadNorAnotherRanksRooms() throws Exception {
        try (FakeRank silent = new FakeRank(); FakeRank healthy = new FakeRank()) {
            KVManager d = decodeWith(Duration.ofSeconds(4));
            KVReceiver stuck = d.createReceiver(silent.addr, 50), fine = d.createReceiver(healthy.addr, 51);
            // One thread drives both rooms, as a scheduler does. Before the set-up ran on a resolver thread,
            // stuck.init() held this thread until the silent rank's 4 s deadline and the room had failed by now.
            stuck.init(0);
            fine.init(0);
            try (SocketChannel accepted = silent.server.accept()) { // its set-up is under way and will hear nothing
                try (ControlConnection c = new ControlConnection(healthy.server.accept())) {
                    acceptAsPrefill(c);
                    await(fine::poll, KVPoll.WaitingForInput);
                    assertEquals(KVPoll.Bootstrapping, stuck.poll(), "the silent rank's room waits for its CHALLENGE meanwhile");
                }
                msToConclude(stuck);
            }
            assertEquals(KVPoll.Failed, stuck.poll());
            String why = failure(stuck::failureException);
            assertTrue(why.contains("did not complete the handshake within 4000 ms"), why);
        }
    }

    @Test
    void prefillRankThatOpensWithAnotherFrameIsRefusedBeforeItsBodyIsRead() throws Exception {
        try (FakeRank hostile = new FakeRank()) {
            KVManager d = decodeWith(REFUSAL_DEADLINE);
            KVReceiver r = d.createReceiver(hostile.addr, 60);
            AtomicLong ms = new AtomicLong();
            Thread init = Thread.ofPlatform().daemon().start(() -> ms.set(timedInit(r) + msToConclude(r)));
            try (SocketChannel ch = hostile.server.accept()) {
                // A 16 MiB TRANSFER_INFO announced and never sent: reading its body would wait for the deadline.
                sendHeaderOnly(ch, MessageType.TRANSFER_INFO, MessageType.TRANSFER_INFO.maxBodyBytes());
                init.join(REFUSAL_DEADLINE.toMillis());
            }
            assertTrue(ms.get() < REFUSAL_DEADLINE.toMillis() / 2, "the decode waited " + ms.get() + " ms for the body of a frame it must refuse");
            String why = failure(r::failureException);
            assertTrue(why.contains("expected CHALLENGE from an unauthenticated peer, got TRANSFER_INFO"), why);
        }
    }

    /** CHALLENGE, the decode's HELLO read, then {@code type} with {@code bodyLength} announced and never sent. */
    private String refusalAfterChallenge(MessageType type, int bodyLength) throws Exception {
        try (FakeRank hostile = new FakeRank()) {
            KVManager d = decodeWith(REFUSAL_DEADLINE);
            KVReceiver r = d.createReceiver(hostile.addr, 61);
            AtomicLong ms = new AtomicLong();
            Thread init = Thread.ofPlatform().daemon().start(() -> ms.set(timedInit(r) + msToConclude(r)));
            SocketChannel ch = hostile.server.accept();
            try (ControlConnection c = new ControlConnection(ch)) {
                c.send(new Challenge(Handshake.nonce()));
                assertInstanceOf(Hello.class, c.read());
                sendHeaderOnly(ch, type, bodyLength);
                init.join(REFUSAL_DEADLINE.toMillis());
            }
            assertTrue(ms.get() < REFUSAL_DEADLINE.toMillis() / 2, "the decode waited " + ms.get() + " ms for the body of a frame it must refuse");
            return failure(r::failureException);
        }
    }

    @Test
    void frameOtherThanHelloAckAfterTheChallengeIsRefusedBeforeItsBodyIsRead() throws Exception {
        String why = refusalAfterChallenge(MessageType.TRANSFER_INFO, MessageType.TRANSFER_INFO.maxBodyBytes());
        assertTrue(why.contains("expected HELLO_ACK or HEARTBEAT from an unauthenticated peer, got TRANSFER_INFO"), why);
    }

    @Test
    void helloAckLargerThanThisRanksCoverageNeedsIsRefusedBeforeItsBodyIsRead() throws Exception {
        String why = refusalAfterChallenge(MessageType.HELLO_ACK, MessageType.HELLO_ACK.maxBodyBytes());
        assertTrue(why.contains("HELLO_ACK of " + MessageType.HELLO_ACK.maxBodyBytes() + " bytes from an unauthenticated peer exceeds"),
                why);
    }

    @Test
    void heartbeatBeforeTheHelloAckIsStillAccepted() throws Exception {
        // A prefill marks the link registered just before it sends HELLO_ACK, so its heartbeat may come first.
        try (FakeRank prefill = new FakeRank()) {
            KVManager d = decodeWith(Duration.ofSeconds(5));
            KVReceiver r = d.createReceiver(prefill.addr, 62);
            Thread init = Thread.ofPlatform().daemon().start(() -> bootstrap(r, 0));
            try (ControlConnection c = new ControlConnection(prefill.server.accept())) {
                byte[] challenge = Handshake.nonce();
                c.send(new Challenge(challenge));
                Hello h = assertInstanceOf(Hello.class, c.read());
                c.send(new Heartbeat());
                c.send(HelloAck.accept(0, 0, "tcp", "", h.checksum(), wholeCoverage(h.memory()))
                        .signed(Handshake.key(TOKEN), h.decodeNonce()));
                init.join(10_000);
                assertEquals(KVPoll.WaitingForInput, r.poll());
            }
        }
    }
}
