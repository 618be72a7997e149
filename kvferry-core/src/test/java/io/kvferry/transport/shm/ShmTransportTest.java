package io.kvferry.transport.shm;

import io.kvferry.api.KVArgs;
import io.kvferry.api.KVFerrySettings;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.memory.SharedArena;
import io.kvferry.memory.SharedMemory;
import io.kvferry.plan.CopyPlan;
import io.kvferry.plan.TransferPlanner;
import io.kvferry.protocol.Region;
import io.kvferry.transport.PeerLink;
import io.kvferry.transport.DataPath;
import io.kvferry.transport.LinkOffer;
import io.kvferry.transport.TransportUnavailableException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The shm transport below the managers: offers, checks, copies and the fence. */
@Timeout(30)
class ShmTransportTest {
    static final long PAGE = 4096;
    static final int PAGES = 16;
    final List<AutoCloseable> closeables = new ArrayList<>();

    @AfterEach
    void close() throws Exception {
        for (int i = closeables.size() - 1; i >= 0; i--) closeables.get(i).close();
    }

    RegisteredMemory memory(Arena arena, int buffers) {
        KVArgs a = new KVArgs();
        a.pageSize = 16;
        a.kvCacheDtypeStr = "bf16";
        for (int b = 0; b < buffers; b++) a.addKvBuffer(arena.allocate(PAGE * PAGES, 64), PAGE);
        a.addAuxBuffer(arena.allocate(64 * 4, 64), 64);
        return RegisteredMemory.from(a);
    }

    SharedArena sharedArena() {
        SharedArena a = SharedArena.open("shm-test", 1 << 20);
        closeables.add(a);
        return a;
    }

    ShmDestination destination(RegisteredMemory m) throws IOException {
        List<String> why = new ArrayList<>();
        ShmDestination d = ShmDestination.open(m, 0, why::add);
        assertNotNull(d, "not offered: " + why);
        closeables.add(d);
        return d;
    }

    @Test
    void copiesEveryRunIntoTheMappedPoolAndCleansUpItsFiles() throws Exception {
        SharedArena decodeArena = sharedArena();
        RegisteredMemory dst = memory(decodeArena, 2);
        Arena privateArena = Arena.ofShared();
        closeables.add(privateArena);
        RegisteredMemory src = memory(privateArena, 2);
        for (int b = 0; b < 2; b++) {
            MemorySegment s = src.segmentOrNull(Region.KV, 0, b);
            for (long i = 0; i < s.byteSize(); i++) s.set(ValueLayout.JAVA_BYTE, i, (byte) (i * 7 + b));
        }
        ShmDestination d = destination(dst);
        LinkOffer offer = d.offer("test-peer");
        DataPath path = new ShmSource().connect(offer.blob(), dst.describe(), PeerLink.named("test-decode"));
        assertTrue(path.oneSided());
        CopyPlan plan = TransferPlanner.planKv(new int[] {3, 4, 5, 9}, new int[] {0, 1, 7, 15}, new long[] {PAGE, PAGE});
        path.write(1, plan, src, () -> false);
        int[] s = {3, 4, 5, 9}, t = {0, 1, 7, 15};
        for (int b = 0; b < 2; b++) {
            for (int k = 0; k < 4; k++) {
                assertEquals(-1, src.slice(Region.KV, 0, b, s[k] * PAGE, PAGE).mismatch(dst.slice(Region.KV, 0, b, t[k] * PAGE, PAGE)),
                        "buffer " + b + " page " + t[k]);
            }
            assertTrue(isZero(dst.slice(Region.KV, 0, b, 2 * PAGE, 5 * PAGE)), "pages the plan does not name stay untouched");
        }
        path.close();
        assertThrows(IOException.class, () -> path.write(2, plan, src, () -> false), "a closed path refuses writes");
        Path file = decodeArena.path();
        assertTrue(Files.exists(file));
        decodeArena.close();
        assertFalse(Files.exists(file), "closing the arena deletes its file");
    }

    @Test
    void aLargeWriteIsSplitOverCopyLanesAndLandsExactly() throws Exception {
        long page = 256 << 10;
        int pages = 64, buffers = 2;
        SharedArena decodeArena = SharedArena.open("shm-lanes", page * pages * buffers + (1 << 20));
        closeables.add(decodeArena);
        Arena privateArena = Arena.ofShared();
        closeables.add(privateArena);
        KVArgs da = new KVArgs(), sa = new KVArgs();
        da.pageSize = sa.pageSize = 16;
        for (int b = 0; b < buffers; b++) {
            da.addKvBuffer(decodeArena.allocate(page * pages, 64), page);
            MemorySegment s = privateArena.allocate(page * pages, 64);
            for (long i = 0; i < s.byteSize(); i += 8) s.set(ValueLayout.JAVA_LONG_UNALIGNED, i, i * 31 + b);
            sa.addKvBuffer(s, page);
        }
        RegisteredMemory dst = RegisteredMemory.from(da), src = RegisteredMemory.from(sa);
        int[] from = new int[pages], to = new int[pages];
        List<Integer> order = new ArrayList<>();
        for (int i = 0; i < pages; i++) order.add(i);
        Collections.shuffle(order, new Random(5));
        for (int i = 0; i < pages; i++) {
            from[i] = i;
            to[i] = order.get(i);
        }
        ShmSource source = new ShmSource(0, 3);
        closeables.add(source);
        ShmDestination d = destination(dst);
        LinkOffer offer = d.offer("p");
        DataPath path = source.connect(offer.blob(), dst.describe(), PeerLink.named("d"));
        CopyPlan plan = TransferPlanner.planKv(from, to, new long[] {page, page});
        assertTrue(plan.totalBytes() >= 3 * CopyLanes.MIN_LANE_BYTES, "the plan is big enough for three lanes");
        path.write(1, plan, src, () -> false);
        for (int b = 0; b < buffers; b++) {
            for (int i = 0; i < pages; i++) {
                assertEquals(-1, src.slice(Region.KV, 0, b, from[i] * page, page).mismatch(dst.slice(Region.KV, 0, b, to[i] * page, page)),
                        "buffer " + b + " page " + to[i]);
            }
        }
        assertTrue(Thread.getAllStackTraces().keySet().stream().anyMatch(t -> t.getName().startsWith("kvferry-shm-copy-r0-")),
                "helper threads copied lanes");
        // A failing lane fails the whole write with its reason (here: the room was cancelled midway).
        AtomicInteger checks = new AtomicInteger();
        IOException e = assertThrows(IOException.class, () -> path.write(2, plan, src, () -> checks.incrementAndGet() > 20));
        assertTrue(e.getMessage().contains("failed during the transfer"), e.getMessage());
        // Revoked: every lane stops at the fence.
        assertTrue(offer.revoke(Duration.ofSeconds(5)));
        e = assertThrows(IOException.class, () -> path.write(3, plan, src, () -> false));
        assertTrue(e.getMessage().contains("revoked"), e.getMessage());
        path.close();
    }

    @Test
    void copyThreadsAreConfigurable() {
        assertTrue(CopyLanes.configured(KVFerrySettings.defaults()) >= 1);
        CopyLanes one = new CopyLanes(1, "t");
        assertEquals(1, one.lanesFor(1L << 30));
        assertFalse(one.offer(() -> {}));
        CopyLanes four = new CopyLanes(4, "t");
        assertEquals(1, four.lanesFor(CopyLanes.MIN_LANE_BYTES));
        assertEquals(2, four.lanesFor(2 * CopyLanes.MIN_LANE_BYTES + 1));
        assertEquals(4, four.lanesFor(1L << 30));
        four.close();
        assertFalse(four.offer(() -> {}), "a closed source's helpers take no more lanes; the writer copies them");
        KVFerrySettings none = KVFerrySettings.defaults();
        IllegalArgumentException x = assertThrows(IllegalArgumentException.class,
                () -> CopyLanes.configured(none.with(CopyLanes.COPY_THREADS, "0")));
        assertTrue(x.getMessage().contains("KVFERRY_SHM_COPY_THREADS"), x.getMessage());
        assertEquals(3, CopyLanes.configured(KVFerrySettings.fromEnvironment(
                Map.of("KVFERRY_SHM_COPY_THREADS", "3"), Map.of())), "read from the environment layer");
        assertEquals(Math.min(4, Runtime.getRuntime().availableProcessors()), CopyLanes.configured(none), "unset: cores, at most 4");
    }

    @Test
    void privateMemoryIsNotOffered() throws Exception {
        Arena privateArena = Arena.ofShared();
        closeables.add(privateArena);
        List<String> why = new ArrayList<>();
        assertNull(ShmDestination.open(memory(privateArena, 1), 0, why::add));
        assertTrue(why.get(0).contains("private memory"), why.toString());
    }

    @Test
    void offersFromAnotherHostOrAnotherMountAreDeclinedWithAReason() throws Exception {
        RegisteredMemory dst = memory(sharedArena(), 1);
        ShmOffer real = ShmOffer.decode(destination(dst).offer("p").blob());
        ShmOffer otherHost = new ShmOffer("another-boot-id", real.fencePath(), real.nonceHi(), real.nonceLo(), real.slot(), real.entries());
        TransportUnavailableException e = assertThrows(TransportUnavailableException.class,
                () -> new ShmSource().connect(otherHost.encode(), dst.describe(), PeerLink.named("d")));
        assertTrue(e.getMessage().contains("another host"), e.getMessage());
        ShmOffer otherFiles = new ShmOffer(real.hostId(), real.fencePath(), real.nonceHi() + 1, real.nonceLo(), real.slot(), real.entries());
        e = assertThrows(TransportUnavailableException.class, () -> new ShmSource().connect(otherFiles.encode(), dst.describe(), PeerLink.named("d")));
        assertTrue(e.getMessage().contains("not the shared-memory files"), e.getMessage());
    }

    @Test
    void forgedOffersNeverMapFilesOutsideTheSharedDirectoryOrOutsideTheDeclaredShape() throws Exception {
        RegisteredMemory dst = memory(sharedArena(), 1);
        ShmOffer real = ShmOffer.decode(destination(dst).offer("p").blob());
        ShmOffer.Entry kv = real.entries().get(0);
        List<ShmOffer.Entry> rest = real.entries().subList(1, real.entries().size());
        Path outside = Files.createTempFile("kvferry-", ".bin");
        Files.write(outside, new byte[(int) (PAGE * PAGES)]);
        try {
            for (String path : List.of(outside.toString(), "/etc/passwd", SharedMemory.DIR + "/../etc/passwd",
                    SharedMemory.DIR + "/not-kvferry")) {
                ShmOffer forged = with(real, new ShmOffer.Entry(Region.KV, 0, 0, path, 0, kv.length()), rest);
                IOException e = assertThrows(IOException.class, () -> new ShmSource().connect(forged.encode(), dst.describe(), PeerLink.named("d")));
                assertTrue(e.getMessage().contains("not a kvferry file"), e.getMessage());
            }
        } finally {
            Files.deleteIfExists(outside);
        }
        ShmOffer wrongLength = with(real, new ShmOffer.Entry(Region.KV, 0, 0, kv.path(), kv.offset(), kv.length() + PAGE), rest);
        IOException e = assertThrows(IOException.class, () -> new ShmSource().connect(wrongLength.encode(), dst.describe(), PeerLink.named("d")));
        assertTrue(e.getMessage().contains("HELLO declares"), e.getMessage());
        ShmOffer pastEnd = with(real, new ShmOffer.Entry(Region.KV, 0, 0, kv.path(), 1 << 20, kv.length()), rest);
        e = assertThrows(IOException.class, () -> new ShmSource().connect(pastEnd.encode(), dst.describe(), PeerLink.named("d")));
        assertTrue(e.getMessage().contains("outside"), e.getMessage());
        ShmOffer missing = new ShmOffer(real.hostId(), real.fencePath(), real.nonceHi(), real.nonceLo(), real.slot(), rest);
        e = assertThrows(IOException.class, () -> new ShmSource().connect(missing.encode(), dst.describe(), PeerLink.named("d")));
        assertTrue(e.getMessage().contains("lacks KV buffer 0"), e.getMessage());
        byte[] truncated = Arrays.copyOf(real.encode(), 20);
        e = assertThrows(IOException.class, () -> new ShmSource().connect(truncated, dst.describe(), PeerLink.named("d")));
        assertTrue(e.getMessage().contains("malformed"), e.getMessage());
    }

    private static ShmOffer with(ShmOffer o, ShmOffer.Entry first, List<ShmOffer.Entry> rest) {
        List<ShmOffer.Entry> all = new ArrayList<>();
        all.add(first);
        all.addAll(rest);
        return new ShmOffer(o.hostId(), o.fencePath(), o.nonceHi(), o.nonceLo(), o.slot(), all);
    }

    @Test
    void aWriteOutsideTheDestinationBufferFailsBeforeAnyByteMoves() throws Exception {
        RegisteredMemory dst = memory(sharedArena(), 1);
        Arena privateArena = Arena.ofShared();
        closeables.add(privateArena);
        RegisteredMemory src = memory(privateArena, 1);
        DataPath path = new ShmSource().connect(destination(dst).offer("p").blob(), dst.describe(), PeerLink.named("d"));
        CopyPlan plan = TransferPlanner.planKv(new int[] {0}, new int[] {PAGES}, new long[] {PAGE});
        IOException e = assertThrows(IOException.class, () -> path.write(1, plan, src, () -> false));
        assertTrue(e.getMessage().contains("outside"), e.getMessage());
        path.close();
    }

    @Test
    void revokeWaitsForACopyInProgressAndStopsLaterOnes() throws Exception {
        RegisteredMemory dst = memory(sharedArena(), 1);
        Arena privateArena = Arena.ofShared();
        closeables.add(privateArena);
        RegisteredMemory src = memory(privateArena, 1);
        ShmDestination d = destination(dst);
        LinkOffer offer = d.offer("p");
        ShmOffer o = ShmOffer.decode(offer.blob());
        DataPath path = new ShmSource().connect(offer.blob(), dst.describe(), PeerLink.named("d"));
        // Stand in for a writer caught mid-copy: hold the slot's busy count.
        MemorySegment fence = d.fenceForTest();
        long slot = Fence.slotOffset(o.slot());
        assertTrue(Fence.enter(fence, slot));
        CompletableFuture<Boolean> revoked = CompletableFuture.supplyAsync(() -> offer.revoke(Duration.ofSeconds(10)));
        Thread.sleep(200);
        assertFalse(revoked.isDone(), "revoke must wait while a copy is in progress");
        Fence.exit(fence, slot);
        assertTrue(revoked.get(5, TimeUnit.SECONDS));
        CopyPlan plan = TransferPlanner.planKv(new int[] {0}, new int[] {1}, new long[] {PAGE});
        IOException e = assertThrows(IOException.class, () -> path.write(1, plan, src, () -> false));
        assertTrue(e.getMessage().contains("revoked"), e.getMessage());
        assertTrue(isZero(dst.slice(Region.KV, 0, 0, 0, PAGE * PAGES)));
        path.close();
    }

    @Test
    void aDeadWritersStaleCountDoesNotHoldRevokeUntilTheTimeout() throws Exception {
        RegisteredMemory dst = memory(sharedArena(), 1);
        ShmDestination d = destination(dst);
        LinkOffer offer = d.offer("p");
        long slot = Fence.slotOffset(ShmOffer.decode(offer.blob()).slot());
        Process gone = new ProcessBuilder("true").start();
        gone.waitFor();
        MemorySegment fence = d.fenceForTest();
        Fence.claim(fence, slot, gone.pid(), gone.info().startInstant().map(Instant::toEpochMilli).orElse(1L), SharedMemory.pidNamespace());
        assertTrue(Fence.enter(fence, slot)); // the "killed" writer's count stays behind
        long t0 = System.nanoTime();
        assertTrue(offer.revoke(Duration.ofSeconds(20)));
        assertTrue(System.nanoTime() - t0 < 5_000_000_000L, "revoke saw the writer was gone");
    }

    @Test
    void staleFilesOfDeadOwnersAreSwept() throws Exception {
        Process gone = new ProcessBuilder("true").start();
        gone.waitFor();
        Path stale = SharedMemory.DIR.resolve(SharedMemory.PREFIX + gone.pid() + "-1-ns" + SharedMemory.pidNamespace() + "-abcdef-stale");
        Files.write(stale, new byte[16]);
        Path mine = sharedArena().path();
        SharedMemory.sweepStale();
        assertFalse(Files.exists(stale), "the dead owner's file is removed");
        assertTrue(Files.exists(mine), "a live owner's file stays");
    }

    /**
     * A SIGKILLed peer's files stay in /dev/shm (its whole KV pool, in memory). The survivor removes
     * them when it loses the link, and so does every later allocation, not only a process's first:
     * before, the first allocation of a new process was the only sweep, so a long-running prefill
     * and decode left a killed peer's pools behind for good.
     */
    @Test
    void theSurvivorOfALostLinkAndEveryAllocationSweepTheFilesOfOwnersThatDied() throws Exception {
        RegisteredMemory dst = memory(sharedArena(), 1);
        ShmDestination d = destination(dst);
        LinkOffer offer = d.offer("test-peer");
        closeables.add(offer);
        DataPath path = new ShmSource().connect(offer.blob(), dst.describe(), PeerLink.named("test-decode"));
        Path killedDecodesPool = deadOwnersFile("pool-tp0-pp0");
        path.close(); // the prefill unmaps the pools of the decode it lost
        assertFalse(Files.exists(killedDecodesPool), "the prefill removes the pool file of the decode it lost");
        Path killedPrefillsPool = deadOwnersFile("prefill-pool");
        assertTrue(offer.revoke(Duration.ofSeconds(5))); // the decode revokes the link of the prefill it lost
        assertFalse(Files.exists(killedPrefillsPool), "the decode removes the pool file of the prefill it lost");
        Path stale = deadOwnersFile("stale");
        Path mine = sharedArena().path(); // not this process's first allocation
        assertFalse(Files.exists(stale), "a later allocation removes the dead owner's file");
        assertTrue(Files.exists(mine) && Files.exists(SharedMemory.locate(dst.segmentOrNull(Region.KV, 0, 0)).path()),
                "live owners' files stay");
    }

    /** A kvferry file whose owner (a process that ran and exited) is provably gone. */
    private static Path deadOwnersFile(String label) throws Exception {
        Process gone = new ProcessBuilder("true").start();
        gone.waitFor();
        Path f = SharedMemory.DIR.resolve(SharedMemory.PREFIX + gone.pid() + "-1-ns" + SharedMemory.pidNamespace() + "-abcdef-" + label);
        Files.write(f, new byte[16]);
        return f;
    }

    private static boolean isZero(MemorySegment s) {
        for (long i = 0; i < s.byteSize(); i++) if (s.get(ValueLayout.JAVA_BYTE, i) != 0) return false;
        return true;
    }
}
