package io.kvferry.chaos.net;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;

/**
 * The few Linux calls the network-namespace harness needs and the JDK does not offer, through the
 * FFM API: {@code setns} (a thread enters a network namespace, so the sockets and TUN devices it
 * creates live there), {@code open}/{@code ioctl} (a TUN device), {@code read}/{@code write}/
 * {@code ppoll} (moving its packets with sub-millisecond timing), {@code close}. Each call reports
 * a failure as an IOException naming the call and errno. No library covers these (JNR/JNA would be
 * a dependency for six calls); they are used by kvferry chaos only, never by kvferry itself.
 */
final class Posix {
    private Posix() {}

    static final int O_RDONLY = 0, O_RDWR = 2, O_NONBLOCK = 0x800, O_CLOEXEC = 0x80000;
    static final int CLONE_NEWNET = 0x40000000;
    static final short POLLIN = 1;
    static final int EAGAIN = 11, EINTR = 4;

    private static final Linker LINKER = Linker.nativeLinker();
    private static final SymbolLookup LIBC = LINKER.defaultLookup();
    private static final StructLayout CAPTURE = Linker.Option.captureStateLayout();
    private static final VarHandle ERRNO = CAPTURE.varHandle(MemoryLayout.PathElement.groupElement("errno"));
    private static final Linker.Option ERRNO_OPTION = Linker.Option.captureCallState("errno");

    /** open(path, flags) without a mode: nothing is created, so no variadic argument is passed. */
    private static final MethodHandle OPEN = handle("open", FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.ADDRESS,
            ValueLayout.JAVA_INT));
    private static final MethodHandle CLOSE = handle("close", FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT));
    private static final MethodHandle SETNS = handle("setns", FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT,
            ValueLayout.JAVA_INT));
    private static final MethodHandle IOCTL = handle("ioctl", FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT,
            ValueLayout.JAVA_LONG, ValueLayout.ADDRESS), Linker.Option.firstVariadicArg(2));
    private static final MethodHandle READ = handle("read", FunctionDescriptor.of(ValueLayout.JAVA_LONG, ValueLayout.JAVA_INT,
            ValueLayout.ADDRESS, ValueLayout.JAVA_LONG));
    private static final MethodHandle WRITE = handle("write", FunctionDescriptor.of(ValueLayout.JAVA_LONG, ValueLayout.JAVA_INT,
            ValueLayout.ADDRESS, ValueLayout.JAVA_LONG));
    private static final MethodHandle PPOLL = handle("ppoll", FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.ADDRESS,
            ValueLayout.JAVA_LONG, ValueLayout.ADDRESS, ValueLayout.ADDRESS));

    private static MethodHandle handle(String name, FunctionDescriptor fd, Linker.Option... extra) {
        Linker.Option[] options = new Linker.Option[extra.length + 1];
        options[0] = ERRNO_OPTION;
        System.arraycopy(extra, 0, options, 1, extra.length);
        MemorySegment symbol = LIBC.find(name).orElseThrow(() -> new UnsatisfiedLinkError("libc has no " + name));
        return LINKER.downcallHandle(symbol, fd, options);
    }

    /** Per-thread scratch for errno capture, so a call allocates nothing. */
    private static final ThreadLocal<MemorySegment> ERRNO_SCRATCH = ThreadLocal.withInitial(() -> Arena.ofAuto().allocate(CAPTURE));

    private static int errno(MemorySegment capture) {
        return (int) ERRNO.get(capture, 0L);
    }

    static int open(String path, int flags) throws IOException {
        MemorySegment cs = ERRNO_SCRATCH.get();
        try (Arena a = Arena.ofConfined()) {
            int fd = (int) OPEN.invokeExact(cs, a.allocateFrom(path), flags);
            if (fd < 0) throw new IOException("open(" + path + ") failed: errno " + errno(cs));
            return fd;
        } catch (IOException e) {
            throw e;
        } catch (Throwable t) {
            throw new IllegalStateException("open", t);
        }
    }

    static void close(int fd) {
        try {
            int ignored = (int) CLOSE.invokeExact(ERRNO_SCRATCH.get(), fd);
        } catch (Throwable t) {
            throw new IllegalStateException("close", t);
        }
    }

    /** Moves the calling thread (only) into the network namespace {@code nsFd} refers to. */
    static void setns(int nsFd) throws IOException {
        MemorySegment cs = ERRNO_SCRATCH.get();
        int rc;
        try {
            rc = (int) SETNS.invokeExact(cs, nsFd, CLONE_NEWNET);
        } catch (Throwable t) {
            throw new IllegalStateException("setns", t);
        }
        if (rc != 0) throw new IOException("setns(CLONE_NEWNET) failed: errno " + errno(cs) + " (root needed)");
    }

    static void ioctl(int fd, long request, MemorySegment arg, String what) throws IOException {
        MemorySegment cs = ERRNO_SCRATCH.get();
        int rc;
        try {
            rc = (int) IOCTL.invokeExact(cs, fd, request, arg);
        } catch (Throwable t) {
            throw new IllegalStateException("ioctl", t);
        }
        if (rc < 0) throw new IOException("ioctl(" + what + ") failed: errno " + errno(cs));
    }

    /** Bytes read, 0 when nothing is ready (EAGAIN/EINTR), -errno on another error. */
    static long read(int fd, MemorySegment buf, long len) {
        MemorySegment cs = ERRNO_SCRATCH.get();
        long n;
        try {
            n = (long) READ.invokeExact(cs, fd, buf, len);
        } catch (Throwable t) {
            throw new IllegalStateException("read", t);
        }
        if (n >= 0) return n;
        int e = errno(cs);
        return e == EAGAIN || e == EINTR ? 0 : -e;
    }

    /** Bytes written, or -errno. */
    static long write(int fd, MemorySegment buf, long len) {
        MemorySegment cs = ERRNO_SCRATCH.get();
        long n;
        try {
            n = (long) WRITE.invokeExact(cs, fd, buf, len);
        } catch (Throwable t) {
            throw new IllegalStateException("write", t);
        }
        return n >= 0 ? n : -errno(cs);
    }

    /**
     * Waits until {@code pollFd} (a one-entry {@code struct pollfd} set up for POLLIN) is readable or
     * {@code timeout} (a {@code struct timespec}) passed. Returns whether it is readable.
     */
    static boolean ppoll(MemorySegment pollFd, MemorySegment timeout) {
        int n;
        try {
            n = (int) PPOLL.invokeExact(ERRNO_SCRATCH.get(), pollFd, 1L, timeout, MemorySegment.NULL);
        } catch (Throwable t) {
            throw new IllegalStateException("ppoll", t);
        }
        return n > 0 && (pollFd.get(ValueLayout.JAVA_SHORT, 6) & POLLIN) != 0;
    }
}
