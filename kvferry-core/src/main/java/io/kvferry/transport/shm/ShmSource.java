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
import java.nio.file.AccessDeniedException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The prefill side of shm: checks an offer and maps the decode's files. What it takes as proof that
 * an offered file belongs to the offering decode (so that no same-host peer can point it at another
 * user's KV cache or any other file):
 * <ul>
 *   <li>every path names a file {@code kvferry-*} directly in the shared-memory directory, opened
 *       without following a symlink ({@code O_NOFOLLOW}); all further checks are on the status of
 *       the opened descriptor, not the name, so no swap between check and open can substitute a file;
 *   <li>the fence holds the offer's nonce (the decode created it, or was told its secret), is a
 *       regular file only its owner can read or write, and is well-formed;
 *   <li>each pool file is a regular owner-only file of the fence's owner, and its (device, inode,
 *       size) is listed in the fence's file table: the decode listed it when it made its offer, and it
 *       has not been replaced or resized since.
 * </ul>
 * The fence owner test is what stops another user: anyone can stat another user's file and list
 * it in their own fence, but not own it. Against the same user there is no boundary to keep (it could
 * write the memory directly); there the table still stops a confused decode naming someone else's file.
 *
 * <p>Mapped bytes: exactly each offered window, whose length HELLO declared and which must lie
 * inside the file's real size; only the pages the decode already backs are faulted in now (a sparse
 * file costs nothing until a copy writes there, bounded by the declared shape).
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
            throw new TransportUnavailableException("decode " + peer + " runs on another host");
        }
        String unsupported = ShmFiles.unavailableReason();
        if (unsupported != null) throw new TransportUnavailableException(unsupported);
        // The shape first: nothing is opened for an offer that contradicts HELLO.
        RemoteBuffers.Builder offered = RemoteBuffers.builder(destination, peer);
        for (ShmOffer.Entry e : offer.entries()) offered.add(e.region(), e.component(), e.buffer(), e.length());
        RemoteBuffers buffers = offered.build();
        Arena arena = Arena.ofShared();
        Map<String, ShmFiles.Opened> files = new HashMap<>();
        boolean ok = false;
        try {
            MappedFence mapped = mapFence(arena, offer, peer);
            MemorySegment fence = mapped.segment();
            long slot = Fence.slotOffset(offer.slot());
            List<MemorySegment> windows = new ArrayList<>(offer.entries().size());
            for (ShmOffer.Entry e : offer.entries()) {
                ShmFiles.Opened file = files.get(e.path());
                if (file == null) {
                    file = open(e.path(), peer);
                    files.put(e.path(), file);
                    checkPoolFile(file, mapped, peer);
                }
                windows.add(file.map(e.offset(), e.length(), arena));
            }
            Fence.claim(fence, slot, ProcessHandle.current().pid(), SharedMemory.startMillis(), SharedMemory.pidNamespace());
            ok = true;
            return new ShmDataPath(arena, fence, slot, buffers, windows.toArray(MemorySegment[]::new), peer, lanes);
        } finally {
            for (ShmFiles.Opened f : files.values()) f.close();
            if (!ok) arena.close();
        }
    }

    /** The offer's fence, mapped, and the uid that owns it. */
    private record MappedFence(MemorySegment segment, int owner) {}

    /** Opens, checks and maps the offer's fence. */
    private static MappedFence mapFence(Arena arena, ShmOffer offer, String peer) throws IOException, TransportUnavailableException {
        try (ShmFiles.Opened f = open(offer.fencePath(), peer)) {
            ShmFiles.Stat st = f.stat();
            if (!st.regularFile()) throw new IOException("the shm fence " + offer.fencePath() + " of " + peer + " is not a regular file");
            if (!st.ownerOnly()) {
                throw new IOException("the shm fence " + offer.fencePath() + " of " + peer + " has mode " + st.permissions()
                        + "; a fence must be readable and writable by its owner only");
            }
            if (st.size() < Fence.HEADER || st.size() > Fence.size(Fence.MAX_SLOTS, Fence.MAX_FILES)) {
                throw new IOException("the shm fence " + offer.fencePath() + " of " + peer + " is " + st.size() + " bytes, not a fence");
            }
            MemorySegment fence = f.map(0, st.size(), arena);
            if (fence.get(ValueLayout.JAVA_LONG, 0) != offer.nonceHi() || fence.get(ValueLayout.JAVA_LONG, 8) != offer.nonceLo()) {
                throw new TransportUnavailableException("decode " + peer + " shares the boot id but not the shared-memory files"
                        + " (another container or mount namespace)");
            }
            String problem = Fence.problem(fence);
            if (problem != null) throw new IOException("the shm fence " + offer.fencePath() + " of " + peer + " is unusable: " + problem);
            if (offer.slot() >= Fence.slots(fence)) {
                throw new IOException("shm fence slot " + offer.slot() + " is outside the fence file of " + peer);
            }
            return new MappedFence(fence, st.uid());
        }
    }

    /** A pool file is usable only if it is a private regular file of the fence's owner, listed in the fence as it is now. */
    private static void checkPoolFile(ShmFiles.Opened file, MappedFence fence, String peer) throws IOException {
        ShmFiles.Stat st = file.stat();
        Path name = file.path();
        int fenceOwner = fence.owner();
        if (!st.regularFile()) throw new IOException("shm offer from " + peer + " names " + name + ", which is not a regular file");
        if (st.uid() != fenceOwner) {
            throw new IOException("shm offer from " + peer + " names " + name + ", which belongs to uid " + st.uid()
                    + ", not to the owner of its fence (uid " + fenceOwner + ")");
        }
        if (!st.ownerOnly()) {
            throw new IOException("shm offer from " + peer + " names " + name + " with mode " + st.permissions()
                    + "; pool files must be readable and writable by their owner only");
        }
        if (!Fence.lists(fence.segment(), st.devMajor(), st.devMinor(), st.inode(), st.size())) {
            throw new IOException("shm offer from " + peer + " names " + name + " (" + st.size() + " bytes), which its fence does not"
                    + " list as one of the decode's pool files of that size (another owner's file, or replaced or resized since the offer)");
        }
    }

    /** Opens a file the offer names, if it is a kvferry file directly in the shared-memory directory. */
    private static ShmFiles.Opened open(String name, String peer) throws IOException, TransportUnavailableException {
        Path path = Path.of(name).normalize();
        if (!path.isAbsolute() || !SharedMemory.DIR.toAbsolutePath().normalize().equals(path.getParent())
                || !path.getFileName().toString().startsWith(SharedMemory.PREFIX)) {
            throw new IOException("shm offer from " + peer + " names " + name + ", which is not a kvferry file in " + SharedMemory.DIR);
        }
        try {
            return ShmFiles.open(path);
        } catch (AccessDeniedException e) {
            throw new TransportUnavailableException("this prefill may not open the shared-memory files of decode " + peer
                    + " (kvferry creates them 0600: shm needs prefill and decode to run as the same user)");
        } catch (IOException e) {
            throw new IOException("shm offer from " + peer + ": " + e.getMessage(), e);
        }
    }

    @Override
    public void close() {
        // mappings belong to the data paths; writes still running finish their lanes themselves
        lanes.close();
    }
}
