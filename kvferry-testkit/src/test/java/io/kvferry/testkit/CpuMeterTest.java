package io.kvferry.testkit;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.concurrent.atomic.AtomicBoolean;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** CPU windows attribute threads to a role by name, and count a busy thread's time. */
@Timeout(60)
class CpuMeterTest {
    @Test
    void threadsCountToTheirRoleByName() {
        assertEquals("prefill", CpuMeter.group("kvferry-prefill-worker-0-1"));
        assertEquals("prefill", CpuMeter.group("kvferry-ucx-src-r0"));
        assertEquals("prefill", CpuMeter.group(CpuMeter.PREFILL_DRIVER_PREFIX + 3));
        assertEquals("decode", CpuMeter.group("kvferry-decode-reader-0-127.0.0.1:1"));
        assertEquals("decode", CpuMeter.group(CpuMeter.DECODE_DRIVER_PREFIX + 0));
        assertEquals("other", CpuMeter.group("kvferry-registry-1"));
        assertEquals("other", CpuMeter.group(null));
    }

    @Test
    void aThreadKeepsTheRoleItHadWhenTheWindowOpened() {
        assertEquals("prefill", CpuMeter.roleInWindow(CpuMeter.PREFILL_DRIVER_PREFIX + 0, "main"),
                "a driver that gave its name back before the last mark still counts to its role");
        assertEquals("decode", CpuMeter.roleInWindow(null, "kvferry-decode-reader-0-x"), "started inside the window");
        assertEquals("decode", CpuMeter.roleInWindow("Thread-3", CpuMeter.DECODE_DRIVER_PREFIX + 1), "named inside the window");
        assertEquals("other", CpuMeter.roleInWindow("G1 Refine#0", "G1 Refine#0"));
    }

    @Test
    void aBusyDecodeThreadShowsInTheDecodeGroupAndTheProcess() throws Exception {
        CpuMeter.Mark start = CpuMeter.mark();
        AtomicBoolean stop = new AtomicBoolean();
        Thread t = Thread.ofPlatform().name(CpuMeter.DECODE_DRIVER_PREFIX + "test").start(() -> {
            while (!stop.get()) Thread.onSpinWait();
        });
        try {
            // Spins until the window shows 20 ms of its CPU (bounded by the test's timeout, not by a guess of speed).
            CpuMeter.Window w;
            do {
                w = CpuMeter.between(start, CpuMeter.mark());
            } while (w.decodeNanos() < 20_000_000L);
            assertTrue(w.processNanos() >= w.decodeNanos(), "the process includes its threads: " + w);
            assertTrue(w.prefillNanos() < w.decodeNanos(), "nothing of it counts to prefill: " + w);
            assertTrue(w.wallNanos() > 0);
        } finally {
            stop.set(true);
            t.join();
        }
    }
}
