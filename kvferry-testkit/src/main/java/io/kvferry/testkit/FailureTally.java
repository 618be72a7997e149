package io.kvferry.testkit;

import io.kvferry.api.KVTransferException;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * A driver's failed requests, as its {@link RoleReport} carries them: which (by index), the first
 * {@value #REASONS} reasons, how many of each failure kind, and when each failure that was not the
 * bootstrap backstop was seen (chaos times its detection from them). Owned by one driver thread.
 */
final class FailureTally {
    static final int REASONS = 5;

    final List<Integer> failedIdx = new ArrayList<>();
    final List<String> reasons = new ArrayList<>();
    final List<Long> failureTimes = new ArrayList<>();
    final Map<String, Integer> failureKinds = new TreeMap<>();
    /** Requests that concluded Failed (a corrupted one is in failedIdx but not counted here). */
    int failed;
    /** Wall-clock millis of the first failure; 0 = none. */
    long firstFailureAt;

    /**
     * Records a request the scheduler saw Failed; {@code raise} is its sender's or receiver's
     * {@code failureException}, which throws the failure's kind and message (and latches it).
     */
    void failed(int index, Runnable raise) {
        failed++;
        failedIdx.add(index);
        long at = System.currentTimeMillis();
        if (firstFailureAt == 0) firstFailureAt = at;
        try {
            raise.run();
        } catch (KVTransferException e) {
            failureKinds.merge(e.kind().label(), 1, Integer::sum);
            reason(e.getMessage());
            if (!RoleReport.isBackstopTimeout(e.getMessage())) failureTimes.add(at);
        }
    }

    /** Keeps {@code reason} when fewer than {@value #REASONS} are kept. */
    void reason(String reason) {
        if (reasons.size() < REASONS) reasons.add(reason);
    }
}
