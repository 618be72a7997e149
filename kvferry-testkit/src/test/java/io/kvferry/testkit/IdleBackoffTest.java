package io.kvferry.testkit;


import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;

class IdleBackoffTest {
    @Test
    void idleSleepsDoubleUpToTheCapAndResetWhenSomethingMoves() {
        IdleBackoff b = new IdleBackoff();
        assertEquals(IdleBackoff.MIN_NANOS, b.nextNanos());
        b.after(false);
        assertEquals(2 * IdleBackoff.MIN_NANOS, b.nextNanos());
        for (int i = 0; i < 10; i++) b.after(false);
        assertEquals(IdleBackoff.MAX_NANOS, b.nextNanos(), "capped: a finished request is noticed within MAX_NANOS");
        b.after(true);
        assertEquals(IdleBackoff.MIN_NANOS, b.nextNanos(), "a busy iteration polls quickly again");
    }
}
