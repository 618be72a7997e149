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
        for (int i = 0; i < 3; i++) {
            System.gc();
            Thread.sleep(100);
        }
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
        for (int i = 0; i < 3; i++) {
            System.gc();
            Thread.sleep(100);
        }
        LeakCheck.Snapshot base = LeakCheck.baseline();
        long held = allocateAndDrop(1 << 20);
        assertTrue(held >= 1 << 20);
        LeakCheck.Leaks leaks = LeakCheck.since(base, 5000);
        assertEquals(0, leaks.nativeBytes(), () -> leaks.toString());
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
