package io.kvferry.api;

/**
 * The monotonic clock a manager measures its deadlines with (bootstrap, waiting and prefill-info
 * timeouts). {@link #SYSTEM} in production; a test hands a manual one to {@link KVManagerConfig}
 * and moves time on instead of sleeping.
 */
@FunctionalInterface
public interface Ticker {
    /** Nanoseconds from an arbitrary origin, like {@link System#nanoTime()}. */
    long nanoTime();

    Ticker SYSTEM = System::nanoTime;
}
