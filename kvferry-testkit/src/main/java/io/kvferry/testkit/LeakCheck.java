package io.kvferry.testkit;


import com.fasterxml.jackson.annotation.JsonIgnore;
import com.fasterxml.jackson.annotation.JsonInclude;
import com.fasterxml.jackson.annotation.JsonProperty;

import java.io.IOException;
import java.lang.management.BufferPoolMXBean;
import java.lang.management.ManagementFactory;
import java.nio.channels.Selector;
import java.nio.channels.SocketChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.locks.LockSupport;
import javax.management.MBeanServer;
import javax.management.ObjectName;

/**
 * Process-level leak accounting of a role process: live {@code kvferry-} threads, open sockets
 * and native memory, compared with a baseline taken before any manager existed.
 *
 * <p>Native memory is the JVM's Native Memory Tracking "Other" category when NMT is on (it holds
 * every {@code Unsafe.allocateMemory}: {@code Arena} segments such as the bench pools, and direct
 * {@code ByteBuffer}s), else the "direct" buffer pool (direct buffers only); plus the "mapped"
 * buffer pool. The JDK caches a few native buffers per thread (temporary NIO buffers, path
 * buffers): the baseline is taken after a warm-up pass of the same probes, and growth up to
 * {@link #NATIVE_TOLERANCE_BYTES} is not a leak.
 */
public final class LeakCheck {
    /** Native growth over the baseline that is still not a leak (the JDK's per-thread caches). */
    public static final long NATIVE_TOLERANCE_BYTES = 64 * 1024;
    /** Threads whose name starts with this belong to the library. */
    public static final String THREAD_PREFIX = "kvferry-";

    private LeakCheck() {}

    /**
     * What one process saw at one moment.
     *
     * @param threads     live threads named {@code kvferry-*}
     * @param sockets     file descriptors that are sockets; -1 where /proc/self/fd cannot be read
     * @param nativeBytes native memory (see the class comment)
     * @param nmt         whether nativeBytes comes from Native Memory Tracking
     */
    public record Snapshot(List<String> threads, int sockets, long nativeBytes, boolean nmt, List<String> socketInodes) {
        public Snapshot(List<String> threads, int sockets, long nativeBytes, boolean nmt) {
            this(threads, sockets, nativeBytes, nmt, List.of());
        }
    }

    /**
     * Resources not returned. {@link #total()} is what a chaos verdict adds to {@code leaked}:
     * rooms, pages, threads and sockets one each, native memory one when it exceeds the tolerance.
     *
     * @param rooms       rooms a manager still tracked after every request concluded
     * @param pages       KV pages and aux/state rows the driver never returned to its pool
     * @param threads     {@code kvferry-} threads alive after teardown beyond the baseline
     * @param sockets     sockets open after teardown beyond the baseline
     * @param nativeBytes native memory above the baseline after teardown, when above the tolerance (else 0)
     * @param details     what leaked (thread names, counts), for the report
     */
    @JsonInclude(JsonInclude.Include.NON_EMPTY)
    public record Leaks(int rooms, int pages, int threads, int sockets, @JsonProperty("native_bytes") long nativeBytes,
                        List<String> details) {
        public static final Leaks NONE = new Leaks(0, 0, 0, 0, 0, List.of());

        public Leaks {
            details = details == null ? List.of() : List.copyOf(details);
        }

        @JsonIgnore
        public int total() {
            return rooms + pages + threads + sockets + (nativeBytes > 0 ? 1 : 0);
        }

        public Leaks plus(Leaks o) {
            List<String> d = new ArrayList<>(details);
            d.addAll(o.details);
            return new Leaks(rooms + o.rooms, pages + o.pages, threads + o.threads, sockets + o.sockets,
                    nativeBytes + o.nativeBytes, d);
        }
    }

    /**
     * A baseline after a warm-up: NIO is initialised (the JDK keeps one process-wide "pre-close"
     * Unix socket for asynchronous close from then on) and the probes run once, so the JDK's lazily
     * created per-thread buffers exist already.
     */
    public static Snapshot baseline() {
        try {
            SocketChannel.open().close();
            Selector.open().close();
        } catch (IOException | RuntimeException e) {
            // no NIO sockets here: nothing to warm up
        }
        snapshot();
        return snapshot();
    }

    public static Snapshot snapshot() {
        List<String> inodes = socketInodes();
        List<String> threads = kvferryThreads();
        long[] nat = nativeBytes();
        return new Snapshot(threads, inodes == null ? -1 : inodes.size(), nat[0], nat[1] == 1,
                inodes == null ? List.of() : inodes);
    }

    /**
     * Compares the process with its baseline, polling up to {@code waitMillis} for threads to exit
     * and sockets and memory to be released after a teardown. Native memory above the baseline gets
     * one garbage collection first: a direct buffer nothing references any more (e.g. a closed
     * connection's scratch buffer) is returned by its cleaner after the GC finds it, so only memory
     * something still holds counts as leaked.
     */
    public static Leaks since(Snapshot base, long waitMillis) {
        long until = System.nanoTime() + waitMillis * 1_000_000L;
        boolean collected = false;
        while (true) {
            Snapshot now = snapshot();
            Leaks l = compare(base, now);
            if (l.total() == 0 || System.nanoTime() >= until) return l;
            if (l.nativeBytes() > 0 && !collected) {
                System.gc();
                collected = true;
            }
            LockSupport.parkNanos(50_000_000L);
        }
    }

    public static Leaks compare(Snapshot base, Snapshot now) {
        List<String> details = new ArrayList<>();
        int threads = Math.max(0, now.threads().size() - base.threads().size());
        if (threads > 0) {
            List<String> extra = new ArrayList<>(now.threads());
            for (String t : base.threads()) extra.remove(t);
            details.add("threads still alive: " + extra.subList(0, Math.min(extra.size(), 8)));
        }
        int sockets = base.sockets() < 0 || now.sockets() < 0 ? 0 : Math.max(0, now.sockets() - base.sockets());
        if (sockets > 0) {
            List<String> extra = new ArrayList<>(now.socketInodes());
            extra.removeAll(base.socketInodes());
            details.add(sockets + " socket(s) open beyond the baseline of " + base.sockets() + ": " + describeSockets(extra));
        }
        long grown = now.nativeBytes() - base.nativeBytes();
        long nativeLeak = grown > NATIVE_TOLERANCE_BYTES ? grown : 0;
        if (nativeLeak > 0) {
            details.add(grown + " bytes of native memory beyond the baseline (" + (now.nmt() ? "NMT Other" : "direct buffers")
                    + " + mapped)");
        }
        return new Leaks(0, 0, threads, sockets, nativeLeak, details);
    }

    public static List<String> kvferryThreads() {
        List<String> names = new ArrayList<>();
        for (Thread t : Thread.getAllStackTraces().keySet()) {
            if (t.isAlive() && t.getName().startsWith(THREAD_PREFIX)) names.add(t.getName());
        }
        return names;
    }

    /** Sockets among this process's file descriptors (Linux); -1 when that cannot be read. */
    public static int countSockets() {
        List<String> inodes = socketInodes();
        return inodes == null ? -1 : inodes.size();
    }

    /** The inodes ("socket:[N]" → N) of this process's socket descriptors; null when /proc/self/fd cannot be read. */
    public static List<String> socketInodes() {
        Path fds = Path.of("/proc/self/fd");
        if (!Files.isDirectory(fds)) return null;
        List<String> inodes = new ArrayList<>();
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(fds)) {
            for (Path fd : ds) {
                try {
                    String target = Files.readSymbolicLink(fd).toString();
                    if (target.startsWith("socket:[")) inodes.add(target.substring(8, target.length() - 1));
                } catch (IOException e) {
                    // closed while we looked (or the directory stream's own descriptor): not a socket
                }
            }
        } catch (IOException e) {
            return null;
        }
        return inodes;
    }

    /** "local -> remote state" of the given socket inodes from /proc/self/net/tcp{,6}, for the report. */
    public static List<String> describeSockets(List<String> inodes) {
        List<String> out = new ArrayList<>();
        Map<String, String> byInode = new HashMap<>();
        for (String table : List.of("tcp", "tcp6", "udp", "udp6", "unix", "netlink")) {
            try {
                for (String line : Files.readAllLines(Path.of("/proc/self/net/" + table))) {
                    String[] f = line.trim().split("\\s+");
                    if (table.equals("unix")) {
                        if (f.length >= 7 && !f[0].equals("Num")) byInode.put(f[6], "unix " + (f.length > 7 ? f[7] : "(unnamed)"));
                    } else if (table.equals("netlink")) {
                        if (f.length >= 10 && !f[0].equals("sk")) byInode.put(f[9], "netlink protocol " + f[1]);
                    } else if (f.length >= 10 && !f[0].equals("sl")) {
                        byInode.put(f[9], table + " " + port(f[1]) + "->" + port(f[2]) + " " + TCP_STATES.getOrDefault(f[3], f[3]));
                    }
                }
            } catch (IOException | RuntimeException e) {
                // not Linux or not readable: inode numbers only
            }
        }
        for (String i : inodes.subList(0, Math.min(inodes.size(), 8))) out.add(byInode.getOrDefault(i, "inode " + i));
        return out;
    }

    private static String port(String hexAddr) {
        int c = hexAddr.lastIndexOf(':');
        return c < 0 ? hexAddr : ":" + Integer.parseInt(hexAddr.substring(c + 1), 16);
    }

    private static final Map<String, String> TCP_STATES = Map.ofEntries(
            Map.entry("01", "ESTABLISHED"), Map.entry("02", "SYN_SENT"), Map.entry("03", "SYN_RECV"),
            Map.entry("04", "FIN_WAIT1"), Map.entry("05", "FIN_WAIT2"), Map.entry("06", "TIME_WAIT"),
            Map.entry("07", "CLOSE"), Map.entry("08", "CLOSE_WAIT"), Map.entry("09", "LAST_ACK"),
            Map.entry("0A", "LISTEN"), Map.entry("0B", "CLOSING"));

    /** {native bytes, 1 if from NMT else 0}. */
    public static long[] nativeBytes() {
        long mapped = 0, direct = 0;
        for (BufferPoolMXBean b : ManagementFactory.getPlatformMXBeans(BufferPoolMXBean.class)) {
            if (b.getName().startsWith("mapped")) mapped += Math.max(0, b.getMemoryUsed());
            else if (b.getName().equals("direct")) direct += Math.max(0, b.getMemoryUsed());
        }
        long nmt = nmtOtherBytes();
        return nmt >= 0 ? new long[]{nmt + mapped, 1} : new long[]{direct + mapped, 0};
    }

    /** NMT's "Other" category in bytes, or -1 when Native Memory Tracking is off or unreadable. */
    public static long nmtOtherBytes() {
        try {
            MBeanServer s = ManagementFactory.getPlatformMBeanServer();
            Object out = s.invoke(new ObjectName("com.sun.management:type=DiagnosticCommand"),
                    "vmNativeMemory", new Object[]{new String[]{"summary scale=b"}},
                    new String[]{String[].class.getName()});
            for (String line : String.valueOf(out).split("\n")) {
                int i = line.indexOf("Other (reserved=");
                if (i < 0) continue;
                int from = i + "Other (reserved=".length();
                int to = from;
                while (to < line.length() && Character.isDigit(line.charAt(to))) to++;
                return Long.parseLong(line.substring(from, to));
            }
            return -1; // NMT off ("Native memory tracking is not enabled") or no such category
        } catch (Exception | LinkageError e) {
            return -1;
        }
    }
}
