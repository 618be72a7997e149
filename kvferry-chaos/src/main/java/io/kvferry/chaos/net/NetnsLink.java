package io.kvferry.chaos.net;

import com.fasterxml.jackson.annotation.JsonInclude;
import com.fasterxml.jackson.annotation.JsonProperty;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Two network namespaces, a prefill side and a decode side, joined by one link, for kvferry chaos
 * on a real kernel path ({@code --netns}): the prefill's ranks and the registry listen at
 * {@link #PREFILL_ADDR} in the one, the decode runs in the other and reaches them only across the
 * link, whose packets are delayed and dropped as the {@link LinkImpairment} says.
 *
 * <ul>
 *   <li>{@link Kind#VETH}: a veth pair with {@code tc netem} on both ends (the kernel needs
 *       {@code sch_netem}).</li>
 *   <li>{@link Kind#TUN}: a TUN device in each namespace and {@link LinkEmulator} in this process
 *       as the wire, for kernels built without netem.</li>
 *   <li>{@link Kind#AUTO}: veth and netem when the kernel has netem (or nothing needs impairing), else tun.</li>
 * </ul>
 *
 * A partition is {@code ip link set DEV down} on the decode's end ({@link #down()}), healed by
 * {@link #up()}. Everything is removed by {@link #close()}: the namespaces (their devices and
 * qdiscs go with them), the TUN devices (they live only while this process holds them); a shutdown
 * hook does the same if the harness is stopped, and {@link Netns#sweepStale()} removes what a
 * killed harness left.
 */
public final class NetnsLink implements AutoCloseable {
    /** Where the prefill side listens (its ranks, the registry). */
    public static final String PREFILL_ADDR = "10.213.0.1";
    /** The decode side's address (a fault proxy on the decode's side listens here). */
    public static final String DECODE_ADDR = "10.213.0.2";
    static final String PREFILL_DEV = "kvf-p", DECODE_DEV = "kvf-d";
    private static final AtomicInteger SEQUENCE = new AtomicInteger();

    public enum Kind {
        AUTO, VETH, TUN;

        public static Kind parse(String s) {
            try {
                return valueOf(s.trim().toUpperCase(Locale.ROOT));
            } catch (IllegalArgumentException | NullPointerException e) {
                throw new IllegalArgumentException("--netns-link must be auto, veth or tun, not '" + s + "'");
            }
        }

        public String label() {
            return name().toLowerCase(Locale.ROOT);
        }
    }

    private final String prefillNs, decodeNs;
    private final LinkImpairment impairment;
    private final Thread cleanup;
    private Kind kind;
    private String impairedBy;
    private LinkEmulator emulator;
    private volatile boolean closed;

    private NetnsLink(String prefillNs, String decodeNs, LinkImpairment impairment) {
        this.prefillNs = prefillNs;
        this.decodeNs = decodeNs;
        this.impairment = impairment;
        this.cleanup = new Thread(this::removeAll, "chaos-netns-cleanup");
    }

    /** Creates both namespaces and the link; on any failure removes what it made and throws naming the step. */
    public static NetnsLink create(LinkImpairment impairment, Kind kind) throws IOException {
        String why = Netns.unavailableReason();
        if (why != null) throw new IOException(why);
        for (String stale : Netns.sweepStale()) System.err.println("[chaos] removed stale network namespace " + stale);
        String base = Netns.PREFIX + ProcessHandle.current().pid() + "-" + SEQUENCE.incrementAndGet();
        NetnsLink link = new NetnsLink(base + "-p", base + "-d", impairment);
        Runtime.getRuntime().addShutdownHook(link.cleanup);
        try {
            link.build(kind);
            return link;
        } catch (IOException | RuntimeException e) {
            link.close();
            throw e;
        }
    }

    private void build(Kind wanted) throws IOException {
        Netns.add(prefillNs);
        Netns.add(decodeNs);
        ip(prefillNs, "link", "set", "lo", "up");
        ip(decodeNs, "link", "set", "lo", "up");
        if (wanted == Kind.TUN) {
            buildTun("requested");
            return;
        }
        Netns.run(List.of("ip", "link", "add", PREFILL_DEV, "netns", prefillNs, "type", "veth", "peer", "name", DECODE_DEV,
                "netns", decodeNs));
        ip(prefillNs, "addr", "add", PREFILL_ADDR + "/30", "dev", PREFILL_DEV);
        ip(decodeNs, "addr", "add", DECODE_ADDR + "/30", "dev", DECODE_DEV);
        ip(prefillNs, "link", "set", PREFILL_DEV, "up");
        ip(decodeNs, "link", "set", DECODE_DEV, "up");
        kind = Kind.VETH;
        if (impairment.isNone()) {
            impairedBy = "none";
            return;
        }
        try {
            netem(prefillNs, PREFILL_DEV);
            netem(decodeNs, DECODE_DEV);
            impairedBy = "tc netem";
        } catch (IOException e) {
            if (wanted == Kind.VETH) throw new IOException("tc netem failed (" + e.getMessage() + "); --netns-link tun plays the link "
                    + "in the harness instead", e);
            ip(prefillNs, "link", "del", PREFILL_DEV); // the peer goes with it
            buildTun("tc netem unavailable: " + tcError(e.getMessage()));
        }
    }

    private void buildTun(String why) throws IOException {
        int p = LinkEmulator.createTun(prefillNs, PREFILL_DEV);
        int d;
        try {
            d = LinkEmulator.createTun(decodeNs, DECODE_DEV);
        } catch (IOException | RuntimeException e) {
            Posix.close(p);
            throw e;
        }
        emulator = new LinkEmulator(p, d, impairment, 0x6b76L);
        kind = Kind.TUN;
        impairedBy = "harness link emulator (" + why + ")";
        String mtu = Integer.toString(LinkEmulator.MTU);
        ip(prefillNs, "addr", "add", PREFILL_ADDR, "peer", DECODE_ADDR, "dev", PREFILL_DEV);
        ip(decodeNs, "addr", "add", DECODE_ADDR, "peer", PREFILL_ADDR, "dev", DECODE_DEV);
        ip(prefillNs, "link", "set", PREFILL_DEV, "mtu", mtu, "up");
        ip(decodeNs, "link", "set", DECODE_DEV, "mtu", mtu, "up");
    }

    private void netem(String ns, String dev) throws IOException {
        List<String> cmd = new ArrayList<>(List.of("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "netem"));
        cmd.addAll(Arrays.asList(impairment.spec().split("\\s+")));
        Netns.run(cmd);
    }

    /** What tc said ("Error: Specified qdisc kind is unknown."), without the command line. */
    private static String tcError(String message) {
        int i = message.indexOf("Error:");
        String s = i < 0 ? message : message.substring(i);
        int nl = s.indexOf('\n');
        return nl < 0 ? s : s.substring(0, nl);
    }

    private static void ip(String ns, String... args) throws IOException {
        List<String> cmd = new ArrayList<>(List.of("ip", "-n", ns));
        cmd.addAll(Arrays.asList(args));
        Netns.run(cmd);
    }

    public String prefillNamespace() {
        return prefillNs;
    }

    public String decodeNamespace() {
        return decodeNs;
    }

    /** The command prefix that runs a program inside a namespace (it execs the program in place). */
    public static List<String> launcher(String ns) {
        return List.of("ip", "netns", "exec", ns);
    }

    /** Partition: the decode's end of the link goes down; nothing crosses until {@link #up()}. */
    public void down() throws IOException {
        ip(decodeNs, "link", "set", DECODE_DEV, "down");
    }

    public void up() throws IOException {
        ip(decodeNs, "link", "set", DECODE_DEV, "up");
    }

    /**
     * The link's round trip as a TCP peer sees it: the median of 50 one-byte echoes from the decode's
     * namespace to the prefill's, in milliseconds.
     */
    public double measureRttMillis() throws IOException {
        try (ServerSocket echo = Netns.call(prefillNs, () -> new ServerSocket(0, 1, InetAddress.getByName(PREFILL_ADDR)))) {
            Thread server = Thread.ofPlatform().daemon().name("chaos-rtt-echo").start(() -> {
                try (Socket s = echo.accept(); InputStream in = s.getInputStream(); OutputStream out = s.getOutputStream()) {
                    s.setTcpNoDelay(true);
                    int b;
                    while ((b = in.read()) >= 0) out.write(b);
                } catch (IOException ignored) {
                    // the measuring side closed
                }
            });
            long[] rtts = Netns.call(decodeNs, () -> {
                long[] out = new long[50];
                try (Socket s = new Socket()) {
                    s.connect(new InetSocketAddress(PREFILL_ADDR, echo.getLocalPort()), 5000);
                    s.setTcpNoDelay(true);
                    s.setSoTimeout(5000);
                    for (int i = 0; i < out.length; i++) {
                        long t0 = System.nanoTime();
                        s.getOutputStream().write(1);
                        if (s.getInputStream().read() < 0) throw new IOException("echo closed");
                        out[i] = System.nanoTime() - t0;
                    }
                }
                return out;
            });
            try {
                server.join(5000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            Arrays.sort(rtts);
            return Math.round(rtts[rtts.length / 2] / 1e4) / 100.0;
        }
    }

    /**
     * What the link was, for the verdict.
     *
     * @param kind       veth or tun
     * @param netem      the impairment asked for
     * @param impairedBy tc netem, the harness's emulator (and why), or none
     * @param rttMs      measured before the run ({@link #measureRttMillis()}); null if not measured
     * @param packets    tun only: packets the emulator carried (both directions)
     * @param lost       tun only: dropped by the loss draw
     * @param refused    tun only: dropped because the far device was down (partition)
     */
    @JsonInclude(JsonInclude.Include.NON_NULL)
    public record Info(String kind, String netem, @JsonProperty("impaired_by") String impairedBy, @JsonProperty("rtt_ms") Double rttMs,
                       Long packets, Long lost, Long refused) {}

    public Info info(Double rttMs) {
        LinkEmulator e = emulator;
        LinkEmulator.Counters c = e == null ? null : e.counters();
        return new Info(kind == null ? "none" : kind.label(), impairment.spec(), impairedBy, rttMs, c == null ? null : c.packets(),
                c == null ? null : c.lost(), c == null ? null : c.refused());
    }

    @Override
    public void close() {
        removeAll();
        try {
            Runtime.getRuntime().removeShutdownHook(cleanup);
        } catch (IllegalStateException shuttingDown) {
            // the hook runs (or ran) anyway
        }
    }

    private synchronized void removeAll() {
        if (closed) return;
        closed = true;
        if (emulator != null) emulator.close();
        Netns.delete(decodeNs);
        Netns.delete(prefillNs);
    }
}
