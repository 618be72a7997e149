package io.kvferry.decode;

import io.kvferry.api.KVArgs;
import io.kvferry.api.KVPoll;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.protocol.Region;
import io.kvferry.transport.WriteRejectedException;
import io.kvferry.transport.WriteSink;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

import java.lang.foreign.Arena;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLongArray;

/**
 * The decode's per-WRITE check (JMH, in kvferry-core's test sources because {@link WriteGate} is
 * package-private; run: docs/PERFORMANCE.md): {@code begin} (registered buffer, live room, metadata
 * sent, the pages owned: a binary search in the room's sorted page list) and {@code end}, for one
 * page of a room that owns {@code roomPages} scattered pages of a 65,536-page buffer.
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(1)
public class WriteGateBench {
    static final long PAGE = 4096;
    static final int BUFFER_PAGES = 65_536;
    static final long ROOM = 42;

    @Param({"16", "4096"})
    public int roomPages;

    Arena arena;
    WriteGate gate;
    DecodeRooms rooms;
    /** The prefill link the room's writes come from (the gate admits only the room's own ranks). */
    static final String PREFILL = "10.0.0.1:7000";
    final WriteSink.Landing landing = new WriteSink.Landing(PREFILL, null);
    /** The room's pages as byte offsets, visited in turn. */
    long[] offsets;
    int next;

    @Setup(Level.Trial)
    public void setUp() {
        arena = Arena.ofShared();
        KVArgs a = new KVArgs();
        a.pageSize = 16;
        // The gate never touches the bytes: a reserved, never-written buffer is enough.
        a.addKvBuffer(arena.allocate(BUFFER_PAGES * PAGE, 4096), PAGE);
        rooms = new DecodeRooms();
        gate = new WriteGate(RegisteredMemory.from(a), rooms);
        Random rnd = new Random(7);
        int[] pages = rnd.ints(0, BUFFER_PAGES).distinct().limit(roomPages).sorted().toArray();
        DecodeRoom r = rooms.create(ROOM, "bootstrap");
        r.slot.advance(KVPoll.WaitingForInput);
        PrefillLink link = new PrefillLink("bootstrap", PREFILL, null, 0);
        RegisteredMemory memory = RegisteredMemory.from(a);
        link.coverage = WriteGateTest.wholeItems(memory);
        link.granules = LinkGranules.of(link.coverage, memory);
        r.targets = List.of(new DecodeRoom.Target(link, 0, 0, false));
        r.landedFrom = new AtomicLongArray(1);
        // No written-bits (bit base -1): the benchmark admits the same pages over and over; the bits' cost is one atomic OR per page.
        r.allowance = new DecodeRoom.Allowance(pages, pages, -1, new int[0][], new int[0][], new long[1], new int[][] {pages},
                new int[][] {pages}, new long[] {-1});
        offsets = new long[pages.length];
        for (int i = 0; i < pages.length; i++) offsets[i] = pages[i] * PAGE;
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        arena.close();
    }

    @Benchmark
    public long admitAndEndOnePage() throws WriteRejectedException {
        long offset = offsets[next];
        next = next + 1 == offsets.length ? 0 : next + 1;
        gate.begin(landing, ROOM, Region.KV, 0, 0, offset, PAGE, PAGE, PAGE, PAGE);
        gate.end(landing, true);
        return landing.offset();
    }
}
