package io.kvferry.transport;

/** An offered transport cannot be used by this peer (another host, library missing, memory not shared). */
public final class TransportUnavailableException extends Exception {
    public TransportUnavailableException(String message) {
        super(message);
    }
}
