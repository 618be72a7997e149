package io.kvferry.transfer;

import io.kvferry.api.BackendUnavailableException;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVFerrySettings;
import io.kvferry.api.KVTransferException;
import io.kvferry.KVFerry;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.api.Knob;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.memory.SharedArena;
import io.kvferry.protocol.Heartbeat;
import io.kvferry.protocol.TransferInfo;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.PrefillRankRegistration;
import io.kvferry.registry.RankEndpoint;
import io.kvferry.transport.ControlConnection;
import io.kvferry.transport.Transports;
import io.kvferry.transport.inproc.InprocOffers;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Which data path a link takes (and why it falls back), and application heartbeats on both sides. */
@Timeout(60)
class DataPathChoiceAndLivenessTest extends TransferTestBase {

    private String pathOf(KVManager p, TestRank pm, KVManager d, TestRank dm, long room) {
        Transfer t = start(p, pm, d, room, new int[] {1, 2, 3}, new int[] {7, 8, 9}, 0, 1, 0);
        assertLanded(t, dm);
        return t.receiver().getTransferMetric().transport();
    }

    @Test
    void shmFallsBackToTcpWhenTheDecodePoolIsPrivateMemory() {
        TestRank pm = rank(), dm = new TestRank(BUFFERS, PAGES, PAGE_BYTES, ROWS, true);
        closeables.add(dm);
        KVManager p = prefill(pm, "shm", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "shm", cfg(1, 0).build(), 0, PAGE_SIZE);
        assertEquals("tcp", pathOf(p, pm, d, dm, 21));
        assertTrue(dm.canariesIntact());
    }

    @Test
    void aPrefillThatOnlyServesTcpDeclinesTheShmOffer() {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "auto", cfg(1, 0).build(), 0, PAGE_SIZE);
        assertEquals("tcp", pathOf(p, pm, d, dm, 22));
    }

    @Test
    void autoOnBothSidesOfOneHostPicksShm() {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "auto", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "auto", cfg(1, 0).build(), 0, PAGE_SIZE);
        assertEquals("shm", pathOf(p, pm, d, dm, 23));
    }

    @Test
    void anUnknownBackendNameIsAClearError() {
        TestRank dm = rank();
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> decode(dm, "rdma", cfg(1, 0).build(), 0, PAGE_SIZE));
        assertTrue(e.getMessage().contains("unknown transfer backend 'rdma'"), e.getMessage());
    }

    @Test
    void aBackendWithABadSettingFailsBothManagersNamingIt() {
        TestRank pm = rank(), dm = rank();
        Knob copyThreads = Transports.get("shm").knobs().stream()
                .filter(k -> k.env().equals("KVFERRY_SHM_COPY_THREADS")).findFirst().orElseThrow();
        KVManagerConfig bad = cfg(1, 0).settings(KVFerrySettings.defaults().with(copyThreads, "lots")).build();
        for (DisaggregationMode mode : DisaggregationMode.values()) {
            TestRank r = mode == DisaggregationMode.PREFILL ? pm : dm;
            // Its own type (an IllegalStateException still): a command line shows it as one line, not a stack trace.
            BackendUnavailableException e = assertThrows(BackendUnavailableException.class,
                    () -> KVFerry.createManager("shm", r.args(0, PAGE_SIZE), mode, bad));
            assertTrue(e.getMessage().contains("transfer backend shm cannot run here")
                    && e.getMessage().contains("KVFERRY_SHM_COPY_THREADS") && e.getMessage().contains("'lots'"), e.getMessage());
        }
        // With auto the bad transport is only left out: links use another one.
        KVManager p = KVFerry.createManager("auto", pm.args(0, PAGE_SIZE), DisaggregationMode.PREFILL, bad);
        closeables.add(p);
        p.registerToBootstrap();
        KVManager d = decode(dm, "auto", bad, 0, PAGE_SIZE);
        assertEquals("tcp", pathOf(p, pm, d, dm, 29));
    }

    @Test
    void aPrefillThatGoesSilentIsDeclaredDeadByHeartbeats() throws Exception {
        TestRank dm = rank();
        try (KVBootstrapServer fakeRegistry = KVFerry.startBootstrapServer("127.0.0.1", 0, TOKEN);
             ServerSocketChannel server = ServerSocketChannel.open()) {
            server.bind(new InetSocketAddress("127.0.0.1", 0));
            String fakeAddr = "127.0.0.1:" + fakeRegistry.port();
            new BootstrapClient(fakeAddr, TOKEN).registerRank(new PrefillRankRegistration(1, 0, 1, 0, 1, 0, 1, 0, 1, 0,
                    "127.0.0.1", ((InetSocketAddress) server.getLocalAddress()).getPort(), PAGE_SIZE, "bf16",
                    "follow_bootstrap_room", false, 0));
            KVManagerConfig c = cfg(1, 0).heartbeat(Duration.ofMillis(100), 3).build();
            KVManager d = decode(dm, "tcp", c, 0, PAGE_SIZE);
            KVReceiver r = d.createReceiver(fakeAddr, 31);
            Thread t = Thread.ofVirtual().start(() -> bootstrap(r, 0));
            // A prefill that registers, then hangs: its socket stays open, nothing more arrives.
            ControlConnection hung = new ControlConnection(server.accept());
            acceptAsPrefill(hung);
            t.join();
            r.sendMetadata(new int[] {1}, 0, null, 0);
            assertInstanceOf(TransferInfo.class, hung.read());
            // The decode's own heartbeats keep coming while it waits.
            assertInstanceOf(Heartbeat.class, hung.read());
            long t0 = System.nanoTime();
            await(r::poll, KVPoll.Failed);
            long ms = (System.nanoTime() - t0) / 1_000_000;
            // The kind says the heartbeats found it; the bound (50 heartbeat timeouts) says "not left to the 300 s waiting
            // timeout" with room for a loaded machine. It was 3 s, a scheduler's figure on two busy cores.
            assertTrue(ms < 15_000, "detected after " + ms + " ms");
            KVTransferException e = failed(r::failureException);
            assertEquals(FailureKind.HEARTBEAT_TIMEOUT, e.kind());
            String why = e.getMessage();
            assertTrue(why.contains("Lost connection with prefill instance (bootstrap_addr: " + fakeAddr + ")"), why);
            hung.close();
        }
    }

    @Test
    void aDecodeThatGoesSilentIsDeclaredDeadByHeartbeatsAndItsRoomReleased() throws Exception {
        TestRank pm = rank(), dm = rank();
        KVManagerConfig pc = cfg(1, 0).heartbeat(Duration.ofMillis(100), 3).build();
        KVManager p = KVFerry.createManager("tcp", pm.args(0, PAGE_SIZE), DisaggregationMode.PREFILL, pc);
        closeables.add(p);
        p.registerToBootstrap();
        RankEndpoint ep = new BootstrapClient(addr, TOKEN).fetchRankEndpoint(0, 0, 0, 0);
        // A decode that registers and sends its metadata, then hangs.
        try (ControlConnection hung = ControlConnection.connect(new InetSocketAddress(ep.rankIp(), ep.rankPort()), Duration.ofSeconds(5))) {
            assertTrue(registerAsDecode(hung, "hung-decode", RegisteredMemory.from(dm.args(0, PAGE_SIZE)).describe()).accepted());
            KVSender s = p.createSender(addr, 41);
            hung.send(new TransferInfo(41, new int[] {1}, 0, new int[][] {{0}}, 1, 0, false));
            await(s::poll, KVPoll.WaitingForInput);
            long t0 = System.nanoTime();
            await(s::poll, KVPoll.Failed);
            long ms = (System.nanoTime() - t0) / 1_000_000;
            // The kind says the heartbeats found it; the bound (50 heartbeat timeouts) says "not left to the 300 s waiting
            // timeout" with room for a loaded machine. It was 3 s, a scheduler's figure on two busy cores.
            assertTrue(ms < 15_000, "detected after " + ms + " ms");
            KVTransferException e = failed(s::failureException);
            assertEquals(FailureKind.HEARTBEAT_TIMEOUT, e.kind());
            String why = e.getMessage();
            assertTrue(why.contains("Decode instance could be dead") && why.contains("no heartbeat"), why);
            assertEquals(0, p.stats().trackedRooms(), "the failed room's KV is released");
        }
    }

    @Test
    void heartbeatsKeepAnIdleLinkAlivePastTheTimeout() throws Exception {
        TestRank pm = rank(), dm = rank();
        // 100 ms beats, declared dead after 1 s of silence: a loaded 2-core machine may delay a timer tick by a few
        // hundred ms, which must not read as a dead peer; idle for 2.5× the timeout (25 beats) the link must survive.
        KVManagerConfig c = cfg(1, 0).heartbeat(Duration.ofMillis(100), 10).build();
        KVManager p = KVFerry.createManager("tcp", pm.args(0, PAGE_SIZE), DisaggregationMode.PREFILL, c);
        closeables.add(p);
        p.registerToBootstrap();
        KVManager d = decode(dm, "tcp", c, 0, PAGE_SIZE);
        assertEquals("tcp", pathOf(p, pm, d, dm, 51));
        Thread.sleep(2500); // no traffic but heartbeats
        assertEquals(1, d.stats().peerConnections(), "the idle link survived");
        assertEquals("tcp", pathOf(p, pm, d, dm, 52));
        assertEquals(1, d.stats().peerConnections(), "and was reused");
    }

    @Test
    void stripedTcpSpreadsRoomsOverSeveralConnectionsInOrder() {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "tcp", cfg(1, 0).tcpStripes(3).build(), 0, PAGE_SIZE);
        Random rnd = new Random(3);
        for (int round = 0; round < 4; round++) {
            int[] src = distinctPages(rnd, 30, PAGES), dst = distinctPages(rnd, 30, PAGES);
            List<Transfer> ts = new ArrayList<>();
            for (int k = 0; k < 3; k++) {
                long room = 100 + round * 3 + k; // consecutive rooms land on different stripes
                ts.add(start(p, pm, d, room, Arrays.copyOfRange(src, k * 10, k * 10 + 10),
                        Arrays.copyOfRange(dst, k * 10, k * 10 + 10), k, ROWS - 1 - k, 0));
            }
            for (Transfer t : ts) assertLanded(t, dm);
        }
        assertEquals(3, p.stats().peerConnections(), "one control connection and two data stripes");
        assertEquals(1, d.stats().peerConnections());
        assertTrue(dm.canariesIntact());
    }

    @Test
    void thePrefillUnmapsTheDecodesPoolWhenTheDecodeGoesAway() throws Exception {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "shm", 1, 0, PAGE_SIZE);
        KVManager d = KVFerry.createManager("shm", dm.args(0, PAGE_SIZE), DisaggregationMode.DECODE, cfg(1, 0).build());
        assertEquals("shm", pathOf(p, pm, d, dm, 61));
        String file = ((SharedArena) dm.arena).path().toString();
        assertTrue(mappingsOf(file) > 1, "the decode's own mapping and the prefill's (one per offered window)");
        d.close();
        long deadline = System.nanoTime() + 5_000_000_000L;
        while (mappingsOf(file) > 1 && System.nanoTime() < deadline) Thread.sleep(20);
        assertEquals(1, mappingsOf(file), "the prefill unmapped the pool once the decode's session was gone");
        assertEquals(0, p.stats().peerConnections());
    }

    /**
     * An inproc link's offer (the key under which the prefill finds the decode's write gate in this JVM)
     * goes with its link: a decode that outlives many prefills does not keep one per link it ever had.
     */
    @Test
    void anInprocLinksOfferIsReleasedWhenTheLinkIsLost() throws Exception {
        TestRank dm = rank();
        KVManager d = decode(dm, "inproc", cfg(1, 0).build(), 0, PAGE_SIZE);
        int before = InprocOffers.held();
        for (int i = 0; i < 3; i++) {
            TestRank pm = rank();
            KVManager p = prefill(pm, "inproc", 1, 0, PAGE_SIZE);
            KVReceiver r = d.createReceiver(addr, 100 + i);
            assertEquals(KVPoll.WaitingForInput, bootstrap(r, 0));
            assertEquals(before + 1, InprocOffers.held(), "the link's offer, while the link is up");
            r.clear();
            p.close(); // the link is lost
            long deadline = System.nanoTime() + 5_000_000_000L;
            while (InprocOffers.held() > before && System.nanoTime() < deadline) Thread.sleep(5);
            assertEquals(before, InprocOffers.held(), "offers of links that are gone are still registered");
        }
        d.close();
        assertEquals(before, InprocOffers.held());
    }

    private static long mappingsOf(String file) throws IOException {
        try (var lines = Files.lines(Path.of("/proc/self/maps"))) {
            return lines.filter(l -> l.endsWith(file)).count();
        }
    }
}
