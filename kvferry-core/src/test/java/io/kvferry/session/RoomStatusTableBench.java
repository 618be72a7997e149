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

/**
 * The status table every room passes through several times (JMH, in kvferry-core's test sources:
 * tools may not depend on {@code io.kvferry.session}; run: docs/PERFORMANCE.md), with
 * {@code inFlight} other rooms in it: a poll's read, a repeated update that changes nothing (a reader
 * seeing a room already Transferring), and one room's whole life (Bootstrapping → WaitingForInput →
 * Transferring → Success → removed).
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(1)
public class RoomStatusTableBench {
    @Param({"64", "10000"})
    public int inFlight;

    RoomStatusTable table;
    long probe;
    long nextRoom;

    @Setup
    public void setUp() {
        table = new RoomStatusTable();
        for (long r = 1; r <= inFlight; r++) {
            table.update(r, KVPoll.Bootstrapping);
            table.update(r, KVPoll.Transferring);
        }
        probe = inFlight / 2 + 1;
        nextRoom = inFlight + 1;
    }

    @Benchmark
    public KVPoll poll() {
        return table.status(probe);
    }

    @Benchmark
    public KVPoll updateUnchanged() {
        return table.update(probe, KVPoll.Transferring);
    }

    @Benchmark
    public int roomLifecycle() {
        long r = nextRoom++;
        table.update(r, KVPoll.Bootstrapping);
        table.update(r, KVPoll.WaitingForInput);
        table.update(r, KVPoll.Transferring);
        table.update(r, KVPoll.Success);
        table.remove(r);
        return table.size();
    }
}
