package io.kvferry.chaos;


import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A TCP forwarder that injects network faults between a decode and a prefill rank
 * ({@code kvferry chaos --scenario partition}, {@code corrupt}). The prefill advertises the proxy's
 * port in the registry, so every decode connection to that rank goes through here. It listens on
 * loopback, or (chaos in network namespaces) on the decode's side of the link.
 *
 * <ul>
 *   <li>{@link #blackhole()}: every connection stays open but no byte moves in either direction;
 *       new connections are accepted and held silent (never connected upstream). This is the
 *       partition TCP keepalive cannot see: the proxy's kernel still acknowledges both peers.</li>
 *   <li>{@link #restore()}: the blackholed connections are closed (both peers declared them dead by
 *       then) and new connections are forwarded again.</li>
 *   <li>{@link #reset()}: every current connection is closed with a TCP RST on both ends.</li>
 *   <li>With a {@link WriteCorruption}: the prefill-to-decode direction of every connection is
 *       followed frame by frame ({@link FrameCorruptor}) and one payload byte of each chosen room's
 *       WRITE is flipped; headers and bodies pass unchanged.</li>
 * </ul>
 *
 * The upstream (the rank's real endpoint) may be set after the proxy started listening:
 * connections accepted before that wait for it.
 */
public final class FaultProxy implements AutoCloseable {
    private static final int BUFFER_BYTES = 1 << 20;
    private static final int PACED_BUFFER_BYTES = 64 << 10;
    private static final long UPSTREAM_WAIT_MILLIS = 30_000;

    private final ServerSocketChannel server;
    private final Thread acceptor;
    private final String name;
    private final Set<Pair> pairs = ConcurrentHashMap.newKeySet();
    private final AtomicInteger accepted = new AtomicInteger();
    private volatile InetSocketAddress upstream;
    private volatile boolean blackholed;
    private volatile boolean closed;
    /** Each direction of each connection is paced to this many bytes per second; 0 = as fast as it goes. */
    private final long bytesPerSecond;
    /** Rooms whose WRITE payloads get a byte flipped on their way to the decode; null = none. */
    private final WriteCorruption corruption;

    /** Listens on an ephemeral port of 127.0.0.1 and forwards at full speed. */
    public FaultProxy(String name) throws IOException {
        this(name, 0);
    }

    /**
     * @param bindHost       the address to listen on (an ephemeral port)
     * @param bytesPerSecond pace of each direction (0 = unpaced)
     * @param corruption     rooms to damage in flight (null = none)
     */
    public FaultProxy(String name, String bindHost, long bytesPerSecond, WriteCorruption corruption) throws IOException {
        if (bytesPerSecond < 0) throw new IllegalArgumentException("bytesPerSecond must be >= 0, got " + bytesPerSecond);
        this.name = name;
        this.bytesPerSecond = bytesPerSecond;
        this.corruption = corruption;
        server = ServerSocketChannel.open();
        server.bind(new InetSocketAddress(bindHost, 0));
        acceptor = Thread.ofPlatform().daemon().name("chaos-proxy-" + name + "-accept").start(this::acceptLoop);
    }

    /**
     * @param bytesPerSecond pace of each direction (0 = unpaced). A paced link is the bottleneck, so the
     *                       prefill always has rooms mid-transfer when a fault strikes (partition).
     */
    public FaultProxy(String name, long bytesPerSecond) throws IOException {
        this(name, "127.0.0.1", bytesPerSecond, null);
    }

    /** The port the proxy listens on (what the prefill advertises). */
    public int port() {
        return ((InetSocketAddress) server.socket().getLocalSocketAddress()).getPort();
    }

    /** The address the proxy listens on (what the prefill advertises). */
    public String host() {
        return ((InetSocketAddress) server.socket().getLocalSocketAddress()).getHostString();
    }

    /** Where connections are forwarded to: the rank's real endpoint. */
    public synchronized void upstream(InetSocketAddress target) {
        upstream = target;
        notifyAll();
    }

    /** Connections accepted so far (all modes). */
    public int accepted() {
        return accepted.get();
    }

    /** Connections currently open through the proxy. */
    public int open() {
        return pairs.size();
    }

    /** Stops every byte on every connection, current and new, until {@link #restore()}. */
    public void blackhole() {
        blackholed = true;
        for (Pair p : pairs) p.blackholed = true;
    }

    /** Closes the connections that were blackholed and forwards new ones again. Returns how many were closed. */
    public int restore() {
        int n = 0;
        for (Pair p : pairs) {
            if (p.blackholed) {
                p.close(false);
                n++;
            }
        }
        blackholed = false;
        return n;
    }

    /** Closes every current connection with a TCP RST to both peers. Returns how many were reset. */
    public int reset() {
        int n = 0;
        for (Pair p : pairs) {
            p.close(true);
            n++;
        }
        return n;
    }

    @Override
    public void close() {
        closed = true;
        try {
            server.close();
        } catch (IOException ignored) {
            // closing
        }
        synchronized (this) {
            notifyAll();
        }
        for (Pair p : pairs) p.close(false);
        try {
            acceptor.join(2000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private void acceptLoop() {
        while (!closed) {
            SocketChannel client;
            try {
                client = server.accept();
            } catch (IOException e) {
                return; // closed
            }
            accepted.incrementAndGet();
            Pair p = new Pair(client);
            pairs.add(p);
            if (blackholed) {
                p.blackholed = true; // the SYN got through, nothing else will: never connect upstream
                continue;
            }
            Thread.ofPlatform().daemon().name("chaos-proxy-" + name + "-connect").start(() -> connect(p));
        }
    }

    private void connect(Pair p) {
        try {
            InetSocketAddress target = awaitUpstream();
            if (target == null) {
                p.close(false);
                return;
            }
            SocketChannel up = SocketChannel.open();
            up.setOption(StandardSocketOptions.TCP_NODELAY, true);
            up.connect(target);
            synchronized (p) {
                if (p.closed) {
                    up.close();
                    return;
                }
                p.upstream = up;
            }
            p.client.setOption(StandardSocketOptions.TCP_NODELAY, true);
            FrameCorruptor corruptor = corruption == null ? null : new FrameCorruptor(corruption);
            Thread.ofPlatform().daemon().name("chaos-proxy-" + name + "-up").start(() -> pump(p, p.client, up, bytesPerSecond, null));
            Thread.ofPlatform().daemon().name("chaos-proxy-" + name + "-down")
                    .start(() -> pump(p, up, p.client, bytesPerSecond, corruptor));
        } catch (IOException e) {
            p.close(true); // upstream refused: the client sees a reset, as it would from the rank itself
        }
    }

    private synchronized InetSocketAddress awaitUpstream() {
        long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(UPSTREAM_WAIT_MILLIS);
        while (upstream == null && !closed && System.nanoTime() < until) {
            try {
                wait(100);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return null;
            }
        }
        return closed ? null : upstream;
    }

    /**
     * Copies one direction (paced when {@code rate > 0}, through {@code corruptor} when not null); a
     * blackholed pair stops before writing and waits for its end.
     */
    private static void pump(Pair p, SocketChannel from, SocketChannel to, long rate, FrameCorruptor corruptor) {
        // Paced: small reads, so the pace holds at the scale of a few milliseconds.
        ByteBuffer buf = ByteBuffer.allocateDirect(rate > 0 ? PACED_BUFFER_BYTES : BUFFER_BYTES);
        long start = System.nanoTime(), sent = 0;
        try {
            while (!p.closed) {
                buf.clear();
                if (from.read(buf) < 0) break;
                buf.flip();
                if (corruptor != null) corruptor.process(buf);
                while (p.blackholed && !p.closed) {
                    synchronized (p) {
                        p.wait(50);
                    }
                }
                if (p.closed) return;
                if (rate > 0) {
                    sent += buf.remaining();
                    long due = start + sent * 1_000_000_000L / rate, now = System.nanoTime();
                    if (due > now) TimeUnit.NANOSECONDS.sleep(due - now);
                    else if (now - due > 100_000_000L) { // idle a while: do not let a burst make up for it
                        start = now;
                        sent = 0;
                    }
                }
                while (buf.hasRemaining()) to.write(buf);
            }
        } catch (IOException | InterruptedException e) {
            // closed or reset: end the pair
        }
        p.close(false);
    }

    /** One proxied connection: the client side and (once connected) the upstream side. */
    private final class Pair {
        final SocketChannel client;
        SocketChannel upstream;
        volatile boolean blackholed;
        volatile boolean closed;

        Pair(SocketChannel client) {
            this.client = client;
        }

        void close(boolean rst) {
            SocketChannel up;
            synchronized (this) {
                if (closed) return;
                closed = true;
                up = upstream;
                notifyAll();
            }
            pairs.remove(this);
            List<SocketChannel> both = new ArrayList<>();
            both.add(client);
            if (up != null) both.add(up);
            for (SocketChannel c : both) {
                try {
                    if (rst) c.setOption(StandardSocketOptions.SO_LINGER, 0);
                } catch (IOException ignored) {
                    // already closed
                }
                try {
                    c.close();
                } catch (IOException ignored) {
                    // already closed
                }
            }
        }
    }
}
