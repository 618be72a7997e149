package io.kvferry.ucx;

import org.openucx.jucx.ucp.UcpEndpoint;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * What UCX chose for one endpoint: its lanes (transport/device, the peer's memory domain) and which
 * of them carry puts. Read from {@code ucp_ep_print_info} (the text {@code ucx_info -e} prints),
 * which JUCX does not bind: called through FFM into a memory stream.
 *
 * <p>Why: UCX over its tcp transport has no RMA lane; every put then travels as an active message
 * that the decode's worker copies into place (~5 µs per put here), and nothing tells the user
 * (NIXL users found out from their figures, nixl#791 and nixl#2039). kvferry's own tcp path moves
 * the same bytes 4–5.5× faster (docs/PERFORMANCE.md, "UCX over its tcp transport"), so backend
 * {@code auto} must not pick such a path and an explicit {@code ucx} must say so.
 *
 * <p>A put lane is only native for the decode's memory when the decode's remote keys cover the
 * lane's memory domain ({@code -> md[N]} in the lane's line; UCX's own rule in
 * {@code ucp_rkey_find_rma_lane}), or the lane needs no key (cma). sysv/posix lanes print puts but
 * cannot register memory kvferry allocated, so over them every put is emulated too.
 *
 * <p>The text is UCX's debug output, not an API: the parse recognises the 1.13/1.14 format (the
 * releases kvferry-ucx runs on, as {@link UcxAddressCheck} already requires; checked against their
 * {@code ucp_ep_config_print}) and answers "unknown" (never "emulated") unless it finds the lanes
 * and the {@code rma_bw} line that closes the RMA section.
 */
@SuppressWarnings("restricted") // FFM: ucp_ep_print_info, open_memstream, fclose, free; needs --enable-native-access
final class UcxEndpointInfo {
    private static final Logger log = LoggerFactory.getLogger(UcxEndpointInfo.class);
    /** {@code #   lane[0]:  0:tcp/lo.0 md[0]   -> md[0]/tcp/sysdev[255] am}: index, transport/device, peer's memory domain. */
    private static final Pattern LANE = Pattern.compile("^#\\s+lane\\[(\\d+)]:\\s+\\d+:(\\S+)\\s.*?->\\s+(?:addr\\[\\d+]\\.)?md\\[(\\d+)]");
    /** {@code #   put[1]: 0..<short>..}: lane 1 carries puts. */
    private static final Pattern PUT = Pattern.compile("^#\\s+put\\[(\\d+)]:");
    /** {@code #   rma_bw: mds ...}: printed after every put line of an endpoint of an RMA context. */
    private static final Pattern RMA_BW = Pattern.compile("^#\\s+rma_bw: mds");
    /** Transports whose puts need no remote key (cross-memory attach reads the peer's pages by pid). */
    private static final Set<String> KEYLESS = Set.of("cma");
    private static final AtomicBoolean warned = new AtomicBoolean();

    /** One lane: its index, {@code transport/device} and the memory domain it reaches on the peer. */
    record Lane(int index, String name, int peerMd) {
        String transport() {
            int slash = name.indexOf('/');
            return slash > 0 ? name.substring(0, slash) : name;
        }
    }

    /**
     * The lanes UCX chose and which carry puts.
     *
     * @param lanes    every lane the text names
     * @param putLanes the indices of lanes that carry puts
     * @param complete whether the text had the {@code rma_bw} line that follows the put lines
     */
    record Lanes(List<Lane> lanes, Set<Integer> putLanes, boolean complete) {
        Lanes {
            lanes = List.copyOf(lanes);
            putLanes = Set.copyOf(putLanes);
        }

        /** Whether the text could not be read (no lane, or not the format this parse knows): nothing can be said. */
        boolean unknown() {
            return lanes.isEmpty() || !complete;
        }

        /** The lanes' transports without their devices ({@code tcp}, {@code rc_mlx5}), in lane order, once each. */
        List<String> transports() {
            return lanes.stream().map(Lane::transport).distinct().toList();
        }

        /** Whether every lane runs over UCX's tcp transport (then emulated puts ride on tcp too). */
        boolean overTcpOnly() {
            return !lanes.isEmpty() && transports().equals(List.of("tcp"));
        }

        /** The lanes whose puts reach memory registered with keys covering {@code keyMds} (a bit per peer memory domain). */
        List<Lane> nativePutLanes(long keyMds) {
            return lanes.stream().filter(l -> putLanes.contains(l.index()))
                    .filter(l -> KEYLESS.contains(l.transport()) || (l.peerMd() < 64 && (keyMds & (1L << l.peerMd())) != 0))
                    .toList();
        }

        /**
         * Why puts over this endpoint into memory registered with keys covering {@code keyMds} are
         * emulated (UCX then sends every put as an active message), or null when some lane puts
         * natively or the text is unknown. It reaches the decode (HELLO_ACK), so it names the
         * transports only, not this host's devices.
         */
        String emulation(long keyMds) {
            if (unknown() || !nativePutLanes(keyMds).isEmpty()) return null;
            Set<String> putTransports = new TreeSet<>();
            for (Lane l : lanes) if (putLanes.contains(l.index())) putTransports.add(l.transport());
            String how = putTransports.isEmpty()
                    ? "UCX reaches this decode over " + String.join(", ", transports()) + " with no RMA lane"
                    : "UCX's RMA lanes to this decode (" + String.join(", ", putTransports) + ") cannot reach its registered memory";
            return how + ": every put is emulated as an active message the decode's worker copies";
        }
    }

    private UcxEndpointInfo() {}

    /** Parses {@code ucp_ep_print_info}'s text. Pure. */
    static Lanes parse(String text) {
        List<Lane> lanes = new ArrayList<>();
        Set<Integer> puts = new TreeSet<>();
        boolean complete = false;
        if (text == null) return new Lanes(lanes, puts, false);
        for (String line : text.split("\n")) {
            Matcher lane = LANE.matcher(line);
            Matcher put = PUT.matcher(line);
            if (lane.find()) {
                lanes.add(new Lane(Integer.parseInt(lane.group(1)), lane.group(2), Integer.parseInt(lane.group(3))));
            } else if (put.find()) {
                puts.add(Integer.parseInt(put.group(1)));
            } else if (RMA_BW.matcher(line).find()) {
                complete = true;
            }
        }
        return new Lanes(lanes, puts, complete);
    }

    /** Looks the native functions up now (dlopen, FFM handles), so a link's set-up does not pay for it on the engine thread. */
    static void warm() {
        Natives.get();
    }

    /**
     * The endpoint's configuration as {@code ucp_ep_print_info} prints it, or null when it cannot
     * be read here (the first such failure is logged). Called on the thread that owns the
     * endpoint's worker, outside UCX's callbacks.
     */
    static String read(UcpEndpoint ep) {
        Natives n = Natives.get();
        if (n == null || ep == null || ep.getNativeId() == null) return null;
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment buf = arena.allocate(ValueLayout.ADDRESS);
            MemorySegment size = arena.allocate(ValueLayout.JAVA_LONG);
            MemorySegment stream = (MemorySegment) n.openMemstream.invokeExact(buf, size);
            if (stream.equals(MemorySegment.NULL)) return failed("open_memstream failed");
            Throwable printFailure = null;
            try {
                n.epPrintInfo.invokeExact(MemorySegment.ofAddress(ep.getNativeId()), stream);
            } catch (Error e) {
                throw e;
            } catch (Throwable t) {
                printFailure = t;
            }
            int rc = (int) n.fclose.invokeExact(stream); // sets buf and size
            MemorySegment text = buf.get(ValueLayout.ADDRESS, 0);
            if (text.equals(MemorySegment.NULL)) return failed("open_memstream left no buffer");
            try {
                if (printFailure != null) return failed(printFailure.toString());
                long len = size.get(ValueLayout.JAVA_LONG, 0);
                // glibc NUL-terminates the buffer: len + 1 bytes are there
                return rc == 0 && len >= 0 ? text.reinterpret(len + 1).getString(0) : failed("fclose returned " + rc);
            } finally {
                n.free.invokeExact(text);
            }
        } catch (Error e) {
            throw e;
        } catch (Throwable t) {
            return failed(t.toString());
        }
    }

    private static String failed(String why) {
        if (warned.compareAndSet(false, true)) {
            log.warn("ucx: cannot read which lanes UCX chose ({}); backend auto then cannot tell emulated puts apart", why);
        }
        return null;
    }

    /** The native functions, looked up once; null when any is missing. */
    private record Natives(MethodHandle openMemstream, MethodHandle fclose, MethodHandle free, MethodHandle epPrintInfo) {
        private static final Natives INSTANCE = lookUp();

        static Natives get() {
            return INSTANCE;
        }

        private static Natives lookUp() {
            try {
                Linker linker = Linker.nativeLinker();
                SymbolLookup libc = linker.defaultLookup();
                // libjucx already loaded libucp.so.0; dlopen by the same soname returns that library
                SymbolLookup ucp = SymbolLookup.libraryLookup("libucp.so.0", Arena.global());
                MemorySegment print = ucp.find("ucp_ep_print_info").orElse(null);
                MemorySegment open = libc.find("open_memstream").orElse(null);
                MemorySegment close = libc.find("fclose").orElse(null);
                MemorySegment free = libc.find("free").orElse(null);
                if (print == null || open == null || close == null || free == null) {
                    failed("ucp_ep_print_info, open_memstream, fclose or free not found");
                    return null;
                }
                return new Natives(
                        linker.downcallHandle(open, FunctionDescriptor.of(ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.ADDRESS)),
                        linker.downcallHandle(close, FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.ADDRESS)),
                        linker.downcallHandle(free, FunctionDescriptor.ofVoid(ValueLayout.ADDRESS)),
                        linker.downcallHandle(print, FunctionDescriptor.ofVoid(ValueLayout.ADDRESS, ValueLayout.ADDRESS)));
            } catch (RuntimeException e) {
                failed(e.toString());
                return null;
            }
        }
    }
}
