package io.kvferry.transfer;

import io.kvferry.api.KVArgs;
import io.kvferry.api.StateType;
import io.kvferry.memory.SharedArena;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;

/**
 * Buffers of one test rank: {@code buffers} KV buffers of {@code pages} pages, two aux buffers and
 * one mamba-like state component with two tensors. Each buffer is surrounded by canary bytes so
 * a write outside registered memory is caught.
 */
final class TestRank implements AutoCloseable {
    static final long CANARY = 0x5A5A5A5A5A5A5A5AL;
    static final int GUARD = 256;
    /** Shared memory by default, so every backend (shm included) can serve these buffers. */
    final Arena arena;
    final long pageBytes;
    final int pages;
    final int rows;
    final MemorySegment[] kvWithGuard;
    final MemorySegment[] kv;
    final MemorySegment[] aux;
    final MemorySegment[] state;
    final long[] auxItem = {64, 128};
    final long[] stateItem = {256, 512};

    TestRank(int buffers, int pages, long pageBytes, int rows) {
        this(buffers, pages, pageBytes, rows, false);
    }

    /** @param privateMemory allocate from a private arena (shm cannot offer it) instead of shared memory */
    TestRank(int buffers, int pages, long pageBytes, int rows, boolean privateMemory) {
        long bytes = buffers * (pages * pageBytes + 2L * GUARD + 64) + (64 + 128 + 256 + 512) * (long) rows + 4 * 64;
        this.arena = privateMemory ? Arena.ofShared() : SharedArena.open("test-rank", bytes);
        this.pageBytes = pageBytes;
        this.pages = pages;
        this.rows = rows;
        kvWithGuard = new MemorySegment[buffers];
        kv = new MemorySegment[buffers];
        for (int b = 0; b < buffers; b++) {
            kvWithGuard[b] = arena.allocate(pages * pageBytes + 2L * GUARD, 64);
            kvWithGuard[b].fill((byte) 0x5A);
            kv[b] = kvWithGuard[b].asSlice(GUARD, pages * pageBytes);
            kv[b].fill((byte) 0);
        }
        aux = new MemorySegment[]{arena.allocate(auxItem[0] * rows, 64), arena.allocate(auxItem[1] * rows, 64)};
        state = new MemorySegment[]{arena.allocate(stateItem[0] * rows, 64), arena.allocate(stateItem[1] * rows, 64)};
    }

    KVArgs args(int engineRank, int pageSize) {
        KVArgs a = new KVArgs();
        a.engineRank = engineRank;
        a.pageSize = pageSize;
        a.kvCacheDtypeStr = "bf16";
        for (MemorySegment b : kv) a.addKvBuffer(b, pageBytes);
        a.addAuxBuffer(aux[0], auxItem[0]).addAuxBuffer(aux[1], auxItem[1]);
        a.addStateComponent(StateType.MAMBA, List.of(state[0], state[1]), List.of(stateItem[0], stateItem[1]));
        return a;
    }

    /** Fills page {@code page} of every buffer with bytes derived from (tag, buffer, logical page). */
    void fillPage(int page, long tag, int logical) {
        for (int b = 0; b < kv.length; b++) {
            MemorySegment s = kv[b].asSlice(page * pageBytes, pageBytes);
            for (long o = 0; o < pageBytes; o += 8) s.set(ValueLayout.JAVA_LONG_UNALIGNED, o, value(tag, b, logical, o));
        }
    }

    boolean pageMatches(int page, long tag, int logical) {
        for (int b = 0; b < kv.length; b++) {
            MemorySegment s = kv[b].asSlice(page * pageBytes, pageBytes);
            for (long o = 0; o < pageBytes; o += 8) {
                if (s.get(ValueLayout.JAVA_LONG_UNALIGNED, o) != value(tag, b, logical, o)) return false;
            }
        }
        return true;
    }

    boolean pageIsZero(int page) {
        for (MemorySegment b : kv) {
            MemorySegment s = b.asSlice(page * pageBytes, pageBytes);
            for (long o = 0; o < pageBytes; o += 8) if (s.get(ValueLayout.JAVA_LONG_UNALIGNED, o) != 0) return false;
        }
        return true;
    }

    /** Whether page {@code page} of KV buffer {@code buffer} holds {@code value} in every byte. */
    boolean pageHolds(int buffer, int page, byte value) {
        MemorySegment s = kv[buffer].asSlice(page * pageBytes, pageBytes);
        for (long o = 0; o < pageBytes; o++) if (s.get(ValueLayout.JAVA_BYTE, o) != value) return false;
        return true;
    }

    void fillRow(MemorySegment[] bufs, long[] items, int row, long tag) {
        for (int b = 0; b < bufs.length; b++) {
            MemorySegment s = bufs[b].asSlice(row * items[b], items[b]);
            for (long o = 0; o < items[b]; o += 8) s.set(ValueLayout.JAVA_LONG_UNALIGNED, o, value(tag, 100 + b, row, o));
        }
    }

    /** True when row {@code row} of {@code bufs} holds what {@link #fillRow} wrote with {@code srcRow}. */
    boolean rowMatches(MemorySegment[] bufs, long[] items, int row, long tag, int srcRow) {
        for (int b = 0; b < bufs.length; b++) {
            MemorySegment s = bufs[b].asSlice(row * items[b], items[b]);
            for (long o = 0; o < items[b]; o += 8) {
                if (s.get(ValueLayout.JAVA_LONG_UNALIGNED, o) != value(tag, 100 + b, srcRow, o)) return false;
            }
        }
        return true;
    }

    boolean canariesIntact() {
        for (MemorySegment g : kvWithGuard) {
            for (long o = 0; o < GUARD; o += 8) {
                if (g.get(ValueLayout.JAVA_LONG_UNALIGNED, o) != CANARY) return false;
                if (g.get(ValueLayout.JAVA_LONG_UNALIGNED, g.byteSize() - GUARD + o) != CANARY) return false;
            }
        }
        return true;
    }

    static long value(long tag, int buffer, int logical, long offset) {
        long h = tag * 0x9E3779B97F4A7C15L + buffer * 0xC2B2AE3D27D4EB4FL + logical * 0x165667B19E3779F9L + offset;
        return h ^ (h >>> 31);
    }

    @Override
    public void close() {
        arena.close();
    }
}
