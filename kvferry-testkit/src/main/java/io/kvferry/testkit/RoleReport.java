package io.kvferry.testkit;


import java.util.List;
import java.util.Map;

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
 * @param latencyMicros   decode: metadata sent → Success, of every request (a histogram)
 * @param firstFailures   up to five failure reasons, for the report
 * @param hung            requests still without a terminal state when the driver's deadline passed
 * @param firstFailureAtMillis wall-clock time (epoch ms) of the first failure this rank saw, 0 if none
 * @param leakedRooms     everything this report counts as leaked: {@code leaks.total()}
 * @param failureTimesMillis wall-clock time (epoch ms) of every failure this rank saw, in order, except the backstop
 *                        timeouts (bootstrap / waiting timeout): what detection times are measured with
 * @param leaks           what was not returned: rooms and pool pages/rows of this rank; the process's
 *                        threads, sockets and native memory after teardown on its first report only
 * @param dataPaths       decode: succeeded requests per data path they took (tcp, shm, ucx, inproc; '+'-joined when mixed)
 * @param datapathBytes   prefill: bytes its data paths moved
 * @param datapathBusyNanos prefill: time its transfer workers spent inside the data paths, summed over workers
 * @param datapathOps     prefill: plan ops its data paths moved (bytes / ops = mean message size)
 * @param datapathActiveNanos prefill: wall time with at least one write inside a data path
 * @param pairedMemcpyBytes prefill with --paired-memcpy: bytes its paired single-thread copies moved
 * @param pairedMemcpyNanos prefill with --paired-memcpy: time those copies took
 * @param figures         the benchmark suite's phase timings, CPU window and room memory ({@link RoleFigures})
 * @param failureKinds    requests that ended Failed on this rank, per {@code FailureKind} label ({@code integrity}, ...)
 */
public record RoleReport(String role, int rank, int succeeded, int failed, int corrupted, List<Integer> failedRequests,
                         long bytes, double elapsedSeconds, MicrosHistogram latencyMicros, List<String> firstFailures,
                         int hung, long firstFailureAtMillis, int leakedRooms, List<Long> failureTimesMillis,
                         LeakCheck.Leaks leaks, Map<String, Long> dataPaths, long datapathBytes,
                         long datapathBusyNanos, long datapathOps, long datapathActiveNanos, long pairedMemcpyBytes,
                         long pairedMemcpyNanos, RoleFigures figures, Map<String, Integer> failureKinds) {
    public RoleReport {
        failureTimesMillis = failureTimesMillis == null ? List.of() : failureTimesMillis;
        latencyMicros = latencyMicros == null ? new MicrosHistogram() : latencyMicros;
        leaks = leaks == null ? LeakCheck.Leaks.NONE : leaks;
        dataPaths = dataPaths == null ? Map.of() : Map.copyOf(dataPaths);
        figures = figures == null ? RoleFigures.none() : figures;
        failureKinds = failureKinds == null ? Map.of() : Map.copyOf(failureKinds);
    }

    /** Without failure kinds. */
    public RoleReport(String role, int rank, int succeeded, int failed, int corrupted, List<Integer> failedRequests,
                      long bytes, double elapsedSeconds, MicrosHistogram latencyMicros, List<String> firstFailures,
                      int hung, long firstFailureAtMillis, int leakedRooms, List<Long> failureTimesMillis,
                      LeakCheck.Leaks leaks, Map<String, Long> dataPaths, long datapathBytes,
                      long datapathBusyNanos, long datapathOps, long datapathActiveNanos, long pairedMemcpyBytes,
                      long pairedMemcpyNanos, RoleFigures figures) {
        this(role, rank, succeeded, failed, corrupted, failedRequests, bytes, elapsedSeconds, latencyMicros, firstFailures,
                hung, firstFailureAtMillis, leakedRooms, failureTimesMillis, leaks, dataPaths, datapathBytes, datapathBusyNanos,
                datapathOps, datapathActiveNanos, pairedMemcpyBytes, pairedMemcpyNanos, figures, Map.of());
    }

    /** Requests that failed on this rank with the failure kind of that label (0 if none). */
    public int failedWith(String kindLabel) {
        return failureKinds.getOrDefault(kindLabel, 0);
    }

    /** The same report with its failures counted per kind. */
    public RoleReport withFailureKinds(Map<String, Integer> kinds) {
        return new RoleReport(role, rank, succeeded, failed, corrupted, failedRequests, bytes, elapsedSeconds, latencyMicros,
                firstFailures, hung, firstFailureAtMillis, leakedRooms, failureTimesMillis, leaks, dataPaths, datapathBytes,
                datapathBusyNanos, datapathOps, datapathActiveNanos, pairedMemcpyBytes, pairedMemcpyNanos, figures, kinds);
    }

    /** Without the benchmark suite's figures. */
    public RoleReport(String role, int rank, int succeeded, int failed, int corrupted, List<Integer> failedRequests,
                      long bytes, double elapsedSeconds, MicrosHistogram latencyMicros, List<String> firstFailures,
                      int hung, long firstFailureAtMillis, int leakedRooms, List<Long> failureTimesMillis,
                      LeakCheck.Leaks leaks, Map<String, Long> dataPaths, long datapathBytes,
                      long datapathBusyNanos, long datapathOps, long datapathActiveNanos, long pairedMemcpyBytes,
                      long pairedMemcpyNanos) {
        this(role, rank, succeeded, failed, corrupted, failedRequests, bytes, elapsedSeconds, latencyMicros, firstFailures,
                hung, firstFailureAtMillis, leakedRooms, failureTimesMillis, leaks, dataPaths, datapathBytes,
                datapathBusyNanos, datapathOps, datapathActiveNanos, pairedMemcpyBytes, pairedMemcpyNanos, RoleFigures.none());
    }

    /** The same report with the benchmark suite's figures. */
    public RoleReport withFigures(RoleFigures f) {
        return new RoleReport(role, rank, succeeded, failed, corrupted, failedRequests, bytes, elapsedSeconds, latencyMicros,
                firstFailures, hung, firstFailureAtMillis, leakedRooms, failureTimesMillis, leaks, dataPaths, datapathBytes,
                datapathBusyNanos, datapathOps, datapathActiveNanos, pairedMemcpyBytes, pairedMemcpyNanos, f, failureKinds);
    }

    public RoleReport(String role, int rank, int succeeded, int failed, int corrupted, List<Integer> failedRequests,
                      long bytes, double elapsedSeconds, MicrosHistogram latencyMicros, List<String> firstFailures,
                      int hung, long firstFailureAtMillis, int leakedRooms, List<Long> failureTimesMillis,
                      LeakCheck.Leaks leaks) {
        this(role, rank, succeeded, failed, corrupted, failedRequests, bytes, elapsedSeconds, latencyMicros, firstFailures,
                hung, firstFailureAtMillis, leakedRooms, failureTimesMillis, leaks, Map.of(), 0, 0, 0, 0, 0, 0);
    }

    /** The same report with the data paths its succeeded requests took. */
    public RoleReport withDataPaths(Map<String, Long> paths) {
        return new RoleReport(role, rank, succeeded, failed, corrupted, failedRequests, bytes, elapsedSeconds, latencyMicros,
                firstFailures, hung, firstFailureAtMillis, leakedRooms, failureTimesMillis, leaks, paths, datapathBytes,
                datapathBusyNanos, datapathOps, datapathActiveNanos, pairedMemcpyBytes, pairedMemcpyNanos, figures, failureKinds);
    }

    /** The same report with the prefill manager's data-path figures. */
    public RoleReport withDataPathStats(long bytes, long busyNanos, long ops, long activeNanos) {
        return new RoleReport(role, rank, succeeded, failed, corrupted, failedRequests, this.bytes, elapsedSeconds,
                latencyMicros, firstFailures, hung, firstFailureAtMillis, leakedRooms, failureTimesMillis, leaks, dataPaths,
                bytes, busyNanos, ops, activeNanos, pairedMemcpyBytes, pairedMemcpyNanos, figures, failureKinds);
    }

    /** The same report with the paired memcpy baseline's totals. */
    public RoleReport withPairedMemcpy(long bytes, long nanos) {
        return new RoleReport(role, rank, succeeded, failed, corrupted, failedRequests, this.bytes, elapsedSeconds,
                latencyMicros, firstFailures, hung, firstFailureAtMillis, leakedRooms, failureTimesMillis, leaks, dataPaths,
                datapathBytes, datapathBusyNanos, datapathOps, datapathActiveNanos, bytes, nanos, figures, failureKinds);
    }

    public RoleReport(String role, int rank, int succeeded, int failed, int corrupted, List<Integer> failedRequests,
                      long bytes, double elapsedSeconds, MicrosHistogram latencyMicros, List<String> firstFailures) {
        this(role, rank, succeeded, failed, corrupted, failedRequests, bytes, elapsedSeconds, latencyMicros, firstFailures,
                0, 0, 0, List.of(), LeakCheck.Leaks.NONE);
    }

    /** A failure by the bootstrap or waiting timeout (a backstop), not by detecting a fault. */
    public static boolean isBackstopTimeout(String reason) {
        return reason != null && reason.contains(" timed out after ")
                && (reason.contains("KVPoll.Bootstrapping") || reason.contains("KVPoll.WaitingForInput"));
    }

    /** The same report with what was not returned; {@code leakedRooms} becomes its total. */
    public RoleReport withLeaks(LeakCheck.Leaks l) {
        return new RoleReport(role, rank, succeeded, failed, corrupted, failedRequests, bytes, elapsedSeconds, latencyMicros,
                firstFailures, hung, firstFailureAtMillis, l.total(), failureTimesMillis, l, dataPaths, datapathBytes,
                datapathBusyNanos, datapathOps, datapathActiveNanos, pairedMemcpyBytes, pairedMemcpyNanos, figures, failureKinds);
    }
}
