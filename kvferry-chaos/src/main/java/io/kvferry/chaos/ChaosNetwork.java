package io.kvferry.chaos;

import io.kvferry.KVFerry;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.chaos.net.LinkImpairment;
import io.kvferry.chaos.net.Netns;
import io.kvferry.chaos.net.NetnsLink;

import io.kvferry.registry.RegistryOptions;

import java.io.IOException;
import java.time.Duration;
import java.util.List;

/**
 * Where a chaos run's processes live and how the harness reaches into their network: all on
 * loopback (the default), or ({@code --netns}) the registry and the prefill in one network
 * namespace and the decode in another, joined by a {@link NetnsLink}. The harness itself stays in
 * the root namespace and reads the roles' stdout as always; what must sit on one side of the link
 * (the registry's socket, a fault proxy) is created there by a thread that entered that namespace.
 */
final class ChaosNetwork implements AutoCloseable {
    private static final String LOOPBACK = "127.0.0.1";

    /** Null on loopback. */
    private final NetnsLink link;
    private final Double rttMillis;

    private ChaosNetwork(NetnsLink link, Double rttMillis) {
        this.link = link;
        this.rttMillis = rttMillis;
    }

    static ChaosNetwork loopback() {
        return new ChaosNetwork(null, null);
    }

    /** Two fresh namespaces and their link; measures the link's round trip once it is up. */
    static ChaosNetwork netns(LinkImpairment impairment, NetnsLink.Kind kind) throws IOException {
        NetnsLink link = NetnsLink.create(impairment, kind);
        try {
            return new ChaosNetwork(link, link.measureRttMillis());
        } catch (IOException | RuntimeException e) {
            link.close();
            throw e;
        }
    }

    boolean isNetns() {
        return link != null;
    }

    /** The link, or null on loopback. */
    NetnsLink link() {
        return link;
    }

    /** What the link is, for the verdict; null on loopback. */
    NetnsLink.Info info() {
        return link == null ? null : link.info(rttMillis);
    }

    /** Where the registry and the prefill's ranks listen. */
    String prefillHost() {
        return link == null ? LOOPBACK : NetnsLink.PREFILL_ADDR;
    }

    /** Where a fault proxy in front of the prefill listens: on the decode's side of the link. */
    String decodeSideHost() {
        return link == null ? LOOPBACK : NetnsLink.DECODE_ADDR;
    }

    /** The command prefix a role process starts with (empty on loopback). */
    List<String> launcher(boolean prefillSide) {
        if (link == null) return List.of();
        return NetnsLink.launcher(prefillSide ? link.prefillNamespace() : link.decodeNamespace());
    }

    /**
     * The registry, on the prefill's side; {@code requestTimeout} null = the default (10 s). In a
     * namespace its requests run on platform threads: a virtual one started there could make the JVM
     * create a carrier thread inside the namespace, where every virtual thread of the harness mounted
     * on it later would connect from ({@link Netns#call}).
     */
    KVBootstrapServer startRegistry(String token, Duration requestTimeout) throws IOException {
        RegistryOptions options = RegistryOptions.defaults(token);
        if (requestTimeout != null) options = options.withRequestTimeout(requestTimeout);
        if (link == null) return KVFerry.startBootstrapServer(LOOPBACK, 0, options);
        RegistryOptions inNamespace = options.withPlatformRequestThreads();
        return Netns.call(link.prefillNamespace(), () -> KVFerry.startBootstrapServer(NetnsLink.PREFILL_ADDR, 0, inNamespace));
    }

    /** A fault proxy on the decode's side of the link (its connections to the prefill cross the link). */
    FaultProxy proxy(String name, long bytesPerSecond, WriteCorruption corruption) throws IOException {
        if (link == null) return new FaultProxy(name, LOOPBACK, bytesPerSecond, corruption);
        return Netns.call(link.decodeNamespace(), () -> new FaultProxy(name, NetnsLink.DECODE_ADDR, bytesPerSecond, corruption));
    }

    @Override
    public void close() {
        if (link != null) link.close();
    }
}
