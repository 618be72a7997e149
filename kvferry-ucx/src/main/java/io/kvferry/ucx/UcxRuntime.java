package io.kvferry.ucx;

import org.openucx.jucx.ucp.UcpContext;
import org.openucx.jucx.ucp.UcpParams;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;

/**
 * Whether UCX can run in this process, probed once. The reasons it returns may reach a peer (a
 * prefill names why it did not use an offered transport in HELLO_ACK), so they never carry the
 * installed UCX version or UCX's own messages; those are logged here.
 *
 * <p>JUCX's jar carries {@code libjucx.so}, which
 * links against the system's {@code libucp.so.0}; without UCX installed the first touch of a JUCX
 * class fails with an {@link UnsatisfiedLinkError} (and every later one with
 * {@link NoClassDefFoundError}), and an older libucp than JUCX expects can abort the process at
 * the first missing symbol. So the probe first opens {@code libucp.so.0} itself (FFM) and asks
 * its version, and only then loads JUCX and opens a throwaway context.
 */
@SuppressWarnings("restricted") // FFM: opening libucp and calling ucp_get_version / setenv; needs --enable-native-access
final class UcxRuntime {
    private static final Logger log = LoggerFactory.getLogger(UcxRuntime.class);
    /** JUCX 1.14.100 (the pinned default) runs on UCX 1.13 and newer. */
    static final int MIN_MAJOR = 1, MIN_MINOR = 13;
    static final String INSTALL_HINT = "install UCX: apt-get install -y libucx0 (Debian/Ubuntu; 'ucx' on RHEL/Fedora),"
            + " or add its lib directory to LD_LIBRARY_PATH";

    private static volatile Probe probe;

    private record Probe(String version, int major, int minor, String reason) {
        Probe(String version, String reason) {
            this(version, -1, -1, reason);
        }
    }

    private UcxRuntime() {}

    /** Null when usable, else a sentence saying what is missing and how to install it. */
    static String unavailableReason() {
        return probe().reason;
    }

    /** The libucp version ("1.13.1"), or null when it cannot load. */
    static String version() {
        return probe().version;
    }

    static int major() {
        return probe().major;
    }

    static int minor() {
        return probe().minor;
    }

    private static Probe probe() {
        Probe p = probe;
        if (p != null) return p;
        synchronized (UcxRuntime.class) {
            if (probe == null) probe = run();
            return probe;
        }
    }

    private static Probe run() {
        String signals = errorSignals();
        if (signals != null) return new Probe(null, signals);
        String version;
        int major, minor;
        try (Arena arena = Arena.ofConfined()) {
            SymbolLookup lib;
            try {
                lib = SymbolLookup.libraryLookup("libucp.so.0", arena);
            } catch (IllegalArgumentException e) {
                return new Probe(null, "UCX is not installed: libucp.so.0 cannot be loaded (" + e.getMessage() + "); " + INSTALL_HINT);
            }
            MemorySegment fn = lib.find("ucp_get_version").orElse(null);
            if (fn == null) return new Probe(null, "libucp.so.0 has no ucp_get_version: not a usable UCX; " + INSTALL_HINT);
            MethodHandle h = Linker.nativeLinker().downcallHandle(fn,
                    FunctionDescriptor.ofVoid(ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.ADDRESS));
            MemorySegment v = arena.allocate(ValueLayout.JAVA_INT, 3);
            h.invokeExact(v, v.asSlice(4), v.asSlice(8));
            major = v.getAtIndex(ValueLayout.JAVA_INT, 0);
            minor = v.getAtIndex(ValueLayout.JAVA_INT, 1);
            version = major + "." + minor + "." + v.getAtIndex(ValueLayout.JAVA_INT, 2);
            if (major < MIN_MAJOR || (major == MIN_MAJOR && minor < MIN_MINOR)) {
                log.warn("ucx: libucp is version {}, too old for kvferry-ucx (needs {}.{} or newer)", version, MIN_MAJOR, MIN_MINOR);
                return new Probe(version, "the installed UCX is too old (its version is in this process's log): kvferry-ucx needs UCX "
                        + MIN_MAJOR + "." + MIN_MINOR + " or newer; " + INSTALL_HINT);
            }
        } catch (IllegalCallerException e) {
            return new Probe(null, "native access is disabled for kvferry-ucx (" + e.getMessage()
                    + "); run java with --enable-native-access=ALL-UNNAMED");
        } catch (Throwable t) {
            return new Probe(null, "cannot query the UCX version: " + t + "; " + INSTALL_HINT);
        }
        try {
            UcpContext ctx = new UcpContext(
                    new UcpParams().requestRmaFeature().requestWakeupFeature());
            ctx.close();
        } catch (LinkageError e) {
            String what = e instanceof NoClassDefFoundError && e.getMessage() != null && e.getMessage().contains("openucx")
                    ? "JUCX (org.openucx:jucx) is not on the class path or failed to initialise"
                    : "JUCX's native library cannot load";
            log.warn("ucx: {} ({}) with UCX {}", what, e.toString(), version);
            return new Probe(version, what + " (details in this process's log); " + INSTALL_HINT);
        } catch (RuntimeException e) {
            log.warn("ucx: UCX {} cannot open a context: {}", version, e.getMessage());
            return new Probe(version, "UCX cannot open a context (details in this process's log; check UCX_TLS / UCX_NET_DEVICES,"
                    + " ucx_info -d lists the transports)");
        }
        return new Probe(version, major, minor, null);
    }

    /**
     * UCX installs handlers for SIGSEGV, SIGBUS, SIGILL and SIGFPE ({@code UCX_ERROR_SIGNALS},
     * default {@code ILL,SEGV,BUS,FPE}). The JVM raises SIGSEGV on purpose (safepoint polls, implicit
     * null checks); UCX's handler takes it for a crash, re-raises it, and the JVM dies with
     * "SIGSEGV (sent by kill)" in compiled Java code (seen here under surefire; openucx/ucx#3337).
     * JUCX clears the setting in its JNI_OnLoad, but this probe opens libucp before JUCX loads. So,
     * before libucs is first loaded, an unset {@code UCX_ERROR_SIGNALS} is set to empty in this
     * process's environment (setenv without overwrite: the one UCX variable kvferry touches, and only
     * when nobody set it; launchers may export {@code UCX_ERROR_SIGNALS=} themselves). An explicit
     * non-empty value is respected but refused, unless the JVM's signal-chaining library (libjsig)
     * is preloaded, which lets both handlers coexist.
     *
     * @return null when fine, else the reason UCX must not be loaded
     */
    private static String errorSignals() {
        String v = System.getenv("UCX_ERROR_SIGNALS");
        if (v == null) {
            try (Arena arena = Arena.ofConfined()) {
                Linker linker = Linker.nativeLinker();
                MethodHandle setenv = linker.downcallHandle(linker.defaultLookup().find("setenv").orElseThrow(),
                        FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.JAVA_INT));
                int rc = (int) setenv.invokeExact(arena.allocateFrom("UCX_ERROR_SIGNALS"), arena.allocateFrom(""), 0);
                if (rc != 0) return "cannot set UCX_ERROR_SIGNALS= (needed so UCX leaves the JVM's signal handlers alone); export it empty";
            } catch (IllegalCallerException e) {
                return "native access is disabled for kvferry-ucx (" + e.getMessage() + "); run java with --enable-native-access=ALL-UNNAMED";
            } catch (Throwable t) {
                return "cannot set UCX_ERROR_SIGNALS= (" + t + "); export UCX_ERROR_SIGNALS= before starting the JVM";
            }
            return null;
        }
        String preload = System.getenv("LD_PRELOAD");
        if (!v.isBlank() && (preload == null || !preload.contains("libjsig"))) {
            return "UCX_ERROR_SIGNALS=" + v + " makes UCX replace the JVM's SIGSEGV handler, which crashes the JVM;"
                    + " unset it or set it empty (or LD_PRELOAD the JVM's libjsig.so)";
        }
        return null;
    }
}
