package io.kvferry.session;

import java.io.EOFException;
import java.nio.channels.ClosedChannelException;
import java.time.Duration;

/** Failure reasons both sides word the same way (SGLang's texts where it has one). */
public final class Failures {
    private Failures() {}

    /** SGLang's reason for an aborted request. */
    public static final String ABORTED = "Aborted by AbortReq.";
    /** SGLang's reason when a prefill reports Failed without one. */
    public static final String DEFAULT_PREFILL_FAILURE = "Failed to get kvcache from prefill instance, it might be dead";
    public static final String INJECTED = "Injected failure (failure-injection test hook)";

    /** An exception's message, or its class name when it has none. */
    public static String message(Throwable e) {
        return e.getMessage() != null ? e.getMessage() : e.getClass().getSimpleName();
    }

    /** True for the exceptions a closed or reset connection raises. */
    public static boolean isConnectionLoss(Throwable e) {
        return e instanceof ClosedChannelException || e instanceof EOFException;
    }

    /** SGLang's timeout reason: {@code Request R timed out after 3.0s in KVPoll.Bootstrapping}. */
    public static String timedOut(long room, double waitedSeconds, String state) {
        return String.format("Request %d timed out after %.1fs in KVPoll.%s", room, waitedSeconds, state);
    }

    /**
     * A timeout in nanoseconds to add to a clock reading and compare as {@code now - deadline > 0}:
     * saturated at 2^61 ns (~73 years), so the sum never wraps into the past.
     */
    public static long deadlineNanos(Duration timeout) {
        long cap = Long.MAX_VALUE / 4;
        if (timeout.isNegative()) return 0;
        return timeout.compareTo(Duration.ofNanos(cap)) >= 0 ? cap : timeout.toNanos();
    }
}
