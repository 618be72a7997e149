package io.kvferry.transport;

import java.util.ArrayList;
import java.util.List;

/**
 * A transfer backend as chosen by {@code --disaggregation-transfer-backend}: the built-in
 * {@code tcp} (bytes over the control connection) and {@code inproc} (same JVM), a pluggable
 * transport found through {@link TransportProvider} ({@code shm}, {@code ucx}, …), {@code auto}
 * (every pluggable one the peer can use, else tcp) or {@code fake} (nothing moves). Managers ask
 * it what to do instead of comparing names.
 */
public final class Backend {
    /** How a backend moves bytes. */
    public enum Kind { TCP, INPROC, PLUGGABLE, AUTO, FAKE }

    public static final Backend TCP = new Backend("tcp", Kind.TCP);
    public static final Backend INPROC = new Backend("inproc", Kind.INPROC);
    public static final Backend AUTO = new Backend("auto", Kind.AUTO);
    public static final Backend FAKE = new Backend("fake", Kind.FAKE);

    private final String name;
    private final Kind kind;

    private Backend(String name, Kind kind) {
        this.name = name;
        this.kind = kind;
    }

    /** The backend of that name; an unknown name fails listing the ones this build has. */
    public static Backend of(String name) {
        if (name == null) throw new IllegalArgumentException("no transfer backend given; choose one of " + names());
        for (Backend b : List.of(TCP, INPROC, AUTO, FAKE)) if (b.name.equals(name)) return b;
        TransportProvider p = Transports.get(name);
        if (p != null) return new Backend(name, Kind.PLUGGABLE);
        throw new IllegalArgumentException("unknown transfer backend '" + name + "'; choose one of " + names());
    }

    /** Every backend name this build serves: the built-in ones, each pluggable transport on the class path, auto, fake. */
    public static List<String> names() {
        List<String> names = new ArrayList<>(List.of(TCP.name, INPROC.name));
        for (TransportProvider p : Transports.all()) names.add(p.name());
        names.add(AUTO.name);
        names.add(FAKE.name);
        return List.copyOf(names);
    }

    public String name() {
        return name;
    }

    public Kind kind() {
        return kind;
    }

    /** Decode and prefill in one JVM, bytes copied directly into the decode's memory through its write gate. */
    public boolean isInproc() {
        return kind == Kind.INPROC;
    }

    /** Chosen by the peers per link (auto). */
    public boolean isAuto() {
        return kind == Kind.AUTO;
    }

    /**
     * The pluggable transports this backend uses, in auto's preference order: every one for
     * {@code auto}, its own for a pluggable backend, none for tcp, inproc and fake.
     */
    public List<TransportProvider> pluggableTransports() {
        return switch (kind) {
            case AUTO -> Transports.all();
            case PLUGGABLE -> List.of(Transports.get(name));
            case TCP, INPROC, FAKE -> List.of();
        };
    }

    /**
     * For a backend named explicitly (not {@code auto}): fails when its transport cannot run here
     * (not installed, a bad setting), so a manager refuses to start instead of failing link by link.
     */
    public void requireAvailable(io.kvferry.api.KVFerrySettings settings) {
        if (kind != Kind.PLUGGABLE) return;
        TransportProvider p = Transports.get(name);
        String unavailable = p.unavailableReason(settings);
        if (unavailable != null) throw new IllegalStateException("transfer backend " + name + " cannot run here: " + unavailable);
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
