package io.kvferry.api;

import java.util.List;

/** The knobs of the transfer layer itself ({@link KVManagerConfig}); transports declare their own. */
public final class Knobs {
    private Knobs() {}

    public static final Knob TRANSFER_WORKERS = new Knob("kvferry.transferWorkers", "KVFERRY_TRANSFER_WORKERS", "4",
            "prefill: transfer worker threads; a room's chunks stay on one worker", "SGLANG_DISAGGREGATION_QUEUE_SIZE");
    public static final Knob BOOTSTRAP_TIMEOUT_MS = new Knob("kvferry.bootstrapTimeoutMs", "KVFERRY_BOOTSTRAP_TIMEOUT_MS", "300000",
            "prefill: a sender still Bootstrapping after this fails (bootstrap_timeout)", "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT (s)");
    public static final Knob WAITING_TIMEOUT_MS = new Knob("kvferry.waitingTimeoutMs", "KVFERRY_WAITING_TIMEOUT_MS", "300000",
            "decode: a receiver still waiting for its KV this long after send_metadata fails (waiting_timeout)",
            "SGLANG_DISAGGREGATION_WAITING_TIMEOUT (s)");
    public static final Knob HEARTBEAT_INTERVAL_MS = new Knob("kvferry.heartbeatIntervalMs", "KVFERRY_HEARTBEAT_INTERVAL_MS", "2000",
            "both: a HEARTBEAT goes out on an idle control connection this often", "SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL (s)");
    public static final Knob HEARTBEAT_MAX_FAILURE = new Knob("kvferry.heartbeatMisses", "KVFERRY_HEARTBEAT_MAX_FAILURE", "5",
            "both: a connection silent for interval x this is declared dead and its rooms fail",
            "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE");
    public static final Knob CONNECT_TIMEOUT_MS = new Knob("kvferry.connectTimeoutMs", "KVFERRY_CONNECT_TIMEOUT_MS", "10000",
            "decode: TCP connect + HELLO handshake per prefill rank; prefill: how long a connection may stay without HELLO", "");
    public static final Knob WRITE_STALL_TIMEOUT_MS = new Knob("kvferry.writeStallTimeoutMs", "KVFERRY_WRITE_STALL_TIMEOUT_MS", "30000",
            "prefill: a connection whose write makes no progress (tcp), or a link whose UCX puts none is confirmed (ucx), this long is closed (its rooms fail); "
                    + "decode: a link to a prefill that stops reading, likewise", "");
    public static final Knob PREFILL_INFO_TIMEOUT_MS = new Knob("kvferry.prefillInfoTimeoutMs", "KVFERRY_PREFILL_INFO_TIMEOUT_MS", "15000",
            "decode: how long a receiver retries (once a second) an unavailable prefill's topology, how long "
                    + "resolvePrefillDpRank waits for a prefill still registering its ranks, and for a room's DP group to be "
                    + "published", "(15 tries, 1 s apart)");
    public static final Knob ABORT_ACK_TIMEOUT_MS = new Knob("kvferry.abortAckTimeoutMs", "KVFERRY_ABORT_ACK_TIMEOUT_MS", "5000",
            "decode: clear() of an unfinished room waits this long for one-sided writers' ABORT_ACK before cutting the link", "");
    public static final Knob TCP_STRIPES = new Knob("kvferry.tcpStripes", "KVFERRY_TCP_STRIPES", "1",
            "decode: TCP connections per prefill rank for data (1 = the control connection carries data)", "");
    public static final Knob FAILURE_INJECTION = new Knob("kvferry.failureInjectionProbability", "KVFERRY_TEST_DISAGG_FAILURE_PROB", "0",
            "test hook: the fraction of rooms (picked by a hash of the room, each side its own) that fail once under way, with 'Injected failure'", "SGLANG_TEST_DISAGG_FAILURE_PROB");

    public static final Knob CHECKSUM = new Knob("kvferry.checksum", "KVFERRY_CHECKSUM", "off",
            "both: verify transfers against the prefill's CRC32C digests: off, sampled (1 page or WRITE in 8, every aux row) or full;"
                    + " a link uses the stronger side's setting; a mismatch fails the room (integrity)",
            "--disaggregation-enable-kv-checksum");
    public static final Knob INSECURE = new Knob("kvferry.insecure", "KVFERRY_INSECURE", "false",
            "both: allow no auth token beyond loopback (unauthenticated control connections); without a token a prefill"
                    + " otherwise listens on loopback only and a decode connects to loopback ranks only", "");
    public static final Knob CORRUPTION_INJECTION = new Knob("kvferry.corruptionInjectionProbability", "KVFERRY_TEST_CORRUPT_PROB", "0",
            "test hook (prefill): the chance that one byte of a room's KV is flipped on its way to the decode (chaos 'corrupt')", "");

    /** Every knob of {@link KVManagerConfig}, in documentation order. */
    public static final List<Knob> ALL = List.of(TRANSFER_WORKERS, BOOTSTRAP_TIMEOUT_MS, WAITING_TIMEOUT_MS, HEARTBEAT_INTERVAL_MS,
            HEARTBEAT_MAX_FAILURE, CONNECT_TIMEOUT_MS, WRITE_STALL_TIMEOUT_MS, PREFILL_INFO_TIMEOUT_MS, ABORT_ACK_TIMEOUT_MS,
            TCP_STRIPES, FAILURE_INJECTION, CHECKSUM, INSECURE, CORRUPTION_INJECTION);
}
