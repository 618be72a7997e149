package io.kvferry.memory;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;

/**
 * An {@link Arena} whose segments live in one {@link SharedMemory} file: the drop-in replacement
 * for {@code Arena.ofShared()} when allocating KV pools (and aux/state buffers) that a same-host
 * peer should write directly. Allocation bumps a pointer through the file (the file is sparse, so
 * reserving more than is allocated costs address space, not memory); segments are zero-filled, may be
 * used from any thread, and all become invalid when the arena closes, which also deletes the file.
 * Each allocation is backed at once (its pages are touched), so transfers into it never fault.
 */
public final class SharedArena implements Arena {
    private final SharedMemory memory;
    /** Guarded by this. */
    private long next;

    private SharedArena(SharedMemory memory) {
        this.memory = memory;
    }

    /**
     * @param label    a short file label, e.g. "decode-kv-rank0"
     * @param capacity bytes the arena may hand out in all (plus alignment padding)
     */
    public static SharedArena open(String label, long capacity) {
        try {
            return new SharedArena(SharedMemory.allocate(label, capacity));
        } catch (IOException e) {
            throw new UncheckedIOException("cannot create a shared-memory arena of " + capacity + " bytes: " + e.getMessage(), e);
        }
    }

    @Override
    public synchronized MemorySegment allocate(long byteSize, long byteAlignment) {
        if (byteSize < 0) throw new IllegalArgumentException("negative allocation size " + byteSize);
        if (byteAlignment <= 0 || Long.bitCount(byteAlignment) != 1) {
            throw new IllegalArgumentException("alignment " + byteAlignment + " is not a power of two");
        }
        MemorySegment all = memory.segment();
        long base = all.address();
        long start = ((base + next + byteAlignment - 1) & -byteAlignment) - base;
        if (start > all.byteSize() || byteSize > all.byteSize() - start) {
            throw new IllegalStateException("shared arena " + memory.path() + " of " + all.byteSize() + " bytes cannot fit "
                    + byteSize + " more bytes (" + next + " used)");
        }
        next = start + byteSize;
        MemorySegment seg = all.asSlice(start, byteSize, byteAlignment);
        prefault(seg);
        return seg;
    }

    /**
     * Touches every page of a new allocation (writing the zero it already holds), so tmpfs backs it
     * now and the transfer path never takes a first-touch page fault — as an engine zero-filling
     * its KV pool would. A file page fault costs far more than a copy of the page (measured in
     * docs/PERFORMANCE.md), so it belongs to set-up, not to a request.
     */
    private static void prefault(MemorySegment seg) {
        for (long off = 0; off < seg.byteSize(); off += PAGE) seg.set(ValueLayout.JAVA_BYTE, off, (byte) 0);
    }

    private static final long PAGE = 4096;

    @Override
    public MemorySegment.Scope scope() {
        return memory.segment().scope();
    }

    /** The backing file. */
    public Path path() {
        return memory.path();
    }

    @Override
    public void close() {
        memory.close();
    }
}
