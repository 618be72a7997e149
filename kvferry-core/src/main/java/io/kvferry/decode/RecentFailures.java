package io.kvferry.decode;

import java.util.concurrent.ConcurrentHashMap;

/**
 * Failures answered again from memory for a short window, by key (a bootstrap address, a prefill
 * endpoint): a burst of rooms for a dead or silent peer fails at once with the first failure instead
 * of each trying again on the scheduler thread. Bounded: a registry may list many keys.
 */
final class RecentFailures<E extends Exception> {
    private static final int MAX_KEYS = 1024;

    /** A failure and how long ago it happened. */
    record Recent<E>(E error, long ageNanos) {
        long ageMillis() {
            return ageNanos / 1_000_000;
        }
    }

    private record Entry<E>(long atNanos, E error) {}

    private final long windowNanos;
    private final ConcurrentHashMap<String, Entry<E>> byKey = new ConcurrentHashMap<>();

    RecentFailures(long windowNanos) {
        this.windowNanos = windowNanos;
    }

    long windowMillis() {
        return windowNanos / 1_000_000;
    }

    void remember(String key, E error) {
        long now = System.nanoTime();
        if (byKey.size() >= MAX_KEYS) {
            byKey.values().removeIf(e -> now - e.atNanos() >= windowNanos);
            if (byKey.size() >= MAX_KEYS) byKey.clear();
        }
        byKey.put(key, new Entry<>(now, error));
    }

    /** The failure of {@code key} within the window, or null (an expired one is dropped). */
    Recent<E> recent(String key) {
        Entry<E> e = byKey.get(key);
        if (e == null) return null;
        long age = System.nanoTime() - e.atNanos();
        if (age < windowNanos) return new Recent<>(e.error(), age);
        byKey.remove(key, e);
        return null;
    }

    void forget(String key) {
        byKey.remove(key);
    }
}
