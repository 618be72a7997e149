package io.kvferry.bench;

import java.util.List;

/**
 * What one rank driver saw, serialised as one JSON line by role processes.
 *
 * @param role            prefill or decode
 * @param rank            attention-TP rank
 * @param succeeded       requests that reached Success (decode: and verified byte-exact)
 * @param failed          requests that ended Failed
 * @param corrupted       decode: requests reported Success whose bytes differ
 * @param failedRequests  indices of requests that did not succeed on this rank
 * @param bytes           decode: verified bytes; prefill: bytes handed to the transport
 * @param elapsedSeconds  first request started → last request concluded
 * @param latencyMicros   decode: metadata sent → Success, per request
 * @param firstFailures   up to five failure reasons, for the report
 * @param hung            requests still without a terminal state when the driver's deadline passed
 * @param firstFailureAtMillis wall-clock time (epoch ms) of the first failure this rank saw, 0 if none
 * @param leakedRooms     rooms the rank's manager still tracked, plus KV pages and aux rows not returned to the
 *                        pool, after every request concluded
 */
public record RoleReport(String role, int rank, int succeeded, int failed, int corrupted, List<Integer> failedRequests,
                         long bytes, double elapsedSeconds, List<Long> latencyMicros, List<String> firstFailures,
                         int hung, long firstFailureAtMillis, int leakedRooms) {
    public RoleReport(String role, int rank, int succeeded, int failed, int corrupted, List<Integer> failedRequests,
                      long bytes, double elapsedSeconds, List<Long> latencyMicros, List<String> firstFailures) {
        this(role, rank, succeeded, failed, corrupted, failedRequests, bytes, elapsedSeconds, latencyMicros, firstFailures,
                0, 0, 0);
    }

    /** The same report with the manager's leftover room count filled in. */
    public RoleReport withLeakedRooms(int leaked) {
        return new RoleReport(role, rank, succeeded, failed, corrupted, failedRequests, bytes, elapsedSeconds, latencyMicros,
                firstFailures, hung, firstFailureAtMillis, leaked);
    }
}
