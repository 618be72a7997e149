package io.kvferry.http;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;

/**
 * The cluster token as an HTTP bearer credential: what a client sends ({@link #header()}) and the
 * check a server makes of an {@code Authorization} header ({@link #accepts}). The token is kept as
 * its SHA-256 digest beside the header value; digests have equal length, so a comparison leaks
 * neither the token's content nor its length. Immutable.
 */
public final class BearerToken {
    private final byte[] digest;
    private final String header;

    private BearerToken(String token) {
        this.digest = sha256(token);
        this.header = "Bearer " + token;
    }

    /** The token's credential, or null for none (a null or blank token). */
    public static BearerToken of(String token) {
        return token == null || token.isBlank() ? null : new BearerToken(token.strip());
    }

    /** The {@code Authorization} header value a client sends. */
    public String header() {
        return header;
    }

    /** Whether {@code authorization} (an {@code Authorization} header value, or null) carries this token. */
    public boolean accepts(String authorization) {
        if (authorization == null) return false;
        String h = authorization.strip();
        int sp = 0;
        while (sp < h.length() && !Character.isWhitespace(h.charAt(sp))) sp++;
        if (sp == 0 || sp == h.length() || !h.substring(0, sp).equalsIgnoreCase("Bearer")) return false;
        String token = h.substring(sp).strip();
        return !token.isEmpty() && MessageDigest.isEqual(sha256(token), digest);
    }

    @Override
    public String toString() {
        return "BearerToken[***]"; // never the token
    }

    private static byte[] sha256(String s) {
        try {
            return MessageDigest.getInstance("SHA-256").digest(s.getBytes(StandardCharsets.UTF_8));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is required of every JDK", e);
        }
    }
}
