package io.kvferry.transport;

import io.kvferry.memory.RegisteredMemory;

import java.io.IOException;

/**
 * A data path besides TCP, plugged in by name (the transport SPI). Found through
 * {@link java.util.ServiceLoader} ({@code META-INF/services/io.kvferry.transport.TransportProvider}),
 * so a module such as {@code kvferry-ucx} adds one by being on the class path.
 *
 * <p>Flow: a decode manager opens a {@link DestinationTransport} over its registered memory and, for
 * each prefill rank it connects to, sends the {@link LinkOffer}'s blob in HELLO. The prefill manager
 * opens a {@link SourceTransport} over its own memory and turns an offer it can use into a
 * {@link DataPath}; one it cannot use (other host, library missing) falls back to TCP with a reason.
 * Control, status, abort and failure detection stay on the TCP control connection.
 */
public interface TransportProvider {
    /** The backend name ({@code shm}, {@code ucx}). */
    String name();

    /** Null when this transport can run in this process; otherwise why not and how to fix it. */
    String unavailableReason();

    /**
     * Decode side, once per manager.
     *
     * @return the destination, or null when this memory cannot be offered (then {@code why} is told why)
     */
    DestinationTransport openDestination(RegisteredMemory memory, int engineRank, java.util.function.Consumer<String> why)
            throws IOException;

    /** Prefill side, once per manager. */
    SourceTransport openSource(RegisteredMemory memory, int engineRank) throws IOException;
}
