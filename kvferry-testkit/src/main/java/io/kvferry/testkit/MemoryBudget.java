package io.kvferry.testkit;


import io.kvferry.api.DisaggregationMode;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Refuses a bench whose pools would not fit in memory, before any is allocated: the pools hold every
 * in-flight request's pages, so a large {@code --concurrency} can need more than the machine has, and the
 * kernel's OOM killer would end the run without a word.
 */
public final class MemoryBudget {
    /** The refusal: a user error (exit code 2, the message only), not a crash. */
    public static final class PoolsDoNotFit extends IllegalArgumentException {
        PoolsDoNotFit(String message) {
            super(message);
        }
    }

    /** Leave a fifth of what is available to the JVMs, the page cache and the rest of the machine. */
    static final double USABLE_FRACTION = 0.8;

    private MemoryBudget() {
    }

    /**
     * @param role      named in the message
     * @param pools     rank pools this role allocates in this process
     * @param poolBytes bytes of one pool
     * @param available bytes the machine has available now ({@link #availableBytes()}); negative = unknown, no check
     * @throws PoolsDoNotFit naming the numbers and what to lower
     */
    public static void require(String role, long pools, long poolBytes, long available) {
        if (available < 0) return;
        long need = pools * poolBytes;
        long usable = (long) (available * USABLE_FRACTION);
        if (need > usable) {
            throw new PoolsDoNotFit(String.format(
                    "the %s pools need %s (%d rank pools of %s, sized for --concurrency in-flight requests of "
                            + "--prompt-tokens each) but only %s of the %s available may be used: lower --concurrency "
                            + "or --prompt-tokens, or use a smaller --model",
                    role, gib(need), pools, gib(poolBytes), gib(usable), gib(available)));
        }
    }

    /**
     * A whole bench on this machine (one JVM or {@code --processes}): both roles' pools together, since
     * both are allocated here. Checked before any process starts, so two role processes that each fit
     * cannot together push the machine into the OOM killer.
     */
    public static void requireBothRoles(BenchConfig config, long available) {
        if (available < 0) return;
        long prefill = roleBytes(DisaggregationMode.PREFILL, config, config.prefillTp());
        long decode = roleBytes(DisaggregationMode.DECODE, config, config.decodeTp());
        long need = prefill + decode, usable = (long) (available * USABLE_FRACTION);
        if (need > usable) {
            throw new PoolsDoNotFit(String.format(
                    "the prefill and decode pools need %s together (%s prefill + %s decode, sized for --concurrency "
                            + "in-flight requests of --prompt-tokens each) but only %s of the %s available may be used: "
                            + "lower --concurrency or --prompt-tokens, or use a smaller --model",
                    gib(need), gib(prefill), gib(decode), gib(usable), gib(available)));
        }
    }

    /**
     * As {@link #requireBothRoles(BenchConfig, long)} for one run of several (a sweep point): the refusal
     * starts with {@code where}, so the user knows which run does not fit.
     */
    public static void requireBothRoles(BenchConfig config, long available, String where) {
        try {
            requireBothRoles(config, available);
        } catch (PoolsDoNotFit e) {
            throw new PoolsDoNotFit(where + ": " + e.getMessage());
        }
    }

    /** Bytes of the pools one role allocates for {@code tpRanksHere} of its TP ranks (every dp group, cp rank and stage). */
    public static long roleBytes(DisaggregationMode mode, BenchConfig config, int tpRanksHere) {
        return poolCount(mode, config, tpRanksHere) * poolBytes(mode, config);
    }

    public static long poolCount(DisaggregationMode mode, BenchConfig config, int tpRanksHere) {
        boolean prefill = mode == DisaggregationMode.PREFILL;
        int groups = prefill ? config.prefillDp() : 1, cps = prefill ? config.prefillCp() : 1;
        return (long) groups * cps * config.pp(mode) * tpRanksHere;
    }

    public static long poolBytes(DisaggregationMode mode, BenchConfig config) {
        Workload w = config.workload();
        return RankPool.capacity(config.shape(), w.pageSize(), config.tp(mode), config.pp(mode), w.poolPages(),
                w.concurrency() + 2);
    }

    /** MemAvailable from /proc/meminfo, or -1 where it cannot be read. */
    public static long availableBytes() {
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

    private static String gib(long bytes) {
        return String.format("%.1f GiB", bytes / (1024.0 * 1024 * 1024));
    }
}
