package io.kvferry.bench;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/** Single-thread MemorySegment.copy bandwidth, measured in the same run as the bench it is compared with. */
public final class MemcpyBaseline {
    private MemcpyBaseline() {}

    /** Copies {@code itemBytes}-sized items from one 256 MiB region to another a few times; returns GB/s. */
    public static double measure(long itemBytes) {
        long total = 256L << 20;
        long items = Math.max(1, total / itemBytes);
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment src = arena.allocate(items * itemBytes, 64);
            MemorySegment dst = arena.allocate(items * itemBytes, 64);
            src.fill((byte) 7);
            dst.fill((byte) 0);
            double best = 0;
            for (int round = 0; round < 5; round++) {
                long t0 = System.nanoTime();
                for (long i = 0; i < items; i++) {
                    // Reverse item order on the destination so it is a scatter, like fragmented pages.
                    MemorySegment.copy(src, i * itemBytes, dst, (items - 1 - i) * itemBytes, itemBytes);
                }
                long ns = System.nanoTime() - t0;
                best = Math.max(best, items * itemBytes / (double) ns);
            }
            return best;
        }
    }
}
