package io.kvferry.chaos;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Samples another process's resident memory and thread count from {@code /proc/PID/status}
 * ({@code VmRSS}, {@code Threads}) on its own thread, keeping the highest values seen: what
 * {@code hostile-peer} reports for the prefill before, during and after its attacks.
 */
final class ProcessUsage implements AutoCloseable {
    /** One reading: resident set in MiB and threads; -1 each when the process is gone. */
    record Sample(long rssMb, long threads) {}

    private final Path status;
    private final AtomicLong peakRssKb = new AtomicLong(-1), peakThreads = new AtomicLong(-1);
    private final Thread sampler;
    private volatile boolean running = true;

    /** Starts sampling {@code pid} every {@code periodMillis}. */
    ProcessUsage(long pid, long periodMillis) {
        this.status = Path.of("/proc", Long.toString(pid), "status");
        this.sampler = Thread.ofPlatform().daemon().name("chaos-usage-" + pid).start(() -> {
            while (running) {
                long[] s = read();
                if (s[0] >= 0) peakRssKb.accumulateAndGet(s[0], Math::max);
                if (s[1] >= 0) peakThreads.accumulateAndGet(s[1], Math::max);
                try {
                    Thread.sleep(periodMillis);
                } catch (InterruptedException e) {
                    return;
                }
            }
        });
    }

    /** A reading now (also counted in the peak). */
    Sample now() {
        long[] s = read();
        if (s[0] >= 0) peakRssKb.accumulateAndGet(s[0], Math::max);
        if (s[1] >= 0) peakThreads.accumulateAndGet(s[1], Math::max);
        return new Sample(s[0] < 0 ? -1 : s[0] / 1024, s[1]);
    }

    /** The highest values seen since sampling started. */
    Sample peak() {
        long kb = peakRssKb.get();
        return new Sample(kb < 0 ? -1 : kb / 1024, peakThreads.get());
    }

    /** {VmRSS in kB, Threads}, -1 each when the process is gone. */
    private long[] read() {
        long rss = -1, threads = -1;
        try {
            for (String line : Files.readAllLines(status)) {
                if (line.startsWith("VmRSS:")) rss = Long.parseLong(line.substring(6).trim().split("\\s+")[0]);
                else if (line.startsWith("Threads:")) threads = Long.parseLong(line.substring(8).trim());
            }
        } catch (IOException | RuntimeException gone) {
            return new long[]{-1, -1};
        }
        return new long[]{rss, threads};
    }

    @Override
    public void close() {
        running = false;
        sampler.interrupt();
        try {
            sampler.join(2000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
