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
 */
public record RoleReport(String role, int rank, int succeeded, int failed, int corrupted, List<Integer> failedRequests,
                         long bytes, double elapsedSeconds, List<Long> latencyMicros, List<String> firstFailures) {}
