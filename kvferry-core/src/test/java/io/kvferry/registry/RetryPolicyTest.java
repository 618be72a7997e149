package io.kvferry.registry;

import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class RetryPolicyTest {

    @Test
    void defaultsMatchSglang() {
        RetryPolicy d = RetryPolicy.defaults();
        assertEquals(5, d.attempts());
        assertEquals(Duration.ofSeconds(1), d.initialBackoff());
        assertEquals(Duration.ofSeconds(30), d.maxBackoff());
        assertEquals(Duration.ofSeconds(5), d.requestTimeout());
        assertEquals(RetryPolicy.DEFAULT_REQUEST_TIMEOUT, new RetryPolicy(3, Duration.ZERO, Duration.ZERO).requestTimeout());
        assertTrue(RetryPolicy.fast().maxBackoff().compareTo(Duration.ofMillis(200)) <= 0);
    }

    @Test
    void rejectsNonsense() {
        assertThrows(IllegalArgumentException.class, () -> new RetryPolicy(0, Duration.ZERO, Duration.ZERO));
        assertThrows(IllegalArgumentException.class, () -> new RetryPolicy(1, Duration.ofSeconds(2), Duration.ofSeconds(1)));
        assertThrows(IllegalArgumentException.class, () -> new RetryPolicy(1, Duration.ZERO, Duration.ZERO, Duration.ZERO));
        assertThrows(IllegalArgumentException.class, () -> RetryPolicy.defaults().backoff(0, new Random()));
    }

    @Test
    void defaultScheduleIsOneTwoFourEightSixteenThenCapped() {
        RetryPolicy d = RetryPolicy.defaults();
        long[] fullSeconds = {1, 2, 4, 8, 16, 30, 30};
        for (int retry = 1; retry <= fullSeconds.length; retry++) {
            Duration got = d.backoff(retry, new Random(retry));
            Duration full = Duration.ofSeconds(fullSeconds[retry - 1]);
            assertTrue(got.compareTo(full) <= 0 && got.compareTo(full.dividedBy(2)) >= 0, retry + ": " + got);
        }
    }
}
