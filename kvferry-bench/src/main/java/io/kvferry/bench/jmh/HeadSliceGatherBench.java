package io.kvferry.bench.jmh;

import io.kvferry.api.KVArgs;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.plan.CopyPlan;
import io.kvferry.plan.HeadSlice;
import io.kvferry.plan.TransferPlanner;
import io.kvferry.transport.ControlConnection;
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

import java.io.IOException;
import java.lang.foreign.Arena;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Head slicing on the tcp path, through the public classes the prefill uses: plan one 256-page chunk of
 * Llama-3.1-8B KV from a P4 rank to a D2 rank ({@link TransferPlanner#planKvSliced}: one strided op per
 * buffer and run, 2 of the decode's 4 heads per token) and send it with
 * {@link ControlConnection#writePlan}, which gathers each op's pieces (512 B per token) into native
 * staging and writes it as one WRITE. The peer is a loopback socket drained by a thread this state owns,
 * so the figure is gather + syscalls + the kernel's loopback copy; {@code bytesPerOp} of the result is the
 * chunk's bytes. {@code planOnly} isolates the planner.
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@Fork(1)
public class HeadSliceGatherBench {
    static final int PAGE_SIZE = 16;
    static final int PAGES = 256;
    static final int BUFFERS = 4;
    static final int POOL_PAGES = 1024;
    /** Llama-3.1-8B: 8 KV heads of 128 bf16 dims; P4 holds 2 heads, D2 holds 4. */
    static final long HEAD_BYTES = 256;
    static final long SRC_ITEM = PAGE_SIZE * 2 * HEAD_BYTES;
    static final long DST_ITEM = PAGE_SIZE * 4 * HEAD_BYTES;

    @Param({"contiguous", "fragmented"})
    public String pages;

    Arena arena;
    RegisteredMemory source;
    int[] src;
    int[] dst;
    long[] srcItems;
    long[] dstItems;
    HeadSlice[] slices;
    ServerSocketChannel server;
    ControlConnection connection;
    Thread drain;
    final AtomicLong drained = new AtomicLong();

    @Setup(Level.Trial)
    public void setUp() throws IOException {
        arena = Arena.ofShared();
        KVArgs a = new KVArgs();
        a.pageSize = PAGE_SIZE;
        for (int b = 0; b < BUFFERS; b++) {
            a.addKvBuffer(arena.allocate(POOL_PAGES * SRC_ITEM, 64).fill((byte) b), SRC_ITEM);
        }
        source = RegisteredMemory.from(a);
        src = new int[PAGES];
        dst = new int[PAGES];
        for (int i = 0; i < PAGES; i++) {
            src[i] = i;
            dst[i] = i;
        }
        if ("fragmented".equals(pages)) {
            Random rnd = new Random(11);
            shuffle(src, rnd);
            shuffle(dst, rnd);
        }
        srcItems = new long[BUFFERS];
        dstItems = new long[BUFFERS];
        slices = new HeadSlice[BUFFERS];
        for (int b = 0; b < BUFFERS; b++) {
            srcItems[b] = SRC_ITEM;
            dstItems[b] = DST_ITEM;
            // Prefill rank 1 of 4 into decode rank 0 of 2: its 2 heads land at heads 2..3 of each token.
            slices[b] = HeadSlice.resolve(8, 4, 1, 2, 0, SRC_ITEM, DST_ITEM, PAGE_SIZE);
        }
        server = ServerSocketChannel.open().bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
        SocketChannel client = SocketChannel.open(server.getLocalAddress());
        SocketChannel peer = server.accept();
        drain = Thread.ofPlatform().daemon().name("jmh-head-slice-drain").start(() -> {
            ByteBuffer sink = ByteBuffer.allocateDirect(1 << 20);
            try (peer) {
                int n;
                while ((n = peer.read(sink.clear())) >= 0) drained.addAndGet(n);
            } catch (IOException e) {
                // the benchmark closed the connection: done
            }
        });
        connection = new ControlConnection(client);
    }

    @TearDown(Level.Trial)
    public void tearDown() throws Exception {
        connection.close();
        drain.join(10_000);
        server.close();
        arena.close();
    }

    private static void shuffle(int[] a, Random rnd) {
        for (int i = a.length - 1; i > 0; i--) {
            int j = rnd.nextInt(i + 1), t = a[i];
            a[i] = a[j];
            a[j] = t;
        }
    }

    @Benchmark
    public CopyPlan planOnly() {
        return TransferPlanner.planKvSliced(src, dst, srcItems, dstItems, PAGE_SIZE, slices);
    }

    @Benchmark
    public long planAndSend() throws IOException {
        CopyPlan plan = TransferPlanner.planKvSliced(src, dst, srcItems, dstItems, PAGE_SIZE, slices);
        connection.writePlan(7, plan, source, () -> false);
        return plan.totalBytes();
    }
}
