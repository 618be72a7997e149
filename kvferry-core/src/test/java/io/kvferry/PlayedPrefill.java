package io.kvferry;

import io.kvferry.protocol.Coverage;
import io.kvferry.protocol.MemoryDescriptor;

import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

import static org.junit.jupiter.api.Assertions.fail;

/** For tests that play a prefill rank against a real decode over a real socket. */
public final class PlayedPrefill {
    private PlayedPrefill() {
    }

    /** A prefill rank's coverage that writes every byte of a decode's memory (same TP, one stage). */
    public static Coverage wholeCoverage(MemoryDescriptor d) {
        int n = d.kvItemLens().length;
        long[][] unit = new long[d.states().size()][], zero = new long[d.states().size()][];
        for (int c = 0; c < unit.length; c++) {
            unit[c] = d.states().get(c).itemLens().clone();
            zero[c] = new long[unit[c].length];
        }
        return new Coverage(d.kvItemLens().clone(), new long[n], d.kvItemLens().clone(), d.auxItemLens().length > 0, true, unit,
                zero, unit);
    }

    /** Waits (up to 30 s, generous for a loaded machine) until {@code condition} holds; fails naming {@code what}. */
    public static void awaitUntil(BooleanSupplier condition, String what) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() - deadline > 0) fail("timed out waiting until " + what);
            Thread.sleep(1);
        }
    }
}
