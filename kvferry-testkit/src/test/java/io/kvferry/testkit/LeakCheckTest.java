package io.kvferry.testkit;


import org.junit.jupiter.api.Test;

import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.concurrent.CountDownLatch;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The leak accounting must see a leaked thread, socket and native buffer, and forget them once released. */
class LeakCheckTest {
    @Test
    void detectsLeakedThreadSocketAndNativeMemoryAndForgetsReleasedOnes() throws Exception {
        // Earlier tests in this JVM may leave unreachable direct buffers; a collection during the check
        // would free them and hide the 4 MiB below. Collect (and let the cleaner run) first.
        settleNativeMemory();
        LeakCheck.Snapshot base = LeakCheck.baseline();
        CountDownLatch stop = new CountDownLatch(1);
        Thread leakedThread = Thread.ofPlatform().daemon().name("kvferry-leak-test").start(() -> {
            try {
                stop.await();
            } catch (InterruptedException ignored) {
                // exit
            }
        });
        ServerSocket server = new ServerSocket(0, 1, InetAddress.getLoopbackAddress());
        Socket client = new Socket(InetAddress.getLoopbackAddress(), server.getLocalPort());
        Socket accepted = server.accept();
        ByteBuffer leakedNative = ByteBuffer.allocateDirect(4 << 20);

        LeakCheck.Leaks leaks = LeakCheck.since(base, 100);
        assertEquals(1, leaks.threads(), () -> "leaked thread not seen: " + leaks);
        assertTrue(leaks.details().toString().contains("kvferry-leak-test"), () -> leaks.details().toString());
        if (base.sockets() >= 0) assertEquals(3, leaks.sockets(), () -> "listener + both ends of a connection: " + leaks);
        assertTrue(leaks.nativeBytes() >= 4 << 20, () -> "4 MiB direct buffer not seen: " + leaks);
        assertTrue(leaks.total() >= 3, () -> "leaks must count into leaked: " + leaks);

        stop.countDown();
        leakedThread.join(2000);
        accepted.close();
        client.close();
        server.close();
        LeakCheck.Leaks after = LeakCheck.since(base, 2000);
        assertEquals(0, after.threads(), () -> "an exited thread is not a leak: " + after);
        assertEquals(0, after.sockets(), () -> "closed sockets are not a leak: " + after);
        assertTrue(leakedNative.capacity() > 0); // still referenced: its memory is still counted
        assertTrue(after.nativeBytes() >= 4 << 20, () -> "a live direct buffer is still native memory: " + after);
    }

    /** Direct memory only the garbage collector still has to return (nothing references it) is not a leak. */
    @Test
    void anUnreachableDirectBufferIsNoLeak() throws Exception {
        settleNativeMemory();
        LeakCheck.Snapshot base = LeakCheck.baseline();
        long held = allocateAndDrop(1 << 20);
        assertTrue(held >= 1 << 20);
        LeakCheck.Leaks leaks = LeakCheck.since(base, 5000);
        assertEquals(0, leaks.nativeBytes(), () -> leaks.toString());
    }

    /**
     * Collects until native memory stops falling: two rounds in a row (a collection, then a wait of
     * 100 ms, 400 ms, then 1.6 s) that free nothing more, 30 s at most. Three collections 100 ms apart stood for this: the cleaner
     * thread, which returns an unreachable buffer's memory after a collection found it, may not run within them on a
     * loaded machine, and a buffer freed during the check then hid the 4 MiB the first test must see.
     */
    private static void settleNativeMemory() throws InterruptedException {
        long deadline = System.nanoTime() + 30_000_000_000L;
        long last = Long.MAX_VALUE;
        int still = 0;
        long wait = 100;
        while (still < 2 && System.nanoTime() < deadline) {
            System.gc();
            Thread.sleep(wait);
            long now = LeakCheck.snapshot().nativeBytes();
            if (now < last) {
                still = 0;
                wait = 100;
            } else {
                still++;
                wait = Math.min(wait * 4, 1600);
            }
            last = Math.min(last, now);
        }
    }

    private static long allocateAndDrop(int bytes) {
        ByteBuffer b = ByteBuffer.allocateDirect(bytes);
        b.put(0, (byte) 1);
        return b.capacity();
    }

    @Test
    void nothingChangedIsNoLeak() {
        LeakCheck.Snapshot base = LeakCheck.baseline();
        LeakCheck.Leaks leaks = LeakCheck.since(base, 2000);
        assertEquals(0, leaks.total(), () -> leaks.toString());
    }

    @Test
    void leaksAddUp() {
        LeakCheck.Leaks a = new LeakCheck.Leaks(1, 2, 0, 0, 0, List.of());
        LeakCheck.Leaks b = new LeakCheck.Leaks(0, 0, 1, 1, 100_000, List.of("x"));
        LeakCheck.Leaks s = a.plus(b);
        assertEquals(6, s.total());
        assertEquals(100_000, s.nativeBytes());
        assertEquals(0, LeakCheck.Leaks.NONE.total());
    }
}
