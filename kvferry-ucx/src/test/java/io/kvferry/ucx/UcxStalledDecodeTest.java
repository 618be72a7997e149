package io.kvferry.ucx;

import io.kvferry.api.KVArgs;
import io.kvferry.api.KVFerrySettings;
import io.kvferry.api.Knobs;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.plan.CopyPlan;
import io.kvferry.plan.TransferPlanner;
import io.kvferry.protocol.Region;
import io.kvferry.transport.DataPath;
import io.kvferry.transport.DestinationTransport;
import io.kvferry.transport.LinkOffer;
import io.kvferry.transport.PeerLink;
import io.kvferry.transport.SourceTransport;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.openucx.jucx.ucp.UcpContext;
import org.openucx.jucx.ucp.UcpMemMapParams;
import org.openucx.jucx.ucp.UcpMemory;
import org.openucx.jucx.ucp.UcpParams;
import org.openucx.jucx.ucp.UcpWorker;
import org.openucx.jucx.ucp.UcpWorkerParams;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * A decode whose UCX worker stops progressing behind a healthy control connection (over UCX's tcp
 * transport, as this module's tests run, a put is confirmed only once the decode's worker has
 * received it). The prefill's engine closes that link after the write-stall timeout, failing its
 * write with a reason and reporting the path broken (so the manager takes the link down), and the
 * stalled link holds only its own window: another decode's writes land meanwhile.
 */
@Timeout(120)
class UcxStalledDecodeTest {
    private static final long PAGE = 4096;
    private static final int PAGES = 64;
    private static final long STALL_MS = 3000;

    private final Arena arena = Arena.ofShared();
    private final List<AutoCloseable> closeables = new ArrayList<>();

    @BeforeAll
    static void requireUcx() {
        String reason = new UcxTransportProvider().unavailableReason(KVFerrySettings.fromEnvironment());
        if (reason != null && "1".equals(System.getenv("KVFERRY_REQUIRE_UCX"))) fail("KVFERRY_REQUIRE_UCX=1 but UCX is unavailable: " + reason);
        assumeTrue(reason == null, "UCX tests skipped: " + reason);
    }

    @AfterEach
    void close() throws Exception {
        for (int i = closeables.size() - 1; i >= 0; i--) closeables.get(i).close();
        arena.close();
    }

    private RegisteredMemory memory(int seed) {
        KVArgs a = new KVArgs();
        a.pageSize = 16;
        MemorySegment kv = arena.allocate(PAGE * PAGES, 4096);
        for (long i = 0; i < kv.byteSize(); i += 8) kv.set(ValueLayout.JAVA_LONG, i, i * 31 + seed);
        a.addKvBuffer(kv, PAGE);
        return RegisteredMemory.from(a);
    }

    private static CopyPlan pages(int from, int to, int count) {
        int[] s = new int[count], d = new int[count];
        for (int i = 0; i < count; i++) {
            s[i] = from + i;
            d[i] = to + i;
        }
        return TransferPlanner.planKv(s, d, new long[] {PAGE});
    }

    /** Runs one write on another thread; completes with what it threw, or null once it landed. */
    private static CompletableFuture<Throwable> writeInBackground(DataPath path, long room, CopyPlan plan, RegisteredMemory src) {
        return CompletableFuture.supplyAsync(() -> {
            try {
                path.write(room, plan, src, () -> false);
                return null;
            } catch (Throwable t) {
                return t;
            }
        });
    }

    private static boolean landed(RegisteredMemory src, RegisteredMemory dst, int from, int to, int count) {
        MemorySegment a = src.slice(Region.KV, 0, 0, from * PAGE, count * PAGE), b = dst.slice(Region.KV, 0, 0, to * PAGE, count * PAGE);
        return a.mismatch(b) == -1;
    }

    /**
     * A decode built here rather than by {@link UcxDestination}, so the test decides when its worker
     * progresses: its own context, its KV buffer registered, one worker whose address and rkey make
     * the offer a real decode would send.
     */
    private static final class StallableDecode implements AutoCloseable {
        final UcpContext context = new UcpContext(new UcpParams().requestRmaFeature());
        final UcpWorker worker = context.newWorker(new UcpWorkerParams());
        final UcpMemory registration;
        final byte[] offer;
        volatile boolean progressing = true;
        volatile boolean stopping;
        final Thread thread;

        StallableDecode(RegisteredMemory memory) {
            MemorySegment kv = memory.segmentOrNull(Region.KV, 0, 0);
            registration = context.memoryMap(new UcpMemMapParams().setAddress(kv.address()).setLength(kv.byteSize()));
            UcxOffer.Entry entry = new UcxOffer.Entry(Region.KV, 0, 0, MemoryType.HOST, kv.address(), kv.byteSize(),
                    UcxDestination.bytes(registration.getRemoteKeyBuffer()));
            offer = new UcxOffer(UcxRuntime.major(), UcxRuntime.minor(), UcxDestination.bytes(worker.getAddress()), List.of(entry)).encode();
            thread = Thread.ofPlatform().daemon().name("stallable-decode").start(() -> {
                while (!stopping) {
                    try {
                        if (!progressing || worker.progress() == 0) LockSupport.parkNanos(20_000);
                    } catch (Exception e) {
                        LockSupport.parkNanos(1_000_000); // the prefill closed its endpoint; keep serving until closed
                    }
                }
            });
        }

        @Override
        public void close() throws Exception {
            stopping = true;
            thread.join();
            worker.close();
            registration.deregister();
            context.close();
        }
    }

    @Test
    void aDecodeWhoseWorkerStopsIsCutAfterTheStallTimeoutWhileOtherLinksWriteOn() throws Exception {
        RegisteredMemory src = memory(1), stuckDst = memory(2), healthyDst = memory(3);
        // One batch per link in flight: before the window was per link, the stuck link's batch held every link's writes.
        KVFerrySettings settings = KVFerrySettings.fromEnvironment()
                .with(Knobs.WRITE_STALL_TIMEOUT_MS, Long.toString(STALL_MS))
                .with(UcxSettings.WINDOW, "1");
        UcxTransportProvider provider = new UcxTransportProvider();
        SourceTransport source = provider.openSource(src, 0, settings);
        closeables.add(source);
        DestinationTransport healthyDecode = provider.openDestination(healthyDst, 0, settings, null, why -> { });
        assertNotNull(healthyDecode);
        closeables.add(healthyDecode);
        LinkOffer healthyOffer = healthyDecode.offer("prefill");
        closeables.add(healthyOffer);
        StallableDecode stuck = new StallableDecode(stuckDst);
        closeables.add(stuck);

        DataPath stuckPath = source.connect(stuck.offer, stuckDst.describe(), PeerLink.named("stuck"));
        closeables.add(stuckPath::close);
        DataPath healthy = source.connect(healthyOffer.blob(), healthyDst.describe(), PeerLink.named("healthy"));
        closeables.add(healthy::close);

        stuckPath.write(1, pages(0, 10, 4), src, () -> false);
        assertTrue(landed(src, stuckDst, 0, 10, 4), "lands while the decode progresses");

        stuck.progressing = false;
        // Measured from before the write starts: its batch is posted after this, so the cut comes STALL_MS after it at
        // least, however long what follows takes. It was measured from after the healthy write below, plus an assumed
        // 200 ms: a healthy write that took over 500 ms (a loaded machine) made a cut at its proper time look early.
        long t0 = System.nanoTime();
        CompletableFuture<Throwable> stalled = writeInBackground(stuckPath, 2, pages(4, 20, 8), src);
        Thread.sleep(200); // its batch is posted (and unconfirmed) by now
        assertFalse(stalled.isDone(), "the write to a decode that stopped progressing cannot complete");

        healthy.write(3, pages(0, 30, 16), src, () -> false);
        assertTrue(landed(src, healthyDst, 0, 30, 16));
        assertFalse(stalled.isDone(), "the healthy decode's write landed while the stalled write still waited for its bound");
        assertNull(healthy.brokenReason());

        Throwable failure = stalled.get(60, TimeUnit.SECONDS);
        long waitedMs = (System.nanoTime() - t0) / 1_000_000;
        assertInstanceOf(IOException.class, failure, String.valueOf(failure));
        assertTrue(failure.getMessage().contains("room 2") && failure.getMessage().contains("was confirmed for " + STALL_MS + " ms"),
                failure.getMessage());
        assertTrue(waitedMs >= STALL_MS - 500, "cut only after the stall timeout, not before: " + waitedMs + " ms");
        String broken = stuckPath.brokenReason();
        assertNotNull(broken, "the stalled path reports itself broken, so the manager takes its link down");
        assertTrue(broken.contains("no UCX put to decode stuck"), broken);
        IOException later = assertThrows(IOException.class, () -> stuckPath.write(4, pages(0, 0, 1), src, () -> false));
        assertTrue(later.getMessage().contains("was confirmed for"), later.getMessage());

        healthy.write(5, pages(16, 50, 8), src, () -> false);
        assertTrue(landed(src, healthyDst, 16, 50, 8), "the healthy link is untouched");
        assertNull(healthy.brokenReason());
    }

    @Test
    void aSlowButProgressingDecodeIsNotCut() throws Exception {
        // Confirmations that keep coming, however slowly, reset the clock: 20 writes over ~2x the stall timeout. Each pause
        // is a tenth of the timeout, and the timeout leaves room for a starved machine's scheduling: at 300 ms (30 ms
        // pauses) a busy 2-core machine once went 300 ms without running the decode's progress thread, and the link was cut.
        RegisteredMemory src = memory(4), dst = memory(5);
        KVFerrySettings settings = KVFerrySettings.fromEnvironment().with(Knobs.WRITE_STALL_TIMEOUT_MS, "1500");
        UcxTransportProvider provider = new UcxTransportProvider();
        SourceTransport source = provider.openSource(src, 0, settings);
        closeables.add(source);
        StallableDecode slow = new StallableDecode(dst);
        closeables.add(slow);
        DataPath path = source.connect(slow.offer, dst.describe(), PeerLink.named("slow"));
        closeables.add(path::close);
        for (int i = 0; i < 20; i++) {
            slow.progressing = false;
            CompletableFuture<Throwable> w = writeInBackground(path, 10, pages(0, 0, 8), src);
            Thread.sleep(150); // paused a tenth of the timeout per write
            slow.progressing = true;
            assertNull(w.get(30, TimeUnit.SECONDS));
        }
        assertEquals(null, path.brokenReason());
        assertTrue(landed(src, dst, 0, 0, 8));
    }
}
