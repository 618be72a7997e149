package io.kvferry.transport.shm;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;
import java.nio.file.AccessDeniedException;
import java.nio.file.Path;
import java.util.Locale;

/**
 * The few POSIX calls the shm transport makes itself (through FFM), because checking a file a peer
 * named needs what {@code java.nio} does not give: the identity of the file actually <em>opened</em>
 * ({@code statx} on the descriptor, not on the name, so a rename or link swap between a check and
 * the open cannot substitute another file), a mapping of exactly the offered window from that
 * descriptor, and which pages of it are already backed ({@code mincore}), so the prefill never
 * faults in (and pays for) memory the decode did not allocate.
 *
 * <p>Linux only (glibc 2.28+ for {@code statx}). {@link #unavailableReason()} says why not elsewhere.
 */
@SuppressWarnings("restricted") // FFM downcalls into libc; the JVM runs with --enable-native-access
final class ShmFiles {
    private static final int O_RDWR = 2, O_NONBLOCK = 0x800, O_CLOEXEC = 0x80000;
    private static final int AT_FDCWD = -100, AT_SYMLINK_NOFOLLOW = 0x100, AT_EMPTY_PATH = 0x1000;
    private static final int STATX_BASIC_STATS = 0x7ff, STATX_NEEDED = 0x1 | 0x2 | 0x8 | 0x100 | 0x200; // type, mode, uid, ino, size
    private static final int S_IFMT = 0xF000, S_IFREG = 0x8000, S_IFLNK = 0xA000;
    private static final int PROT_READ = 1, PROT_WRITE = 2, MAP_SHARED = 1;
    private static final int ELOOP = 40, EACCES = 13;
    static final long PAGE = 4096;
    private static final long STATX_SIZE = 256;
    /** Pages asked about per {@code mincore} call (one byte each). */
    private static final long MINCORE_PAGES = 16384;

    private static final Linker LINKER = Linker.nativeLinker();
    private static final MemoryLayout CAPTURED = Linker.Option.captureStateLayout();
    private static final VarHandle ERRNO = CAPTURED.varHandle(MemoryLayout.PathElement.groupElement("errno"));
    private static final Native NATIVE = Native.load();

    /** Non-null when this platform cannot run these calls, saying why. */
    private record Native(MethodHandle open, MethodHandle close, MethodHandle statx, MethodHandle mmap, MethodHandle munmap,
                          MethodHandle mincore, MethodHandle strerror, int noFollow, String reason) {
        static Native load() {
            if (!System.getProperty("os.name", "").toLowerCase(Locale.ROOT).contains("linux")) {
                return failed("shm needs Linux (this is " + System.getProperty("os.name") + ")");
            }
            int noFollow = switch (System.getProperty("os.arch", "")) {
                case "amd64", "x86_64", "riscv64", "s390x", "loongarch64" -> 0x20000;
                case "aarch64", "ppc64le", "ppc64" -> 0x8000;
                default -> 0;
            };
            if (noFollow == 0) return failed("shm does not know O_NOFOLLOW on " + System.getProperty("os.arch"));
            try {
                SymbolLookup libc = LINKER.defaultLookup();
                Linker.Option errno = Linker.Option.captureCallState("errno");
                ValueLayout addr = ValueLayout.ADDRESS, i32 = ValueLayout.JAVA_INT, i64 = ValueLayout.JAVA_LONG;
                return new Native(
                        LINKER.downcallHandle(find(libc, "open"), FunctionDescriptor.of(i32, addr, i32, i32),
                                errno, Linker.Option.firstVariadicArg(2)),
                        LINKER.downcallHandle(find(libc, "close"), FunctionDescriptor.of(i32, i32)),
                        LINKER.downcallHandle(find(libc, "statx"), FunctionDescriptor.of(i32, i32, addr, i32, i32, addr), errno),
                        LINKER.downcallHandle(find(libc, "mmap"), FunctionDescriptor.of(addr, addr, i64, i32, i32, i32, i64), errno),
                        LINKER.downcallHandle(find(libc, "munmap"), FunctionDescriptor.of(i32, addr, i64)),
                        LINKER.downcallHandle(find(libc, "mincore"), FunctionDescriptor.of(i32, addr, i64, addr), errno),
                        LINKER.downcallHandle(find(libc, "strerror"), FunctionDescriptor.of(addr, i32)),
                        noFollow, null);
            } catch (RuntimeException e) {
                return failed("shm cannot bind the C library calls it needs: " + e.getMessage());
            }
        }

        private static MemorySegment find(SymbolLookup lib, String name) {
            return lib.find(name).orElseThrow(() -> new IllegalStateException("libc has no " + name + " (statx needs glibc 2.28+)"));
        }

        private static Native failed(String reason) {
            return new Native(null, null, null, null, null, null, null, 0, reason);
        }
    }

    private ShmFiles() {}

    /** Null when the calls are available here, else why not. */
    static String unavailableReason() {
        return NATIVE.reason;
    }

    /**
     * What identifies a file and decides whether it may be used: device, inode, size, allocated
     * bytes, owner and mode (type and permission bits).
     */
    record Stat(int devMajor, int devMinor, long inode, long size, long allocatedBytes, int uid, int mode) {
        boolean regularFile() {
            return (mode & S_IFMT) == S_IFREG;
        }

        boolean symlink() {
            return (mode & S_IFMT) == S_IFLNK;
        }

        /** Whether no one but the owner (and root) may read or write it: no group or other bits. */
        boolean ownerOnly() {
            return (mode & 0077) == 0;
        }

        /** The permission bits, e.g. "0600". */
        String permissions() {
            return String.format("%04o", mode & 07777);
        }

        boolean sameFile(int major, int minor, long ino) {
            return devMajor == major && devMinor == minor && inode == ino;
        }
    }

    /** The status of {@code path} itself (a symlink is reported as one, never followed). */
    static Stat lstat(Path path) throws IOException {
        requireNative();
        try (Arena a = Arena.ofConfined()) {
            MemorySegment buf = a.allocate(STATX_SIZE, 8), state = a.allocate(CAPTURED);
            int rc = (int) NATIVE.statx.invokeExact(state, AT_FDCWD, a.allocateFrom(path.toString()), AT_SYMLINK_NOFOLLOW,
                    STATX_BASIC_STATS, buf);
            if (rc != 0) throw failure("cannot stat " + path, state);
            return decodeStat(buf, path);
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("cannot stat " + path + ": " + t, t);
        }
    }

    /**
     * Opens {@code path} for reading and writing without following a symlink in its last component
     * ({@code O_NOFOLLOW}), without blocking on a FIFO, and reads the status of what was opened.
     *
     * @throws AccessDeniedException when this process may not open it for writing (another user's 0600 file)
     * @throws IOException naming the path; "is a symbolic link" when it is one
     */
    static Opened open(Path path) throws IOException {
        requireNative();
        int fd;
        try (Arena a = Arena.ofConfined()) {
            MemorySegment state = a.allocate(CAPTURED);
            fd = (int) NATIVE.open.invokeExact(state, a.allocateFrom(path.toString()), O_RDWR | O_CLOEXEC | O_NONBLOCK | NATIVE.noFollow, 0);
            if (fd < 0) {
                int errno = (int) ERRNO.get(state, 0L);
                if (errno == ELOOP) throw new IOException(path + " is a symbolic link; shm opens only the file itself");
                if (errno == EACCES) throw new AccessDeniedException(path.toString(), null, strerror(errno));
                throw failure("cannot open " + path, state);
            }
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("cannot open " + path + ": " + t, t);
        }
        Opened o = new Opened(path, fd);
        try {
            o.stat = o.fstat();
            return o;
        } catch (IOException | RuntimeException e) {
            o.close();
            throw e;
        }
    }

    /** One open descriptor; the mappings made from it outlive it (they belong to their arena). Not thread-safe. */
    static final class Opened implements AutoCloseable {
        private final Path path;
        private int fd;
        private Stat stat;

        private Opened(Path path, int fd) {
            this.path = path;
            this.fd = fd;
        }

        Path path() {
            return path;
        }

        /** The status of the opened file (taken once, right after the open). */
        Stat stat() {
            return stat;
        }

        private Stat fstat() throws IOException {
            try (Arena a = Arena.ofConfined()) {
                MemorySegment buf = a.allocate(STATX_SIZE, 8), state = a.allocate(CAPTURED);
                int rc = (int) NATIVE.statx.invokeExact(state, fd, a.allocateFrom(""), AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW,
                        STATX_BASIC_STATS, buf);
                if (rc != 0) throw failure("cannot stat the opened " + path, state);
                return decodeStat(buf, path);
            } catch (IOException e) {
                throw e;
            } catch (Throwable t) {
                throw new IOException("cannot stat the opened " + path + ": " + t, t);
            }
        }

        /**
         * Maps bytes [offset, offset + length) of the file shared and writable, unmapped when
         * {@code arena} closes. Only the pages the window spans are mapped. Pages the file already
         * backs (resident, see {@code mincore}) are faulted in now, so copies into a pool the decode
         * allocated never take a page fault; holes are left alone, so an offered sparse file costs
         * the prefill nothing until a copy writes there.
         */
        MemorySegment map(long offset, long length, Arena arena) throws IOException {
            if (fd < 0) throw new IllegalStateException(path + " is closed");
            if (offset < 0 || length <= 0 || offset > stat.size || length > stat.size - offset) {
                throw new IOException("window [" + offset + ", +" + length + ") lies outside " + path + " of " + stat.size + " bytes");
            }
            long start = offset & -PAGE, span = offset + length - start;
            long mapLength = (span + PAGE - 1) & -PAGE;
            MemorySegment base;
            try (Arena a = Arena.ofConfined()) {
                MemorySegment state = a.allocate(CAPTURED);
                base = (MemorySegment) NATIVE.mmap.invokeExact(state, MemorySegment.NULL, mapLength, PROT_READ | PROT_WRITE, MAP_SHARED,
                        fd, start);
                if (base.address() == -1L) throw failure("cannot map " + length + " bytes of " + path, state);
            } catch (IOException e) {
                throw e;
            } catch (Throwable t) {
                throw new IOException("cannot map " + path + ": " + t, t);
            }
            long address = base.address();
            MemorySegment mapped = MemorySegment.ofAddress(address).reinterpret(mapLength, arena, s -> unmap(address, mapLength));
            prefaultResident(mapped);
            return mapped.asSlice(offset - start, length);
        }

        @Override
        public void close() {
            if (fd < 0) return;
            try {
                int ignored = (int) NATIVE.close.invokeExact(fd);
            } catch (Throwable t) {
                // nothing more to do with a descriptor that cannot be closed
            }
            fd = -1;
        }
    }

    private static void unmap(long address, long length) {
        try {
            int ignored = (int) NATIVE.munmap.invokeExact(MemorySegment.ofAddress(address), length);
        } catch (Throwable t) {
            // munmap of a mapping we made cannot fail; nothing to do if it did
        }
    }

    /** Sink for page touches, so the JIT cannot drop them. */
    private static volatile byte touched;

    /**
     * Faults in the pages of a page-aligned mapping that the file already backs. Returns how many.
     * A page the file does not back (a hole of a sparse file) is not touched: touching it would
     * allocate it, charged to this process. A read of one byte per backed page (the kernel maps its
     * neighbours with it): as fast as {@code MemorySegment.load()} was over the whole window, and
     * faster than {@code madvise(MADV_POPULATE_WRITE)} on the backed runs (measured: 512 MiB in
     * 23-32 ms against 34-51 ms).
     */
    static long prefaultResident(MemorySegment mapped) throws IOException {
        long pages = mapped.byteSize() / PAGE, done = 0;
        try (Arena a = Arena.ofConfined()) {
            MemorySegment vec = a.allocate(Math.min(pages, MINCORE_PAGES)), state = a.allocate(CAPTURED);
            for (long first = 0; first < pages; first += MINCORE_PAGES) {
                long n = Math.min(MINCORE_PAGES, pages - first);
                int rc = (int) NATIVE.mincore.invokeExact(state, MemorySegment.ofAddress(mapped.address() + first * PAGE), n * PAGE, vec);
                if (rc != 0) throw failure("mincore failed", state);
                for (long p = 0; p < n; ) {
                    if ((vec.get(ValueLayout.JAVA_BYTE, p) & 1) == 0) {
                        p++;
                        continue;
                    }
                    long run = p;
                    while (run < n && (vec.get(ValueLayout.JAVA_BYTE, run) & 1) != 0) run++;
                    touch(mapped, (first + p) * PAGE, (run - p) * PAGE);
                    done += run - p;
                    p = run;
                }
            }
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IOException("cannot tell which pages are backed: " + t, t);
        }
        return done;
    }

    private static void touch(MemorySegment mapped, long offset, long length) {
        byte sink = 0;
        for (long off = offset; off < offset + length; off += PAGE) sink ^= mapped.get(ValueLayout.JAVA_BYTE, off);
        touched = sink;
    }

    private static Stat decodeStat(MemorySegment b, Path path) throws IOException {
        int mask = b.get(ValueLayout.JAVA_INT, 0);
        if ((mask & STATX_NEEDED) != STATX_NEEDED) throw new IOException("the file system of " + path + " does not report type, mode, owner, inode and size");
        return new Stat(b.get(ValueLayout.JAVA_INT, 136), b.get(ValueLayout.JAVA_INT, 140), b.get(ValueLayout.JAVA_LONG, 32),
                b.get(ValueLayout.JAVA_LONG, 40), b.get(ValueLayout.JAVA_LONG, 48) * 512, b.get(ValueLayout.JAVA_INT, 20),
                b.get(ValueLayout.JAVA_SHORT, 28) & 0xFFFF);
    }

    private static IOException failure(String what, MemorySegment state) {
        int errno = (int) ERRNO.get(state, 0L);
        return new IOException(what + ": " + strerror(errno));
    }

    private static String strerror(int errno) {
        try {
            MemorySegment s = (MemorySegment) NATIVE.strerror.invokeExact(errno);
            return s.reinterpret(256).getString(0) + " (errno " + errno + ")";
        } catch (Throwable t) {
            return "errno " + errno;
        }
    }

    private static void requireNative() throws IOException {
        if (NATIVE.reason != null) throw new IOException(NATIVE.reason);
    }
}
