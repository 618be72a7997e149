package io.kvferry.protocol;

import java.util.Arrays;

/**
 * One data path a decode rank offers in HELLO besides TCP: the transport's name and its own
 * description of how to reach the decode's memory (for {@code shm} the shared files, for
 * {@code ucx} the worker address and packed remote keys). The blob is opaque to the control
 * protocol; the named transport parses it strictly.
 */
public record TransportOffer(String transport, byte[] blob) {
    /** The largest blob one offer may carry. */
    public static final int MAX_BLOB_BYTES = 512 << 10;
    /** The most offers one HELLO may carry. */
    public static final int MAX_OFFERS = 8;

    public TransportOffer {
        if (transport == null || transport.isEmpty()) throw new IllegalArgumentException("an offer needs a transport name");
        if (blob == null) blob = new byte[0];
        if (blob.length > MAX_BLOB_BYTES) {
            throw new IllegalArgumentException(transport + " offer of " + blob.length + " bytes exceeds " + MAX_BLOB_BYTES);
        }
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof TransportOffer t && t.transport.equals(transport) && Arrays.equals(t.blob, blob);
    }

    @Override
    public int hashCode() {
        return transport.hashCode() * 31 + Arrays.hashCode(blob);
    }

    @Override
    public String toString() {
        return "TransportOffer[" + transport + ", " + blob.length + " bytes]";
    }
}
