package io.kvferry.bench;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Refuses a bench whose pools would not fit in memory, before any is allocated: the pools hold every
 * in-flight request's pages, so a large {@code --concurrency} can need more than the machine has, and the
 * kernel's OOM killer would end the run without a word.
 */
final class MemoryBudget {
    /** Leave a fifth of what is available to the JVMs, the page cache and the rest of the machine. */
    static final double USABLE_FRACTION = 0.8;

    private MemoryBudget() {
    }

    /**
     * @param role      named in the message
     * @param pools     rank pools this role allocates in this process
     * @param poolBytes bytes of one pool
     * @param available bytes the machine has available now ({@link #availableBytes()}); negative = unknown, no check
     * @throws IllegalArgumentException naming the numbers and what to lower
     */
    static void require(String role, long pools, long poolBytes, long available) {
        if (available < 0) return;
        long need = pools * poolBytes;
        long usable = (long) (available * USABLE_FRACTION);
        if (need > usable) {
            throw new IllegalArgumentException(String.format(
                    "the %s pools need %s (%d rank pools of %s, sized for --concurrency in-flight requests of "
                            + "--prompt-tokens each) but only %s of the %s available may be used: lower --concurrency "
                            + "or --prompt-tokens, or use a smaller --model",
                    role, mib(need), pools, mib(poolBytes), mib(usable), mib(available)));
        }
    }

    /** MemAvailable from /proc/meminfo, or -1 where it cannot be read. */
    static long availableBytes() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/meminfo"))) {
                if (line.startsWith("MemAvailable:")) {
                    String[] f = line.trim().split("\\s+");
                    return Long.parseLong(f[1]) * 1024;
                }
            }
        } catch (IOException | RuntimeException e) {
            // not Linux, or an unreadable procfs: no check rather than a wrong one
        }
        return -1;
    }

    private static String mib(long bytes) {
        return String.format("%.1f GiB", bytes / (1024.0 * 1024 * 1024));
    }
}
