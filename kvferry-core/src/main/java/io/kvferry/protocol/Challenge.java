package io.kvferry.protocol;

import java.util.Arrays;

/**
 * The first frame on every connection a prefill rank accepts: a fresh random nonce the decode's
 * HELLO must answer with a MAC ({@link Handshake}), so a recorded HELLO cannot be replayed.
 */
public record Challenge(byte[] nonce) implements ControlMessage {
    public Challenge {
        if (nonce == null || nonce.length != Handshake.BYTES) {
            throw new IllegalArgumentException("a challenge nonce is " + Handshake.BYTES + " bytes");
        }
        nonce = nonce.clone();
    }

    @Override
    public byte[] nonce() {
        return nonce.clone();
    }

    @Override
    public MessageType type() {
        return MessageType.CHALLENGE;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Challenge c && Arrays.equals(c.nonce, nonce);
    }

    @Override
    public int hashCode() {
        return Arrays.hashCode(nonce);
    }

    @Override
    public String toString() {
        return "Challenge[]";
    }
}
