package io.kvferry.memory;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.FileAttribute;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.SecureRandom;
import java.util.EnumSet;
import java.util.HexFormat;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentSkipListMap;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The allocator engines use instead of a private {@link Arena} when a same-host peer should be
 * able to write their KV pools directly (the {@code shm} transport): each allocation is a file
 * under {@code /dev/shm} (tmpfs), mapped shared. Register slices of {@link #segment()} in
 * {@code KVArgs} as usual; {@link #locate} later finds which file and offset back a buffer.
 *
 * <p>Lifetime: {@link #close()} unmaps and deletes the file; a JVM shutdown hook deletes the files
 * of a process that exits without closing. A peer that mapped the file keeps its mapping until it
 * unmaps (tmpfs frees the memory then). If the owner is SIGKILLed its files stay behind; their
 * names carry the owner's pid, start time and pid namespace, and every allocation on the host, as
 * well as a shm peer that loses its link to the owner (the prefill when it unmaps a lost decode's
 * pools, the decode when a prefill's link closes), removes this user's files whose owner has
 * provably exited ({@link #sweepStale}; never one from another pid namespace).
 *
 * <p>Files are created {@code O_CREAT|O_EXCL}, never through a symlink, mode 0600 (only their owner
 * reads the KV cache), in a directory other users cannot tamper with ({@link #directoryProblem}).
 *
 * <p>Thread-safety: allocation, lookup and close may be called from any thread.
 */
public final class SharedMemory implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(SharedMemory.class);
    /** Where the files live; tests may point it elsewhere with -Dkvferry.shm.dir. */
    public static final Path DIR = Path.of(System.getProperty("kvferry.shm.dir", "/dev/shm"));
    public static final String PREFIX = "kvferry-";
    private static final ConcurrentSkipListMap<Long, SharedMemory> LIVE = new ConcurrentSkipListMap<>();
    private static final AtomicBoolean HOOKED = new AtomicBoolean();
    private static final SecureRandom RANDOM = new SecureRandom();
    private static final FileAttribute<Set<PosixFilePermission>> OWNER_ONLY =
            PosixFilePermissions.asFileAttribute(EnumSet.of(PosixFilePermission.OWNER_READ, PosixFilePermission.OWNER_WRITE));
    private static final long PID_NAMESPACE = readPidNamespace();

    /** Where a registered buffer lives in shared memory: its file, and its offset and length there. */
    public record Location(Path path, long offset, long length) {}

    private final Path path;
    private final Arena arena;
    private final MemorySegment segment;
    private final AtomicBoolean closed = new AtomicBoolean();

    private SharedMemory(Path path, Arena arena, MemorySegment segment) {
        this.path = path;
        this.arena = arena;
        this.segment = segment;
    }

    /**
     * Creates and maps a new shared file of {@code bytes} bytes (zero-filled; tmpfs allocates pages
     * as they are first touched).
     *
     * @param label a short name for the file (letters, digits, '.', '_', '-'), e.g. "kv-rank0"
     */
    public static SharedMemory allocate(String label, long bytes) throws IOException {
        if (bytes <= 0) throw new IllegalArgumentException("shared memory size must be positive, got " + bytes);
        if (label == null || !label.matches("[A-Za-z0-9._-]{1,64}")) {
            throw new IllegalArgumentException("shared memory label '" + label + "' must be 1-64 of [A-Za-z0-9._-]");
        }
        String unsafe = directoryProblem();
        if (unsafe != null) throw new IOException(unsafe);
        // Every time, not once per process: a long-lived process allocating again (a decode manager
        // created anew) must not leave the pools of a peer that was SIGKILLed since in /dev/shm.
        sweepStale();
        if (HOOKED.compareAndSet(false, true)) {
            Runtime.getRuntime().addShutdownHook(new Thread(SharedMemory::deleteAllFiles, "kvferry-shm-cleanup"));
        }
        ProcessHandle self = ProcessHandle.current();
        byte[] rnd = new byte[6];
        RANDOM.nextBytes(rnd);
        Path path = DIR.resolve(PREFIX + self.pid() + "-" + startMillis(self.pid()) + "-ns" + pidNamespace() + "-"
                + HexFormat.of().formatHex(rnd) + "-" + label);
        Arena arena = Arena.ofShared();
        // CREATE_NEW is O_CREAT|O_EXCL: a name that exists (a planted file or symlink) fails instead of
        // being opened; 0600: the KV cache is readable by its owner only, whatever the umask.
        try (FileChannel ch = FileChannel.open(path, Set.of(StandardOpenOption.CREATE_NEW, StandardOpenOption.READ,
                StandardOpenOption.WRITE, LinkOption.NOFOLLOW_LINKS), OWNER_ONLY)) {
            // setLength via a write at the end: truncate only shrinks
            ch.write(ByteBuffer.allocate(1), bytes - 1);
            MemorySegment seg = ch.map(FileChannel.MapMode.READ_WRITE, 0, bytes, arena);
            SharedMemory m = new SharedMemory(path, arena, seg);
            LIVE.put(seg.address(), m);
            return m;
        } catch (FileAlreadyExistsException e) {
            arena.close();
            throw new IOException("cannot create " + path + ": the name exists already (never opened: kvferry creates its files itself)");
        } catch (IOException | RuntimeException e) {
            arena.close();
            Files.deleteIfExists(path);
            throw e;
        }
    }

    /** Null when {@link #DIR} is a directory other users cannot tamper with, else why not (see the overload). */
    public static String directoryProblem() {
        return directoryProblem(DIR);
    }

    /**
     * Null when {@code dir} is a writable directory other users cannot tamper with, else why not.
     * Other users may create files there (/dev/shm is world-writable) only if the directory is
     * sticky, so that no one but a file's owner can rename or delete it.
     */
    public static String directoryProblem(Path dir) {
        try {
            int mode = (Integer) Files.getAttribute(dir, "unix:mode");
            if ((mode & 0170000) != 0040000) return dir + " is not a directory; shared-memory pools need a tmpfs there";
            if (!Files.isWritable(dir)) return dir + " is not writable by this process";
            if ((mode & 0022) != 0 && (mode & 01000) == 0) {
                return dir + " (mode " + String.format("%04o", mode & 07777) + ") is writable by other users but not sticky:"
                        + " they could replace kvferry's files; use /dev/shm or a directory only this user can write";
            }
            return null;
        } catch (IOException | RuntimeException e) {
            return dir + " is not usable for shared-memory pools: " + e;
        }
    }

    /** The mapped memory (valid until {@link #close()}). */
    public MemorySegment segment() {
        return segment;
    }

    public Path path() {
        return path;
    }

    /** The shared file backing all of {@code seg}, or null when it is not inside one live allocation. */
    public static Location locate(MemorySegment seg) {
        if (seg == null || !seg.isNative()) return null;
        Map.Entry<Long, SharedMemory> e = LIVE.floorEntry(seg.address());
        if (e == null) return null;
        SharedMemory m = e.getValue();
        long offset = seg.address() - m.segment.address();
        if (m.closed.get() || offset + seg.byteSize() > m.segment.byteSize()) return null;
        return new Location(m.path, offset, seg.byteSize());
    }

    /** Unmaps the memory and deletes the file. Idempotent. Segments sliced from it become unusable. */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) return;
        LIVE.remove(segment.address(), this);
        try {
            Files.deleteIfExists(path);
        } catch (IOException e) {
            log.warn("could not delete {}: {}", path, e.getMessage());
        }
        arena.close();
    }

    private static void deleteAllFiles() {
        for (SharedMemory m : LIVE.values()) {
            try {
                Files.deleteIfExists(m.path);
            } catch (IOException ignored) {
                // exiting anyway
            }
        }
    }

    /** An identity of this machine's running kernel (the boot id), the same for every process on it. */
    public static String hostId() {
        try {
            return Files.readString(Path.of("/proc/sys/kernel/random/boot_id")).trim();
        } catch (IOException | RuntimeException e) {
            return "unknown";
        }
    }

    /** Above this a recorded start is epoch milliseconds (kvferry before boot-relative starts; 2001 on), not since boot (31 years). */
    static final long EPOCH_RECORDED = 1_000_000_000_000L;

    /**
     * When process {@code pid} started, in milliseconds since boot: {@code /proc/PID/stat}'s starttime (its 22nd field, in
     * clock ticks: Linux's USER_HZ, 100 a second), 0 when it cannot be read. Not the JDK's {@code startInstant()}: that adds
     * the boot time of {@code /proc/stat}, the wall clock less the time since boot, read once per JVM and moved by any step of
     * the wall clock (NTP, a VM restored from a snapshot), so two processes started either side of a step told the same
     * process's start time a second or hours apart, and each sweep deleted the other's live files (a decode's pool: its shm
     * back end could not start).
     */
    static long startMillis(long pid) {
        try {
            String stat = Files.readString(Path.of("/proc", Long.toString(pid), "stat"));
            String[] after = stat.substring(stat.lastIndexOf(')') + 2).split(" "); // the name, field 2, may hold spaces and ')'
            return Long.parseLong(after[22 - 3]) * 10;
        } catch (IOException | RuntimeException e) {
            return 0;
        }
    }

    /** This process's start in milliseconds since boot (0 when unknown), as file names and fences record it ({@link #startMillis(long)}). */
    public static long startMillis() {
        return startMillis(ProcessHandle.current().pid());
    }

    /**
     * The inode of this process's pid namespace ({@code /proc/self/ns/pid}), or 0 when it cannot be
     * read. A pid means a process only within its namespace: containers on one host share the boot id
     * and may share /dev/shm, yet number their processes independently.
     */
    public static long pidNamespace() {
        return PID_NAMESPACE;
    }

    private static long readPidNamespace() {
        try {
            String link = Files.readSymbolicLink(Path.of("/proc/self/ns/pid")).toString(); // "pid:[4026531836]"
            if (!link.startsWith("pid:[") || !link.endsWith("]")) return 0;
            return Long.parseLong(link.substring(5, link.length() - 1));
        } catch (IOException | RuntimeException e) {
            return 0;
        }
    }

    /**
     * Whether the process {@code pid}, started at {@code startMillis} (0: unknown), in pid namespace
     * {@code pidNamespace}, has provably exited: only when that namespace is known and is this
     * process's own, and no process with that pid and start time runs. A pid from another namespace
     * (or an unknown one) is never taken for dead, because this process cannot look it up: such a
     * file stays until its owner removes it, and such a writer is waited for until the timeout.
     */
    public static boolean provablyGone(long pid, long startMillis, long pidNamespace) {
        if (pidNamespace == 0 || PID_NAMESPACE == 0 || pidNamespace != PID_NAMESPACE) return false;
        return !ProcessHandle.of(pid).filter(ProcessHandle::isAlive)
                .map(p -> {
                    long started = startMillis(pid); // 0: unreadable, so not provably another process
                    // A start past EPOCH_RECORDED is an older kvferry's epoch milliseconds, not comparable: not provably gone.
                    return startMillis == 0 || started == 0 || startMillis > EPOCH_RECORDED || Math.abs(started - startMillis) < 1000;
                })
                .orElse(false);
    }

    /**
     * Deletes kvferry files in {@link #DIR} whose owner has provably exited; returns how many. Only
     * regular files of this user, named {@code kvferry-<pid>-<start>-ns<pid namespace>-…}, are
     * considered; a file whose owner lives in another pid namespace, or that is named without one
     * (an older kvferry), is left alone (see {@link #provablyGone}).
     */
    public static int sweepStale() {
        int removed = 0;
        int uid = ownUid();
        try (DirectoryStream<Path> files = Files.newDirectoryStream(DIR, PREFIX + "*")) {
            for (Path f : files) {
                String[] parts = f.getFileName().toString().split("-", 6);
                if (parts.length < 6 || !parts[3].startsWith("ns")) continue;
                try {
                    long pid = Long.parseLong(parts[1]);
                    long start = Long.parseLong(parts[2]);
                    long ns = Long.parseLong(parts[3].substring(2));
                    Map<String, Object> a = Files.readAttributes(f, "unix:uid,mode", LinkOption.NOFOLLOW_LINKS);
                    boolean mine = uid >= 0 && (Integer) a.get("uid") == uid && ((Integer) a.get("mode") & 0170000) == 0100000;
                    if (mine && provablyGone(pid, start, ns) && Files.deleteIfExists(f)) {
                        removed++;
                        log.info("removed {}: its owner (pid {}) is gone", f, pid);
                    }
                } catch (NumberFormatException | IOException ignored) {
                    // not ours, or already gone
                }
            }
        } catch (IOException e) {
            log.debug("could not sweep {}: {}", DIR, e.getMessage());
        }
        return removed;
    }

    /** This process's uid (the owner of the files it creates), or -1 when unknown. */
    private static int ownUid() {
        try {
            return (Integer) Files.getAttribute(Path.of("/proc/self"), "unix:uid");
        } catch (IOException | RuntimeException e) {
            return -1;
        }
    }
}
