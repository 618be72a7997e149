package io.kvferry.registry;

import java.time.Duration;
import java.util.Objects;
import java.util.random.RandomGenerator;

/**
 * How {@link BootstrapClient} retries: exponential backoff from {@code initialBackoff}, doubled per
 * retry and capped at {@code maxBackoff}, each wait jittered into [half, full] so that the ranks of
 * one instance, which all start together, do not hit the registry in lockstep.
 *
 * @param attempts       total tries, the first included (1 = no retry)
 * @param requestTimeout limit on one HTTP exchange
 */
public record RetryPolicy(int attempts, Duration initialBackoff, Duration maxBackoff, Duration requestTimeout) {

    /** SGLang's registration client uses a 5 s HTTP timeout. */
    public static final Duration DEFAULT_REQUEST_TIMEOUT = Duration.ofSeconds(5);

    public RetryPolicy {
        if (attempts < 1) throw new IllegalArgumentException("attempts must be >= 1, got " + attempts);
        Objects.requireNonNull(initialBackoff, "initialBackoff");
        Objects.requireNonNull(maxBackoff, "maxBackoff");
        Objects.requireNonNull(requestTimeout, "requestTimeout");
        if (initialBackoff.isNegative()) throw new IllegalArgumentException("initialBackoff must be >= 0");
        if (maxBackoff.compareTo(initialBackoff) < 0) {
            throw new IllegalArgumentException("maxBackoff " + maxBackoff + " is below initialBackoff " + initialBackoff);
        }
        if (requestTimeout.isNegative() || requestTimeout.isZero()) {
            throw new IllegalArgumentException("requestTimeout must be > 0");
        }
    }

    public RetryPolicy(int attempts, Duration initialBackoff, Duration maxBackoff) {
        this(attempts, initialBackoff, maxBackoff, DEFAULT_REQUEST_TIMEOUT);
    }

    /** SGLang's registration schedule: 5 attempts, 1 s doubling to at most 30 s, 5 s per request. */
    public static RetryPolicy defaults() {
        return new RetryPolicy(5, Duration.ofSeconds(1), Duration.ofSeconds(30));
    }

    /** Milliseconds-scale schedule for tests and same-host setups, where waiting seconds buys nothing. */
    public static RetryPolicy fast() {
        return new RetryPolicy(5, Duration.ofMillis(10), Duration.ofMillis(100), Duration.ofSeconds(2));
    }

    /** The wait before retry number {@code retry} (1 = the wait after the first failure). */
    public Duration backoff(int retry, RandomGenerator random) {
        if (retry < 1) throw new IllegalArgumentException("retry must be >= 1, got " + retry);
        long initial = initialBackoff.toNanos();
        long cap = maxBackoff.toNanos();
        long full = initial;
        for (int i = 1; i < retry && full < cap; i++) {
            full = full > cap / 2 ? cap : full * 2;
        }
        full = Math.min(full, cap);
        long half = full / 2;
        long jittered = half + (full - half == 0 ? 0 : random.nextLong(full - half + 1));
        return Duration.ofNanos(jittered);
    }
}
