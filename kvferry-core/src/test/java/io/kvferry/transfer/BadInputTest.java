package io.kvferry.transfer;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVTransferException;
import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.protocol.Abort;
import io.kvferry.protocol.ControlMessage;
import io.kvferry.protocol.Region;
import io.kvferry.protocol.Status;
import io.kvferry.protocol.TransferInfo;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.PrefillRankRegistration;
import io.kvferry.transport.ControlConnection;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.Timeout;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.time.Duration;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Bad input gives a Failed room or an error with a clear reason, and leaves other rooms and memory untouched. */
@Timeout(60)
class BadInputTest extends TransferTestBase {

    @ParameterizedTest
    @ValueSource(strings = {"tcp", "inproc", "shm", "auto"})
    void decodePageIdsBeyondThePoolFailOnlyThatRoom(String backend) {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, backend, 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, backend, cfg(1, 0).build(), 0, PAGE_SIZE);
        KVReceiver bad = d.createReceiver(addr, 500);
        bootstrap(bad, 0);
        bad.sendMetadata(new int[]{1, PAGES + 5}, 0, null, 0);
        assertEquals(KVPoll.Failed, bad.poll());
        assertTrue(failure(bad::failureException).contains("page id " + (PAGES + 5) + " is outside the decode KV pool of " + PAGES));
        assertLanded(start(p, pm, d, 501, new int[]{1, 2}, new int[]{3, 4}, 0, 0, 0), dm);
        assertTrue(dm.pageIsZero(1) && dm.canariesIntact());
    }

    @ParameterizedTest
    @ValueSource(strings = {"tcp", "inproc", "shm", "auto"})
    void prefillPageIdBeyondThePoolFailsBothSides(String backend) {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, backend, 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, backend, cfg(1, 0).build(), 0, PAGE_SIZE);
        KVReceiver recv = d.createReceiver(addr, 600);
        bootstrap(recv, 0);
        recv.sendMetadata(new int[]{7, 8}, 1, null, 0);
        KVSender send = p.createSender(addr, 600);
        await(send::poll, KVPoll.WaitingForInput);
        send.init(2, 1);
        send.send(new int[]{3, 9999});
        await(send::poll, KVPoll.Failed);
        await(recv::poll, KVPoll.Failed);
        assertTrue(failure(send::failureException).contains("page id 9999 is outside the prefill KV pool"));
        KVTransferException onDecode = failed(recv::failureException);
        assertTrue(onDecode.getMessage().contains("page id 9999 is outside the prefill KV pool"));
        assertEquals(FailureKind.BAD_REQUEST, onDecode.kind(), "the prefill's kind travels on its STATUS");
        assertTrue(dm.pageIsZero(7) && dm.pageIsZero(8) && dm.canariesIntact());
        assertLanded(start(p, pm, d, 601, new int[]{1}, new int[]{2}, 0, 0, 0), dm);
    }

    @ParameterizedTest
    @ValueSource(strings = {"tcp", "inproc", "shm", "auto"})
    void wrongAuxIndexIsRejectedOnEitherSide(String backend) {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, backend, 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, backend, cfg(1, 0).build(), 0, PAGE_SIZE);
        KVReceiver r1 = d.createReceiver(addr, 700);
        bootstrap(r1, 0);
        r1.sendMetadata(new int[]{1}, ROWS, null, 0);
        assertTrue(failure(r1::failureException).contains("aux index " + ROWS + " is outside the decode metadata pool of " + ROWS));

        KVReceiver r2 = d.createReceiver(addr, 701);
        bootstrap(r2, 0);
        r2.sendMetadata(new int[]{1}, 0, null, 0);
        KVSender s2 = p.createSender(addr, 701);
        await(s2::poll, KVPoll.WaitingForInput);
        s2.init(1, ROWS + 3);
        await(s2::poll, KVPoll.Failed);
        await(r2::poll, KVPoll.Failed);
        assertTrue(failure(r2::failureException).contains("aux index " + (ROWS + 3)));
    }

    @ParameterizedTest
    @ValueSource(strings = {"tcp", "inproc", "shm", "auto"})
    void pageSizeMismatchIsAClearFailure(String backend) {
        TestRank pm = rank(), dm = rank();
        prefill(pm, backend, 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, backend, cfg(1, 0).build(), 0, 32);
        KVReceiver r = d.createReceiver(addr, 800);
        bootstrap(r, 0);
        assertEquals(KVPoll.Failed, r.poll());
        KVTransferException e800 = failed(r::failureException);
        assertEquals(FailureKind.LAYOUT_REFUSED, e800.kind());
        String why = e800.getMessage();
        assertTrue(why.startsWith("KVTransferError(bootstrap_room=800): "), why);
        assertTrue(why.contains("page_size mismatch: prefill at " + addr + " uses 16, decode uses 32"), why);
    }

    @Test
    void wrongClusterTokenIsRefusedOnControlConnectionsAndRegistry() {
        TestRank pm = rank(), dm = rank();
        prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "tcp", cfg(1, 0).authToken("not-the-token").build(), 0, PAGE_SIZE);
        KVReceiver r = d.createReceiver(addr, 900);
        bootstrap(r, 0);
        KVTransferException unauthorized = failed(r::failureException);
        assertTrue(unauthorized.getMessage().contains("Unauthorized"));
        assertEquals(FailureKind.HANDSHAKE_REFUSED, unauthorized.kind(), "the refusal kind travels on HELLO_ACK");

        KVManager rogue = KVFerry.createManager("tcp", pm.args(0, PAGE_SIZE), DisaggregationMode.PREFILL,
                cfg(1, 0).authToken("not-the-token").build());
        closeables.add(rogue);
        RuntimeException e = assertThrows(RuntimeException.class, rogue::registerToBootstrap);
        assertTrue(e.getMessage().contains("401"), e.getMessage());
    }

    @Test
    void senderForARoomNoDecodeKnowsTimesOutWithSGLangsReason() {
        TestRank pm = rank();
        KVManager p = KVFerry.createManager("tcp", pm.args(0, PAGE_SIZE), DisaggregationMode.PREFILL,
                cfg(1, 0).bootstrapTimeout(Duration.ofMillis(200)).build());
        closeables.add(p);
        KVSender s = p.createSender(addr, 4242);
        assertEquals(KVPoll.Bootstrapping, s.poll());
        await(s::poll, KVPoll.Failed);
        KVTransferException e = failed(s::failureException);
        assertEquals(FailureKind.BOOTSTRAP_TIMEOUT, e.kind());
        String why = e.getMessage();
        assertTrue(why.contains("Request 4242 timed out after") && why.contains("in KVPoll.Bootstrapping"), why);
    }

    /**
     * A hostile prefill rank: it registers, accepts the decode's HELLO, then writes outside the room's
     * pages, to an unknown room, and finally a write larger than any buffer. Decode must fail only
     * the targeted room, drop the rest, never land a byte outside the room's pages, and drop the
     * connection on the protocol violation.
     */
    @Test
    void forgedWritesNeverLandOutsideTheRoomsPages() throws Exception {
        TestRank dm = rank();
        try (KVBootstrapServer fakeRegistry = KVFerry.startBootstrapServer("127.0.0.1", 0, TOKEN);
             ServerSocketChannel server = ServerSocketChannel.open();
             Arena arena = Arena.ofConfined()) {
            server.bind(new InetSocketAddress("127.0.0.1", 0));
            String fakeAddr = "127.0.0.1:" + fakeRegistry.port();
            new BootstrapClient(fakeAddr, TOKEN).registerRank(new PrefillRankRegistration(1, 0, 1, 0, 1, 0, 1, 0, 1, 0,
                    "127.0.0.1", ((InetSocketAddress) server.getLocalAddress()).getPort(), PAGE_SIZE, "bf16",
                    "follow_bootstrap_room", false, 0));
            KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
            KVReceiver victim = d.createReceiver(fakeAddr, 1);
            KVReceiver bystander = d.createReceiver(fakeAddr, 2);
            Thread t = Thread.ofVirtual().start(() -> {
                bootstrap(victim, 0);
                bootstrap(bystander, 0);
            });
            ControlConnection evil = new ControlConnection(server.accept());
            acceptAsPrefill(evil); // an evil prefill that holds the cluster token
            t.join();
            victim.sendMetadata(new int[]{1, 2}, 0, null, 0);
            bystander.sendMetadata(new int[]{3}, 1, null, 0);
            assertInstanceOf(TransferInfo.class, evil.read());
            assertInstanceOf(TransferInfo.class, evil.read());

            MemorySegment junk = arena.allocate(PAGE_BYTES * 2);
            junk.fill((byte) 0x77);
            // Room 1 owns pages 1-2: pages 2-3 are not all its own.
            RawFrames.write(evil, 1, Region.KV, 0, 0, 2 * PAGE_BYTES, junk);
            // An unknown room and a status for an unknown room: dropped.
            RawFrames.write(evil, 99, Region.KV, 0, 0, 0, junk.asSlice(0, PAGE_BYTES));
            evil.send(new Status(12345, KVPoll.Success, 0, ""));
            // Bystander's aux row is row 1; row 0 is not its own.
            RawFrames.write(evil, 2, Region.AUX, 0, 0, 0, junk.asSlice(0, 64));
            await(victim::poll, KVPoll.Failed);
            assertTrue(failure(victim::failureException).contains("does not own"));
            await(bystander::poll, KVPoll.Failed);
            assertTrue(failure(bystander::failureException).contains("aux write"));
            for (int page = 0; page < PAGES; page++) assertTrue(dm.pageIsZero(page), "page " + page + " was written");
            assertTrue(dm.canariesIntact());

            KVReceiver third = d.createReceiver(fakeAddr, 3);
            bootstrap(third, 0);
            third.sendMetadata(new int[]{5}, 2, null, 0);
            // The failed rooms were given up (failureException() drops them, as SGLang's): each one's ABORT comes first.
            ControlMessage next;
            while ((next = evil.read()) instanceof Abort) {
                assertTrue(((Abort) next).room() == 1 || ((Abort) next).room() == 2, "ABORT of room " + ((Abort) next).room());
            }
            assertInstanceOf(TransferInfo.class, next);
            // A length larger than the whole buffer is a protocol violation: the connection goes.
            RawFrames.write(evil, 3, Region.KV, 0, 0, 0, arena.allocate(PAGE_BYTES * PAGES + 8));
            await(third::poll, KVPoll.Failed);
            assertTrue(failure(third::failureException).contains("Lost connection with prefill instance (bootstrap_addr: " + fakeAddr + ")"));
            assertTrue(dm.pageIsZero(5) && dm.canariesIntact());
            evil.close();
        }
    }

    @Test
    void peerThatNeverAnswersTheHandshakeDoesNotHangInit() throws Exception {
        TestRank dm = rank();
        try (KVBootstrapServer fakeRegistry = KVFerry.startBootstrapServer("127.0.0.1", 0, TOKEN);
             ServerSocketChannel server = ServerSocketChannel.open()) {
            server.bind(new InetSocketAddress("127.0.0.1", 0));
            String fakeAddr = "127.0.0.1:" + fakeRegistry.port();
            new BootstrapClient(fakeAddr, TOKEN).registerRank(new PrefillRankRegistration(1, 0, 1, 0, 1, 0, 1, 0, 1, 0,
                    "127.0.0.1", ((InetSocketAddress) server.getLocalAddress()).getPort(), PAGE_SIZE, "bf16",
                    "follow_bootstrap_room", false, 0));
            KVManagerConfig c = cfg(1, 0).connectTimeout(Duration.ofMillis(300)).build();
            KVManager d = decode(dm, "tcp", c, 0, PAGE_SIZE);
            KVReceiver r = d.createReceiver(fakeAddr, 5);
            bootstrap(r, 0); // the server accepts (backlog) but never answers HELLO
            assertEquals(KVPoll.Failed, r.poll());
            KVTransferException e = failed(r::failureException);
            assertTrue(e.getMessage().contains("did not complete the handshake within 300 ms"), e.getMessage());
            assertEquals(FailureKind.PREFILL_UNREACHABLE, e.kind());
        }
    }

}
