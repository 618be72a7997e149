package io.kvferry.memory;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.security.SecureRandom;
import java.time.Instant;
import java.util.HexFormat;
import java.util.Map;
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
 * names carry the owner's pid and start time, and the next allocation on the host removes files
 * whose owner is gone ({@link #sweepStale}).
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
    private static final AtomicBoolean SWEPT = new AtomicBoolean();
    private static final SecureRandom RANDOM = new SecureRandom();

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
        if (!Files.isDirectory(DIR) || !Files.isWritable(DIR)) {
            throw new IOException(DIR + " is not a writable directory; shared-memory pools need a tmpfs there");
        }
        if (SWEPT.compareAndSet(false, true)) sweepStale();
        if (HOOKED.compareAndSet(false, true)) {
            Runtime.getRuntime().addShutdownHook(new Thread(SharedMemory::deleteAllFiles, "kvferry-shm-cleanup"));
        }
        ProcessHandle self = ProcessHandle.current();
        byte[] rnd = new byte[6];
        RANDOM.nextBytes(rnd);
        Path path = DIR.resolve(PREFIX + self.pid() + "-" + startMillis(self) + "-" + HexFormat.of().formatHex(rnd) + "-" + label);
        Arena arena = Arena.ofShared();
        try (FileChannel ch = FileChannel.open(path, StandardOpenOption.CREATE_NEW, StandardOpenOption.READ,
                StandardOpenOption.WRITE, LinkOption.NOFOLLOW_LINKS)) {
            ch.truncate(bytes);
            // setLength via a write at the end: truncate only shrinks
            ch.write(ByteBuffer.allocate(1), bytes - 1);
            MemorySegment seg = ch.map(FileChannel.MapMode.READ_WRITE, 0, bytes, arena);
            SharedMemory m = new SharedMemory(path, arena, seg);
            LIVE.put(seg.address(), m);
            return m;
        } catch (IOException | RuntimeException e) {
            arena.close();
            Files.deleteIfExists(path);
            throw e;
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

    private static long startMillis(ProcessHandle p) {
        return p.info().startInstant().map(Instant::toEpochMilli).orElse(0L);
    }

    /** Whether the process {@code pid}, started at {@code startMillis}, still runs (pid reuse aware). */
    public static boolean processAlive(long pid, long startMillis) {
        return ProcessHandle.of(pid).filter(ProcessHandle::isAlive)
                .map(p -> startMillis == 0 || Math.abs(startMillis(p) - startMillis) < 1000)
                .orElse(false);
    }

    /** Deletes kvferry files in {@link #DIR} whose owning process is gone; returns how many. */
    public static int sweepStale() {
        int removed = 0;
        try (DirectoryStream<Path> files = Files.newDirectoryStream(DIR, PREFIX + "*")) {
            for (Path f : files) {
                String[] parts = f.getFileName().toString().split("-", 5);
                if (parts.length < 5) continue;
                try {
                    long pid = Long.parseLong(parts[1]);
                    long start = Long.parseLong(parts[2]);
                    if (!processAlive(pid, start) && Files.deleteIfExists(f)) {
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
}
