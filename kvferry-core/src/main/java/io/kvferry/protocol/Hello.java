package io.kvferry.protocol;

import io.kvferry.api.ChecksumMode;

import java.util.Arrays;
import java.util.List;
import java.util.Objects;

/**
 * A decode rank's registration with one prefill rank (or an extra data stripe of it). Authenticated
 * as a whole by {@link #mac} (docs/PROTOCOL.md §4); the cluster token itself is never sent.
 *
 * @param sessionId    unique id of the decode manager (the per-room key on prefill)
 * @param instanceId   the decode instance this rank belongs to, shared by all its ranks: a room's
 *                     destinations must all come from one instance
 * @param fingerprint  what both sides must agree on (build, model, dtype, page size, MLA, heads)
 * @param dataPath     the decode's backend: "tcp", "inproc", or a transport it offers ("shm", "ucx", "auto")
 * @param flags        {@link #FLAG_ALL_CP_RANKS}, {@link #FLAG_STRIPE}, {@link #FLAG_RESUME}; unknown bits are rejected
 * @param checksum     how much of each transfer this decode wants verified
 * @param offers       data paths besides TCP, in the decode's order of preference
 * @param decodeNonce  the decode's fresh nonce (the prefill's HELLO_ACK MAC covers it)
 * @param resumeProof  with {@link #FLAG_RESUME}: proof of the previous session key ({@link Handshake#resumeProof}); else zeros
 * @param mac          {@link Handshake#helloMac} (or {@link Handshake#stripeMac}) over the challenge and this body with a zero MAC
 */
public record Hello(String sessionId, String instanceId, Fingerprint fingerprint, String dataPath, int engineRank,
                    int attnTpSize, int ppRank, int flags, ChecksumMode checksum, MemoryDescriptor memory,
                    List<TransportOffer> offers, byte[] decodeNonce, byte[] resumeProof, byte[] mac)
        implements ControlMessage {
    public Hello {
        Objects.requireNonNull(fingerprint, "fingerprint");
        Objects.requireNonNull(memory, "memory");
        sessionId = sessionId == null ? "" : sessionId;
        instanceId = instanceId == null ? "" : instanceId;
        checksum = checksum == null ? ChecksumMode.OFF : checksum;
        offers = offers == null ? List.of() : List.copyOf(offers);
        decodeNonce = fixed(decodeNonce, "decode nonce");
        resumeProof = fixed(resumeProof, "resume proof");
        mac = fixed(mac, "mac");
    }

    private static byte[] fixed(byte[] b, String what) {
        if (b == null) return Handshake.NONE.clone();
        if (b.length != Handshake.BYTES) throw new IllegalArgumentException(what + " must be " + Handshake.BYTES + " bytes");
        return b.clone();
    }

    /** Flag: the decode expects every prefill CP rank to send its share (all-CP-ranks transfer). */
    public static final int FLAG_ALL_CP_RANKS = 1;
    /**
     * Flag: this connection is an extra data stripe of the decode session already registered under
     * {@code sessionId}; bits 8-15 carry its stripe index (1..).
     */
    public static final int FLAG_STRIPE = 2;
    /** Flag: this registration replaces the prefill's link of the same session; {@code resumeProof} proves it is the same decode. */
    public static final int FLAG_RESUME = 4;
    /** Bits 16-23 of the first HELLO: how many TCP stripes (connections) the session will use (0 = 1). */
    public static final int STRIPES_SHIFT = 16;
    public static final int STRIPE_INDEX_SHIFT = 8;
    /** Every flag bit a HELLO may carry. */
    public static final int KNOWN_FLAGS = FLAG_ALL_CP_RANKS | FLAG_STRIPE | FLAG_RESUME | (0xFF << STRIPE_INDEX_SHIFT)
            | (0xFF << STRIPES_SHIFT);

    public boolean isStripe() {
        return (flags & FLAG_STRIPE) != 0;
    }

    public boolean isResume() {
        return (flags & FLAG_RESUME) != 0;
    }

    public int stripeIndex() {
        return (flags >>> STRIPE_INDEX_SHIFT) & 0xFF;
    }

    /** TCP connections the session uses for data (at least 1). */
    public int stripes() {
        return Math.max(1, (flags >>> STRIPES_SHIFT) & 0xFF);
    }

    public int pageSize() {
        return fingerprint.pageSize();
    }

    public String kvCacheDtype() {
        return fingerprint.kvCacheDtype();
    }

    @Override
    public byte[] decodeNonce() {
        return decodeNonce.clone();
    }

    @Override
    public byte[] resumeProof() {
        return resumeProof.clone();
    }

    @Override
    public byte[] mac() {
        return mac.clone();
    }

    /** This HELLO with another MAC (the body a MAC is computed over has a zero one). */
    public Hello withMac(byte[] newMac) {
        return new Hello(sessionId, instanceId, fingerprint, dataPath, engineRank, attnTpSize, ppRank, flags, checksum, memory,
                offers, decodeNonce, resumeProof, newMac);
    }

    /** This HELLO signed for the challenge it answers: with the cluster key, or a session key for a stripe. */
    public Hello signed(byte[] key, byte[] challenge) {
        Hello unsigned = withMac(Handshake.NONE);
        byte[] m = isStripe() ? Handshake.stripeMac(key, challenge, FrameCodec.body(unsigned))
                : Handshake.helloMac(key, challenge, FrameCodec.body(unsigned));
        return withMac(m);
    }

    /** Whether this HELLO's MAC is right for {@code key} and the challenge it answers (constant time). */
    public boolean verify(byte[] key, byte[] challenge) {
        return Handshake.equal(signed(key, challenge).mac, mac);
    }

    @Override
    public MessageType type() {
        return MessageType.HELLO;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Hello h && h.sessionId.equals(sessionId) && h.instanceId.equals(instanceId)
                && h.fingerprint.equals(fingerprint) && Objects.equals(h.dataPath, dataPath) && h.engineRank == engineRank
                && h.attnTpSize == attnTpSize && h.ppRank == ppRank && h.flags == flags && h.checksum == checksum
                && memoryEquals(h.memory, memory) && h.offers.equals(offers) && Arrays.equals(h.decodeNonce, decodeNonce)
                && Arrays.equals(h.resumeProof, resumeProof) && Arrays.equals(h.mac, mac);
    }

    private static boolean memoryEquals(MemoryDescriptor a, MemoryDescriptor b) {
        if (!Arrays.equals(a.kvLengths(), b.kvLengths()) || !Arrays.equals(a.kvItemLens(), b.kvItemLens())
                || !Arrays.equals(a.kvLayerIds(), b.kvLayerIds()) || !Arrays.equals(a.auxLengths(), b.auxLengths())
                || !Arrays.equals(a.auxItemLens(), b.auxItemLens()) || a.states().size() != b.states().size()) {
            return false;
        }
        for (int i = 0; i < a.states().size(); i++) {
            MemoryDescriptor.StateDescriptor x = a.states().get(i), y = b.states().get(i);
            if (!x.type().equals(y.type()) || !Arrays.equals(x.lengths(), y.lengths()) || !Arrays.equals(x.itemLens(), y.itemLens())) {
                return false;
            }
        }
        return true;
    }

    @Override
    public int hashCode() {
        return Objects.hash(sessionId, instanceId, fingerprint, engineRank, flags) * 31 + Arrays.hashCode(mac);
    }

    @Override
    public String toString() {
        return "Hello[session=" + sessionId + ", instance=" + instanceId + ", " + fingerprint + ", dataPath=" + dataPath
                + ", engineRank=" + engineRank + ", attnTp=" + attnTpSize + ", pp=" + ppRank + ", flags=0x"
                + Integer.toHexString(flags) + ", checksum=" + checksum.label() + ", offers=" + offers + "]";
    }
}
