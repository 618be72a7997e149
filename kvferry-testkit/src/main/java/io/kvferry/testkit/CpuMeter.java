package io.kvferry.testkit;

import com.fasterxml.jackson.annotation.JsonProperty;
import com.sun.management.OperatingSystemMXBean;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadInfo;
import java.lang.management.ThreadMXBean;
import java.util.HashMap;
import java.util.Map;

/**
 * CPU time over a measured window, for the per-room CPU cost: the whole process's (what a role JVM
 * spends, GC and JIT included) and, within one JVM holding both roles, per thread group by name:
 * prefill = {@code kvferry-prefill-*}, {@code kvferry-ucx-src*}, {@code kvferry-shm-copy-*} and the
 * bench's prefill drivers ({@code bench-prefill-*}); decode = {@code kvferry-decode-*},
 * {@code kvferry-ucx-dst*} and {@code bench-decode-*}; everything else (GC, JIT, the registry, the
 * bench's own threads) is "other". A thread that ended inside the window loses its CPU time
 * (the library's threads live as long as their manager, so this misses little).
 */
public final class CpuMeter {
    private static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();

    private CpuMeter() {}

    /**
     * CPU nanoseconds spent in a window.
     *
     * @param wallNanos   the window's length
     * @param processNanos the whole process (-1 where the JVM cannot tell)
     * @param prefillNanos threads of the prefill group
     * @param decodeNanos  threads of the decode group
     * @param otherNanos   the other threads that could be measured
     */
    public record Window(@JsonProperty("wall_ns") long wallNanos, @JsonProperty("process_ns") long processNanos,
                         @JsonProperty("prefill_threads_ns") long prefillNanos,
                         @JsonProperty("decode_threads_ns") long decodeNanos,
                         @JsonProperty("other_threads_ns") long otherNanos) {}

    /** One moment: process CPU and each live thread's CPU, by thread id. */
    public record Mark(long atNanos, long processNanos, Map<Long, Long> threadNanos, Map<Long, String> threadNames) {}

    public static Mark mark() {
        long now = System.nanoTime();
        Map<Long, Long> cpu = new HashMap<>();
        Map<Long, String> names = new HashMap<>();
        if (THREADS.isThreadCpuTimeSupported()) {
            long[] ids = THREADS.getAllThreadIds();
            ThreadInfo[] infos = THREADS.getThreadInfo(ids);
            for (int i = 0; i < ids.length; i++) {
                long t = THREADS.getThreadCpuTime(ids[i]);
                if (t < 0 || infos[i] == null) continue; // ended meanwhile, or measurement off
                cpu.put(ids[i], t);
                names.put(ids[i], infos[i].getThreadName());
            }
        }
        return new Mark(now, processCpuNanos(), cpu, names);
    }

    /** The window between two marks of the same process. */
    public static Window between(Mark start, Mark end) {
        long prefill = 0, decode = 0, other = 0;
        for (Map.Entry<Long, Long> e : end.threadNanos().entrySet()) {
            long spent = e.getValue() - start.threadNanos().getOrDefault(e.getKey(), 0L);
            if (spent <= 0) continue;
            switch (roleInWindow(start.threadNames().get(e.getKey()), end.threadNames().get(e.getKey()))) {
                case "prefill" -> prefill += spent;
                case "decode" -> decode += spent;
                default -> other += spent;
            }
        }
        long process = start.processNanos() < 0 || end.processNanos() < 0 ? -1 : end.processNanos() - start.processNanos();
        return new Window(end.atNanos() - start.atNanos(), process, prefill, decode, other);
    }

    /**
     * The group of a thread over a window: by its name at the start when that names a role (a bench
     * driver takes its role's name for its run and gives it back when done, possibly before the
     * window's last mark: at 10,000 rooms in flight the prefill driver finished ahead of the decode's
     * last verification and all its CPU was counted as "other"), else by its name at the end (threads
     * started or named inside the window).
     */
    static String roleInWindow(String startName, String endName) {
        String atStart = group(startName);
        return atStart.equals("other") ? group(endName) : atStart;
    }

    /** prefill, decode or other, by thread name. */
    public static String group(String name) {
        if (name == null) return "other";
        if (name.startsWith("kvferry-prefill-") || name.startsWith("kvferry-ucx-src") || name.startsWith("kvferry-shm-copy-")
                || name.startsWith(PREFILL_DRIVER_PREFIX)) {
            return "prefill";
        }
        if (name.startsWith("kvferry-decode-") || name.startsWith("kvferry-ucx-dst") || name.startsWith(DECODE_DRIVER_PREFIX)) {
            return "decode";
        }
        return "other";
    }

    /** Names the bench's drivers run under while they drive (so their CPU counts to their role). */
    public static final String PREFILL_DRIVER_PREFIX = "bench-prefill-driver-";
    public static final String DECODE_DRIVER_PREFIX = "bench-decode-driver-";

    /** This process's CPU time (all threads, user + system), or -1 where the JVM cannot tell. */
    public static long processCpuNanos() {
        OperatingSystemMXBean os = ManagementFactory.getPlatformMXBean(OperatingSystemMXBean.class);
        return os == null ? -1 : os.getProcessCpuTime();
    }
}
