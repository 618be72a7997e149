package io.kvferry.transport;

import io.kvferry.api.KVArgs;
import io.kvferry.api.KVFerrySettings;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.plan.CopyPlan;
import io.kvferry.plan.TransferPlanner;
import io.kvferry.protocol.Region;
import io.kvferry.protocol.WriteList;
import io.kvferry.transport.inproc.InprocTransportProvider;
import io.kvferry.transport.tcp.TcpTransportProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Every transport is a provider; backends choose among them by type, and inproc lands through the gate it is handed. */
class TransportProvidersTest {
    private static final KVFerrySettings SETTINGS = KVFerrySettings.defaults();
    private final Arena arena = Arena.ofConfined();

    @AfterEach
    void close() {
        arena.close();
    }

    @Test
    void tcpAndInprocAreProvidersAndTcpIsTheFallback() {
        assertInstanceOf(TcpTransportProvider.class, Transports.get("tcp"));
        assertInstanceOf(InprocTransportProvider.class, Transports.get("inproc"));
        assertEquals("tcp", Transports.fallback().name());
        List<String> all = Transports.all().stream().map(TransportProvider::name).toList();
        assertEquals("tcp", all.get(all.size() - 1), "tcp comes last: " + all);
        assertTrue(all.contains("shm"), all.toString());
        List<String> auto = Transports.offeredByAuto().stream().map(TransportProvider::name).toList();
        assertFalse(auto.contains("tcp") || auto.contains("inproc"), auto.toString());
        assertTrue(auto.contains("shm"), auto.toString());
    }

    @Test
    void backendsSayWhatTheyOfferWithoutComparingNames() {
        assertEquals(List.of(), Backend.of("tcp").offeredTransports());
        assertEquals(List.of(Transports.get("inproc")), Backend.of("inproc").offeredTransports());
        assertEquals(List.of(Transports.get("shm")), Backend.of("shm").offeredTransports());
        assertEquals(Transports.offeredByAuto(), Backend.of("auto").offeredTransports());
        assertTrue(Backend.of("auto").isAuto());
        assertEquals(Backend.Kind.FAKE, Backend.of("fake").kind());
        assertEquals(List.of(), Backend.of("fake").offeredTransports());
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Backend.of("rdma"));
        assertTrue(e.getMessage().contains("unknown transfer backend 'rdma'") && e.getMessage().contains("tcp"), e.getMessage());
        assertEquals("tcp", Backend.names().get(0));
        assertTrue(Backend.names().containsAll(List.of("inproc", "shm", "auto", "fake")), Backend.names().toString());
    }

    @Test
    void tcpNeedsTheLinksControlConnection() {
        SourceTransport s = Transports.fallback().openSource(null, 0, SETTINGS);
        assertThrows(TransportUnavailableException.class, () -> s.connect(new byte[0], null, PeerLink.named("d")));
    }

    /** A gate that records what it let through and refuses writes to room 13. */
    private static final class RecordingGate implements WriteSink {
        final MemorySegment pool;
        final List<String> landed = new ArrayList<>();

        RecordingGate(MemorySegment pool) {
            this.pool = pool;
        }

        @Override
        public void begin(Landing into, long room, Region region, int component, int buffer, long offset, long span, long payload,
                          long piece, long stride)
                throws WriteRejectedException {
            if (room == 13) throw new WriteRejectedException("room 13 is not ready", false);
            into.admit(room, 0, pool, offset, span, payload);
        }

        @Override
        public void beginList(Landing into, WriteList list) throws WriteRejectedException {
            if (list.room() == 13) throw new WriteRejectedException("room 13 is not ready", false);
            for (int i = 0; i < list.count(); i++) into.pieceBuffers()[i] = pool;
            into.admitList(list.room(), 0, list.payloadLength());
        }

        @Override
        public void end(Landing landing, boolean ok) {
            landed.add(landing.span() + (ok ? " landed" : " failed"));
        }
    }

    private RegisteredMemory memory(MemorySegment pool) {
        KVArgs a = new KVArgs();
        a.pageSize = 16;
        a.addKvBuffer(pool, 256);
        return RegisteredMemory.from(a);
    }

    @Test
    void inprocLandsThroughTheGateItWasHandedAndOnlyInThisJvm() throws Exception {
        MemorySegment src = arena.allocate(1024), dst = arena.allocate(1024);
        for (int i = 0; i < 1024; i++) src.set(ValueLayout.JAVA_BYTE, i, (byte) i);
        RecordingGate gate = new RecordingGate(dst);
        TransportProvider inproc = Transports.get("inproc");
        RegisteredMemory dstMemory = memory(dst), srcMemory = memory(src);
        try (DestinationTransport d = inproc.openDestination(dstMemory, 0, SETTINGS, gate, why -> { })) {
            LinkOffer offer = d.offer("p");
            assertFalse(offer.oneSided(), "inproc writes pass the decode's gate");
            assertTrue(offer.revoke(Duration.ZERO));
            SourceTransport s = inproc.openSource(srcMemory, 0, SETTINGS);
            DataPath path = s.connect(offer.blob(), dstMemory.describe(), PeerLink.named("d"));
            assertFalse(path.oneSided());
            CopyPlan plan = TransferPlanner.planKv(new int[] {0, 1}, new int[] {2, 3}, new long[] {256});
            path.write(7, plan, srcMemory, () -> false);
            assertEquals(List.of("512 landed"), gate.landed);
            assertEquals(src.asSlice(0, 512).mismatch(dst.asSlice(512, 512)), -1L, "pages 0-1 landed in pages 2-3");
            IOException refused = assertThrows(IOException.class, () -> path.write(13, plan, srcMemory, () -> false));
            assertTrue(refused.getMessage().contains("room 13 is not ready"), refused.getMessage());
            assertNull(path.connectionFor(7), "inproc status goes on the control connection");
            assertFalse(path.attachStripe(1, null));
            byte[] blob = offer.blob();
            d.close();
            TransportUnavailableException gone = assertThrows(TransportUnavailableException.class,
                    () -> s.connect(blob, dstMemory.describe(), PeerLink.named("d")));
            assertTrue(gone.getMessage().contains("same JVM"), gone.getMessage());
        }
        SourceTransport s = inproc.openSource(srcMemory, 0, SETTINGS);
        assertThrows(TransportUnavailableException.class,
                () -> s.connect("not-a-key".getBytes(), dstMemory.describe(), PeerLink.named("elsewhere")));
    }
}
