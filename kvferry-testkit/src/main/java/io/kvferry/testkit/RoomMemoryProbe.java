package io.kvferry.testkit;

import com.fasterxml.jackson.annotation.JsonIgnoreProperties;
import com.fasterxml.jackson.annotation.JsonProperty;

import java.lang.management.ManagementFactory;
import java.util.concurrent.locks.LockSupport;

/**
 * Heap and native bytes per in-flight room. The bench's drivers park {@code rooms} requests in flight
 * (the last warm-up requests, so no timed figure includes the pause) and this probe measures the JVM
 * twice: a baseline once every driver in it reached the probe with nothing in flight, and again once
 * every driver has its rooms parked — decode: each room's receiver initialised and its metadata sent;
 * prefill: each room's sender created and at WaitingForInput (the decode's TRANSFER_INFO arrived), no
 * chunk sent. Each measurement runs {@link System#gc()} until the native figure settles and reads the heap
 * in use and the native memory {@link LeakCheck#nativeBytes()} counts (NMT's "Other" when the JVM runs with
 * {@code -XX:NativeMemoryTracking}, else the direct buffer pool; plus mapped buffers). The difference
 * divided by {@code rooms} is the cost of one room. Pools are allocated before the baseline, so page
 * memory is not in it: this is the library's (and the drivers') per-room state.
 *
 * <p>One probe per JVM, shared by every driver in it ({@code parties}): with {@code --processes} a
 * role's JVM measures that role alone; in one JVM both roles' rooms are in the same heap, so the
 * figure is per room on both sides together ({@link Result#scope()} says which). Thread-safe: drivers
 * call it from their own threads and poll it without blocking; the last to arrive measures.
 */
public final class RoomMemoryProbe {
    /**
     * @param rooms            rooms parked
     * @param heapBytesPerRoom heap in use after GC, parked minus baseline, per room
     * @param nativeBytesPerRoom native memory, parked minus baseline, per room
     * @param nativeSource     "nmt" or "direct+mapped"
     * @param scope            prefill, decode, or both (one JVM holding both roles)
     */
    @JsonIgnoreProperties(value = "total_bytes_per_room", allowGetters = true) // derived: written, not read back
    public record Result(int rooms, @JsonProperty("heap_bytes_per_room") long heapBytesPerRoom,
                         @JsonProperty("native_bytes_per_room") long nativeBytesPerRoom,
                         @JsonProperty("native_source") String nativeSource, String scope) {
        @JsonProperty("total_bytes_per_room")
        public long totalBytesPerRoom() {
            return heapBytesPerRoom + nativeBytesPerRoom;
        }
    }

    private final int parties;
    private final int rooms;
    private final String scope;
    private int arrivedBaseline;
    private int arrivedParked;
    private long baseHeap;
    private long baseNative;
    private Result result;

    /**
     * @param parties drivers in this JVM that take part (each arrives once at each step)
     * @param rooms   requests parked (a request on several ranks counts once)
     * @param scope   what the JVM holds: prefill, decode or both
     */
    public RoomMemoryProbe(int parties, int rooms, String scope) {
        if (parties < 1 || rooms < 1) throw new IllegalArgumentException("a probe needs parties and rooms >= 1");
        this.parties = parties;
        this.rooms = rooms;
        this.scope = scope;
    }

    public int rooms() {
        return rooms;
    }

    /** A driver reached the probe with nothing in flight; the last one takes the baseline. */
    public synchronized void arriveBaseline() {
        if (++arrivedBaseline == parties) {
            long[] m = measure();
            baseHeap = m[0];
            baseNative = m[1];
        }
    }

    /** Whether every driver arrived and the baseline is taken: the drivers may now put their rooms in flight. */
    public synchronized boolean baselineTaken() {
        return arrivedBaseline >= parties;
    }

    /** A driver has all its rooms parked; the last one measures. */
    public synchronized void arriveParked() {
        if (++arrivedParked == parties) {
            long[] m = measure();
            result = new Result(rooms, (m[0] - baseHeap) / rooms, (m[1] - baseNative) / rooms,
                    m[2] == 1 ? "nmt" : "direct+mapped", scope);
        }
    }

    /** Whether the parked rooms were measured: the drivers may let them go on. */
    public synchronized boolean measured() {
        return result != null;
    }

    /** The figures, or null before {@link #measured()}. */
    public synchronized Result result() {
        return result;
    }

    /** Rounds of GC a measurement may take waiting for native memory to settle. */
    static final int MAX_GC_ROUNDS = 24;
    /** Readings in a row that must agree: the settled native figure held for the last two waits. */
    static final int AGREEING_READINGS = 3;

    /**
     * {heap bytes in use after GC, native bytes, 1 if native is from NMT}. Native memory behind
     * unreachable buffers and automatic arenas is freed by the JDK's cleaner thread after a GC, not by
     * the GC: the reading is taken once {@link #AGREEING_READINGS} rounds in a row agree, each round
     * waiting longer for the cleaner (10 ms doubling to 160 ms), so the baseline does not count memory
     * that is about to go. Two rounds 10 ms apart were once not enough: on a 2-core machine loaded by
     * other builds the cleaner did not run within them, the baseline counted ~50 MB that went a moment
     * later, and the parked rooms measured -101 KB each (BenchCommandTest).
     */
    private static long[] measure() {
        long[] prev = null;
        int agreeing = 0;
        long waitNanos = 10_000_000L;
        for (int round = 0; round < MAX_GC_ROUNDS; round++) {
            System.gc();
            LockSupport.parkNanos(waitNanos); // give the cleaner thread a turn
            waitNanos = Math.min(waitNanos * 2, 160_000_000L);
            long heap = ManagementFactory.getMemoryMXBean().getHeapMemoryUsage().getUsed();
            long[] nat = LeakCheck.nativeBytes();
            long[] now = {heap, nat[0], nat[1]};
            agreeing = prev != null && prev[1] == now[1] ? agreeing + 1 : 1;
            if (agreeing >= AGREEING_READINGS) return now;
            prev = now;
        }
        return prev;
    }
}
