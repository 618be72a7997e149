package io.kvferry.ucx;

import java.util.Locale;
import java.util.Set;

/**
 * kvferry-ucx's own settings: each a system property ({@code -Dkvferry.ucx.…}) or an environment
 * variable ({@code KVFERRY_UCX_…}), the property winning. UCX's own settings ({@code UCX_TLS},
 * {@code UCX_NET_DEVICES}, {@code UCX_RNDV_THRESH}, …) are read by UCX itself from the environment:
 * kvferry never sets, overrides or filters them (no {@code UcpParams.setConfig}).
 */
final class UcxSettings {
    private UcxSettings() {}

    /** Spin settings are capped here (a few minutes of polling): larger values would overflow the idle counters. */
    static final long MAX_SPIN = 1_000_000_000L;

    /**
     * Null when every kvferry-ucx setting parses; otherwise the first bad one, named. Checked before
     * a transport opens, so a typo fails the manager's creation (or, with backend auto, is logged
     * and the link uses another transport) instead of breaking a link's thread later.
     */
    static String problem() {
        try {
            errMode();
            batchBytes();
            window();
            connectTimeoutMs();
            drainTimeoutMs();
            spin();
            dstSpin();
            return null;
        } catch (IllegalArgumentException e) {
            return e.getMessage();
        }
    }

    /** Endpoint error-handling mode. */
    enum ErrMode {
        /**
         * {@code UCP_ERR_HANDLING_MODE_PEER}: a dead or vanished decode fails the endpoint, and writes
         * fail with its reason. On UCX 1.13 this excludes the transports without peer-failure support
         * from the endpoint: posix and sysv (cma stays), so two processes on one host need tcp (or
         * another network transport) for UCX's active-message lane.
         */
        PEER,
        /**
         * {@code UCP_ERR_HANDLING_MODE_NONE}: every transport is usable (posix/sysv active messages on
         * one host), but a peer failure is not reported: puts to a dead decode may never complete, so
         * writes then end only by cancellation or the drain timeout.
         */
        NONE
    }

    /** {@code kvferry.ucx.errMode} / {@code KVFERRY_UCX_ERR_MODE}: {@code peer} (default) or {@code none}. */
    static ErrMode errMode() {
        String v = get("kvferry.ucx.errMode", "KVFERRY_UCX_ERR_MODE", "peer").trim().toLowerCase(Locale.ROOT);
        return switch (v) {
            case "peer" -> ErrMode.PEER;
            case "none" -> ErrMode.NONE;
            default -> throw new IllegalArgumentException("KVFERRY_UCX_ERR_MODE / kvferry.ucx.errMode must be peer or none, not '" + v + "'");
        };
    }

    /**
     * Bytes posted to one endpoint between two flushes (a "batch"); the engine keeps
     * {@link #window()} batches in flight, so the pipe stays full while each batch's flush confirms
     * remote completion. {@code kvferry.ucx.batchBytes} / {@code KVFERRY_UCX_BATCH_BYTES}, default 8 MiB.
     */
    static long batchBytes() {
        return Math.max(4096, getLong("kvferry.ucx.batchBytes", "KVFERRY_UCX_BATCH_BYTES", 8L << 20));
    }

    /** Batches in flight at once ({@code kvferry.ucx.window} / {@code KVFERRY_UCX_WINDOW}, default 4). */
    static int window() {
        return (int) Math.max(1, Math.min(64, getLong("kvferry.ucx.window", "KVFERRY_UCX_WINDOW", 4)));
    }

    /**
     * How long connect waits for UCX to wire the endpoint up (a first flush) before the link falls
     * back to TCP ({@code kvferry.ucx.connectTimeoutMs} / {@code KVFERRY_UCX_CONNECT_TIMEOUT_MS}, default 10 s).
     */
    static long connectTimeoutMs() {
        return Math.max(1, getLong("kvferry.ucx.connectTimeoutMs", "KVFERRY_UCX_CONNECT_TIMEOUT_MS", 10_000));
    }

    /**
     * After a cancelled write, how long its puts already posted may take to complete before the
     * endpoint is force-closed and the link failed ({@code kvferry.ucx.drainTimeoutMs} /
     * {@code KVFERRY_UCX_DRAIN_TIMEOUT_MS}, default 5 s).
     */
    static long drainTimeoutMs() {
        return Math.max(1, getLong("kvferry.ucx.drainTimeoutMs", "KVFERRY_UCX_DRAIN_TIMEOUT_MS", 5_000));
    }

    /**
     * Empty progress calls the prefill's engine makes while puts are in flight before it sleeps on
     * the worker's event fd ({@code kvferry.ucx.spin} / {@code KVFERRY_UCX_SPIN}, default 20000, a
     * few milliseconds). With nothing in flight it sleeps at once.
     */
    static long spin() {
        return Math.max(0, Math.min(MAX_SPIN, getLong("kvferry.ucx.spin", "KVFERRY_UCX_SPIN", 20_000)));
    }

    /**
     * Empty progress calls a decode link's progress thread makes after a call that did work, before
     * it sleeps on the worker's event fd ({@code kvferry.ucx.dstSpin} / {@code KVFERRY_UCX_DST_SPIN}).
     * Transports that are not truly one-sided (tcp, and the active-message lanes) need the decode's
     * worker to receive every fragment; sleeping between fragments costs an event-fd wakeup each.
     * An idle link sleeps at once.
     */
    static long dstSpin() {
        return Math.max(0, Math.min(MAX_SPIN, getLong("kvferry.ucx.dstSpin", "KVFERRY_UCX_DST_SPIN", 20_000)));
    }

    /** UCX transports that write a peer's memory without that peer's UCX worker (see {@link #directAccessPossible}). */
    static final Set<String> DIRECT_ACCESS_TLS = Set.of("cma", "knem", "xpmem", "cuda_ipc", "rocm_ipc");

    /**
     * Whether UCX, configured by this {@code UCX_TLS} value, may give a peer a transport that writes
     * this process's registered memory without this process's UCX worker taking part: cma, knem,
     * xpmem (same-host process-to-process copies) and cuda_ipc/rocm_ipc. Unset, empty or
     * {@code all} means yes. {@code sm}/{@code shm}, {@code cuda} and {@code rocm} are UCX's aliases.
     * A leading {@code ^} makes the list an exclusion list. Conservative: anything unrecognised
     * counts as possible.
     */
    static boolean directAccessPossible(String ucxTls) {
        if (ucxTls == null || ucxTls.isBlank()) return true;
        String v = ucxTls.trim().toLowerCase(Locale.ROOT);
        boolean exclude = v.startsWith("^");
        if (exclude) v = v.substring(1);
        java.util.Set<String> named = new java.util.HashSet<>();
        for (String raw : v.split(",")) {
            String t = raw.trim();
            while (t.startsWith("\\")) t = t.substring(1); // UCX 1.14+: "\name" = this name, not an alias
            if (t.isEmpty()) continue;
            switch (t) {
                case "all" -> named.addAll(DIRECT_ACCESS_TLS);
                case "sm", "shm" -> named.addAll(Set.of("cma", "knem", "xpmem"));
                case "cuda" -> named.add("cuda_ipc");
                case "rocm" -> named.add("rocm_ipc");
                default -> {
                    if (DIRECT_ACCESS_TLS.contains(t)) named.add(t);
                }
            }
        }
        if (!exclude) return !named.isEmpty();
        return !named.containsAll(DIRECT_ACCESS_TLS);
    }

    static String get(String property, String env, String dflt) {
        String v = System.getProperty(property);
        if (v == null || v.isBlank()) v = System.getenv(env);
        return v == null || v.isBlank() ? dflt : v;
    }

    static long getLong(String property, String env, long dflt) {
        String v = get(property, env, null);
        if (v == null) return dflt;
        try {
            return Long.parseLong(v.trim());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(env + " / " + property + " must be a number, not '" + v + "'");
        }
    }
}
