package io.kvferry.chaos.net;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.util.SplittableRandom;

/**
 * The wire between two TUN devices, one in each namespace, for kernels without {@code sch_netem}:
 * every IP packet one kernel sends out of its device is read here and written into the other
 * device after the {@link LinkImpairment}'s delay, unless the loss draw drops it, at most at its
 * rate. Both ends are real kernel TCP stacks (retransmission, congestion control, RTT estimation
 * see a real lossy, delayed path); only the wire is played by this process.
 *
 * <p>One platform thread per direction reads packets as they come ({@code ppoll} with nanosecond
 * timeouts, so a 0.5 ms delay holds to tens of microseconds) into a fixed ring of native slots and
 * writes each when it is due; a full ring drops the packet (a router's tail drop). Nothing is
 * allocated per packet. A device that is down (a partition) refuses the write: the packet is lost.
 */
final class LinkEmulator implements AutoCloseable {
    /** The MTU the TUN devices get: one syscall moves up to 64 KB, as TSO/GRO super-packets do on a veth. */
    static final int MTU = 65000;
    private static final int SLOT_BYTES = 1 << 16;
    private static final int SLOTS = 256;
    private static final long IDLE_WAIT_NANOS = 50_000_000L;
    private static final long TUNSETIFF = 0x400454caL;
    private static final short IFF_TUN = 0x0001, IFF_NO_PI = 0x1000;

    private final Direction toDecode, toPrefill;
    private final Thread toDecodeThread, toPrefillThread;
    private final int prefillFd, decodeFd;
    private volatile boolean running = true;

    /** Starts moving packets between the two devices' descriptors (both non-blocking); closes them on {@link #close()}. */
    LinkEmulator(int prefillFd, int decodeFd, LinkImpairment impairment, long seed) {
        this.prefillFd = prefillFd;
        this.decodeFd = decodeFd;
        toDecode = new Direction(prefillFd, decodeFd, impairment, seed);
        toPrefill = new Direction(decodeFd, prefillFd, impairment, seed + 1);
        toDecodeThread = Thread.ofPlatform().daemon().name("chaos-link-to-decode").start(toDecode);
        toPrefillThread = Thread.ofPlatform().daemon().name("chaos-link-to-prefill").start(toPrefill);
    }

    /**
     * Creates TUN device {@code name} (layer 3, no packet info, non-blocking) inside namespace
     * {@code ns}. It exists as long as the returned descriptor is open: closing it (or this process
     * ending) removes the device, so nothing outlives the harness.
     */
    static int createTun(String ns, String name) throws IOException {
        byte[] n = name.getBytes(StandardCharsets.US_ASCII);
        if (n.length > 15) throw new IllegalArgumentException("device name too long: " + name);
        return Netns.call(ns, () -> {
            int fd = Posix.open("/dev/net/tun", Posix.O_RDWR | Posix.O_NONBLOCK | Posix.O_CLOEXEC);
            try (Arena a = Arena.ofConfined()) {
                MemorySegment ifreq = a.allocate(40); // struct ifreq: name[16], short flags, padding
                MemorySegment.copy(n, 0, ifreq, ValueLayout.JAVA_BYTE, 0, n.length);
                ifreq.set(ValueLayout.JAVA_SHORT, 16, (short) (IFF_TUN | IFF_NO_PI));
                Posix.ioctl(fd, TUNSETIFF, ifreq, "TUNSETIFF " + name);
                return fd;
            } catch (IOException | RuntimeException e) {
                Posix.close(fd);
                throw e;
            }
        });
    }

    /** Packets and their fate, both directions together. */
    record Counters(long packets, long bytes, long lost, long queueDrops, long refused) {}

    Counters counters() {
        return new Counters(toDecode.packets + toPrefill.packets, toDecode.bytes + toPrefill.bytes,
                toDecode.lost + toPrefill.lost, toDecode.queueDrops + toPrefill.queueDrops, toDecode.refused + toPrefill.refused);
    }

    @Override
    public void close() {
        running = false;
        try {
            toDecodeThread.join(5000);
            toPrefillThread.join(5000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        Posix.close(prefillFd);
        Posix.close(decodeFd);
    }

    /** One direction: its own thread, ring and counters (written by that thread only). */
    private final class Direction implements Runnable {
        private final int in, out;
        private final long delayNanos, bytesPerSecond;
        private final double loss;
        private final SplittableRandom random;
        private final long[] due = new long[SLOTS];
        private final int[] length = new int[SLOTS];
        private int head, count;
        private long serialEnd;
        volatile long packets, bytes, lost, queueDrops, refused;

        Direction(int in, int out, LinkImpairment imp, long seed) {
            this.in = in;
            this.out = out;
            this.delayNanos = imp.delayNanos();
            this.loss = imp.lossFraction();
            this.bytesPerSecond = imp.bytesPerSecond();
            this.random = new SplittableRandom(seed);
        }

        @Override
        public void run() {
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment ringMemory = arena.allocate((long) SLOTS * SLOT_BYTES, 64);
                MemorySegment[] ring = new MemorySegment[SLOTS];
                for (int i = 0; i < SLOTS; i++) ring[i] = ringMemory.asSlice((long) i * SLOT_BYTES, SLOT_BYTES);
                MemorySegment scratch = arena.allocate(SLOT_BYTES);
                MemorySegment pollFd = arena.allocate(8, 4);
                MemorySegment timeout = arena.allocate(16, 8);
                pollFd.set(ValueLayout.JAVA_INT, 0, in);
                while (running) {
                    long now = System.nanoTime();
                    while (count > 0 && due[head] <= now) {
                        if (Posix.write(out, ring[head], length[head]) < 0) refused++;
                        head = (head + 1) % SLOTS;
                        count--;
                    }
                    long wait = count > 0 ? due[head] - now : IDLE_WAIT_NANOS;
                    timeout.set(ValueLayout.JAVA_LONG, 0, wait / 1_000_000_000L);
                    timeout.set(ValueLayout.JAVA_LONG, 8, wait % 1_000_000_000L);
                    pollFd.set(ValueLayout.JAVA_SHORT, 4, Posix.POLLIN);
                    pollFd.set(ValueLayout.JAVA_SHORT, 6, (short) 0);
                    if (Posix.ppoll(pollFd, timeout)) readAll(ring, scratch);
                }
            }
        }

        /** Reads what is waiting (a bounded batch, so due packets are not held back). */
        private void readAll(MemorySegment[] ring, MemorySegment scratch) {
            for (int k = 0; k < 64; k++) {
                boolean full = count == SLOTS;
                int tail = (head + count) % SLOTS;
                MemorySegment slot = full ? scratch : ring[tail];
                long n = Posix.read(in, slot, SLOT_BYTES);
                if (n <= 0) return; // nothing more (or the device went away: the link is being torn down)
                packets++;
                bytes += n;
                if (full) {
                    queueDrops++;
                    continue;
                }
                if (loss > 0 && random.nextDouble() < loss) {
                    lost++;
                    continue;
                }
                long now = System.nanoTime(), leaves = now;
                if (bytesPerSecond > 0) {
                    serialEnd = Math.max(now, serialEnd) + n * 1_000_000_000L / bytesPerSecond;
                    leaves = serialEnd;
                }
                due[tail] = leaves + delayNanos;
                length[tail] = (int) n;
                count++;
            }
        }
    }
}
