package io.kvferry.transport.shm;

import io.kvferry.api.KVFerrySettings;
import io.kvferry.api.Knob;

import java.util.concurrent.ExecutorService;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Helper threads that let one large shm write copy on several cores at once. A write splits its
 * ops into {@code lanes} contiguous ranges of about equal bytes; the writing thread offers lanes
 * 1..n-1 to the helpers, copies lane 0 itself, then runs every lane no helper has picked up yet,
 * and finally waits for the lanes a helper is running. So a write never waits for a queue (four
 * transfer workers splitting at once just copy more of their own lanes) and helpers never wait
 * on anything, which rules out deadlock.
 *
 * <p>Why: one core's {@code memcpy} is not the machine's memory bandwidth, and a decode waiting
 * for one long prompt's KV waits for the slowest copy. Owned by one {@link ShmSource} (one
 * prefill rank); helpers are daemon threads {@code kvferry-shm-copy-…}, stopped by {@link #close}.
 */
final class CopyLanes implements AutoCloseable {
    /** Below this many bytes per lane, splitting costs more than it gains. */
    static final long MIN_LANE_BYTES = 4L << 20;

    private final int lanes;
    private final ExecutorService helpers;

    /** @param lanes threads copying one write, the writer included (1 = no helpers) */
    CopyLanes(int lanes, String name) {
        this.lanes = Math.max(1, lanes);
        if (this.lanes == 1) {
            helpers = null;
        } else {
            AtomicInteger n = new AtomicInteger();
            helpers = new ThreadPoolExecutor(this.lanes - 1, this.lanes - 1, 0, TimeUnit.MILLISECONDS, new LinkedBlockingQueue<>(),
                    r -> Thread.ofPlatform().daemon().name("kvferry-shm-copy-" + name + "-" + n.getAndIncrement()).unstarted(r));
        }
    }

    /** Lanes for a write of {@code bytes}: 1 when small or when this source has no helpers. */
    int lanesFor(long bytes) {
        return (int) Math.max(1, Math.min(lanes, bytes / MIN_LANE_BYTES));
    }

    /** Runs {@code task} on a helper; false when none can take it (closed), so the caller runs it. */
    boolean offer(Runnable task) {
        if (helpers == null) return false;
        try {
            helpers.execute(task);
            return true;
        } catch (RejectedExecutionException e) {
            return false;
        }
    }

    /** Threads copying one large write, the transfer worker included; unset = the number of cores, at most 4. */
    static final Knob COPY_THREADS = new Knob("kvferry.shm.copyThreads", "KVFERRY_SHM_COPY_THREADS", "",
            "shm: threads copying one large write, the transfer worker included (unset: cores, at most 4)", "");

    static int configured(KVFerrySettings settings) {
        if (!settings.isSet(COPY_THREADS)) return Math.min(4, Runtime.getRuntime().availableProcessors());
        return settings.getInt(COPY_THREADS, 1, 64);
    }

    @Override
    public void close() {
        // Lanes already queued still run (their writer waits for them); new offers are refused.
        if (helpers != null) helpers.shutdown();
    }
}
