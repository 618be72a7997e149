package io.kvferry.api;

/**
 * A pure, seeded choice of rooms: whether a room is one of a fraction picked by a hash of
 * (room, salt). Test hooks that damage "about p of the rooms" use it so a run is reproducible from
 * its workload (whose rooms are a function of the seed), and so a test can rely on which rooms are
 * damaged instead of on a random draw that, once in a few thousand runs, damages none.
 */
public final class RoomChoice {
    private RoomChoice() {}

    /**
     * Keys the prefill's corruption hook ({@code corruptionInjectionProbability}): any fixed value; the
     * chaos fault proxy keys its own choice by the workload seed.
     */
    public static final long PREFILL_HOOK_SALT = 0x6B76_6665_7272_7921L;

    /**
     * Keys the prefill's failure-injection hook ({@code failureInjectionProbability}); the decode's has
     * its own salt, so the two sides pick independent rooms (and neither the rooms the corruption hook picks).
     */
    public static final long PREFILL_FAILURE_SALT = 0x7072_6566_6169_6C21L;

    /** Keys the decode's failure-injection hook ({@code failureInjectionProbability}). */
    public static final long DECODE_FAILURE_SALT = 0x6465_6366_6169_6C21L;

    /** Whether {@code room} is chosen: true for about {@code probability} of all rooms, the same every call. */
    public static boolean chosen(long room, long salt, double probability) {
        if (probability <= 0) return false;
        if (probability >= 1) return true;
        return (mix(room ^ salt) >>> 11) * 0x1.0p-53 < probability;
    }

    /** SplitMix64's finalizer: a cheap, well-spread 64-bit mix. */
    public static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }
}
