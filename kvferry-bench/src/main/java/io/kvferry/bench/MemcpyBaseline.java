package io.kvferry.bench;

import io.kvferry.memory.HugePageArena;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Arrays;

/** Single-thread MemorySegment.copy bandwidth, measured in the same run as the bench it is compared with. */
public final class MemcpyBaseline {
    private MemcpyBaseline() {}

    /**
     * Copies {@code itemBytes}-sized items from one 256 MiB region to another: one warm-up round,
     * then {@link #ROUNDS} timed ones; returns their median in GB/s. The median, not the best: what it
     * is compared with (the bench's data path) is an average over the whole run, and on a shared VM
     * single rounds swing by ±30 %.
     */
    public static double measure(long itemBytes) {
        return median(rounds(itemBytes));
    }

    /** The median of rounds from several measurements (the bench measures before and after its transfers). */
    public static double median(double[]... measurements) {
        double[] all = Arrays.stream(measurements).flatMapToDouble(Arrays::stream).sorted().toArray();
        if (all.length == 0) return 0;
        return all.length % 2 == 1 ? all[all.length / 2] : (all[all.length / 2 - 1] + all[all.length / 2]) / 2;
    }

    /** {@link #ROUNDS} timed rounds after a warm-up one, GB/s each. */
    public static double[] rounds(long itemBytes) {
        return rounds(itemBytes, false);
    }

    /** @param hugePages the buffers come from a {@link HugePageArena}, like the bench's pools with {@code --huge-pages on} */
    public static double[] rounds(long itemBytes, boolean hugePages) {
        long total = 256L << 20;
        long items = Math.max(1, total / itemBytes);
        try (Arena arena = hugePages ? new HugePageArena() : Arena.ofConfined()) {
            MemorySegment src = arena.allocate(items * itemBytes, 64);
            MemorySegment dst = arena.allocate(items * itemBytes, 64);
            src.fill((byte) 7);
            dst.fill((byte) 0);
            double[] rounds = new double[ROUNDS];
            for (int round = -1; round < ROUNDS; round++) {
                long t0 = System.nanoTime();
                for (long i = 0; i < items; i++) {
                    // Reverse item order on the destination so it is a scatter, like fragmented pages.
                    MemorySegment.copy(src, i * itemBytes, dst, (items - 1 - i) * itemBytes, itemBytes);
                }
                long ns = System.nanoTime() - t0;
                if (round >= 0) rounds[round] = items * itemBytes / (double) ns;
            }
            return rounds;
        }
    }

    public static final int ROUNDS = 7;
}
