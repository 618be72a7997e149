package io.kvferry.transport.shm;

import io.kvferry.memory.RegisteredMemory;
import io.kvferry.memory.SharedMemory;
import io.kvferry.transport.DestinationTransport;
import io.kvferry.transport.LinkOffer;
import io.kvferry.transport.RevocableOffer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;

/**
 * A decode manager's shared pools as the shm transport offers them: the file window of every
 * registered buffer, plus a fence file with one slot per link (never reused, so a writer of an old
 * link can never pass a new link's check). Owned by the decode manager; offers by its links.
 */
final class ShmDestination implements DestinationTransport {
    private static final Logger log = LoggerFactory.getLogger(ShmDestination.class);
    private static final int SLOTS = Fence.MAX_SLOTS;

    private final SharedMemory fence;
    private final long nonceHi, nonceLo;
    private final String hostId = SharedMemory.hostId();
    private final List<ShmOffer.Entry> entries;
    private final AtomicInteger nextSlot = new AtomicInteger();

    private ShmDestination(SharedMemory fence, long nonceHi, long nonceLo, List<ShmOffer.Entry> entries) {
        this.fence = fence;
        this.nonceHi = nonceHi;
        this.nonceLo = nonceLo;
        this.entries = entries;
    }

    /**
     * Null (and {@code why} told) when some registered buffer is not in shared memory. Creates the
     * fence (0600, like every kvferry file) listing the identity of each pool file it offers.
     */
    static ShmDestination open(RegisteredMemory memory, int engineRank, Consumer<String> why) throws IOException {
        List<ShmOffer.Entry> entries = new ArrayList<>();
        List<String> privateBuffers = new ArrayList<>();
        memory.forEachBuffer((region, c, b, seg) -> {
            SharedMemory.Location loc = SharedMemory.locate(seg);
            if (loc == null) privateBuffers.add(region + " buffer " + c + "/" + b);
            else entries.add(new ShmOffer.Entry(region, c, b, loc.path().toString(), loc.offset(), loc.length()));
        });
        if (!privateBuffers.isEmpty()) {
            why.accept(privateBuffers.get(0) + " is private memory, not a SharedMemory allocation"
                    + (privateBuffers.size() > 1 ? " (and " + (privateBuffers.size() - 1) + " more buffers)" : ""));
            return null;
        }
        String unsupported = ShmFiles.unavailableReason();
        if (unsupported != null) {
            why.accept(unsupported);
            return null;
        }
        Map<String, Fence.FileId> files = new LinkedHashMap<>();
        for (ShmOffer.Entry e : entries) {
            if (files.containsKey(e.path())) continue;
            // Our own files, created O_EXCL in a directory only their owner can rename in: the name is theirs.
            ShmFiles.Stat st = ShmFiles.lstat(Path.of(e.path()));
            files.put(e.path(), new Fence.FileId(st.devMajor(), st.devMinor(), st.inode(), st.size()));
        }
        if (files.size() > Fence.MAX_FILES) {
            why.accept("the buffers lie in " + files.size() + " shared files; a fence lists at most " + Fence.MAX_FILES);
            return null;
        }
        SharedMemory fence = SharedMemory.allocate("fence-rank" + engineRank, Fence.size(SLOTS, files.size()));
        SecureRandom rnd = new SecureRandom();
        long hi = rnd.nextLong(), lo = rnd.nextLong();
        Fence.init(fence.segment(), hi, lo, SLOTS, List.copyOf(files.values()));
        return new ShmDestination(fence, hi, lo, List.copyOf(entries));
    }

    @Override
    public String name() {
        return "shm";
    }

    @Override
    public LinkOffer offer(String peer) {
        int slot = nextSlot.getAndIncrement();
        if (slot >= SLOTS) {
            log.warn("shm: all {} fence slots used; the link to {} uses TCP", SLOTS, peer);
            return null;
        }
        byte[] blob = new ShmOffer(hostId, fence.path().toString(), nonceHi, nonceLo, slot, entries).encode();
        return new Offer(slot, blob);
    }

    @Override
    public void close() {
        fence.close();
    }

    /** The fence page (tests stand in for writers with it). */
    MemorySegment fenceForTest() {
        return fence.segment();
    }

    private final class Offer extends RevocableOffer {
        private final long slotOffset;

        Offer(int slot, byte[] blob) {
            super(blob);
            this.slotOffset = Fence.slotOffset(slot);
        }

        @Override
        protected boolean revokeOnce(Duration timeout) {
            MemorySegment page = fence.segment();
            Fence.revoke(page, slotOffset);
            long deadline = System.nanoTime() + timeout.toNanos();
            boolean drained;
            while (true) {
                if (Fence.busy(page, slotOffset) == 0) {
                    drained = true;
                    break;
                }
                // A writer SIGKILLed mid-copy leaves its count behind, but can write nothing more.
                // A writer in another pid namespace cannot be looked up here: it is waited for, never taken for dead.
                long pid = Fence.writerPid(page, slotOffset);
                if (pid != 0 && SharedMemory.provablyGone(pid, Fence.writerStart(page, slotOffset),
                        Fence.writerPidNamespace(page, slotOffset))) {
                    drained = true;
                    break;
                }
                if (System.nanoTime() > deadline) {
                    drained = false;
                    break;
                }
                try {
                    Thread.sleep(1);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    drained = false;
                    break;
                }
            }
            // A lost link often means a SIGKILLed prefill: its own shared pools would otherwise stay in tmpfs.
            SharedMemory.sweepStale();
            return drained;
        }

        @Override
        public void close() {
            Fence.revoke(fence.segment(), slotOffset); // no waiting: the link is gone or never used this offer
        }
    }
}
