package io.kvferry.transport;

import io.kvferry.api.BackendUnavailableException;
import io.kvferry.api.KVFerrySettings;

import java.util.ArrayList;
import java.util.List;

/**
 * A transfer backend as chosen by {@code --disaggregation-transfer-backend}: one transport by name
 * ({@code tcp}, {@code inproc}, {@code shm}, {@code ucx}, … — every {@link TransportProvider} on the
 * class path), {@code auto} (every transport the peer can use, in preference order, else tcp) or
 * {@code fake} (nothing moves). Managers ask it what to offer and accept instead of comparing names.
 */
public final class Backend {
    /** How a backend picks its transports. */
    public enum Kind { TRANSPORT, AUTO, FAKE }

    private static final String AUTO_NAME = "auto";
    private static final String FAKE_NAME = "fake";

    private final String name;
    private final Kind kind;
    /** For {@link Kind#TRANSPORT}; null otherwise. */
    private final TransportProvider transport;

    private Backend(String name, Kind kind, TransportProvider transport) {
        this.name = name;
        this.kind = kind;
        this.transport = transport;
    }

    /** The backend of that name; an unknown name fails listing the ones this build has. */
    public static Backend of(String name) {
        if (name == null) throw new IllegalArgumentException("no transfer backend given; choose one of " + names());
        if (name.equals(AUTO_NAME)) return new Backend(name, Kind.AUTO, null);
        if (name.equals(FAKE_NAME)) return new Backend(name, Kind.FAKE, null);
        TransportProvider p = Transports.get(name);
        if (p != null) return new Backend(name, Kind.TRANSPORT, p);
        throw new IllegalArgumentException("unknown transfer backend '" + name + "'; choose one of " + names());
    }

    /** Every backend name this build serves: each transport on the class path, auto, fake. */
    public static List<String> names() {
        List<String> names = new ArrayList<>();
        Transports.all().stream().map(TransportProvider::name).sorted((a, b) -> a.equals("tcp") ? -1 : b.equals("tcp") ? 1 : 0)
                .forEach(names::add);
        names.add(AUTO_NAME);
        names.add(FAKE_NAME);
        return List.copyOf(names);
    }

    public String name() {
        return name;
    }

    public Kind kind() {
        return kind;
    }

    /** Chosen by the peers per link (auto). */
    public boolean isAuto() {
        return kind == Kind.AUTO;
    }

    /**
     * The transports a decode offers and a prefill accepts with this backend, in preference order,
     * besides tcp, which every link can fall back to: auto's list for {@code auto}, the named one
     * for a named transport other than tcp, none for tcp and fake.
     */
    public List<TransportProvider> offeredTransports() {
        return switch (kind) {
            case AUTO -> Transports.offeredByAuto();
            case TRANSPORT -> transport == Transports.fallback() ? List.of() : List.of(transport);
            case FAKE -> List.of();
        };
    }

    /**
     * For a backend named explicitly (not {@code auto}): fails when its transport cannot run here
     * (not installed, a bad setting), so a manager refuses to start instead of failing link by link.
     *
     * @throws BackendUnavailableException naming the backend and why it cannot run
     */
    public void requireAvailable(KVFerrySettings settings) {
        if (kind != Kind.TRANSPORT) return;
        String unavailable = transport.unavailableReason(settings);
        if (unavailable != null) throw new BackendUnavailableException("transfer backend " + name + " cannot run here: " + unavailable);
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Backend b && b.name.equals(name);
    }

    @Override
    public int hashCode() {
        return name.hashCode();
    }

    @Override
    public String toString() {
        return name;
    }
}
