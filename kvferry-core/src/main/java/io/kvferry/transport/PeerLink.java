package io.kvferry.transport;

/**
 * The prefill's side of one decode link as a transport sees it when it connects to that decode's
 * offer: who the peer is (for messages), the control connection (tcp writes ride on it) and how
 * many tcp connections the decode said it opens.
 *
 * @param control null where no control connection exists (a transport tested on its own)
 */
public record PeerLink(String peer, ControlConnection control, int stripes) {
    public PeerLink {
        if (peer == null) throw new IllegalArgumentException("a peer link needs a peer name");
        stripes = Math.max(1, stripes);
    }

    /** A peer known only by name (one-sided transports need nothing else). */
    public static PeerLink named(String peer) {
        return new PeerLink(peer, null, 1);
    }
}
