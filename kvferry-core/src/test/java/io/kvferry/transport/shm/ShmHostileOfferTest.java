package io.kvferry.transport.shm;

import io.kvferry.api.KVArgs;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.memory.SharedArena;
import io.kvferry.memory.SharedMemory;
import io.kvferry.plan.CopyPlan;
import io.kvferry.plan.TransferPlanner;
import io.kvferry.protocol.Region;
import io.kvferry.transport.DataPath;
import io.kvferry.transport.PeerLink;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Set;
import java.util.UUID;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * A same-host hostile decode against the prefill's shm checks (issue 13, hostile input 6): every
 * offered file must be proven to be the offering decode's own pool file, mapped bytes are capped by
 * HELLO's shape and the file's real size, and a sparse file is never faulted in by the prefill.
 * The hostile decode here is this process forging offers and fences (the prefill's checks see only
 * bytes and files, so that is all a hostile peer controls).
 */
@Timeout(60)
class ShmHostileOfferTest {
    static final long PAGE = 4096;
    static final int PAGES = 16;
    final List<AutoCloseable> closeables = new ArrayList<>();
    final List<Path> created = new ArrayList<>();

    @AfterEach
    void close() throws Exception {
        for (int i = closeables.size() - 1; i >= 0; i--) closeables.get(i).close();
        for (Path p : created) Files.deleteIfExists(p);
    }

    RegisteredMemory memory(Arena arena) {
        KVArgs a = new KVArgs();
        a.pageSize = 16;
        a.addKvBuffer(arena.allocate(PAGE * PAGES, 64), PAGE);
        a.addAuxBuffer(arena.allocate(64 * 4, 64), 64);
        return RegisteredMemory.from(a);
    }

    SharedArena sharedArena(String label) {
        SharedArena a = SharedArena.open(label, 1 << 20);
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

    /** The offer with its KV entry's file path replaced by {@code path}. */
    static byte[] withKvPath(ShmOffer o, String path) {
        List<ShmOffer.Entry> entries = new ArrayList<>();
        for (ShmOffer.Entry e : o.entries()) {
            entries.add(e.region() == Region.KV ? new ShmOffer.Entry(e.region(), e.component(), e.buffer(), path, e.offset(), e.length()) : e);
        }
        return new ShmOffer(o.hostId(), o.fencePath(), o.nonceHi(), o.nonceLo(), o.slot(), entries).encode();
    }

    IOException refused(byte[] offer, RegisteredMemory dst) {
        return assertThrows(IOException.class, () -> new ShmSource().connect(offer, dst.describe(), PeerLink.named("hostile")));
    }

    static boolean root() throws IOException {
        return (Integer) Files.getAttribute(Path.of("/proc/self"), "unix:uid") == 0;
    }

    static long allocated(Path p) throws IOException {
        return ShmFiles.lstat(p).allocatedBytes();
    }

    @Test
    void poolAndFenceFilesAreReadableAndWritableByTheirOwnerOnly() throws Exception {
        SharedArena pool = sharedArena("perm-test");
        ShmDestination d = destination(memory(pool));
        Set<PosixFilePermission> ownerOnly = EnumSet.of(PosixFilePermission.OWNER_READ, PosixFilePermission.OWNER_WRITE);
        assertEquals(ownerOnly, Files.getPosixFilePermissions(pool.path()), "pool file");
        Path fence = Path.of(ShmOffer.decode(d.offer("p").blob()).fencePath());
        assertEquals(ownerOnly, Files.getPosixFilePermissions(fence), "fence file");
    }

    @Test
    void anotherOwnersKvferryFileIsRefusedEvenWhenTheHostileFenceListsIt() throws Exception {
        assumeTrue(root(), "needs root to give a file to another user (CI runs as root)");
        // The victim: another user's decode pool. The hostile decode can stat it (anyone can), so its
        // own fence lists the victim's device, inode and size; it cannot make the file its own.
        SharedArena victim = sharedArena("victim-pool");
        RegisteredMemory victimMemory = memory(victim);
        ShmDestination hostile = destination(victimMemory);
        byte[] offer = hostile.offer("p").blob();
        Files.setAttribute(victim.path(), "unix:uid", 65534);
        long before = victimMemory.segmentOrNull(Region.KV, 0, 0).get(ValueLayout.JAVA_LONG, 0);
        IOException e = refused(offer, victimMemory);
        assertTrue(e.getMessage().contains("belongs to uid 65534, not to the owner of its fence"), e.getMessage());
        assertEquals(before, victimMemory.segmentOrNull(Region.KV, 0, 0).get(ValueLayout.JAVA_LONG, 0));
    }

    @Test
    void aKvferryFileTheFenceDoesNotListIsRefused() throws Exception {
        RegisteredMemory dst = memory(sharedArena("listed-pool"));
        SharedArena other = sharedArena("other-pool"); // same owner, same directory, never offered by this decode
        ShmOffer real = ShmOffer.decode(destination(dst).offer("p").blob());
        IOException e = refused(withKvPath(real, other.path().toString()), dst);
        assertTrue(e.getMessage().contains("its fence does not list"), e.getMessage());
    }

    @Test
    void symlinksAreNeverFollowedForPoolFilesOrTheFence() throws Exception {
        RegisteredMemory dst = memory(sharedArena("link-target"));
        ShmOffer real = ShmOffer.decode(destination(dst).offer("p").blob());
        Path poolLink = SharedMemory.DIR.resolve(SharedMemory.PREFIX + "link-" + UUID.randomUUID());
        created.add(poolLink);
        Files.createSymbolicLink(poolLink, Path.of(real.entries().get(0).path()));
        IOException e = refused(withKvPath(real, poolLink.toString()), dst);
        assertTrue(e.getMessage().contains("is a symbolic link"), e.getMessage());
        Path fenceLink = SharedMemory.DIR.resolve(SharedMemory.PREFIX + "fence-link-" + UUID.randomUUID());
        created.add(fenceLink);
        Files.createSymbolicLink(fenceLink, Path.of(real.fencePath()));
        byte[] viaLink = new ShmOffer(real.hostId(), fenceLink.toString(), real.nonceHi(), real.nonceLo(), real.slot(), real.entries()).encode();
        e = refused(viaLink, dst);
        assertTrue(e.getMessage().contains("is a symbolic link"), e.getMessage());
    }

    @Test
    void aSparseOversizedFileIsMappedWithoutFaultingItIn() throws Exception {
        long gib = 1L << 30;
        SharedMemory sparse = SharedMemory.allocate("sparse", gib); // a SharedArena would back it; a hostile decode does not
        closeables.add(sparse);
        KVArgs a = new KVArgs();
        a.pageSize = 16;
        a.addKvBuffer(sparse.segment(), PAGE);
        RegisteredMemory dst = RegisteredMemory.from(a);
        long before = allocated(sparse.path());
        assertTrue(before <= 64 << 10, "the file starts sparse: " + before + " bytes allocated");
        ShmSource source = new ShmSource(0, 1);
        closeables.add(source);
        DataPath path = source.connect(destination(dst).offer("p").blob(), dst.describe(), PeerLink.named("hostile"));
        closeables.add(path::close);
        assertEquals(before, allocated(sparse.path()), "registering the link faulted in none of the 1 GiB");
        // A copy allocates what it writes, nothing more (bounded by the shape HELLO declared).
        Arena src = Arena.ofShared();
        closeables.add(src);
        KVArgs sa = new KVArgs();
        sa.pageSize = 16;
        sa.addKvBuffer(src.allocate(PAGE * 4, 64), PAGE);
        CopyPlan plan = TransferPlanner.planKv(new int[] {0}, new int[] {1000}, new long[] {PAGE});
        path.write(1, plan, RegisteredMemory.from(sa), () -> false);
        assertTrue(allocated(sparse.path()) <= before + (64 << 10), "one page written: " + allocated(sparse.path()) + " bytes allocated");
    }

    @Test
    void aBackedPoolIsFaultedInAtRegistrationAndAHoleIsNot() throws Exception {
        SharedArena pool = sharedArena("backed"); // allocations are backed (touched) by the decode
        RegisteredMemory dst = memory(pool);
        ShmDestination d = destination(dst);
        ShmSource source = new ShmSource(0, 1);
        closeables.add(source);
        source.connect(d.offer("p").blob(), dst.describe(), PeerLink.named("d")).close();
        // The mapping's own check, directly: a backed range reports every page, a hole none.
        try (Arena arena = Arena.ofShared(); ShmFiles.Opened f = ShmFiles.open(pool.path())) {
            MemorySegment window = f.map(0, PAGE * PAGES, arena);
            assertEquals(PAGES, ShmFiles.prefaultResident(window));
            MemorySegment hole = f.map((1 << 20) - PAGE * 5, PAGE * 4, arena); // unallocated (the last page holds the size byte)
            assertEquals(0, ShmFiles.prefaultResident(hole));
        }
    }

    @Test
    void aFileTruncatedOrReplacedAfterTheOfferIsRefused() throws Exception {
        SharedArena pool = sharedArena("truncated");
        RegisteredMemory dst = memory(pool);
        byte[] offer = destination(dst).offer("p").blob();
        try (FileChannel ch = FileChannel.open(pool.path(), StandardOpenOption.WRITE)) {
            ch.truncate(PAGE * PAGES * 2);
        }
        IOException e = refused(offer, dst);
        assertTrue(e.getMessage().contains("does not list") && e.getMessage().contains("resized"), e.getMessage());
    }

    @Test
    void aFenceOthersCanReadOrWriteIsRefused() throws Exception {
        RegisteredMemory dst = memory(sharedArena("loose-fence"));
        ShmOffer real = ShmOffer.decode(destination(dst).offer("p").blob());
        Files.setPosixFilePermissions(Path.of(real.fencePath()), PosixFilePermissions.fromString("rw-rw-rw-"));
        IOException e = refused(real.encode(), dst);
        assertTrue(e.getMessage().contains("mode 0666") && e.getMessage().contains("owner only"), e.getMessage());
    }

    @Test
    void aPoolFileOthersCanReadIsRefused() throws Exception {
        SharedArena pool = sharedArena("loose-pool");
        RegisteredMemory dst = memory(pool);
        byte[] offer = destination(dst).offer("p").blob();
        Files.setPosixFilePermissions(pool.path(), PosixFilePermissions.fromString("rw-r--r--"));
        IOException e = refused(offer, dst);
        assertTrue(e.getMessage().contains("mode 0644"), e.getMessage());
    }

    @Test
    void aForgedFenceIsRefused() throws Exception {
        RegisteredMemory dst = memory(sharedArena("forged-fence"));
        ShmOffer real = ShmOffer.decode(destination(dst).offer("p").blob());
        // A fence-sized file with the right nonce but no fence structure (a hostile decode's own file).
        SharedMemory fake = SharedMemory.allocate("fake-fence", Fence.size(Fence.MAX_SLOTS, 1));
        closeables.add(fake);
        fake.segment().set(ValueLayout.JAVA_LONG, 0, real.nonceHi());
        fake.segment().set(ValueLayout.JAVA_LONG, 8, real.nonceLo());
        byte[] offer = new ShmOffer(real.hostId(), fake.path().toString(), real.nonceHi(), real.nonceLo(), real.slot(), real.entries()).encode();
        IOException e = refused(offer, dst);
        assertTrue(e.getMessage().contains("not a kvferry fence"), e.getMessage());
    }

    @Test
    void aSharedDirectoryOthersCouldTamperWithIsRefused() throws Exception {
        assertNull(SharedMemory.directoryProblem(), "the default /dev/shm is sticky");
        Path dir = Files.createTempDirectory("kvferry-dir");
        created.add(dir);
        Files.setPosixFilePermissions(dir, PosixFilePermissions.fromString("rwxrwxrwx"));
        String problem = SharedMemory.directoryProblem(dir);
        assertNotNull(problem);
        assertTrue(problem.contains("writable by other users but not sticky"), problem);
        Files.setAttribute(dir, "unix:mode", 01777);
        assertNull(SharedMemory.directoryProblem(dir), "sticky, like /dev/shm");
        Files.setPosixFilePermissions(dir, PosixFilePermissions.fromString("rwx------"));
        assertNull(SharedMemory.directoryProblem(dir), "private to its owner");
    }
}
