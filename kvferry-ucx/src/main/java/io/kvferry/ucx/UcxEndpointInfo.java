package io.kvferry.ucx;

import org.openucx.jucx.ucp.UcpEndpoint;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * What UCX chose for one endpoint: its lanes (transport/device) and whether any of them does RMA
 * natively. Read from {@code ucp_ep_print_info} (the text {@code ucx_info -e} prints), which JUCX
 * does not bind: called through FFM into a memory stream.
 *
 * <p>Why: UCX over its tcp transport has no RMA lane; every put then travels as an active message
 * that the decode's worker copies into place (~5 µs per put here), and nothing tells the user
 * (NIXL users found out from their figures, nixl#791 and nixl#2039). kvferry's own tcp path moves
 * the same bytes several times faster (docs/PERFORMANCE.md, "UCX over its tcp transport"), so
 * backend {@code auto} must not pick such a path and an explicit {@code ucx} must say so.
 *
 * <p>The text is UCX's debug output, not an API: the parse recognises the 1.13/1.14 format (the
 * releases kvferry-ucx runs on, as {@link UcxAddressCheck} already requires) and answers "unknown"
 * (never "emulated") when it finds no lane it can read.
 */
@SuppressWarnings("restricted") // FFM: ucp_ep_print_info, open_memstream, fclose, free; needs --enable-native-access
final class UcxEndpointInfo {
    /** {@code lane[0]:  0:tcp/lo.0 md[0] -> ...}: the lane index and its transport/device. */
    private static final Pattern LANE = Pattern.compile("lane\\[(\\d+)]:\\s+\\d+:(\\S+)");
    /** {@code put[1]: 0..<short>..}: a lane that carries puts natively. */
    private static final Pattern PUT = Pattern.compile("\\bput\\[(\\d+)]:");

    /**
     * The lanes UCX chose and how many of them do RMA.
     *
     * @param lanes    each lane's transport/device ({@code tcp/lo.0}, {@code rc_mlx5/mlx5_0:1})
     * @param rmaLanes lanes that carry puts natively
     */
    record Lanes(List<String> lanes, int rmaLanes) {
        Lanes {
            lanes = List.copyOf(lanes);
        }

        /** Whether the text named no lane (an unknown format): nothing can be said. */
        boolean unknown() {
            return lanes.isEmpty();
        }

        /** The lanes' transports without their devices ({@code tcp}, {@code rc_mlx5}), in lane order, once each. */
        List<String> transports() {
            return lanes.stream().map(l -> l.indexOf('/') > 0 ? l.substring(0, l.indexOf('/')) : l).distinct().toList();
        }

        /**
         * Why puts over this endpoint are emulated (no lane does RMA: UCX sends every put as an
         * active message), or null when some lane does RMA or the format is unknown. It reaches the
         * decode (HELLO_ACK), so it names the transports only, not this host's devices.
         */
        String emulation() {
            if (unknown() || rmaLanes > 0) return null;
            return "UCX reaches this decode over " + String.join(", ", transports())
                    + " with no RMA lane: every put is emulated as an active message the decode's worker copies";
        }
    }

    private UcxEndpointInfo() {}

    /** Parses {@code ucp_ep_print_info}'s text. Pure. */
    static Lanes parse(String text) {
        List<String> lanes = new ArrayList<>();
        int rma = 0;
        if (text == null) return new Lanes(lanes, 0);
        for (String line : text.split("\n")) {
            Matcher lane = LANE.matcher(line);
            if (lane.find()) {
                lanes.add(lane.group(2));
                continue;
            }
            if (PUT.matcher(line).find()) rma++;
        }
        return new Lanes(lanes, rma);
    }

    /**
     * The endpoint's configuration as {@code ucp_ep_print_info} prints it, or null when it cannot
     * be read here. Called on the thread that owns the endpoint's worker.
     */
    static String read(UcpEndpoint ep) {
        Natives n = Natives.get();
        if (n == null || ep == null || ep.getNativeId() == null) return null;
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment buf = arena.allocate(ValueLayout.ADDRESS);
            MemorySegment size = arena.allocate(ValueLayout.JAVA_LONG);
            MemorySegment stream = (MemorySegment) n.openMemstream.invokeExact(buf, size);
            if (stream.equals(MemorySegment.NULL)) return null;
            n.epPrintInfo.invokeExact(MemorySegment.ofAddress(ep.getNativeId()), stream);
            int rc = (int) n.fclose.invokeExact(stream); // sets buf and size
            MemorySegment text = buf.get(ValueLayout.ADDRESS, 0);
            if (text.equals(MemorySegment.NULL)) return null;
            try {
                long len = size.get(ValueLayout.JAVA_LONG, 0);
                return rc == 0 && len >= 0 ? text.reinterpret(len + 1).getString(0) : null;
            } finally {
                n.free.invokeExact(text);
            }
        } catch (Throwable t) {
            return null;
        }
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
                SymbolLookup ucp = SymbolLookup.libraryLookup("libucp.so.0", Arena.global());
                MemorySegment print = ucp.find("ucp_ep_print_info").orElse(null);
                MemorySegment open = libc.find("open_memstream").orElse(null);
                MemorySegment close = libc.find("fclose").orElse(null);
                MemorySegment free = libc.find("free").orElse(null);
                if (print == null || open == null || close == null || free == null) return null;
                return new Natives(
                        linker.downcallHandle(open, FunctionDescriptor.of(ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.ADDRESS)),
                        linker.downcallHandle(close, FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.ADDRESS)),
                        linker.downcallHandle(free, FunctionDescriptor.ofVoid(ValueLayout.ADDRESS)),
                        linker.downcallHandle(print, FunctionDescriptor.ofVoid(ValueLayout.ADDRESS, ValueLayout.ADDRESS)));
            } catch (RuntimeException e) {
                return null;
            }
        }
    }
}
