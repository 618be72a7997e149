package io.kvferry.transport.tcp;

import com.sun.management.ThreadMXBean;
import io.kvferry.api.ChecksumMode;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVPoll;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.plan.CopyPlan;
import io.kvferry.plan.HeadSlice;
import io.kvferry.plan.PageRuns;
import io.kvferry.plan.TransferPlanner;
import io.kvferry.protocol.ControlMessage;
import io.kvferry.protocol.FrameCodec;
import io.kvferry.protocol.Region;
import io.kvferry.protocol.Status;
import io.kvferry.protocol.WriteHeader;
import io.kvferry.protocol.WriteList;
import io.kvferry.transport.ControlConnection;
import io.kvferry.transport.Transports;
import io.kvferry.transport.WriteRejectedException;
import io.kvferry.transport.WriteSink;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.management.ManagementFactory;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.ServerSocketChannel;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BooleanSupplier;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * tcp's data path over a real loopback connection: plans leave as WRITE_LISTs (and strided ops as
 * WRITEs) with the STATUS in the same syscall, land byte-exact through a gate with exact counts,
 * carry CRCs when asked, and neither side allocates per frame.
 */
@Timeout(60)
class TcpFramesTest {
    private static final int PAGES = 4096;
    private static final long PAGE = 256;
    private static final int BUFFERS = 3;
    private final Arena arena = Arena.ofShared();
    private ServerSocketChannel server;
    private ControlConnection client, peer;

    @BeforeEach
    void connect() throws IOException {
        server = ServerSocketChannel.open();
        server.bind(new InetSocketAddress("127.0.0.1", 0));
        client = ControlConnection.connect((InetSocketAddress) server.getLocalAddress(), Duration.ofSeconds(5));
        peer = new ControlConnection(server.accept());
    }

    @AfterEach
    void close() throws IOException {
        client.close();
        peer.close();
        server.close();
        arena.close();
    }

    private RegisteredMemory memory(int seed) {
        KVArgs a = new KVArgs();
        a.pageSize = 1;
        for (int b = 0; b < BUFFERS; b++) {
            MemorySegment s = arena.allocate(PAGES * PAGE);
            if (seed != 0) for (long i = 0; i < s.byteSize(); i += 8) s.set(ValueLayout.JAVA_LONG_UNALIGNED, i, i * 31 + b * 7 + seed);
            a.addKvBuffer(s, PAGE);
        }
        MemorySegment aux = arena.allocate(4 * 64);
        if (seed != 0) aux.fill((byte) seed);
        a.addAuxBuffer(aux, 64);
        return RegisteredMemory.from(a);
    }

    /** A gate that admits everything into {@code dst}, counting what landed. */
    private static final class OpenGate implements WriteSink {
        final RegisteredMemory dst;
        final AtomicLong landed = new AtomicLong();
        int lists, writes;

        OpenGate(RegisteredMemory dst) {
            this.dst = dst;
        }

        @Override
        public void begin(Landing into, long room, Region region, int component, int buffer, long offset, long span, long payload,
                          long piece, long stride) {
            writes++;
            into.admit(this, 0, dst.segmentOrNull(region, component, buffer), offset, span, payload);
        }

        @Override
        public void beginList(Landing into, WriteList list) {
            lists++;
            for (int i = 0; i < list.count(); i++) {
                into.pieceBuffers()[i] = dst.segmentOrNull(list.region(i), list.component(i), list.buffer(i));
            }
            into.admitList(this, 0, list.payloadLength());
        }

        @Override
        public void end(Landing landing, boolean ok) {
            if (ok) landed.addAndGet(landing.payload());
        }
    }

    private static int[] shuffled(int n, long seed) {
        List<Integer> l = new ArrayList<>();
        for (int i = 0; i < n; i++) l.add(i);
        Collections.shuffle(l, new Random(seed));
        return l.stream().mapToInt(Integer::intValue).toArray();
    }

    /** A fragmented chunk: every page its own run, on both sides, so every op is one small piece. */
    private static CopyPlan fragmentedPlan(int[] src, int[] dst, int from, int n, boolean sorted) {
        CopyPlan plan = CopyPlan.reusable();
        PageRuns runs = PageRuns.reusable().regroup(src, from, dst, from, n);
        if (sorted) runs.sortByDestination();
        TransferPlanner.appendKv(plan, runs, new long[] {PAGE, PAGE, PAGE}, null);
        TransferPlanner.appendAux(plan, 1, 2, new long[] {64});
        return plan;
    }

    private static ByteBuffer successFrame(long room, long bytes) {
        ByteBuffer b = ByteBuffer.allocateDirect(FrameCodec.SUCCESS_STATUS_FRAME_BYTES).order(ByteOrder.LITTLE_ENDIAN);
        FrameCodec.putSuccessStatusFrame(b, room, 3, bytes, 0, false);
        return b.flip();
    }

    /**
     * Runs a sender on its own thread; if it fails, the connection is closed so the reader fails at
     * once instead of waiting for frames that will never come.
     */
    private Thread inBackground(IoAction sender) {
        return Thread.ofPlatform().start(() -> {
            try {
                sender.run();
            } catch (IOException | RuntimeException e) {
                client.close();
                throw e instanceof IOException io ? new UncheckedIOException(io) : (RuntimeException) e;
            }
        });
    }

    /** Reads frames and lands them until a STATUS arrives; returns it. */
    private static Status landUntilStatus(ControlConnection peer, TcpLander lander) throws IOException {
        while (true) {
            ControlMessage m = peer.read();
            switch (m) {
                case WriteList l -> assertNull(lander.land(l));
                case WriteHeader w -> assertNull(lander.land(w));
                case Status s -> {
                    return s;
                }
                default -> throw new AssertionError("unexpected " + m);
            }
        }
    }

    @Test
    void aFragmentedPlanTravelsAsFewPieceListsWithItsStatusAndLandsByteExact() throws Exception {
        RegisteredMemory src = memory(5), dst = memory(0);
        int[] srcPages = shuffled(PAGES, 1), dstPages = shuffled(PAGES, 2);
        OpenGate gate = new OpenGate(dst);
        TcpDestination tcp = (TcpDestination) Transports.fallback().openDestination(dst, 0, null, gate, why -> { });
        TcpLander lander = tcp.lander(peer, new WriteSink.Landing("prefill", ChecksumMode.OFF));
        TcpFrameWriter writer = new TcpFrameWriter(client);
        CopyPlan plan = fragmentedPlan(srcPages, dstPages, 0, 2000, true);
        long bytes = plan.totalBytes();
        Thread sender = inBackground(() -> writer.writePlan(7, plan, src, () -> false, ChecksumMode.OFF, successFrame(7, bytes)));
        Status s = landUntilStatus(peer, lander);
        sender.join();
        assertEquals(Status.success(7, 3, bytes, 0, false), s, "the STATUS follows the bytes it reports");
        assertEquals(bytes, gate.landed.get(), "every byte counted, once");
        assertEquals(0, gate.writes, "contiguous ops travel in lists only");
        // 6001 pieces, one buffer after another ascending, at most MAX_PIECES per list, the aux row in the last list.
        assertEquals((6001 + WriteList.MAX_PIECES - 1) / WriteList.MAX_PIECES, gate.lists, "pieces sorted by destination pack into full lists");
        for (int i = 0; i < 2000; i++) {
            for (int b = 0; b < BUFFERS; b++) {
                MemorySegment from = src.slice(Region.KV, 0, b, srcPages[i] * PAGE, PAGE);
                assertEquals(-1, from.mismatch(dst.slice(Region.KV, 0, b, dstPages[i] * PAGE, PAGE)), "page " + i + " of buffer " + b);
            }
        }
        assertEquals(-1, src.slice(Region.AUX, 0, 0, 64, 64).mismatch(dst.slice(Region.AUX, 0, 0, 128, 64)));
    }

    @Test
    void largeOpsAreCutIntoListsOfAtMostTheListPayload() throws Exception {
        RegisteredMemory src = memory(11), dst = memory(0);
        // 4000 pages in 4 runs of 1000 (256,000 bytes per op) per buffer, ascending at the destination.
        int[] srcPages = new int[4000], dstPages = new int[4000];
        for (int i = 0; i < 4000; i++) {
            srcPages[i] = i;
            dstPages[i] = i + i / 1000;
        }
        CopyPlan plan = CopyPlan.reusable();
        TransferPlanner.appendKv(plan, PageRuns.reusable().regroup(srcPages, 0, dstPages, 0, 4000), new long[] {PAGE, PAGE, PAGE}, null);
        assertEquals(12, plan.size());
        OpenGate gate = new OpenGate(dst);
        TcpLander lander = new TcpLander(peer, gate, new WriteSink.Landing("prefill", ChecksumMode.OFF));
        Thread sender = inBackground(() -> new TcpFrameWriter(client).writePlan(9, plan, src, () -> false, ChecksumMode.OFF,
                successFrame(9, 0)));
        landUntilStatus(peer, lander);
        sender.join();
        assertEquals(plan.totalBytes(), gate.landed.get());
        // Four 256,000-byte ops fit under the 1 MiB cut, a fifth would not: 12 ops in 3 lists (one list under a 4 MiB cut).
        assertEquals(3, gate.lists, "lists are cut at " + TcpFrameWriter.LIST_PAYLOAD_BYTES + " bytes of payload");
        for (int b = 0; b < BUFFERS; b++) {
            assertEquals(-1, src.slice(Region.KV, 0, b, 0, 1000 * PAGE).mismatch(dst.slice(Region.KV, 0, b, 0, 1000 * PAGE)));
            assertEquals(-1, src.slice(Region.KV, 0, b, 3000 * PAGE, 1000 * PAGE).mismatch(dst.slice(Region.KV, 0, b, 3003 * PAGE, 1000 * PAGE)));
        }
    }

    @Test
    void piecesOutOfDestinationOrderStartANewListSoNoListEverOverlaps() throws Exception {
        RegisteredMemory src = memory(9), dst = memory(0);
        int[] srcPages = shuffled(PAGES, 3), dstPages = shuffled(PAGES, 4);
        OpenGate gate = new OpenGate(dst);
        TcpLander lander = new TcpLander(peer, gate, new WriteSink.Landing("prefill", ChecksumMode.OFF));
        CopyPlan plan = fragmentedPlan(srcPages, dstPages, 0, 200, false); // runs in source order
        Thread sender = inBackground(() -> new TcpFrameWriter(client).writePlan(8, plan, src, () -> false, ChecksumMode.OFF,
                successFrame(8, 0)));
        landUntilStatus(peer, lander);
        sender.join();
        assertEquals(plan.totalBytes(), gate.landed.get());
        assertTrue(gate.lists > 3 && gate.lists < plan.size(), gate.lists + " lists for " + plan.size() + " ops in random order");
        for (int i = 0; i < 200; i++) {
            assertEquals(-1, src.slice(Region.KV, 0, 1, srcPages[i] * PAGE, PAGE).mismatch(dst.slice(Region.KV, 0, 1, dstPages[i] * PAGE, PAGE)));
        }
    }

    @Test
    void checksummedListsCarryTheirPayloadsCrcAndABadOneIsCaught() throws Exception {
        RegisteredMemory src = memory(3), dst = memory(0);
        OpenGate gate = new OpenGate(dst);
        TcpLander lander = new TcpLander(peer, gate, new WriteSink.Landing("prefill", ChecksumMode.FULL));
        CopyPlan plan = fragmentedPlan(shuffled(PAGES, 5), shuffled(PAGES, 6), 0, 50, true);
        new TcpFrameWriter(client).writePlan(9, plan, src, () -> false, ChecksumMode.FULL, null);
        WriteList l = assertInstanceOf(WriteList.class, peer.read());
        assertTrue(l.hasCrc(), "a checksum=full link puts a CRC in every list");
        assertNull(lander.land(l));
        // The same list with one CRC bit flipped: the bytes land, the room is told.
        WriteList bad = WriteList.builder(9, 1).add(Region.KV, 0, 0, 0, PAGE).withCrc(0x1234);
        ByteBuffer[] v = {FrameCodec.encode(bad), src.slice(Region.KV, 0, 0, 0, PAGE).asByteBuffer()};
        client.writeFrames(v, 0, 2, v[0].remaining() + PAGE);
        WriteRejectedException e = lander.land(assertInstanceOf(WriteList.class, peer.read()));
        assertTrue(e != null && e.getMessage().contains("checksum mismatch on a WRITE_LIST of room 9"), String.valueOf(e));
        // A list without a CRC on a full link is refused and its payload skipped: the stream stays in step.
        WriteList bare = WriteList.builder(9, 1).add(Region.KV, 0, 0, 0, PAGE);
        v[0] = FrameCodec.encode(bare);
        v[1] = src.slice(Region.KV, 0, 0, 0, PAGE).asByteBuffer();
        client.writeFrames(v, 0, 2, v[0].remaining() + PAGE);
        client.send(new Status(9, KVPoll.Success, 3, ""));
        e = lander.land(assertInstanceOf(WriteList.class, peer.read()));
        assertTrue(e != null && e.getMessage().contains("carries no checksum on a checksum=full link"), String.valueOf(e));
        assertInstanceOf(Status.class, peer.read());
    }

    @Test
    void aStridedOpTravelsAsOneWriteAndItsPiecesLandAtTheirStride() throws Exception {
        RegisteredMemory src = memory(7), dst = memory(0);
        OpenGate gate = new OpenGate(dst);
        TcpLander lander = new TcpLander(peer, gate, new WriteSink.Landing("prefill", ChecksumMode.FULL));
        // Page size 1, 4 heads of 64 bytes per 256-byte token slot; the slice moves heads 1-2 to heads 0-1.
        HeadSlice[] slices = new HeadSlice[BUFFERS];
        for (int b = 0; b < BUFFERS; b++) slices[b] = new HeadSlice(1, 0, 2, 64, PAGE, PAGE);
        CopyPlan plan = TransferPlanner.planKvSliced(new int[] {4, 5, 9}, new int[] {1, 2, 3}, new long[] {PAGE, PAGE, PAGE},
                new long[] {PAGE, PAGE, PAGE}, 1, slices);
        new TcpFrameWriter(client).writePlan(10, plan, src, () -> false, ChecksumMode.FULL, successFrame(10, plan.totalBytes()));
        assertEquals(plan.totalBytes(), landUntilStatus(peer, lander).bytes());
        // Per buffer: pages 4-5 are one strided op (two tokens), page 9 alone is one contiguous piece.
        assertEquals(BUFFERS, gate.writes, "each strided op is one WRITE");
        assertEquals(BUFFERS, gate.lists, "a one-token slice is contiguous and travels in a list");
        assertEquals(-1, src.slice(Region.KV, 0, 2, 4 * PAGE + 64, 128).mismatch(dst.slice(Region.KV, 0, 2, PAGE, 128)));
        assertEquals(-1, src.slice(Region.KV, 0, 2, 9 * PAGE + 64, 128).mismatch(dst.slice(Region.KV, 0, 2, 3 * PAGE, 128)));
    }

    /** Bytes allocated by the current thread while running {@code r}, or -1 when the JVM cannot say. */
    static long allocatedBy(IoAction r) throws IOException {
        if (!(ManagementFactory.getThreadMXBean() instanceof ThreadMXBean mx)
                || !mx.isThreadAllocatedMemorySupported() || !mx.isThreadAllocatedMemoryEnabled()) {
            r.run();
            return -1;
        }
        long before = mx.getCurrentThreadAllocatedBytes();
        r.run();
        return mx.getCurrentThreadAllocatedBytes() - before;
    }

    interface IoAction {
        void run() throws IOException;
    }

    /** The decode's hot path: reading a WRITE frame, admitting it and landing its payload allocates nothing per frame. */
    @Test
    void landingWriteFramesAllocatesNothingPerFrame() throws Exception {
        int frames = 12000, measured = 2000;
        MemorySegment one = arena.allocate(PAGE);
        for (int i = 0; i < PAGE; i++) one.set(ValueLayout.JAVA_BYTE, i, (byte) (i + 1));
        RegisteredMemory dst = memory(0);
        TcpFrameWriter writer = new TcpFrameWriter(client);
        Thread sender = inBackground(() -> {
            for (int f = 0; f < frames; f++) writer.write(f, Region.KV, 0, 0, (f % 64) * PAGE, one);
        });
        TcpLander lander = new TcpLander(peer, new OpenGate(dst), new WriteSink.Landing("peer", null));
        IoAction landSome = () -> {
            for (int f = 0; f < measured; f++) assertNull(lander.land((WriteHeader) peer.read()));
        };
        for (int round = 0; round < 5; round++) landSome.run(); // warm-up: views made, code compiled
        long bytes = allocatedBy(landSome);
        sender.join();
        assertEquals(-1, dst.slice(Region.KV, 0, 0, 63 * PAGE, PAGE).mismatch(one), "the last page landed intact");
        if (bytes >= 0) assertTrue(bytes < measured * 16L, bytes + " bytes allocated for " + measured + " WRITE frames");
    }

    /**
     * Per list, what the JDK's socket calls allocate besides the per-buffer releasers (a list may
     * take a few partial writes or reads); a kvferry object per piece (768 per list here) would be
     * far above it.
     */
    private static final long PER_CALL_SLACK = 256;

    /**
     * What the JDK allocates per segment-backed buffer handed to one vectored socket call (a
     * releaser it links per buffer, sun.nio.ch.IOUtil): measured here, on this JVM, so the tests
     * below can hold kvferry's own allocation to zero without counting the JDK's.
     */
    private long jdkBytesPerVectoredBuffer() throws IOException {
        MemorySegment s = arena.allocate(64L * 8);
        ByteBuffer[] v = new ByteBuffer[64];
        for (int i = 0; i < 64; i++) v[i] = s.asSlice(i * 8L, 8).asByteBuffer();
        MemorySegment sink = arena.allocate(64L * 8);
        ByteBuffer in = sink.asByteBuffer();
        IoAction once = () -> {
            for (ByteBuffer b : v) b.clear();
            client.writeFrames(v, 0, 64, 64L * 8);
            in.clear();
            peer.readPayload(in);
        };
        for (int i = 0; i < 200; i++) once.run();
        return Math.max(0, allocatedBy(once)) / 64;
    }

    /**
     * WRITE_LIST both ways: planning a fragmented chunk into a reused plan, sending it as lists and
     * landing them through the gate allocate nothing per list or piece on either side, beyond what
     * the JDK's vectored socket calls allocate per buffer (counted by the connection).
     */
    @Test
    void sendingAndLandingPieceListsAllocatesNothingPerList() throws Exception {
        long jdk = jdkBytesPerVectoredBuffer();
        RegisteredMemory src = memory(11), dst = memory(0);
        int[] srcPages = shuffled(PAGES, 7), dstPages = shuffled(PAGES, 8);
        int rounds = 40, chunk = 256;
        TcpFrameWriter writer = new TcpFrameWriter(client);
        CopyPlan plan = CopyPlan.reusable();
        PageRuns runs = PageRuns.reusable();
        long[] sender = {-1, 0};
        long[] items = {PAGE, PAGE, PAGE};
        BooleanSupplier never = () -> false;
        Thread t = inBackground(() -> {
            IoAction send = () -> {
                for (int r = 0; r < rounds; r++) {
                    plan.reset();
                    int from = (r * chunk) % PAGES;
                    TransferPlanner.appendKv(plan, runs.regroup(srcPages, from, dstPages, from, chunk).sortByDestination(), items, null);
                    writer.writePlan(r, plan, src, never, ChecksumMode.FULL, null);
                }
            };
            send.run(); // warm-up: views, arrays and code
            long before = client.vectoredWritten();
            sender[0] = allocatedBy(send);
            sender[1] = client.vectoredWritten() - before;
        });
        OpenGate gate = new OpenGate(dst);
        TcpLander lander = new TcpLander(peer, gate, new WriteSink.Landing("peer", ChecksumMode.FULL));
        long perPhase = (long) rounds * chunk * BUFFERS * PAGE;
        IoAction landRound = () -> {
            long landed = gate.landed.get();
            while (gate.landed.get() - landed < perPhase) assertNull(lander.land((WriteList) peer.read()));
        };
        landRound.run();
        long before = peer.vectoredRead();
        long landerBytes = allocatedBy(landRound);
        long landerJdk = jdk * (peer.vectoredRead() - before);
        t.join();
        assertEquals(2L * rounds * chunk * BUFFERS * PAGE, gate.landed.get());
        if (landerBytes >= 0) {
            assertTrue(landerBytes <= landerJdk + PER_CALL_SLACK * rounds, landerBytes + " bytes allocated landing " + rounds + " lists, of which the JDK's "
                    + landerJdk);
        }
        if (sender[0] >= 0) {
            long senderJdk = jdk * sender[1];
            assertTrue(sender[0] <= senderJdk + PER_CALL_SLACK * rounds, sender[0] + " bytes allocated planning and sending " + rounds
                    + " lists, of which the JDK's " + senderJdk);
        }
    }
}
