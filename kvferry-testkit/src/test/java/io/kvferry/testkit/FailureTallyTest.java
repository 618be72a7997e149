package io.kvferry.testkit;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVTransferException;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

class FailureTallyTest {
    private static Runnable raising(FailureKind kind, String reason) {
        return () -> {
            throw KVTransferException.forRoom(7, kind, reason);
        };
    }

    @Test
    void recordsIndexKindReasonAndWhenButNotTheBackstopsTime() {
        FailureTally t = new FailureTally();
        long before = System.currentTimeMillis();
        t.failed(3, raising(FailureKind.ABORTED, "Aborted by AbortReq."));
        t.failed(9, raising(FailureKind.BOOTSTRAP_TIMEOUT, "Request 7 timed out after 2.0s in KVPoll.Bootstrapping"));
        assertEquals(2, t.failed);
        assertEquals(List.of(3, 9), t.failedIdx);
        assertEquals(Map.of(FailureKind.ABORTED.label(), 1, FailureKind.BOOTSTRAP_TIMEOUT.label(), 1), t.failureKinds);
        assertEquals(2, t.reasons.size());
        assertTrue(t.reasons.get(0).contains("Aborted"), t.reasons.toString());
        assertEquals(1, t.failureTimes.size(), "the bootstrap backstop is not a detected failure: " + t.failureTimes);
        assertTrue(t.firstFailureAt >= before && t.failureTimes.get(0) >= t.firstFailureAt);
    }

    @Test
    void keepsOnlyTheFirstFiveReasons() {
        FailureTally t = new FailureTally();
        for (int i = 0; i < 8; i++) t.failed(i, raising(FailureKind.ABORTED, "reason " + i));
        t.reason("corrupted");
        assertEquals(8, t.failed);
        assertEquals(FailureTally.REASONS, t.reasons.size());
        for (int i = 0; i < FailureTally.REASONS; i++) assertTrue(t.reasons.get(i).endsWith("reason " + i), t.reasons.toString());
    }
}
