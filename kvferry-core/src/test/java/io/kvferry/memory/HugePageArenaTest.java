package io.kvferry.memory;

import org.junit.jupiter.api.Test;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class HugePageArenaTest {
    @Test
    void largeAllocationsAreZeroedWritableAlignedAndAdvisedSmallOnesArePlain() {
        MemorySegment big;
        try (HugePageArena arena = new HugePageArena()) {
            long size = 5 * HugePageArena.HUGE_PAGE + 12_345;
            big = arena.allocate(size, 64);
            assertEquals(size, big.byteSize());
            for (long off = 0; off < size; off += 4096) assertEquals(0, big.get(ValueLayout.JAVA_BYTE, off));
            big.set(ValueLayout.JAVA_LONG_UNALIGNED, size - 8, 0x0123_4567_89ab_cdefL);
            assertEquals(0x0123_4567_89ab_cdefL, big.get(ValueLayout.JAVA_LONG_UNALIGNED, size - 8));
            if (HugePageArena.unavailableReason() == null) {
                assertEquals(0, big.address() % HugePageArena.HUGE_PAGE, "a pool buffer starts on a huge page");
                if (!"never".equals(HugePageArena.transparentHugePageMode())) assertEquals(5 * HugePageArena.HUGE_PAGE, arena.advisedBytes(), "whole huge pages only");
            }
            long advised = arena.advisedBytes();
            MemorySegment small = arena.allocate(4096, 64);
            assertEquals(0, small.address() % 64);
            small.fill((byte) 7);
            assertEquals(advised, arena.advisedBytes(), "small buffers are not worth a mapping of their own");
            MemorySegment other = arena.allocate(3 * HugePageArena.HUGE_PAGE, 4096);
            other.fill((byte) 1);
            assertEquals(0x0123_4567_89ab_cdefL, big.get(ValueLayout.JAVA_LONG_UNALIGNED, size - 8), "allocations do not overlap");
            assertTrue(other.address() + other.byteSize() <= big.address() || big.address() + big.byteSize() <= other.address());
        }
        assertThrows(IllegalStateException.class, () -> big.get(ValueLayout.JAVA_BYTE, 0), "closing the arena unmaps its buffers");
    }

    @Test
    void badArgumentsAreRefusedByName() {
        try (HugePageArena arena = new HugePageArena()) {
            assertTrue(assertThrows(IllegalArgumentException.class, () -> arena.allocate(-1, 8)).getMessage().contains("negative"));
            assertTrue(assertThrows(IllegalArgumentException.class, () -> arena.allocate(8, 3)).getMessage().contains("power of two"));
        }
    }
}
