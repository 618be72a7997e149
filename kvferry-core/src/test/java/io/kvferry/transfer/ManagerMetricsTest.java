package io.kvferry.transfer;

import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVManagerInspection;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.metrics.KVFerryMeters;
import io.kvferry.metrics.LogSafe;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.protocol.Challenge;
import io.kvferry.protocol.Handshake;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.HelloAck;
import io.kvferry.protocol.Status;
import io.kvferry.protocol.TransferInfo;
import io.kvferry.protocol.TransportOffer;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.PrefillRankRegistration;
import io.kvferry.registry.RankEndpoint;
import io.kvferry.transport.ControlConnection;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import java.util.function.BooleanSupplier;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** What managers record in the registry their config names, and what inspect() shows, from real transfers. */
class ManagerMetricsTest extends TransferTestBase {
    private final SimpleMeterRegistry meters = new SimpleMeterRegistry();

    private double counter(String name, String... tags) {
        Counter c = meters.find(name).tags(tags).counter();
        assertNotNull(c, name);
        return c.count();
    }

    /** Values recorded so far in a histogram of one role (0 before its first, when it is not registered yet). */
    private long recorded(String name, String role) {
        DistributionSummary d = meters.find(name).tags("role", role).summary();
        return d == null ? 0 : d.count();
    }

    /** Waits (20 s at most) for a condition another thread makes true. */
    private static void eventually(BooleanSupplier condition, String what) {
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() > deadline) throw new AssertionError("not within 20 s: " + what);
            LockSupport.parkNanos(1_000_000); // not a spin: on two cores it would take the core the recording thread needs
        }
    }

    private KVManager prefillWith(TestRank mem, KVManagerConfig config) {
        KVManager m = KVFerry.createManager("tcp", mem.args(0, PAGE_SIZE), DisaggregationMode.PREFILL, config);
        closeables.add(m);
        m.registerToBootstrap();
        return m;
    }

    @Test
    void transfersAreRecordedOncePerRoomOnEachSideWithTheirBytesAndOps() {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefillWith(pm, cfg(1, 0).meterRegistry(meters).build());
        KVManager d = decode(dm, "tcp", cfg(1, 0).meterRegistry(meters).build(), 0, PAGE_SIZE);
        long bytes = 0;
        for (int i = 0; i < 3; i++) {
            Transfer t = start(p, pm, d, 100 + i, new int[]{1 + i, 10 + i, 20 + i}, new int[]{30 + i, 40 + i, 50 + i}, i, i, 0);
            assertLanded(t, dm);
            bytes += 3 * PAGE_BYTES * BUFFERS + 64 + 128 + 256 + 512;
        }
        // Each side records a room right after its status moved, on the thread that moved it, one meter after another: wait
        // for every per-room meter read below (a CI run read the decode's total_mb one room short after its latency's third).
        eventually(() -> recorded(KVFerryMeters.TRANSFER_LATENCY_MS, "prefill") == 3 && recorded(KVFerryMeters.TRANSFER_LATENCY_MS, "decode") == 3
                && recorded(KVFerryMeters.TRANSFER_TOTAL_MB, "prefill") == 3 && recorded(KVFerryMeters.TRANSFER_TOTAL_MB, "decode") == 3
                && recorded(KVFerryMeters.TRANSFER_BOOTSTRAP_MS, "prefill") == 3 && recorded(KVFerryMeters.TRANSFER_BOOTSTRAP_MS, "decode") == 3
                && recorded(KVFerryMeters.TRANSFER_ALLOC_MS, "decode") == 3, "3 rooms recorded");
        for (String role : new String[]{"prefill", "decode"}) {
            assertEquals(3, meters.find(KVFerryMeters.TRANSFER_LATENCY_MS).tags("role", role, "transport", "tcp").summary().count(), role);
            assertEquals(bytes / 1e6, meters.find(KVFerryMeters.TRANSFER_TOTAL_MB).tags("role", role).summary().totalAmount(), 1e-9, role);
            assertEquals(3, meters.find(KVFerryMeters.TRANSFER_BOOTSTRAP_MS).tags("role", role).summary().count(), role);
        }
        assertEquals(3, meters.find(KVFerryMeters.TRANSFER_ALLOC_MS).tags("role", "decode").summary().count());
        assertEquals(bytes, counter(KVFerryMeters.DATAPATH_BYTES, "role", "prefill", "transport", "tcp"));
        assertEquals(p.stats().dataPathOps(), counter(KVFerryMeters.DATAPATH_OPS, "transport", "tcp"));
        assertEquals(p.stats().dataPathOps(), meters.find(KVFerryMeters.DATAPATH_OPS_BY_SIZE).tags("le", "+Inf").functionCounter().count());
        assertEquals(0, counter(KVFerryMeters.TRANSFER_FAILED, "role", "decode", "kind", "peer_lost"));
        assertEquals(1, meters.find(KVFerryMeters.PEERS).tags("role", "prefill").gauge().value());
        assertEquals(0, meters.find(KVFerryMeters.ROOMS).tags("role", "prefill", "state", "success").gauge().value(), "cleared rooms leave");

        KVManagerInspection in = p.inspect();
        assertEquals("prefill", in.role());
        assertEquals(3, in.roomsConcluded());
        assertEquals(bytes, in.bytesMoved());
        assertEquals(1, in.peers().size());
        assertEquals("tcp", in.peers().getFirst().dataPath());
        // The decode's session id is the key its registrations are held under: the status page shows a digest of it.
        assertTrue(in.peers().getFirst().name().matches("session [0-9a-f]{12}"), in.peers().getFirst().name());
        KVManagerInspection din = d.inspect();
        assertEquals(bytes, din.bytesMoved());
        assertEquals("prefill rank 0", din.peers().getFirst().name());
        p.close();
        d.close();
        assertEquals(null, meters.find(KVFerryMeters.ROOMS).gauge(), "a torn-down manager's gauges go with it");
    }

    /**
     * The poll lag: each side's first poll that returns a concluded room records how long the room
     * had been concluded (here at least the time the scheduler "slept" after both sides reached
     * Success unpolled), once per room; a room cleared unpolled records nothing.
     */
    @Test
    void theFirstPollOfAConcludedRoomRecordsHowLongItWaitedOncePerRoom() throws InterruptedException {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefillWith(pm, cfg(1, 0).meterRegistry(meters).build());
        KVManager d = decode(dm, "tcp", cfg(1, 0).meterRegistry(meters).build(), 0, PAGE_SIZE);
        Transfer t = start(p, pm, d, 300, new int[]{1, 2}, new int[]{3, 4}, 0, 0, 0);
        eventually(() -> recorded(KVFerryMeters.TRANSFER_LATENCY_MS, "prefill") == 1 && recorded(KVFerryMeters.TRANSFER_LATENCY_MS, "decode") == 1,
                "both sides reached Success (recorded by their own threads, nobody polling)");
        for (String role : new String[]{"prefill", "decode"}) {
            assertEquals(0, meters.find(KVFerryMeters.POLL_LAG_SECONDS).tags("role", role).timer().count(), role + ": not polled yet");
        }
        // Both rooms entered Success before this point (each side moves the status, then records the latency).
        long concludedBy = System.nanoTime();
        Thread.sleep(60);
        double waitedMs = (System.nanoTime() - concludedBy) / 1e6;
        assertEquals(KVPoll.Success, t.receiver().poll());
        assertEquals(KVPoll.Success, t.sender().poll());
        assertEquals(KVPoll.Success, t.receiver().poll());
        assertEquals(KVPoll.Success, t.sender().poll());
        for (String role : new String[]{"prefill", "decode"}) {
            Timer lag = meters.find(KVFerryMeters.POLL_LAG_SECONDS).tags("role", role).timer();
            assertEquals(1, lag.count(), role + ": one room, recorded at its first poll only");
            double lagMs = lag.totalTime(TimeUnit.NANOSECONDS) / 1e6;
            assertTrue(lagMs >= waitedMs, role + ": lag " + lagMs + " ms, polled " + waitedMs + " ms after Success at least");
        }
        // Failed counts too: an abort is noticed by the poll that returns it, here at once.
        KVReceiver r = d.createReceiver(addr, 301);
        bootstrap(r, 0);
        r.abort();
        assertEquals(KVPoll.Failed, r.poll());
        assertEquals(2, meters.find(KVFerryMeters.POLL_LAG_SECONDS).tags("role", "decode").timer().count());
        // A room cleared before any poll saw it concluded records nothing.
        KVReceiver unpolled = d.createReceiver(addr, 302);
        unpolled.abort();
        unpolled.clear();
        assertEquals(2, meters.find(KVFerryMeters.POLL_LAG_SECONDS).tags("role", "decode").timer().count());
        t.receiver().clear();
        t.sender().clear();
    }

    @Test
    void roomsInFlightShowWithTheirStateAndAgeAndFailuresByKindAndStage() {
        AtomicLong now = new AtomicLong(1_000_000_000L);
        TestRank pm = rank(), dm = rank();
        KVManager p = prefillWith(pm, cfg(1, 0).meterRegistry(meters).ticker(now::get).bootstrapTimeout(Duration.ofSeconds(10)).build());
        KVManager d = decode(dm, "tcp", cfg(1, 0).meterRegistry(meters).build(), 0, PAGE_SIZE);
        // A room no decode asks for stays Bootstrapping, is listed as in flight, then times out.
        KVSender lonely = p.createSender(addr, 77);
        assertEquals(KVPoll.Bootstrapping, lonely.poll());
        KVManagerInspection in = p.inspect();
        assertEquals(1, in.roomsByState().get("Bootstrapping"));
        assertEquals(77, in.oldestRooms().getFirst().room());
        assertEquals("Bootstrapping", in.oldestRooms().getFirst().state());
        assertEquals(1, meters.find(KVFerryMeters.ROOMS).tags("role", "prefill", "state", "bootstrapping").gauge().value());
        now.addAndGet(Duration.ofSeconds(11).toNanos());
        assertEquals(KVPoll.Failed, lonely.poll());
        assertEquals(1, counter(KVFerryMeters.BOOTSTRAP_FAILED, "role", "prefill", "kind", "bootstrap_timeout"));
        assertEquals(1, counter(KVFerryMeters.TIMEOUTS, "role", "prefill", "stage", "bootstrapping"));
        // An abort on the decode after its metadata went out: both sides count it, by kind.
        KVReceiver r = d.createReceiver(addr, 78);
        bootstrap(r, 0);
        KVSender s = p.createSender(addr, 78);
        r.sendMetadata(new int[]{1, 2}, 0, new int[][]{{0}}, 0);
        await(s::poll, KVPoll.WaitingForInput);
        r.abort();
        assertEquals(KVPoll.Failed, r.poll());
        await(s::poll, KVPoll.Failed);
        assertEquals(1, counter(KVFerryMeters.TRANSFER_FAILED, "role", "decode", "kind", "aborted")); // failed on this thread
        assertEquals(1, counter(KVFerryMeters.ABORTS, "role", "decode"));
        // The prefill's reader failed the room; its telemetry hears of it just after the status changed.
        eventually(() -> counter(KVFerryMeters.TRANSFER_FAILED, "role", "prefill", "kind", "aborted") == 1
                && p.inspect().recentFailures().getFirst().room() == 78, "the prefill recorded the abort");
        KVManagerInspection.Failure last = p.inspect().recentFailures().getFirst();
        assertEquals(78, last.room());
        assertEquals("aborted", last.kind());
        assertEquals("waiting_for_input", last.stage());
        assertTrue(last.peer().contains("127.0.0.1"), last.peer());
        assertEquals(2L, p.inspect().failuresByKind().values().stream().mapToLong(Long::longValue).sum());
        lonely.clear();
        s.clear();
        r.clear();
    }

    @Test
    void aNewlineInAPrefillsFailureReasonCannotForgeALogLine() throws Exception {
        // A prefill rank of our own making: it registers, accepts the decode's HELLO, and answers the room's
        // metadata with a Failed status whose reason carries a line break and a fake failure line.
        TestRank dm = rank();
        String forged = "boom\n[main] WARN io.kvferry.failures - room failed: room=666 kind=forged";
        try (ServerSocketChannel listener = ServerSocketChannel.open()) {
            listener.bind(new InetSocketAddress("127.0.0.1", 0));
            int port = ((InetSocketAddress) listener.getLocalAddress()).getPort();
            try (BootstrapClient c = new BootstrapClient(addr, TOKEN)) {
                c.registerRank(new PrefillRankRegistration(1, 0, 1, 0, 1, 0, 1, 0, 1, 0, "127.0.0.1", port, PAGE_SIZE, dm.args(0, PAGE_SIZE)
                        .kvCacheDtypeStr, null, false, null));
            }
            Thread fake = Thread.ofPlatform().daemon().start(() -> {
                try (ControlConnection conn = new ControlConnection(listener.accept())) {
                    acceptAsPrefill(conn);
                    TransferInfo info = (TransferInfo) conn.read();
                    conn.send(new Status(info.room(), KVPoll.Failed, FailureKind.TRANSFER_ERROR, 0, forged));
                    conn.read(); // until the decode closes
                } catch (Exception ignored) {
                    // the decode hung up
                }
            });
            ByteArrayOutputStream captured = new ByteArrayOutputStream();
            PrintStream original = System.err;
            System.setErr(new PrintStream(captured, true, StandardCharsets.UTF_8));
            try {
                KVManager d = decode(dm, "tcp", cfg(1, 0).meterRegistry(meters).build(), 0, PAGE_SIZE);
                KVReceiver r = d.createReceiver(addr, 5);
                bootstrap(r, 0);
                r.sendMetadata(new int[]{1}, 0, new int[][]{{0}}, 0);
                await(r::poll, KVPoll.Failed);
                eventually(() -> !d.inspect().recentFailures().isEmpty(), "the decode recorded the failure");
                String reason = d.inspect().recentFailures().getFirst().reason();
                assertFalse(reason.contains("\n"), reason);
                assertTrue(reason.contains("boom\\n[main] WARN"), reason);
                String msg = failure(r::failureException);
                assertFalse(msg.contains("\n"), "the exception the scheduler logs is one line too: " + msg);
                d.close();
            } finally {
                System.setErr(original);
            }
            fake.join(5000);
            String log = captured.toString(StandardCharsets.UTF_8);
            assertTrue(log.contains("room failed: room=5 role=decode"), log);
            for (String line : log.split("\n")) {
                assertFalse(line.startsWith("[main] WARN io.kvferry.failures - room failed: room=666"), "forged line: " + line);
            }
            assertEquals(1, counter(KVFerryMeters.TRANSFER_FAILED, "role", "decode", "kind", "transfer_error"));
        }
    }

    /**
     * A decode's instance id is its own configuration's text, sent in its HELLO: a prefill that refuses its
     * transfer info for a room bound to another instance logs it escaped, so a line break in it cannot forge a line.
     */
    @Test
    void aNewlineInADecodesInstanceIdCannotForgeAPrefillLogLine() throws Exception {
        TestRank pm = rank(), am = rank(), bm = rank();
        String forged = "b\n[main] WARN io.kvferry.failures - room failed: room=666 kind=forged";
        KVManager p = prefillWith(pm, cfg(1, 0).meterRegistry(meters).build());
        KVManager a = decode(am, "tcp", cfg(1, 0).instanceId("a").build(), 0, PAGE_SIZE);
        KVManager b = decode(bm, "tcp", cfg(1, 0).instanceId(forged).build(), 0, PAGE_SIZE);
        ByteArrayOutputStream captured = new ByteArrayOutputStream();
        PrintStream original = System.err;
        System.setErr(new PrintStream(captured, true, StandardCharsets.UTF_8));
        try {
            KVReceiver first = a.createReceiver(addr, 9);
            bootstrap(first, 0);
            first.sendMetadata(new int[]{1}, 0, new int[][]{{0}}, 0);
            KVSender s = p.createSender(addr, 9);
            await(s::poll, KVPoll.WaitingForInput); // the room is bound to instance "a"
            KVReceiver second = b.createReceiver(addr, 9);
            bootstrap(second, 0);
            second.sendMetadata(new int[]{2}, 0, new int[][]{{0}}, 0);
            await(second::poll, KVPoll.Failed); // refused: the prefill logged why before it answered
        } finally {
            System.setErr(original);
        }
        String log = captured.toString(StandardCharsets.UTF_8);
        assertTrue(log.contains("refused a transfer info from decode instance b\\n[main] WARN"), log);
        for (String line : log.split("\n")) {
            assertFalse(line.startsWith("[main] WARN io.kvferry.failures - room failed: room=666"), "forged line: " + line);
        }
    }

    /**
     * The transport names a decode offers are HELLO text: the prefill's "registered" line,
     * which says why offers were passed over, quotes them escaped, so a line break in one cannot forge a line; the
     * session id (HELLO text too) shows only as its digest.
     */
    @Test
    void aNewlineInAnOfferedTransportNameCannotForgeAPrefillLogLine() throws Exception {
        TestRank pm = rank(), dm = rank();
        String forged = "x\n[main] WARN io.kvferry.failures - room failed: room=666 kind=forged";
        prefillWith(pm, cfg(1, 0).build());
        RankEndpoint ep = new BootstrapClient(addr, TOKEN).fetchRankEndpoint(0, 0, 0, 0);
        ByteArrayOutputStream captured = new ByteArrayOutputStream();
        PrintStream original = System.err;
        System.setErr(new PrintStream(captured, true, StandardCharsets.UTF_8));
        try (ControlConnection c = ControlConnection.connect(new InetSocketAddress(ep.rankIp(), ep.rankPort()), Duration.ofSeconds(5))) {
            Challenge ch = (Challenge) c.read();
            Hello plain = decodeHello("sess\nion", RegisteredMemory.from(dm.args(0, PAGE_SIZE)).describe());
            Hello h = new Hello(plain.sessionId(), plain.instanceId(), plain.fingerprint(), plain.dataPath(), plain.engineRank(),
                    plain.attnTpSize(), plain.ppRank(), plain.flags(), plain.checksum(), plain.memory(),
                    List.of(new TransportOffer(forged, new byte[0])), plain.decodeNonce(), null, null);
            c.send(h.signed(Handshake.key(TOKEN), ch.nonce()));
            assertTrue(((HelloAck) c.read()).accepted());
            eventually(() -> captured.toString(StandardCharsets.UTF_8).contains("registered; data path tcp"), "the registered line");
        } finally {
            System.setErr(original);
        }
        String log = captured.toString(StandardCharsets.UTF_8);
        assertTrue(log.contains("decode " + LogSafe.session("sess\nion") + " ("), log);
        assertFalse(log.contains("sess\\nion"), "the session id itself is never logged: " + log);
        assertTrue(log.contains("(x\\n[main] WARN"), log);
        for (String line : log.split("\n")) {
            assertFalse(line.startsWith("[main] WARN io.kvferry.failures - room failed: room=666"), "forged line: " + line);
        }
    }
}
