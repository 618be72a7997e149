package io.kvferry.registry;

import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.constraints.LongRange;

import java.math.BigInteger;
import java.time.Duration;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertTrue;

class RetryPolicyPropertiesTest {

    @Property(seed = "20261207", tries = 300)
    void backoffDoublesWithinJitterAndNeverExceedsTheCap(@ForAll @IntRange(min = 1, max = 200) int retry,
                                                         @ForAll @LongRange(min = 0, max = 5_000) long initialMs,
                                                         @ForAll @LongRange(min = 0, max = 60_000) long extraCapMs,
                                                         @ForAll long seed) {
        RetryPolicy p = new RetryPolicy(5, Duration.ofMillis(initialMs), Duration.ofMillis(initialMs + extraCapMs));
        BigInteger doubled = BigInteger.valueOf(p.initialBackoff().toNanos()).shiftLeft(retry - 1);
        long full = doubled.min(BigInteger.valueOf(p.maxBackoff().toNanos())).longValueExact();
        long got = p.backoff(retry, new Random(seed)).toNanos();
        assertTrue(got <= full && got >= full / 2, "retry " + retry + ": " + got + " not in [" + full / 2 + ", " + full + "]");
    }
}
