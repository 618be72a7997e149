package io.kvferry.transport.shm;

import io.kvferry.memory.SharedMemory;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.protocol.Region;
import io.kvferry.transport.DataPath;
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
import java.util.HashMap;
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
        this(0, CopyLanes.configured(io.kvferry.api.KVFerrySettings.defaults()));
    }

    @Override
    public String name() {
        return "shm";
    }

    @Override
    public DataPath connect(byte[] blob, MemoryDescriptor destination, String peer) throws TransportUnavailableException, IOException {
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
            Targets targets = new Targets(destination);
            for (ShmOffer.Entry e : offer.entries()) {
                long declared = targets.declaredLength(e.region(), e.component(), e.buffer());
                if (declared < 0) throw new IOException("shm offer names " + e.region() + " buffer " + e.component() + "/" + e.buffer()
                        + ", which the decode's HELLO does not declare");
                if (declared != e.length()) {
                    throw new IOException("shm offer gives " + e.region() + " buffer " + e.component() + "/" + e.buffer() + " "
                            + e.length() + " bytes but HELLO declares " + declared);
                }
                MemorySegment file = map(arena, files, e.path(), peer);
                if (e.offset() > file.byteSize() || e.length() > file.byteSize() - e.offset()) {
                    throw new IOException("shm offer window [" + e.offset() + ", +" + e.length() + ") lies outside " + e.path());
                }
                MemorySegment window = file.asSlice(e.offset(), e.length());
                // Map every page now (registration time), so no copy of a request takes a page fault.
                window.load();
                targets.put(e.region(), e.component(), e.buffer(), window);
            }
            targets.requireComplete(peer);
            Fence.claim(fence, slot, ProcessHandle.current().pid(),
                    ProcessHandle.current().info().startInstant().map(java.time.Instant::toEpochMilli).orElse(0L));
            ok = true;
            return new ShmDataPath(arena, fence, slot, targets, peer, lanes);
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

    /** The mapped destination of every decode buffer, by (region, component, buffer). */
    static final class Targets {
        private final MemorySegment[] kv, aux;
        private final MemorySegment[][] state;
        private final MemoryDescriptor shape;

        Targets(MemoryDescriptor d) {
            this.shape = d;
            kv = new MemorySegment[d.kvLengths().length];
            aux = new MemorySegment[d.auxLengths().length];
            state = new MemorySegment[d.states().size()][];
            for (int c = 0; c < state.length; c++) state[c] = new MemorySegment[d.states().get(c).lengths().length];
        }

        long declaredLength(Region r, int c, int b) {
            return switch (r) {
                case KV -> c == 0 && b < kv.length ? shape.kvLengths()[b] : -1;
                case AUX -> c == 0 && b < aux.length ? shape.auxLengths()[b] : -1;
                case STATE -> c < state.length && b < state[c].length ? shape.states().get(c).lengths()[b] : -1;
            };
        }

        void put(Region r, int c, int b, MemorySegment seg) {
            switch (r) {
                case KV -> kv[b] = seg;
                case AUX -> aux[b] = seg;
                case STATE -> state[c][b] = seg;
            }
        }

        /** The destination buffer, or null. */
        MemorySegment get(Region r, int c, int b) {
            return switch (r) {
                case KV -> c == 0 && b >= 0 && b < kv.length ? kv[b] : null;
                case AUX -> c == 0 && b >= 0 && b < aux.length ? aux[b] : null;
                case STATE -> c >= 0 && c < state.length && b >= 0 && b < state[c].length ? state[c][b] : null;
            };
        }

        void requireComplete(String peer) throws IOException {
            for (int b = 0; b < kv.length; b++) if (kv[b] == null) throw new IOException("shm offer from " + peer + " lacks KV buffer " + b);
            for (int b = 0; b < aux.length; b++) if (aux[b] == null) throw new IOException("shm offer from " + peer + " lacks aux buffer " + b);
            for (int c = 0; c < state.length; c++) {
                for (int b = 0; b < state[c].length; b++) {
                    if (state[c][b] == null) throw new IOException("shm offer from " + peer + " lacks state buffer " + c + "/" + b);
                }
            }
        }
    }
}
