package io.kvferry.transport.shm;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;

/**
 * The shared fence page between one decode manager and its shm writers. Header: a 16-byte nonce
 * (proof that both sides mapped the same file). Then one 64-byte slot per link: {@code revoked}
 * (set by the decode when the link is gone), {@code busy} (writes in progress, counted by the
 * prefill), and the writer's pid and start time (so a decode can tell a dead writer's stale count).
 *
 * <p>Protocol (Dekker-style, sequentially consistent atomics on shared memory): a writer increments
 * {@code busy}, then reads {@code revoked}; if set it decrements and stops, else it copies and
 * decrements. The decode sets {@code revoked}, then waits for {@code busy == 0}. Either the writer
 * sees the revocation or the decode sees the write in progress, so once the decode's wait ends no
 * copy through that slot is running or can start.
 */
final class Fence {
    static final long HEADER = 64;
    static final long SLOT = 64;
    private static final long REVOKED = 0, BUSY = 8, WRITER_PID = 16, WRITER_START = 24;
    private static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();

    private Fence() {}

    static long slotOffset(int slot) {
        return HEADER + slot * SLOT;
    }

    static int slots(long fileSize) {
        return (int) ((fileSize - HEADER) / SLOT);
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

    static void claim(MemorySegment page, long slot, long pid, long startMillis) {
        LONG.setVolatile(page, slot + WRITER_PID, pid);
        LONG.setVolatile(page, slot + WRITER_START, startMillis);
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
}
