package io.kvferry.api;

import java.time.Duration;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;

/**
 * kvferry's configuration context: immutable, built once, layered as defaults ← {@code KVFERRY_*}
 * environment (and {@code -Dkvferry.*} properties, which win over the environment) ← explicit
 * settings. Components read their {@link Knob}s from the context they are handed (managers through
 * {@link KVManagerConfig#settings()}, transports through the provider SPI); nothing reads the
 * environment at a use site, so a test sets a knob by building a context, not by mutating the process.
 */
public final class KVFerrySettings {
    private static final KVFerrySettings DEFAULTS = new KVFerrySettings(Map.of(), Map.of());

    /** Values from the process (environment variables by name, properties by key), captured at build time. */
    private final Map<String, String> environment;
    /** Explicit values by knob key; they win over the environment. */
    private final Map<String, String> explicit;

    private KVFerrySettings(Map<String, String> environment, Map<String, String> explicit) {
        this.environment = Map.copyOf(environment);
        this.explicit = Map.copyOf(explicit);
    }

    /** Only the defaults: what a test gets when it wants no influence from the machine it runs on. */
    public static KVFerrySettings defaults() {
        return DEFAULTS;
    }

    /** Defaults ← this process's {@code KVFERRY_*} environment and {@code kvferry.*} system properties. */
    public static KVFerrySettings fromEnvironment() {
        Map<String, String> props = new HashMap<>();
        for (String k : System.getProperties().stringPropertyNames()) {
            if (k.startsWith("kvferry.")) props.put(k, System.getProperty(k));
        }
        return fromEnvironment(System.getenv(), props);
    }

    /** Defaults ← the given environment ← the given properties (for tests and child-process set-up). */
    public static KVFerrySettings fromEnvironment(Map<String, String> env, Map<String, String> properties) {
        Map<String, String> captured = new HashMap<>();
        env.forEach((k, v) -> {
            if (k.startsWith("KVFERRY_") && v != null && !v.isBlank()) captured.put(k, v);
        });
        properties.forEach((k, v) -> {
            if (k.startsWith("kvferry.") && v != null && !v.isBlank()) captured.put(k, v);
        });
        return new KVFerrySettings(captured, Map.of());
    }

    /** A copy with one knob set explicitly (wins over the environment); null clears an explicit value. */
    public KVFerrySettings with(Knob knob, String value) {
        Map<String, String> e = new HashMap<>(explicit);
        if (value == null) e.remove(knob.key());
        else e.put(knob.key(), value);
        return new KVFerrySettings(environment, e);
    }

    /** The knob's text: explicit, else property, else environment variable, else its default. */
    public String get(Knob knob) {
        String v = explicit.get(knob.key());
        if (v == null) v = environment.get(knob.key());
        if (v == null) v = environment.get(knob.env());
        return v == null ? knob.defaultValue() : v.trim();
    }

    /** Whether the knob was set (explicitly or by the environment) rather than defaulted. */
    public boolean isSet(Knob knob) {
        return explicit.containsKey(knob.key()) || environment.containsKey(knob.key()) || environment.containsKey(knob.env());
    }

    /** A whole number; anything else fails naming the knob and the value. */
    public long getLong(Knob knob) {
        String v = get(knob);
        try {
            return Long.parseLong(v);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(knob.names() + " must be a whole number, not '" + v + "'");
        }
    }

    /** A whole number in {@code [min, max]}; anything else fails naming the knob and the value. */
    public long getLong(Knob knob, long min, long max) {
        String v = get(knob);
        long n;
        try {
            n = Long.parseLong(v);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(knob.names() + " must be a whole number in [" + min + ", " + max + "], not '" + v + "'");
        }
        if (n < min || n > max) {
            throw new IllegalArgumentException(knob.names() + " must be in [" + min + ", " + max + "], not " + n);
        }
        return n;
    }

    public int getInt(Knob knob, int min, int max) {
        return (int) getLong(knob, min, max);
    }

    /** A duration written in milliseconds, at least {@code minMillis}. */
    public Duration getMillis(Knob knob, long minMillis) {
        return Duration.ofMillis(getLong(knob, minMillis, Long.MAX_VALUE / 1_000_000L));
    }

    /** {@code true} or {@code false} (also 1/0, yes/no); anything else fails naming the knob. */
    public boolean getBoolean(Knob knob) {
        String v = get(knob).toLowerCase(Locale.ROOT);
        return switch (v) {
            case "true", "1", "yes" -> true;
            case "false", "0", "no", "" -> false;
            default -> throw new IllegalArgumentException(knob.names() + " must be true or false, not '" + get(knob) + "'");
        };
    }

    /** A checksum mode ({@code off}, {@code sampled}, {@code full}). */
    public ChecksumMode getChecksum(Knob knob) {
        try {
            return ChecksumMode.parse(get(knob));
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(knob.names() + ": " + e.getMessage());
        }
    }

    /** A probability in [0, 1]. */
    public double getProbability(Knob knob) {
        String v = get(knob);
        try {
            double p = Double.parseDouble(v);
            if (p >= 0 && p <= 1) return p;
        } catch (NumberFormatException e) {
            // reported below
        }
        throw new IllegalArgumentException(knob.names() + " must be a probability in [0, 1], not '" + v + "'");
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof KVFerrySettings s && s.environment.equals(environment) && s.explicit.equals(explicit);
    }

    @Override
    public int hashCode() {
        return Objects.hash(environment, explicit);
    }

    @Override
    public String toString() {
        return "KVFerrySettings[env=" + environment.keySet() + ", explicit=" + explicit + "]";
    }
}
