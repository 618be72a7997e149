package io.kvferry.memory;

import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The start times shared-memory file names and fences record, and {@link SharedMemory#provablyGone}'s reading of them:
 * since boot, from /proc, so a step of the wall clock between two processes' start-ups (which moved the JDK's
 * startInstant by the step) cannot make one take the other's live files for a dead process's.
 */
class ProcessStartTest {

    @Test
    void aStartIsMillisecondsSinceBootFromProcNotTheWallClock() throws Exception {
        String stat = Files.readString(Path.of("/proc/self/stat"));
        long ticks = Long.parseLong(stat.substring(stat.lastIndexOf(')') + 2).split(" ")[19]);
        assertEquals(ticks * 10, SharedMemory.startMillis());
        assertEquals(SharedMemory.startMillis(), SharedMemory.startMillis(ProcessHandle.current().pid()));
        double uptimeMs = Double.parseDouble(Files.readString(Path.of("/proc/uptime")).split(" ")[0]) * 1000;
        assertTrue(SharedMemory.startMillis() > 0 && SharedMemory.startMillis() <= uptimeMs + 1000,
                "since boot (uptime " + uptimeMs + " ms), not epoch milliseconds: " + SharedMemory.startMillis());
    }

    @Test
    void aLiveProcessIsGoneOnlyWhenItsStartDiffersAndReadable() throws Exception {
        Process child = new ProcessBuilder("sleep", "60").start();
        try {
            long pid = child.pid(), ns = SharedMemory.pidNamespace();
            long start = SharedMemory.startMillis(pid);
            assertTrue(start > 0, "its start read from /proc: " + start);
            assertFalse(SharedMemory.provablyGone(pid, start, ns), "alive, its own start");
            assertFalse(SharedMemory.provablyGone(pid, 0, ns), "alive, no start recorded");
            assertTrue(SharedMemory.provablyGone(pid, start + 60_000, ns), "its pid used again by another process");
            assertFalse(SharedMemory.provablyGone(pid, SharedMemory.EPOCH_RECORDED + 1, ns), "an older kvferry's epoch start: not comparable");
            assertFalse(SharedMemory.provablyGone(pid, start + 60_000, ns + 1), "another pid namespace: never provable");
            child.destroyForcibly();
            assertTrue(child.waitFor(30, TimeUnit.SECONDS));
            assertTrue(SharedMemory.provablyGone(pid, start, ns), "exited");
        } finally {
            child.destroyForcibly();
        }
    }
}
