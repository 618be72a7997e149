package io.kvferry.session;

import io.kvferry.api.KVPoll;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.Warmup;

import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * One scheduler step over {@code inFlight} rooms of which {@code moved} changed since the last step:
 * a sweep reads every room's status (SGLang's poll of each request, here only its status read); the
 * change feed takes the {@code moved} signals the status changes would send (on the scheduler thread
 * here, without the cross-core traffic a reader thread's signal pays) and drains them, reading each
 * handed-out room's status. JMH, in kvferry-core's test sources beside {@link RoomStatusTableBench}.
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(1)
public class RoomFeedBench {
    @Param({"64", "10000"})
    public int inFlight;

    @Param({"16"})
    public int moved;

    RoomStatusTable.Slot[] slots;
    RoomFeed.Entry<RoomStatusTable.Slot>[] entries;
    RoomFeed<RoomStatusTable.Slot> roomFeed;
    int next;
    int seen;
    private final Consumer<RoomStatusTable.Slot> poll = s -> seen += s.status().value();

    @Setup
    @SuppressWarnings("unchecked")
    public void setUp() {
        RoomStatusTable table = new RoomStatusTable();
        roomFeed = new RoomFeed<>();
        slots = new RoomStatusTable.Slot[inFlight];
        entries = new RoomFeed.Entry[inFlight];
        for (int r = 0; r < inFlight; r++) {
            slots[r] = table.create(r + 1);
            slots[r].advance(KVPoll.Transferring);
            entries[r] = roomFeed.join(slots[r]);
            slots[r].watch(entries[r]);
        }
        roomFeed.drain(0, s -> { });
    }

    /** Every room's status read, as a scheduler polling all it holds. */
    @Benchmark
    public int sweep() {
        int sum = 0;
        for (RoomStatusTable.Slot s : slots) sum += s.status().value();
        return sum;
    }

    /** {@code moved} rooms signalled, then one drain reading each one handed out. */
    @Benchmark
    public int feed() {
        for (int i = 0; i < moved; i++) {
            entries[next].signal();
            next = next + 1 == inFlight ? 0 : next + 1;
        }
        seen = 0;
        roomFeed.drain(0, poll);
        return seen;
    }
}
