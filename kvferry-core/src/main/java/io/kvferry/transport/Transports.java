package io.kvferry.transport;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.ServiceLoader;

/** The pluggable transports on the class path, in the order {@code auto} prefers them (shm, then ucx, then others). */
public final class Transports {
    private static final Map<String, TransportProvider> PROVIDERS = load();

    private Transports() {}

    private static Map<String, TransportProvider> load() {
        List<TransportProvider> found = new ArrayList<>();
        for (TransportProvider p : ServiceLoader.load(TransportProvider.class, Transports.class.getClassLoader())) found.add(p);
        found.sort(java.util.Comparator.comparingInt(p -> switch (p.name()) {
            case "shm" -> 0;
            case "ucx" -> 1;
            default -> 2;
        }));
        Map<String, TransportProvider> byName = new LinkedHashMap<>();
        for (TransportProvider p : found) byName.putIfAbsent(p.name(), p);
        return java.util.Collections.unmodifiableMap(byName);
    }

    /** Every pluggable transport on the class path, auto's preference first. */
    public static List<TransportProvider> all() {
        return List.copyOf(PROVIDERS.values());
    }

    /** The provider of that name, or null. */
    public static TransportProvider get(String name) {
        return PROVIDERS.get(name);
    }
}
