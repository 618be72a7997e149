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

    /**
     * The transports a manager with this backend uses: {@code auto} → every one on the class path;
     * a pluggable transport's own name → that one; tcp/inproc → none.
     */
    public static List<TransportProvider> forBackend(String backend) {
        if ("auto".equals(backend)) return all();
        TransportProvider p = PROVIDERS.get(backend);
        return p == null ? List.of() : List.of(p);
    }

    /**
     * For a backend named explicitly (not {@code auto}): fails when its transport cannot run here
     * (not installed, a bad setting), so a manager refuses to start instead of failing link by link.
     */
    public static void requireAvailable(String backend) {
        if ("auto".equals(backend)) return;
        for (TransportProvider p : forBackend(backend)) {
            String unavailable = p.unavailableReason();
            if (unavailable != null) throw new IllegalStateException("transfer backend " + p.name() + " cannot run here: " + unavailable);
        }
    }
}
