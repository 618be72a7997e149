package io.kvferry.protocol;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * The cryptography of kvferry's handshake (docs/PROTOCOL.md §4): HMAC-SHA256 keyed with the cluster
 * token, so the token itself never crosses the wire and nothing a peer sends is acted on before it
 * is authenticated.
 *
 * <ul>
 *   <li>The prefill opens every accepted connection with a CHALLENGE (a fresh random nonce).</li>
 *   <li>The decode's HELLO carries its own nonce and {@code HMAC(key, "hello" ‖ challenge ‖ body)}:
 *       the whole HELLO (layout, offers, session id) is authenticated and cannot be replayed.</li>
 *   <li>The prefill's HELLO_ACK carries {@code HMAC(key, "ack" ‖ decode nonce ‖ body)}: the decode
 *       knows the prefill holds the token too before it lets any of its writes land.</li>
 *   <li>Both derive a session key from the two nonces; it is never sent. Extra TCP stripes of the
 *       session, and a reconnection that replaces a session the prefill still holds, prove it.</li>
 * </ul>
 *
 * Pure: no I/O. Without a token (an explicitly insecure cluster) the key is a fixed public value,
 * so the same code runs and anyone can compute the MACs.
 */
public final class Handshake {
    private Handshake() {}

    /** Bytes of every nonce, MAC and derived key. */
    public static final int BYTES = 32;
    private static final String HMAC = "HmacSHA256";
    private static final SecureRandom RANDOM = new SecureRandom();
    private static final byte[] INSECURE_KEY = sha256("kvferry/insecure/no-token".getBytes(StandardCharsets.UTF_8));
    private static final byte[] HELLO = label("kvferry/v5/hello");
    private static final byte[] ACK = label("kvferry/v5/hello-ack");
    private static final byte[] STRIPE = label("kvferry/v5/stripe");
    private static final byte[] RESUME = label("kvferry/v5/resume");
    private static final byte[] SESSION = label("kvferry/v5/session");
    /** All zeros: the MAC or proof field of a message that carries none (a refusal, a first registration). */
    public static final byte[] NONE = new byte[BYTES];

    /** The HMAC key of a cluster token; null or empty means "no token" (insecure mode). */
    public static byte[] key(String token) {
        if (token == null || token.isEmpty()) return INSECURE_KEY.clone();
        return sha256(token.getBytes(StandardCharsets.UTF_8));
    }

    /** A fresh random nonce. */
    public static byte[] nonce() {
        byte[] n = new byte[BYTES];
        RANDOM.nextBytes(n);
        return n;
    }

    /** The MAC a HELLO must carry: over the challenge it answers and its body (with a zero MAC field). */
    public static byte[] helloMac(byte[] key, byte[] challenge, ByteBuffer unsignedBody) {
        return mac(key, HELLO, challenge, unsignedBody);
    }

    /** The MAC an accepting HELLO_ACK must carry: over the decode's nonce and its body (with a zero MAC field). */
    public static byte[] ackMac(byte[] key, byte[] decodeNonce, ByteBuffer unsignedBody) {
        return mac(key, ACK, decodeNonce, unsignedBody);
    }

    /** The MAC a data-stripe HELLO carries: keyed with the session key, over the stripe connection's challenge. */
    public static byte[] stripeMac(byte[] sessionKey, byte[] challenge, ByteBuffer unsignedBody) {
        return mac(sessionKey, STRIPE, challenge, unsignedBody);
    }

    /** Proof that a new registration comes from the holder of an earlier session's key. */
    public static byte[] resumeProof(byte[] previousSessionKey, byte[] challenge) {
        return mac(previousSessionKey, RESUME, challenge, ByteBuffer.allocate(0));
    }

    /** The key both sides derive for one registered session; never sent. */
    public static byte[] sessionKey(byte[] key, byte[] challenge, byte[] decodeNonce, String sessionId) {
        byte[] id = sessionId.getBytes(StandardCharsets.UTF_8);
        ByteBuffer tail = ByteBuffer.allocate(decodeNonce.length + id.length);
        tail.put(decodeNonce).put(id);
        tail.flip();
        return mac(key, SESSION, challenge, tail);
    }

    /** Constant-time comparison; false for null or differently sized inputs. */
    public static boolean equal(byte[] a, byte[] b) {
        return a != null && b != null && a.length == b.length && MessageDigest.isEqual(a, b);
    }

    private static byte[] mac(byte[] key, byte[] label, byte[] nonce, ByteBuffer body) {
        try {
            Mac m = Mac.getInstance(HMAC);
            m.init(new SecretKeySpec(key, HMAC));
            m.update(label);
            m.update(nonce);
            m.update(body.duplicate());
            return m.doFinal();
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 is part of every JDK", e);
        }
    }

    private static byte[] label(String s) {
        return s.getBytes(StandardCharsets.US_ASCII);
    }

    static byte[] sha256(byte[] in) {
        try {
            return MessageDigest.getInstance("SHA-256").digest(in);
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("SHA-256 is part of every JDK", e);
        }
    }
}
