package io.kvferry.memory;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Locale;
import java.util.concurrent.atomic.AtomicLong;

/**
 * An {@link Arena} for KV pools in private memory that asks the kernel for transparent huge pages:
 * each allocation of at least {@link #HUGE_PAGE} bytes is its own anonymous mapping, aligned to
 * 2 MiB, its whole 2 MiB pages advised {@code MADV_HUGEPAGE} before any page is touched, then touched page by page (so a
 * transfer never takes a first-touch fault, as with {@code Arena.ofShared()}'s zero-fill). Smaller
 * allocations, and every allocation where the calls are not available (not Linux, THP "never"),
 * come from an ordinary shared arena. Segments are zero, usable from any thread, and all unmapped
 * when the arena closes.
 *
 * <p>Why: a fragmented pool spreads a request's pages over the whole pool, so every 2 KiB-32 KiB
 * piece a transport copies (and the kernel, for tcp) lands on another 4 KiB page and its TLB miss;
 * with 2 MiB pages the same pool needs 512× fewer entries (PERFORMANCE.md, "Huge pages").
 */
public final class HugePageArena implements Arena {
    /** x86-64 and arm64 (4 KiB base pages) transparent huge page size. */
    public static final long HUGE_PAGE = 2L << 20;
    private static final long PAGE = 4096;
    private static final int PROT_READ_WRITE = 0x1 | 0x2;
    private static final int MAP_PRIVATE_ANONYMOUS = 0x02 | 0x20;
    private static final int MADV_HUGEPAGE = 14;
    private static final Calls CALLS = Calls.load();
    private static final Logger log = LoggerFactory.getLogger(HugePageArena.class);

    private final Arena scope = Arena.ofShared();
    private final AtomicLong advisedBytes = new AtomicLong();

    /** Null when huge pages can be asked for here; else why not (allocations then come from a plain arena). */
    public static String unavailableReason() {
        return CALLS.reason;
    }

    /** The kernel's THP mode ({@code always}, {@code madvise} or {@code never}), or "unknown". */
    public static String transparentHugePageMode() {
        try {
            String s = Files.readString(Path.of("/sys/kernel/mm/transparent_hugepage/enabled"));
            int a = s.indexOf('['), b = s.indexOf(']');
            return a >= 0 && b > a ? s.substring(a + 1, b) : "unknown";
        } catch (Exception e) {
            return "unknown";
        }
    }

    /** Bytes advised for huge pages so far (the whole 2 MiB pages of each large allocation). */
    public long advisedBytes() {
        return advisedBytes.get();
    }

    @Override
    public MemorySegment allocate(long byteSize, long byteAlignment) {
        if (byteSize < 0) throw new IllegalArgumentException("negative allocation size " + byteSize);
        if (byteAlignment <= 0 || Long.bitCount(byteAlignment) != 1) {
            throw new IllegalArgumentException("alignment " + byteAlignment + " is not a power of two");
        }
        if (byteSize < HUGE_PAGE || byteAlignment > HUGE_PAGE || CALLS.reason != null) return scope.allocate(byteSize, byteAlignment);
        long mapped = ((byteSize + PAGE - 1) & -PAGE) + HUGE_PAGE; // room to start on a 2 MiB boundary
        // Only whole huge pages are advised: a partial last one stays on 4 KiB pages, so the buffer
        // costs its own size in memory, not up to 2 MiB more.
        long hugeLength = byteSize & -HUGE_PAGE;
        MemorySegment base;
        try {
            base = (MemorySegment) CALLS.mmap.invokeExact(MemorySegment.NULL, mapped, PROT_READ_WRITE, MAP_PRIVATE_ANONYMOUS, -1, 0L);
        } catch (Throwable t) {
            throw new IllegalStateException("mmap of " + mapped + " bytes failed: " + t, t);
        }
        if (base.address() == -1L) throw new OutOfMemoryError("mmap of " + mapped + " anonymous bytes failed (address space or overcommit)");
        long start = (base.address() + HUGE_PAGE - 1) & -HUGE_PAGE;
        MemorySegment seg = MemorySegment.ofAddress(start).reinterpret(byteSize, scope, s -> unmap(base.address(), mapped));
        int advised;
        try {
            advised = (int) CALLS.madvise.invokeExact(MemorySegment.ofAddress(start), hugeLength, MADV_HUGEPAGE);
        } catch (Throwable t) {
            advised = -1;
        }
        if (advised == 0) advisedBytes.addAndGet(hugeLength);
        for (long off = 0; off < byteSize; off += PAGE) seg.set(ValueLayout.JAVA_BYTE, off, (byte) 0);
        return seg;
    }

    private static void unmap(long address, long length) {
        try {
            int rc = (int) CALLS.munmap.invokeExact(MemorySegment.ofAddress(address), length);
            if (rc != 0) log.warn("munmap of a huge-page pool mapping of {} bytes failed ({})", length, rc);
        } catch (Throwable t) {
            log.warn("munmap of a huge-page pool mapping of {} bytes failed: {}", length, t.toString());
        }
    }

    @Override
    public MemorySegment.Scope scope() {
        return scope.scope();
    }

    /** Unmaps every allocation; their segments become unusable. */
    @Override
    public void close() {
        scope.close();
    }

    private record Calls(MethodHandle mmap, MethodHandle munmap, MethodHandle madvise, String reason) {
        static Calls load() {
            if (!System.getProperty("os.name", "").toLowerCase(Locale.ROOT).contains("linux")) {
                return new Calls(null, null, null, "transparent huge pages need Linux");
            }
            if (!"amd64".equals(System.getProperty("os.arch")) && !"x86_64".equals(System.getProperty("os.arch"))
                    && !"aarch64".equals(System.getProperty("os.arch"))) {
                return new Calls(null, null, null, "huge-page pools know the mmap flags of x86-64 and arm64 only");
            }
            try {
                Linker linker = Linker.nativeLinker();
                var libc = linker.defaultLookup();
                ValueLayout addr = ValueLayout.ADDRESS, i32 = ValueLayout.JAVA_INT, i64 = ValueLayout.JAVA_LONG;
                return new Calls(
                        linker.downcallHandle(libc.find("mmap").orElseThrow(), FunctionDescriptor.of(addr, addr, i64, i32, i32, i32, i64)),
                        linker.downcallHandle(libc.find("munmap").orElseThrow(), FunctionDescriptor.of(i32, addr, i64)),
                        linker.downcallHandle(libc.find("madvise").orElseThrow(), FunctionDescriptor.of(i32, addr, i64, i32)),
                        null);
            } catch (RuntimeException e) {
                return new Calls(null, null, null, "cannot bind mmap/madvise: " + e.getMessage());
            }
        }
    }
}
