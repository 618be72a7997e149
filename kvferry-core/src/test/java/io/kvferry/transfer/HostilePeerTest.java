package io.kvferry.transfer;

import io.kvferry.KVFerry;
import io.kvferry.api.ChecksumMode;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.api.KVTransferException;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.protocol.Abort;
import io.kvferry.protocol.AbortAck;
import io.kvferry.protocol.Challenge;
import io.kvferry.protocol.Fingerprint;
import io.kvferry.protocol.Handshake;
import io.kvferry.protocol.Heartbeat;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.HelloAck;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.protocol.Status;
import io.kvferry.protocol.TransferInfo;
import io.kvferry.protocol.Wire;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.RankEndpoint;
import io.kvferry.transport.ControlConnection;
import io.kvferry.protocol.FrameCodec;
import io.kvferry.protocol.MessageType;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.channels.SocketChannel;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import static io.kvferry.PlayedPrefill.awaitUntil;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
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

    /**
     * Issue 13 item 4: a registered peer that floods ABORTs and never reads is cut once its unsent
     * acknowledgements pile up, without stalling the rooms of a real decode on the same rank.
     */
    @Test
    void anAbortFloodFromAPeerThatNeverReadsIsCutWhileOthersAreServed() throws Exception {
        TestRank pm = rank(), dm = rank(), fm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        assertLanded(start(p, pm, d, 910, new int[]{1}, new int[]{2}, 0, 0, 0), dm); // the real decode is connected
        RankEndpoint ep = new BootstrapClient(addr, TOKEN).fetchRankEndpoint(0, 0, 0, 0);
        SocketChannel raw = SocketChannel.open(new InetSocketAddress(ep.rankIp(), ep.rankPort()));
        try (ControlConnection flood = new ControlConnection(raw)) {
            assertTrue(registerAsDecode(flood, "flood", RegisteredMemory.from(fm.args(0, PAGE_SIZE)).describe()).accepted());
            raw.configureBlocking(false);
            long sent = 0, deadline = System.nanoTime() + 20_000_000_000L;
            ByteBuffer batch = ByteBuffer.allocate(20 * 1000).order(ByteOrder.LITTLE_ENDIAN);
            boolean cut = false;
            while (!cut && System.nanoTime() < deadline) {
                batch.clear();
                for (int i = 0; i < 1000; i++) batch.put(FrameCodec.encode(new Abort(1_000_000 + sent++)));
                batch.flip();
                try {
                    while (batch.hasRemaining()) {
                        if (raw.write(batch) == 0) Thread.onSpinWait();
                        if (System.nanoTime() > deadline) break;
                    }
                } catch (IOException reset) {
                    cut = true; // the rank closed the flooding connection
                }
                if (p.stats().peerConnections() == 1) cut = true;
            }
            assertTrue(cut, "the flooding link was cut after " + sent + " ABORTs");
        }
        // The real decode's rooms go on being served on the same rank and workers.
        assertLanded(start(p, pm, d, 911, new int[]{3, 4}, new int[]{5, 6}, 0, 0, 0), dm);
        assertLanded(start(p, pm, d, 912, new int[]{7}, new int[]{8}, 0, 0, 0), dm);
    }

    /** An ABORT for a room the link has no part in is acknowledged, each time, and changes nothing. */
    @Test
    void abortsOfRoomsThatAreNotTheLinksAreAnsweredAndIgnored() throws Exception {
        TestRank pm = rank(), dm = rank(), fm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        KVReceiver victim = d.createReceiver(addr, 920);
        bootstrap(victim, 0);
        KVSender s = p.createSender(addr, 920);
        victim.sendMetadata(new int[]{2}, 0, new int[][]{{0}}, 0);
        await(s::poll, KVPoll.WaitingForInput);
        RankEndpoint ep = new BootstrapClient(addr, TOKEN).fetchRankEndpoint(0, 0, 0, 0);
        try (ControlConnection other = ControlConnection.connect(new InetSocketAddress(ep.rankIp(), ep.rankPort()), Duration.ofSeconds(5))) {
            assertTrue(registerAsDecode(other, "other", RegisteredMemory.from(fm.args(0, PAGE_SIZE)).describe()).accepted());
            for (int i = 0; i < 3; i++) other.send(new Abort(920));
            // Every ABORT is answered (a retried request may abort its room id again); nothing else changes.
            for (int i = 0; i < 3; i++) assertEquals(new AbortAck(920, 0), readSkippingHeartbeats(other));
            other.send(new Abort(999_999));
            assertEquals(new AbortAck(999_999, 0), readSkippingHeartbeats(other));
        }
        assertEquals(KVPoll.WaitingForInput, s.poll(), "another decode's ABORT does not fail the room");
        pm.fillPage(1, 920, 0);
        s.init(1, 0);
        s.send(new int[]{1}, new int[][]{{0}});
        await(victim::poll, KVPoll.Success);
    }

    /**
     * A decode that aborts a room this rank holds only for it (its request never reached this rank) has
     * the room dropped at once, not after the waiting timeout: the info stops counting against the link's
     * budget of held rooms, and a request for that room arriving later fails at once as aborted.
     */
    @Test
    void anAbortedRoomHeldOnlyForItsDecodeIsDroppedAtOnce() throws Exception {
        TestRank pm = rank(), fm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE); // default waiting timeout: 300 s
        RankEndpoint ep = new BootstrapClient(addr, TOKEN).fetchRankEndpoint(0, 0, 0, 0);
        try (ControlConnection c = ControlConnection.connect(new InetSocketAddress(ep.rankIp(), ep.rankPort()), Duration.ofSeconds(5))) {
            assertTrue(registerAsDecode(c, "aborting", RegisteredMemory.from(fm.args(0, PAGE_SIZE)).describe()).accepted());
            c.send(new TransferInfo(7000, new int[]{1}, -1, new int[0][], 1, 0, false));
            c.send(new Abort(7000));
            assertEquals(new AbortAck(7000, 0), readSkippingHeartbeats(c));
            assertEquals(0, p.stats().trackedRooms(), "the aborted room is still held");
        }
        KVSender late = p.createSender(addr, 7000);
        assertEquals(KVPoll.Failed, late.poll());
        assertEquals(FailureKind.ABORTED, failed(late::failureException).kind());
    }

    /**
     * Reasons quote peers' text, and a session id may be 4 KiB: before authentication a stripe HELLO
     * with such an id gets its refusal (not a reader thread dying on an unencodable reason), and after
     * it a room failed with such a reason is still reported to the next decode that names it.
     */
    @Test
    void reasonsQuotingALongSessionIdAreClippedNotFatal() throws Exception {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        MemoryDescriptor mem = RegisteredMemory.from(dm.args(0, PAGE_SIZE)).describe();
        RankEndpoint ep = new BootstrapClient(addr, TOKEN).fetchRankEndpoint(0, 0, 0, 0);
        InetSocketAddress at = new InetSocketAddress(ep.rankIp(), ep.rankPort());
        try (ControlConnection c = ControlConnection.connect(at, Duration.ofSeconds(5))) {
            assertInstanceOf(Challenge.class, c.read());
            c.send(new Hello("s".repeat(4090), "i", Fingerprint.of("", "bf16", PAGE_SIZE, false, 0), "tcp", 0, 1, 0,
                    Hello.FLAG_STRIPE | (1 << Hello.STRIPE_INDEX_SHIFT), ChecksumMode.OFF, mem, List.of(), Handshake.nonce(), null, null));
            HelloAck refused = assertInstanceOf(HelloAck.class, c.read(), "an unsigned stripe HELLO is refused with a reason");
            assertFalse(refused.accepted());
        }
        try (ControlConnection a = ControlConnection.connect(at, Duration.ofSeconds(5));
             ControlConnection b = ControlConnection.connect(at, Duration.ofSeconds(5))) {
            assertTrue(register(a, sameInstanceHello("a".repeat(4050), mem)).accepted());
            assertTrue(register(b, sameInstanceHello("b", mem)).accepted());
            a.send(new TransferInfo(90, new int[]{1}, -1, new int[0][], 2, 0, false));
            // Room 90 held before a closes (a close with a's unread heartbeats is a reset, which can drop the unread info).
            awaitUntil(() -> p.stats().trackedRooms() == 1, "room 90's info held");
            a.close(); // room 90 fails with a reason naming a's session, and is buried
            // Its tombstone is left before its record goes: once untracked, b's info finds it. Two sleeps of 200 ms
            // stood for these waits; slower (a loaded machine), b's info found room 90 still held and was held with it,
            // unanswered until the 300 s waiting timeout.
            awaitUntil(() -> p.stats().peerConnections() <= 1 && p.stats().trackedRooms() == 0, "a's link gone and room 90 buried");
            b.send(new TransferInfo(90, new int[]{2}, -1, new int[0][], 2, 0, false));
            Status st = assertInstanceOf(Status.class, readSkippingHeartbeats(b), "b's link must answer, not be cut");
            assertEquals(KVPoll.Failed, st.status());
            assertTrue(st.reason().getBytes(StandardCharsets.UTF_8).length <= Wire.MAX_STRING_BYTES);
        }
    }

    /** A HELLO of a decode rank of one shared instance ("shared"), session {@code sessionId}. */
    private static Hello sameInstanceHello(String sessionId, MemoryDescriptor mem) {
        return new Hello(sessionId, "shared", Fingerprint.of("", "bf16", PAGE_SIZE, false, 0), "tcp", 0, 1, 0, 0,
                ChecksumMode.OFF, mem, List.of(), Handshake.nonce(), null, null);
    }

    private static HelloAck register(ControlConnection c, Hello h) throws IOException {
        Challenge ch = assertInstanceOf(Challenge.class, c.read());
        c.send(h.signed(Handshake.key(TOKEN), ch.nonce()));
        return assertInstanceOf(HelloAck.class, c.read());
    }

    private static Object readSkippingHeartbeats(ControlConnection c) throws IOException {
        Object m;
        do {
            m = c.read();
        } while (m instanceof Heartbeat);
        return m;
    }

    /**
     * Issue 13 item 5: transfer infos for rooms this rank never started are held within a per-link
     * budget (then refused), dropped with the session that sent them, and expire after the waiting
     * timeout otherwise (the decode gives up on them by then).
     */
    @Test
    void transferInfosForRoomsNeverStartedAreBoundedDroppedWithTheirSessionAndExpire() throws Exception {
        TestRank pm = rank(), fm = rank(), qm = rank();
        // Default waiting timeout (300 s): only the disconnect can drop these rooms.
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        RankEndpoint ep = new BootstrapClient(addr, TOKEN).fetchRankEndpoint(0, 0, 0, 0);
        InetSocketAddress at = new InetSocketAddress(ep.rankIp(), ep.rankPort());
        int[] fourMiB = new int[1 << 20];
        try (ControlConnection c = ControlConnection.connect(at, Duration.ofSeconds(5))) {
            assertTrue(registerAsDecode(c, "stray", RegisteredMemory.from(fm.args(0, PAGE_SIZE)).describe()).accepted());
            for (int i = 0; i < 40; i++) c.send(new TransferInfo(5000 + i, fourMiB, -1, new int[0][], 1, 0, false));
            // 64 MiB per link: the 16th and later are refused at once.
            Status refused = assertInstanceOf(Status.class, readSkippingHeartbeats(c));
            assertEquals(KVPoll.Failed, refused.status());
            assertTrue(refused.reason().contains("has not started"), refused.reason());
            // Waits park (a spinning test thread takes one of two cores from the rank it waits for).
            awaitUntil(() -> p.stats().trackedRooms() >= 15, "15 infos held");
            assertTrue(p.stats().trackedRooms() <= 16, "held: " + p.stats().trackedRooms());
        }
        awaitUntil(() -> p.stats().trackedRooms() == 0, "the disconnected peer's held rooms dropped");
        // A request that reaches this rank after its decode left fails at once, with why (not after a bootstrap timeout).
        KVSender late = p.createSender(addr, 5000);
        assertEquals(KVPoll.Failed, late.poll());
        KVTransferException gone = failed(late::failureException);
        assertEquals(FailureKind.PEER_LOST, gone.kind());
        assertTrue(gone.getMessage().contains("Decode instance could be dead"), gone.getMessage());

        // Another prefill rank whose 2 s waiting timeout expires a held info while its decode stays connected.
        KVManager q = KVFerry.createManager("tcp", qm.args(0, PAGE_SIZE), DisaggregationMode.PREFILL,
                cfg(1, 0).waitingTimeout(Duration.ofSeconds(2)).build());
        closeables.add(q);
        try (ControlConnection c = ControlConnection.connect(q.controlEndpoint().orElseThrow(), Duration.ofSeconds(5))) {
            assertTrue(registerAsDecode(c, "slow", RegisteredMemory.from(fm.args(0, PAGE_SIZE)).describe()).accepted());
            c.send(new TransferInfo(6000, new int[]{1}, -1, new int[0][], 1, 0, false));
            Status expired = assertInstanceOf(Status.class, readSkippingHeartbeats(c)); // after the 2 s waiting timeout
            assertEquals(FailureKind.WAITING_TIMEOUT, expired.kind());
            assertTrue(expired.reason().contains("no request for room 6000"), expired.reason());
            awaitUntil(() -> q.stats().trackedRooms() == 0, "the expired info dropped");
        }
    }
}
