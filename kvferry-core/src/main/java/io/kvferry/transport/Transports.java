package io.kvferry.transport;

import io.kvferry.transport.tcp.TcpTransportProvider;

import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.ServiceLoader;

/**
 * The transports on the class path, in the order {@code auto} prefers them (shm, then ucx, then
 * others), with tcp, the fallback every link has, last.
 */
public final class Transports {
    private static final Map<String, TransportProvider> PROVIDERS = load();
    private static final TcpTransportProvider FALLBACK = (TcpTransportProvider) PROVIDERS.get(TcpTransportProvider.NAME);

    private Transports() {}

    private static Map<String, TransportProvider> load() {
        List<TransportProvider> found = new ArrayList<>();
        for (TransportProvider p : ServiceLoader.load(TransportProvider.class, Transports.class.getClassLoader())) found.add(p);
        if (found.stream().noneMatch(p -> p instanceof TcpTransportProvider)) found.add(new TcpTransportProvider());
        found.sort(Comparator.comparingInt(p -> switch (p.name()) {
            case "shm" -> 0;
            case "ucx" -> 1;
            case "inproc" -> 3;
            case "tcp" -> 4;
            default -> 2;
        }));
        Map<String, TransportProvider> byName = new LinkedHashMap<>();
        for (TransportProvider p : found) byName.putIfAbsent(p.name(), p);
        return Collections.unmodifiableMap(byName);
    }

    /** Every transport on the class path, auto's preference first, tcp last. */
    public static List<TransportProvider> all() {
        return List.copyOf(PROVIDERS.values());
    }

    /** The ones backend {@code auto} offers, in its order of preference (tcp, the fallback, is not among them). */
    public static List<TransportProvider> offeredByAuto() {
        return PROVIDERS.values().stream().filter(TransportProvider::offeredByAuto).toList();
    }

    /** The provider of that name, or null. */
    public static TransportProvider get(String name) {
        return PROVIDERS.get(name);
    }

    /** tcp: what a link uses when no offered transport could be. */
    public static TcpTransportProvider fallback() {
        return FALLBACK;
    }
}
