package io.kvferry.ucx;

import io.kvferry.api.KVArgs;
import io.kvferry.api.KVFerrySettings;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.plan.CopyPlan;
import io.kvferry.plan.TransferPlanner;
import io.kvferry.transport.DataPath;
import io.kvferry.transport.DestinationTransport;
import io.kvferry.transport.LinkOffer;
import io.kvferry.transport.PeerLink;
import io.kvferry.transport.SourceTransport;

import javax.management.ObjectName;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SegmentAllocator;
import java.lang.foreign.StructLayout;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A measurement, not a test (docs/PERFORMANCE.md, "Link churn with ucx"): sets up and tears down
 * ucx links in one JVM (one decode destination, one prefill source; per link an offer, a connect,
 * one write, the path's and the offer's close) and prints, at each checkpoint, VmRSS, glibc's
 * mallinfo2 (in use, free but held, mmapped), NMT's committed total (run with
 * -XX:NativeMemoryTracking=summary), glibc in use minus NMT's malloc (what UCX and JUCX malloc'ed),
 * heap, threads, fds and maps. HISTO=1 adds the live JUCX objects, MAPS=1 the mappings by name,
 * NMT_DUMP=N an NMT diff against the warm-up at checkpoint N.
 *
 * <p>Args: checkpoints (e.g. 100,200,400,800), then optional flags: nowrite, revoke, warm=N.
 */
@SuppressWarnings("restricted")
public final class LinkChurnMain {
    public static void main(String[] args) throws Throwable {
        int[] marks = Arrays.stream(args[0].split(",")).mapToInt(Integer::parseInt).toArray();
        List<String> flags = List.of(args).subList(1, args.length);
        boolean write = !flags.contains("nowrite");
        boolean revoke = flags.contains("revoke");
        int warm = flags.stream().filter(f -> f.startsWith("warm=")).mapToInt(f -> Integer.parseInt(f.substring(5))).findFirst().orElse(20);
        KVFerrySettings settings = KVFerrySettings.fromEnvironment();
        UcxTransportProvider provider = new UcxTransportProvider();
        String reason = provider.unavailableReason(settings);
        if (reason != null) throw new IllegalStateException(reason);
        Arena arena = Arena.ofShared();
        RegisteredMemory dst = memory(arena), src = memory(arena);
        List<String> why = new ArrayList<>();
        DestinationTransport d = provider.openDestination(dst, 0, settings, null, why::add);
        if (d == null) throw new IllegalStateException(String.valueOf(why));
        SourceTransport s = provider.openSource(src, 0, settings);
        long[] items = {16 << 10, 16 << 10};
        CopyPlan plan = TransferPlanner.planKv(new int[] {0, 1, 5}, new int[] {2, 3, 9}, items);
        System.out.printf("%-6s %10s %10s %10s %10s %10s %10s %10s %10s %8s %5s %5s%n", "links", "rss_kb", "inuse_kb", "free_kb", "mmap_kb",
                "nmt_kb", "nonjvm_kb", "heap_used", "heap_comm", "threads", "fds", "maps");
        int done = 0;
        for (int round = 0; round < warm; round++) churn(d, s, dst, src, plan, write, revoke);
        System.gc();
        report("warm" + warm);
        for (int mark : marks) {
            while (done < mark) {
                churn(d, s, dst, src, plan, write, revoke);
                done++;
            }
            System.gc();
            report(String.valueOf(done));
        }
        s.close();
        System.gc();
        report("srcclosed");
        d.close();
        System.gc();
        report("closed");
    }

    static void churn(DestinationTransport d, SourceTransport s, RegisteredMemory dst, RegisteredMemory src, CopyPlan plan,
                      boolean write, boolean revoke) throws Exception {
        LinkOffer o = d.offer("prefill-0");
        DataPath p = s.connect(o.blob(), dst.describe(), PeerLink.named("decode-0"));
        if (write) p.write(1, plan, src, () -> false);
        p.close();
        if (revoke) o.revoke(Duration.ofMillis(1));
        o.close();
    }

    static RegisteredMemory memory(Arena arena) {
        KVArgs a = new KVArgs();
        a.pageSize = 16;
        for (int b = 0; b < 2; b++) a.addKvBuffer(arena.allocate(16L << 10 << 5, 4096), 16 << 10);
        a.addAuxBuffer(arena.allocate(128 * 16, 64), 128);
        return RegisteredMemory.from(a);
    }

    // ------------------------------------------------------------------ figures

    static final StructLayout MALLINFO2 = MemoryLayout.structLayout(
            ValueLayout.JAVA_LONG.withName("arena"), ValueLayout.JAVA_LONG.withName("ordblks"), ValueLayout.JAVA_LONG.withName("smblks"),
            ValueLayout.JAVA_LONG.withName("hblks"), ValueLayout.JAVA_LONG.withName("hblkhd"), ValueLayout.JAVA_LONG.withName("usmblks"),
            ValueLayout.JAVA_LONG.withName("fsmblks"), ValueLayout.JAVA_LONG.withName("uordblks"), ValueLayout.JAVA_LONG.withName("fordblks"),
            ValueLayout.JAVA_LONG.withName("keepcost"));
    static final MethodHandle MALLINFO = Linker.nativeLinker().downcallHandle(
            Linker.nativeLinker().defaultLookup().find("mallinfo2").orElseThrow(), FunctionDescriptor.of(MALLINFO2));

    static String nmt(String what) throws Exception {
        return (String) ManagementFactory.getPlatformMBeanServer().invoke(new ObjectName("com.sun.management:type=DiagnosticCommand"),
                "vmNativeMemory", new Object[] {new String[] {what}}, new String[] {String[].class.getName()});
    }

    public static void report(String label) throws Throwable {
        long rss = 0, threads = 0;
        for (String l : Files.readAllLines(Path.of("/proc/self/status"))) {
            if (l.startsWith("VmRSS:")) rss = Long.parseLong(l.replaceAll("\\D", ""));
            if (l.startsWith("Threads:")) threads = Long.parseLong(l.replaceAll("\\D", ""));
        }
        long inUse, free, mmapped;
        try (Arena a = Arena.ofConfined()) {
            MemorySegment mi = (MemorySegment) MALLINFO.invokeExact((SegmentAllocator) a);
            inUse = mi.get(ValueLayout.JAVA_LONG, 7 * 8) + mi.get(ValueLayout.JAVA_LONG, 4 * 8);
            free = mi.get(ValueLayout.JAVA_LONG, 8 * 8);
            mmapped = mi.get(ValueLayout.JAVA_LONG, 4 * 8);
        }
        long nmt = -1, nmtMalloc = 0;
        try {
            String out = (String) ManagementFactory.getPlatformMBeanServer().invoke(new ObjectName("com.sun.management:type=DiagnosticCommand"),
                    "vmNativeMemory", new Object[] {new String[] {"summary"}}, new String[] {String[].class.getName()});
            Matcher m = Pattern.compile("Total: reserved=\\d+KB, committed=(\\d+)KB").matcher(out);
            if (m.find()) nmt = Long.parseLong(m.group(1));
            Matcher mm = Pattern.compile("malloc: (\\d+)KB").matcher(out);
            if (mm.find()) nmtMalloc = Long.parseLong(mm.group(1));
            if (System.getenv("NMT_DUMP") != null && label.startsWith("warm")) nmt("baseline");
            if (System.getenv("NMT_DUMP") != null && label.equals(System.getenv("NMT_DUMP"))) System.out.println(nmt("summary.diff"));
        } catch (Exception e) {
            // NMT off
        }
        long fds;
        try (var st = Files.list(Path.of("/proc/self/fd"))) {
            fds = st.count();
        }
        long maps = Files.readAllLines(Path.of("/proc/self/maps")).size();
        System.out.printf("%-6s %10d %10d %10d %10d %10d %10d %10d %10d %8d %5d %5d%n", label, rss, inUse >> 10, free >> 10, mmapped >> 10, nmt,
                (inUse >> 10) - nmtMalloc, ManagementFactory.getMemoryMXBean().getHeapMemoryUsage().getUsed() >> 10,
                ManagementFactory.getMemoryMXBean().getHeapMemoryUsage().getCommitted() >> 10,
                threads, fds, maps);
        if (System.getenv("MAPS") != null) {
            Map<String, Integer> byName = new TreeMap<>();
            for (String l : Files.readAllLines(Path.of("/proc/self/maps"))) {
                String[] f = l.trim().split("\\s+", 6);
                String name = f.length > 5 ? f[5].replaceAll("[0-9a-f]{6,}|\\d{4,}", "#") : "[anon]";
                byName.merge(name + " " + f[1], 1, Integer::sum);
            }
            byName.forEach((k, v) -> { if (v > 20) System.out.println("   maps " + v + " " + k); });
        }
        if (System.getenv("HISTO") != null) {
            String h = (String) ManagementFactory.getPlatformMBeanServer().invoke(new ObjectName("com.sun.management:type=DiagnosticCommand"),
                    "gcClassHistogram", new Object[] {new String[0]}, new String[] {String[].class.getName()});
            for (String l : h.split("\n")) {
                if (l.contains("org.openucx") || l.contains("io.kvferry.ucx") || l.contains("DirectByteBuffer ")) System.out.println("   " + l.trim());
            }
        }
    }
}
