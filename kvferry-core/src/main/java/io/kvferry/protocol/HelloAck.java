package io.kvferry.protocol;

import io.kvferry.api.ChecksumMode;
import io.kvferry.api.FailureKind;

import java.util.Arrays;
import java.util.Objects;

/**
 * The prefill's answer to a HELLO. An acceptance is authenticated by {@link #mac}
 * ({@link Handshake#ackMac} over the decode's nonce); a refusal carries none (it can only deny).
 *
 * @param error    why the HELLO was refused; empty when accepted
 * @param refusal  the kind of refusal ({@link FailureKind#HANDSHAKE_REFUSED} or {@link FailureKind#LAYOUT_REFUSED});
 *                 null when accepted (on the wire 0)
 * @param dataPath the data path the prefill chose for this connection (tcp, inproc, shm, ucx); empty when refused
 * @param fallback why a transport the decode offered was not used (empty when none was refused)
 * @param checksum the checksum mode the link uses (the stronger of the two sides' settings)
 * @param coverage which decode bytes this prefill rank writes for every room of the link
 */
public record HelloAck(boolean accepted, String error, FailureKind refusal, int prefillEngineRank, int prefillUniqueRank,
                       String dataPath, String fallback, ChecksumMode checksum, Coverage coverage, byte[] mac)
        implements ControlMessage {
    public HelloAck {
        error = error == null ? "" : Wire.clip(error); // reasons quote the peer's HELLO: always sendable
        dataPath = dataPath == null ? "" : dataPath;
        fallback = fallback == null ? "" : Wire.clip(fallback);
        checksum = checksum == null ? ChecksumMode.OFF : checksum;
        coverage = coverage == null ? Coverage.NONE : coverage;
        if (mac == null) mac = Handshake.NONE;
        if (mac.length != Handshake.BYTES) throw new IllegalArgumentException("mac must be " + Handshake.BYTES + " bytes");
        mac = mac.clone();
        if (accepted) refusal = null;
        else if (refusal == null) refusal = FailureKind.HANDSHAKE_REFUSED;
    }

    /** Without checksum mode, coverage or MAC (a refusal, or an acceptance to be completed; tests). */
    public HelloAck(boolean accepted, String error, FailureKind refusal, int prefillEngineRank, int prefillUniqueRank,
                    String dataPath, String fallback) {
        this(accepted, error, refusal, prefillEngineRank, prefillUniqueRank, dataPath, fallback, ChecksumMode.OFF, Coverage.NONE, null);
    }

    /** An unsigned acceptance over a data path, or a refusal of kind handshake. */
    public HelloAck(boolean accepted, String error, int prefillEngineRank, int prefillUniqueRank, String dataPath, String fallback) {
        this(accepted, error, null, prefillEngineRank, prefillUniqueRank, dataPath, fallback);
    }

    /** A refusal of kind handshake, or an unsigned acceptance over tcp. */
    public HelloAck(boolean accepted, String error, int prefillEngineRank, int prefillUniqueRank) {
        this(accepted, error, prefillEngineRank, prefillUniqueRank, accepted ? "tcp" : "", "");
    }

    /**
     * The largest body of a HELLO_ACK that can answer a HELLO with {@code decodeMemory}: three texts at
     * the string limit, the fixed fields and MAC (under 256 bytes), and per the encoding 24 bytes of
     * coverage per KV buffer and state tensor and 4 per state component (a coverage of any other shape
     * is refused anyway). Some KiB for a typical model instead of the type's 2 MiB: the decode reads no
     * more from a prefill that has not yet proven the token.
     */
    public static int maxBodyBytes(MemoryDescriptor decodeMemory) {
        long units = decodeMemory.kvItemLens().length;
        for (MemoryDescriptor.StateDescriptor s : decodeMemory.states()) units += s.itemLens().length;
        long bytes = 3L * (2 + Wire.MAX_STRING_BYTES) + 256 + 4L * decodeMemory.states().size() + 24 * units;
        return (int) Math.min(bytes, MessageType.HELLO_ACK.maxBodyBytes());
    }

    /** An unsigned acceptance (sign it with {@link #signed}). */
    public static HelloAck accept(int prefillEngineRank, int prefillUniqueRank, String dataPath, String fallback,
                                  ChecksumMode checksum, Coverage coverage) {
        return new HelloAck(true, "", null, prefillEngineRank, prefillUniqueRank, dataPath, fallback, checksum, coverage, null);
    }

    /** A refusal of the given kind. */
    public static HelloAck refused(FailureKind kind, String error, int prefillEngineRank, int prefillUniqueRank) {
        return new HelloAck(false, error, kind, prefillEngineRank, prefillUniqueRank, "", "", ChecksumMode.OFF, Coverage.NONE, null);
    }

    @Override
    public byte[] mac() {
        return mac.clone();
    }

    /** This acceptance with its MAC, for the HELLO whose nonce it answers. */
    public HelloAck signed(byte[] key, byte[] decodeNonce) {
        HelloAck unsigned = withMac(Handshake.NONE);
        return withMac(Handshake.ackMac(key, decodeNonce, FrameCodec.body(unsigned)));
    }

    /** Whether this acceptance was signed with {@code key} for {@code decodeNonce} (constant time). */
    public boolean verify(byte[] key, byte[] decodeNonce) {
        return accepted && Handshake.equal(signed(key, decodeNonce).mac, mac);
    }

    private HelloAck withMac(byte[] m) {
        return new HelloAck(accepted, error, refusal, prefillEngineRank, prefillUniqueRank, dataPath, fallback, checksum,
                coverage, m);
    }

    @Override
    public MessageType type() {
        return MessageType.HELLO_ACK;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof HelloAck a && a.accepted == accepted && a.error.equals(error) && a.refusal == refusal
                && a.prefillEngineRank == prefillEngineRank && a.prefillUniqueRank == prefillUniqueRank
                && a.dataPath.equals(dataPath) && a.fallback.equals(fallback) && a.checksum == checksum
                && a.coverage.equals(coverage) && Arrays.equals(a.mac, mac);
    }

    @Override
    public int hashCode() {
        return Objects.hash(accepted, error, refusal, prefillUniqueRank, dataPath) * 31 + Arrays.hashCode(mac);
    }

    @Override
    public String toString() {
        return "HelloAck[accepted=" + accepted + (accepted ? "" : ", " + refusal + ": " + error) + ", rank=" + prefillUniqueRank
                + ", dataPath=" + dataPath + ", checksum=" + checksum.label() + "]";
    }
}
