package io.kvferry.transport.shm;

import io.kvferry.api.KVFerrySettings;
import io.kvferry.memory.SharedMemory;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.transport.DataPath;
import io.kvferry.transport.PeerLink;
import io.kvferry.transport.RemoteBuffers;
import io.kvferry.transport.SourceTransport;
import io.kvferry.transport.TransportUnavailableException;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.BasicFileAttributes;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The prefill side of shm: checks an offer (same host, same files, shape matching HELLO) and maps
 * the decode's files. Only regular files named {@code kvferry-*} directly in the shared-memory
 * directory are ever opened, so an offer cannot point a prefill at other files.
 */
final class ShmSource implements SourceTransport {
    private final String hostId = SharedMemory.hostId();
    /** Shared by every data path of this source (one prefill rank). */
    private final CopyLanes lanes;

    /** @param copyThreads threads copying one large write, the transfer worker included */
    ShmSource(int engineRank, int copyThreads) {
        this.lanes = new CopyLanes(copyThreads, "r" + engineRank);
    }

    ShmSource() {
        this(0, CopyLanes.configured(KVFerrySettings.defaults()));
    }

    @Override
    public String name() {
        return "shm";
    }

    @Override
    public DataPath connect(byte[] blob, MemoryDescriptor destination, PeerLink link) throws TransportUnavailableException, IOException {
        String peer = link.peer();
        ShmOffer offer;
        try {
            offer = ShmOffer.decode(blob);
        } catch (IllegalArgumentException e) {
            throw new IOException("malformed shm offer from " + peer + ": " + e.getMessage());
        }
        if (!offer.hostId().equals(hostId)) {
            throw new TransportUnavailableException("decode " + peer + " runs on another host (boot id " + offer.hostId() + ")");
        }
        Arena arena = Arena.ofShared();
        boolean ok = false;
        try {
            Map<String, MemorySegment> files = new HashMap<>();
            MemorySegment fence = map(arena, files, offer.fencePath(), peer);
            long slot = Fence.slotOffset(offer.slot());
            if (fence.byteSize() < Fence.HEADER || offer.slot() >= Fence.slots(fence.byteSize())) {
                throw new IOException("shm fence slot " + offer.slot() + " is outside the fence file of " + peer);
            }
            if (fence.get(ValueLayout.JAVA_LONG, 0) != offer.nonceHi() || fence.get(ValueLayout.JAVA_LONG, 8) != offer.nonceLo()) {
                throw new TransportUnavailableException("decode " + peer + " shares the boot id but not the shared-memory files"
                        + " (another container or mount namespace)");
            }
            RemoteBuffers.Builder offered = RemoteBuffers.builder(destination, peer);
            List<MemorySegment> windows = new ArrayList<>(offer.entries().size());
            for (ShmOffer.Entry e : offer.entries()) {
                offered.add(e.region(), e.component(), e.buffer(), e.length());
                MemorySegment file = map(arena, files, e.path(), peer);
                if (e.offset() > file.byteSize() || e.length() > file.byteSize() - e.offset()) {
                    throw new IOException("shm offer window [" + e.offset() + ", +" + e.length() + ") lies outside " + e.path());
                }
                MemorySegment window = file.asSlice(e.offset(), e.length());
                // Map every page now (registration time), so no copy of a request takes a page fault.
                window.load();
                windows.add(window);
            }
            RemoteBuffers buffers = offered.build();
            Fence.claim(fence, slot, ProcessHandle.current().pid(),
                    ProcessHandle.current().info().startInstant().map(Instant::toEpochMilli).orElse(0L));
            ok = true;
            return new ShmDataPath(arena, fence, slot, buffers, windows.toArray(MemorySegment[]::new), peer, lanes);
        } finally {
            if (!ok) arena.close();
        }
    }

    private static MemorySegment map(Arena arena, Map<String, MemorySegment> files, String name, String peer) throws IOException {
        MemorySegment seg = files.get(name);
        if (seg != null) return seg;
        Path path = Path.of(name).normalize();
        if (!path.isAbsolute() || !SharedMemory.DIR.toAbsolutePath().normalize().equals(path.getParent())
                || !path.getFileName().toString().startsWith(SharedMemory.PREFIX)) {
            throw new IOException("shm offer from " + peer + " names " + name + ", which is not a kvferry file in " + SharedMemory.DIR);
        }
        BasicFileAttributes attrs;
        try {
            attrs = Files.readAttributes(path, BasicFileAttributes.class, LinkOption.NOFOLLOW_LINKS);
        } catch (IOException e) {
            throw new IOException("cannot open shared file " + path + " of " + peer + ": " + e.getMessage(), e);
        }
        if (!attrs.isRegularFile()) throw new IOException(path + " is not a regular file");
        try (FileChannel ch = FileChannel.open(path, StandardOpenOption.READ, StandardOpenOption.WRITE, LinkOption.NOFOLLOW_LINKS)) {
            seg = ch.map(FileChannel.MapMode.READ_WRITE, 0, ch.size(), arena);
        }
        files.put(name, seg);
        return seg;
    }

    @Override
    public void close() {
        // mappings belong to the data paths; writes still running finish their lanes themselves
        lanes.close();
    }
}
