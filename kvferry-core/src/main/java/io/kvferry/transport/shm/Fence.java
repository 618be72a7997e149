package io.kvferry.transport.shm;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
import java.util.List;

/**
 * The shared fence file between one decode manager and its shm writers (little-endian, version 2).
 *
 * <pre>
 *   header (64 bytes): nonce (2 × i64) | magic u32 "KFFN" | version u32 = 2 | slots u32 | files u32 | reserved
 *   slots × 64 bytes:  revoked i64 | busy i64 | writer pid i64 | writer start ms i64 | writer pid namespace i64 | reserved
 *   files × 32 bytes:  device major u32 | device minor u32 | inode u64 | size u64 | reserved
 * </pre>
 *
 * The nonce proves both sides mapped the same file (the offer carries it too). The file table
 * lists every pool file the decode offers, by identity: the prefill maps an offered file only if
 * the file it opened is listed here and belongs to the fence's owner (see {@link ShmSource}). The
 * decode writes header and table once, before its first offer, and never changes them.
 *
 * <p>Slot protocol (Dekker-style, sequentially consistent atomics on shared memory): a writer
 * increments {@code busy}, then reads {@code revoked}; if set it decrements and stops, else it
 * copies and decrements. The decode sets {@code revoked}, then waits for {@code busy == 0}. Either
 * the writer sees the revocation or the decode sees the write in progress, so once the decode's
 * wait ends no copy through that slot is running or can start. The writer's pid, start time and
 * pid namespace let the decode tell a dead writer's stale count (see {@code SharedMemory.provablyGone}).
 */
final class Fence {
    static final long HEADER = 64;
    static final long SLOT = 64;
    static final long FILE = 32;
    static final int MAGIC = 0x4E46464B; // "KFFN"
    static final int VERSION = 2;
    /** Files one fence may list; more than any pool needs, and it bounds what a prefill maps to read a fence. */
    static final int MAX_FILES = 1 << 16;
    static final int MAX_SLOTS = 4095;
    private static final long MAGIC_AT = 16, VERSION_AT = 20, SLOTS_AT = 24, FILES_AT = 28;
    private static final long REVOKED = 0, BUSY = 8, WRITER_PID = 16, WRITER_START = 24, WRITER_PID_NS = 32;
    private static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();

    /** One listed pool file. */
    record FileId(int devMajor, int devMinor, long inode, long size) {}

    private Fence() {}

    static long size(int slots, int files) {
        return HEADER + slots * SLOT + files * FILE;
    }

    static long slotOffset(int slot) {
        return HEADER + slot * SLOT;
    }

    // ---- layout (decode writes once, prefill checks)

    static void init(MemorySegment fence, long nonceHi, long nonceLo, int slots, List<FileId> files) {
        fence.set(ValueLayout.JAVA_LONG, 0, nonceHi);
        fence.set(ValueLayout.JAVA_LONG, 8, nonceLo);
        fence.set(ValueLayout.JAVA_INT, MAGIC_AT, MAGIC);
        fence.set(ValueLayout.JAVA_INT, VERSION_AT, VERSION);
        fence.set(ValueLayout.JAVA_INT, SLOTS_AT, slots);
        fence.set(ValueLayout.JAVA_INT, FILES_AT, files.size());
        long at = HEADER + slots * SLOT;
        for (FileId f : files) {
            fence.set(ValueLayout.JAVA_INT, at, f.devMajor());
            fence.set(ValueLayout.JAVA_INT, at + 4, f.devMinor());
            fence.set(ValueLayout.JAVA_LONG, at + 8, f.inode());
            fence.set(ValueLayout.JAVA_LONG, at + 16, f.size());
            at += FILE;
        }
        VarHandle.fullFence();
    }

    /**
     * Null when {@code fence} is a well-formed fence of exactly its size, else what is wrong. The
     * nonce is checked separately (a wrong nonce means another mount namespace, not a bad file).
     */
    static String problem(MemorySegment fence) {
        if (fence.byteSize() < HEADER) return "it is " + fence.byteSize() + " bytes, shorter than a fence header";
        int magic = fence.get(ValueLayout.JAVA_INT, MAGIC_AT), version = fence.get(ValueLayout.JAVA_INT, VERSION_AT);
        if (magic != MAGIC) return "it is not a kvferry fence (magic 0x" + Integer.toHexString(magic) + ")";
        if (version != VERSION) return "fence version " + version + ", this kvferry reads version " + VERSION;
        int slots = slots(fence), files = files(fence);
        if (slots < 1 || slots > MAX_SLOTS || files < 0 || files > MAX_FILES) {
            return "it declares " + Integer.toUnsignedString(slots) + " slots and " + Integer.toUnsignedString(files) + " files";
        }
        if (fence.byteSize() != size(slots, files)) {
            return "it is " + fence.byteSize() + " bytes but its " + slots + " slots and " + files + " files take " + size(slots, files);
        }
        return null;
    }

    static int slots(MemorySegment fence) {
        return fence.get(ValueLayout.JAVA_INT, SLOTS_AT);
    }

    static int files(MemorySegment fence) {
        return fence.get(ValueLayout.JAVA_INT, FILES_AT);
    }

    /** Whether a well-formed fence lists this file with exactly this size. */
    static boolean lists(MemorySegment fence, int devMajor, int devMinor, long inode, long size) {
        long at = HEADER + slots(fence) * SLOT;
        for (int i = 0, n = files(fence); i < n; i++, at += FILE) {
            if (fence.get(ValueLayout.JAVA_INT, at) == devMajor && fence.get(ValueLayout.JAVA_INT, at + 4) == devMinor
                    && fence.get(ValueLayout.JAVA_LONG, at + 8) == inode && fence.get(ValueLayout.JAVA_LONG, at + 16) == size) {
                return true;
            }
        }
        return false;
    }

    // ---- writer (prefill)

    /** Registers a copy in progress; false (nothing registered) when the decode revoked the slot. */
    static boolean enter(MemorySegment page, long slot) {
        LONG.getAndAdd(page, slot + BUSY, 1L);
        if ((long) LONG.getVolatile(page, slot + REVOKED) != 0) {
            LONG.getAndAdd(page, slot + BUSY, -1L);
            return false;
        }
        return true;
    }

    static void exit(MemorySegment page, long slot) {
        LONG.getAndAdd(page, slot + BUSY, -1L);
    }

    /** Records who writes through the slot: pid and start time as seen in the writer's pid namespace, and that namespace. */
    static void claim(MemorySegment page, long slot, long pid, long startMillis, long pidNamespace) {
        LONG.setVolatile(page, slot + WRITER_PID_NS, pidNamespace);
        LONG.setVolatile(page, slot + WRITER_START, startMillis);
        LONG.setVolatile(page, slot + WRITER_PID, pid);
    }

    // ---- decode

    static void revoke(MemorySegment page, long slot) {
        LONG.setVolatile(page, slot + REVOKED, 1L);
    }

    static long busy(MemorySegment page, long slot) {
        return (long) LONG.getVolatile(page, slot + BUSY);
    }

    static long writerPid(MemorySegment page, long slot) {
        return (long) LONG.getVolatile(page, slot + WRITER_PID);
    }

    static long writerStart(MemorySegment page, long slot) {
        return (long) LONG.getVolatile(page, slot + WRITER_START);
    }

    static long writerPidNamespace(MemorySegment page, long slot) {
        return (long) LONG.getVolatile(page, slot + WRITER_PID_NS);
    }
}
