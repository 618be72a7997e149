package io.kvferry.ucx;

import io.kvferry.api.KVFerrySettings;
import io.kvferry.api.Knob;
import io.kvferry.api.Knobs;

import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;

/**
 * kvferry-ucx's own settings, read once from the {@link KVFerrySettings} context the manager hands
 * the provider (each a {@code KVFERRY_UCX_…} variable or {@code -Dkvferry.ucx.…} property, or set
 * explicitly). UCX's own settings ({@code UCX_TLS},
 * {@code UCX_NET_DEVICES}, {@code UCX_RNDV_THRESH}, …) are read by UCX itself from the environment:
 * kvferry never sets, overrides or filters them (no {@code UcpParams.setConfig}).
 */
final class UcxSettings {
    /** The most a spin count may be (a few minutes of polling): larger values would overflow the idle counters. */
    static final long MAX_SPIN = 1_000_000_000L;

    /** The range of {@link #BATCH_BYTES}: a page at least, a GiB at most between two flushes. */
    static final long MIN_BATCH_BYTES = 4096, MAX_BATCH_BYTES = 1L << 30;
    /** The most batches in flight per endpoint ({@link #WINDOW}). */
    static final int MAX_WINDOW = 64;

    static final Knob ERR_MODE = new Knob("kvferry.ucx.errMode", "KVFERRY_UCX_ERR_MODE", "peer",
            "ucx: endpoint error handling, peer (a dead decode fails the endpoint) or none (every UCX transport usable)", "");
    static final Knob BATCH_BYTES = new Knob("kvferry.ucx.batchBytes", "KVFERRY_UCX_BATCH_BYTES", Long.toString(8L << 20),
            "ucx: bytes posted to one endpoint between two flushes, in [4096, 1073741824]", "");
    static final Knob WINDOW = new Knob("kvferry.ucx.window", "KVFERRY_UCX_WINDOW", "4",
            "ucx: batches in flight per endpoint, in [1, 64]", "");
    static final Knob CONNECT_TIMEOUT_MS = new Knob("kvferry.ucx.connectTimeoutMs", "KVFERRY_UCX_CONNECT_TIMEOUT_MS", "10000",
            "ucx: how long endpoint wire-up may take before the link falls back to TCP", "");
    static final Knob DRAIN_TIMEOUT_MS = new Knob("kvferry.ucx.drainTimeoutMs", "KVFERRY_UCX_DRAIN_TIMEOUT_MS", "5000",
            "ucx: after a cancelled write, how long posted puts may take before the endpoint is closed", "");
    static final Knob SPIN = new Knob("kvferry.ucx.spin", "KVFERRY_UCX_SPIN", "20000",
            "ucx: empty progress calls the prefill engine makes with puts in flight before sleeping on the event fd, in [0, 1000000000]", "");
    static final Knob DST_SPIN = new Knob("kvferry.ucx.dstSpin", "KVFERRY_UCX_DST_SPIN", "20000",
            "ucx: empty progress calls a decode link makes after work before sleeping on the event fd, in [0, 1000000000]", "");
    static final List<Knob> ALL = List.of(ERR_MODE, BATCH_BYTES, WINDOW, CONNECT_TIMEOUT_MS, DRAIN_TIMEOUT_MS, SPIN, DST_SPIN);

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

    final ErrMode errMode;
    /**
     * Bytes posted to one endpoint between two flushes (a "batch"); the engine keeps {@link #window}
     * batches in flight, so the pipe stays full while each batch's flush confirms remote completion.
     */
    final long batchBytes;
    final int window;
    /** How long connect waits for UCX to wire the endpoint up (a first flush) before the link falls back to TCP. */
    final long connectTimeoutMs;
    /** After a cancelled write, how long its puts already posted may take before the endpoint is closed. */
    final long drainTimeoutMs;
    /** Empty progress calls the prefill's engine makes while puts are in flight before it sleeps (nothing in flight: at once). */
    final long spin;
    /**
     * A link with puts in flight none of which UCX confirmed for this long is closed, failing its
     * writes: the prefill's write-stall timeout ({@link Knobs#WRITE_STALL_TIMEOUT_MS}), the bound tcp
     * writes have, for a decode whose worker stopped progressing behind a healthy control connection.
     */
    final long stallTimeoutMs;
    /**
     * Empty progress calls a decode link's progress thread makes after a call that did work, before
     * it sleeps on the worker's event fd. Transports that are not truly one-sided (tcp, and the
     * active-message lanes) need the decode's worker to receive every fragment; sleeping between
     * fragments costs an event-fd wakeup each. An idle link sleeps at once.
     */
    final long dstSpin;

    /** Parses every kvferry-ucx knob from the context; a bad one fails naming it. */
    UcxSettings(KVFerrySettings s) {
        String mode = s.get(ERR_MODE).toLowerCase(Locale.ROOT);
        errMode = switch (mode) {
            case "peer" -> ErrMode.PEER;
            case "none" -> ErrMode.NONE;
            default -> throw new IllegalArgumentException(ERR_MODE.names() + " must be peer or none, not '" + mode + "'");
        };
        // Out of range is refused naming the knob and its range, as the core knobs are, not clamped to something else.
        batchBytes = s.getLong(BATCH_BYTES, MIN_BATCH_BYTES, MAX_BATCH_BYTES);
        window = s.getInt(WINDOW, 1, MAX_WINDOW);
        connectTimeoutMs = s.getMillis(CONNECT_TIMEOUT_MS, 1).toMillis();
        drainTimeoutMs = s.getMillis(DRAIN_TIMEOUT_MS, 1).toMillis();
        spin = s.getLong(SPIN, 0, MAX_SPIN);
        stallTimeoutMs = Math.max(1, s.getLong(Knobs.WRITE_STALL_TIMEOUT_MS));
        dstSpin = s.getLong(DST_SPIN, 0, MAX_SPIN);
    }

    /**
     * Null when every kvferry-ucx setting parses; otherwise the first bad one, named. Checked before
     * a transport opens, so a typo fails the manager's creation (or, with backend auto, is logged
     * and the link uses another transport) instead of breaking a link's thread later.
     */
    static String problem(KVFerrySettings s) {
        try {
            new UcxSettings(s);
            return null;
        } catch (IllegalArgumentException e) {
            return e.getMessage();
        }
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
        Set<String> named = new HashSet<>();
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
}
