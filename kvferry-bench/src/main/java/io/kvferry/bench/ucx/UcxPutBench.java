package io.kvferry.bench.ucx;

import io.kvferry.api.KVArgs;
import io.kvferry.api.KVFerrySettings;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.plan.CopyPlan;
import io.kvferry.plan.TransferPlanner;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.protocol.Region;
import io.kvferry.transport.PeerLink;
import io.kvferry.transport.DataPath;
import io.kvferry.transport.DestinationTransport;
import io.kvferry.transport.LinkOffer;
import io.kvferry.transport.SourceTransport;
import io.kvferry.ucx.UcxTransportProvider;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.ConnectException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Put bandwidth of the ucx {@link DataPath}, for comparison with
 * {@code ucx_perftest -t ucp_put_bw -s SIZE -n ITERS} under the same {@code UCX_TLS}.
 *
 * <p>Each write is one plan of {@code --batch} ops of {@code --size} bytes, ending with the
 * DataPath's flush; the figure is payload bytes over wall time of {@code --iters} puts after
 * {@code --warmup} puts, in MB/s with MB = 2^20 bytes like ucx_perftest. {@code --pages same}
 * (default) puts one source page into one destination page again and again, as ucx_perftest does
 * (cache-hot buffers); {@code --pages distinct} spreads the ops over distinct, non-adjacent pages
 * (a KV-cache-like working set of {@code batch × size} bytes). The destination is verified at the end.
 *
 * <pre>
 * one JVM (two UCP contexts):  java --enable-native-access=ALL-UNNAMED -cp 'kvferry-cli/target/lib/*' io.kvferry.bench.ucx.UcxPutBench --size 1048576 --iters 4000
 * two processes:               ... UcxPutBench --server 13337 --size 1048576     and     ... UcxPutBench --client localhost:13337 --size 1048576 --iters 4000
 * </pre>
 */
public final class UcxPutBench {
    /** The bench's configuration context: this process's KVFERRY_UCX_* environment. */
    private static final KVFerrySettings SETTINGS = KVFerrySettings.fromEnvironment();

    private UcxPutBench() {}

    public static void main(String[] args) throws Exception {
        long size = 1 << 20;
        long iters = 2000, warmup = -1;
        int batch = -1;
        String server = null, client = null;
        boolean json = false;
        boolean same = true;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--size", "-s" -> size = parseSize(args[++i]);
                case "--iters", "-n" -> iters = Long.parseLong(args[++i]);
                case "--warmup" -> warmup = Long.parseLong(args[++i]);
                case "--batch" -> batch = Integer.parseInt(args[++i]);
                case "--server" -> server = args[++i];
                case "--client" -> client = args[++i];
                case "--json" -> json = true;
                case "--pages" -> same = switch (args[++i]) {
                    case "same" -> true;
                    case "distinct" -> false;
                    default -> throw new IllegalArgumentException("--pages same|distinct");
                };
                case "--help", "-h" -> {
                    System.out.println("UcxPutBench [--size BYTES] [--iters N] [--warmup N] [--batch OPS_PER_WRITE] [--pages same|distinct] [--json]"
                            + " [--server PORT | --client HOST:PORT]");
                    return;
                }
                default -> throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        if (size < 1 || size > CopyPlan.MAX_OP_BYTES) throw new IllegalArgumentException("--size must be in [1, " + CopyPlan.MAX_OP_BYTES + "]");
        if (batch < 0) batch = (int) Math.max(1, Math.min(1024, (64L << 20) / size)); // ~64 MiB per write
        if (warmup < 0) warmup = Math.max(batch, iters / 10);
        String reason = new UcxTransportProvider().unavailableReason(SETTINGS);
        if (reason != null) {
            System.err.println(reason);
            System.exit(2);
        }
        // Destination pages 0, 2, 4, …: every op stays its own put (no run merging).
        SAME = same;
        int pages = 2 * batch;
        if (server != null) {
            runServer(Integer.parseInt(server), size, pages);
        } else {
            Result r = client != null ? runClient(client, size, batch, iters, warmup) : runLocal(size, batch, iters, warmup);
            String tls = System.getenv("UCX_TLS");
            if (json) {
                System.out.printf(Locale.ROOT, "{\"size\":%d,\"pages\":\"%s\",\"iters\":%d,\"ops_per_write\":%d,\"mib_per_s\":%.1f,\"seconds\":%.3f,"
                                + "\"ucx_tls\":\"%s\",\"err_mode\":\"%s\",\"verified\":%b}%n", size, same ? "same" : "distinct", r.puts, batch, r.mibPerSec(), r.seconds(),
                        tls == null ? "" : tls, (UcxTransportProvider.peerErrorHandling(SETTINGS) ? "peer" : "none"), r.verified);
            } else {
                System.out.printf(Locale.ROOT, "ucx DataPath put bandwidth: size %d B (%s pages), %d puts (%d per write), %.1f MB/s (MB = 2^20),"
                                + " %.3f s; UCX_TLS=%s, KVFERRY_UCX_ERR_MODE=%s, verified=%b%n", size, same ? "same" : "distinct", r.puts, batch, r.mibPerSec(),
                        r.seconds(), tls == null ? "<unset>" : tls, (UcxTransportProvider.peerErrorHandling(SETTINGS) ? "peer" : "none"), r.verified);
            }
        }
        System.exit(0);
    }

    record Result(long puts, long bytes, long nanos, boolean verified) {
        double seconds() {
            return nanos / 1e9;
        }

        double mibPerSec() {
            return bytes / (double) (1 << 20) / seconds();
        }
    }

    static long parseSize(String s) {
        String v = s.trim().toLowerCase(Locale.ROOT);
        long mul = 1;
        if (v.endsWith("k")) mul = 1 << 10;
        else if (v.endsWith("m")) mul = 1 << 20;
        if (mul > 1) v = v.substring(0, v.length() - 1);
        return Long.parseLong(v) * mul;
    }

    static RegisteredMemory memory(Arena arena, long size, int pages, boolean fill) {
        MemorySegment seg = arena.allocate(size * pages, 4096);
        if (fill) {
            for (long i = 0; i + 8 <= seg.byteSize(); i += 8) seg.set(ValueLayout.JAVA_LONG_UNALIGNED, i, i * 0x9E3779B97F4A7C15L + 1);
        }
        KVArgs a = new KVArgs();
        a.addKvBuffer(seg, size);
        return RegisteredMemory.from(a);
    }

    /** The page layout: same (page 0 to page 0, perftest-like) or distinct. */
    static boolean SAME = true;

    /** Distinct: source pages 0..batch-1 to destination pages 0, 2, 4, …; same: page 0 to page 0 each op. One put of {@code size} bytes per op. */
    static CopyPlan plan(long size, int batch) {
        int[] src = new int[batch], dst = new int[batch];
        for (int i = 0; i < batch; i++) {
            src[i] = SAME ? 0 : i;
            dst[i] = SAME ? 0 : 2 * i;
        }
        return TransferPlanner.planKv(src, dst, new long[] {size});
    }

    static Result drive(DataPath path, RegisteredMemory src, long size, int batch, long iters, long warmup) throws Exception {
        CopyPlan plan = plan(size, batch);
        if (plan.size() != batch) throw new IllegalStateException("plan has " + plan.size() + " ops, expected " + batch);
        long room = 1;
        for (long done = 0; done < warmup; done += batch) path.write(room++, plan, src, () -> false);
        long writes = Math.max(1, (iters + batch - 1) / batch);
        long t0 = System.nanoTime();
        for (long w = 0; w < writes; w++) path.write(room++, plan, src, () -> false);
        long nanos = System.nanoTime() - t0;
        return new Result(writes * batch, writes * batch * size, nanos, false);
    }

    static boolean verify(RegisteredMemory src, RegisteredMemory dst, long size, int batch) {
        MemorySegment s = src.segmentOrNull(Region.KV, 0, 0), d = dst.segmentOrNull(Region.KV, 0, 0);
        for (int i = 0; i < (SAME ? 1 : batch); i++) {
            if (s.asSlice(i * size, size).mismatch(d.asSlice(2L * i * size, size)) != -1) return false;
        }
        return true;
    }

    static Result runLocal(long size, int batch, long iters, long warmup) throws Exception {
        try (Arena arena = Arena.ofShared()) {
            UcxTransportProvider p = new UcxTransportProvider();
            RegisteredMemory dst = memory(arena, size, 2 * batch, false), src = memory(arena, size, 2 * batch, true);
            List<String> why = new ArrayList<>();
            DestinationTransport d = p.openDestination(dst, 0, SETTINGS, null, why::add);
            if (d == null) throw new IllegalStateException("no destination: " + why);
            try (d; SourceTransport s = p.openSource(src, 0, SETTINGS); LinkOffer o = d.offer("bench")) {
                DataPath path = s.connect(o.blob(), dst.describe(), PeerLink.named("bench"));
                Result r = drive(path, src, size, batch, iters, warmup);
                path.close();
                return new Result(r.puts, r.bytes, r.nanos, verify(src, dst, size, batch));
            }
        }
    }

    /** The decode side: offers its memory over a plain socket, then verifies what landed. */
    static void runServer(int port, long size, int pages) throws Exception {
        try (Arena arena = Arena.ofShared(); ServerSocket ss = new ServerSocket()) {
            ss.bind(new InetSocketAddress(port));
            ss.setSoTimeout(120_000); // no client within 2 minutes: give up
            System.out.println("UcxPutBench server: waiting on port " + port);
            UcxTransportProvider p = new UcxTransportProvider();
            RegisteredMemory dst = memory(arena, size, pages, false);
            List<String> why = new ArrayList<>();
            DestinationTransport d = p.openDestination(dst, 0, SETTINGS, null, why::add);
            if (d == null) throw new IllegalStateException("no destination: " + why);
            try (d; Socket c = ss.accept(); LinkOffer o = d.offer(c.getRemoteSocketAddress().toString())) {
                DataOutputStream out = new DataOutputStream(c.getOutputStream());
                DataInputStream in = new DataInputStream(c.getInputStream());
                byte[] blob = o.blob();
                out.writeLong(size * pages);
                out.writeInt(blob.length);
                out.write(blob);
                out.flush();
                in.readInt(); // client finished
                MemorySegment seg = dst.segmentOrNull(Region.KV, 0, 0);
                boolean ok = true;
                for (int i = 0; i < (SAME ? 1 : pages / 2) && ok; i++) {
                    for (long b = 0; b + 8 <= size; b += 8) {
                        long at = i * size + b;
                        if (seg.get(ValueLayout.JAVA_LONG_UNALIGNED, 2L * i * size + b) != at * 0x9E3779B97F4A7C15L + 1) {
                            ok = false;
                            break;
                        }
                    }
                }
                out.writeBoolean(ok);
                out.flush();
                System.out.println("UcxPutBench server: verified=" + ok);
            }
        }
    }

    /** The server may still be starting: retry for up to 60 s. */
    static Socket connectWithRetry(String host, int port) throws Exception {
        long deadline = System.nanoTime() + 60_000_000_000L;
        while (true) {
            try {
                return new Socket(host, port);
            } catch (ConnectException e) {
                if (System.nanoTime() > deadline) throw e;
                Thread.sleep(100);
            }
        }
    }

    static Result runClient(String hostPort, long size, int batch, long iters, long warmup) throws Exception {
        int colon = hostPort.lastIndexOf(':');
        try (Arena arena = Arena.ofShared(); Socket c = connectWithRetry(hostPort.substring(0, colon), Integer.parseInt(hostPort.substring(colon + 1)))) {
            DataInputStream in = new DataInputStream(c.getInputStream());
            DataOutputStream out = new DataOutputStream(c.getOutputStream());
            long dstLength = in.readLong();
            byte[] blob = new byte[in.readInt()];
            in.readFully(blob);
            RegisteredMemory src = memory(arena, size, 2 * batch, true);
            MemoryDescriptor shape = new MemoryDescriptor(new long[] {dstLength}, new long[] {size}, new int[] {0}, new long[0],
                    new long[0], List.of());
            try (SourceTransport s = new UcxTransportProvider().openSource(src, 0, SETTINGS)) {
                DataPath path = s.connect(blob, shape, PeerLink.named(hostPort));
                Result r = drive(path, src, size, batch, iters, warmup);
                path.close();
                out.writeInt(1);
                out.flush();
                return new Result(r.puts, r.bytes, r.nanos, in.readBoolean());
            }
        }
    }
}
