package io.kvferry.transport;

import io.kvferry.api.KVFerrySettings;
import io.kvferry.api.Knob;
import io.kvferry.memory.RegisteredMemory;

import java.io.IOException;
import java.util.List;
import java.util.function.Consumer;

/**
 * A data path, plugged in by name (the transport SPI): the built-in {@code tcp} and {@code inproc},
 * {@code shm}, and {@code ucx} from its own module. Found through {@link java.util.ServiceLoader}
 * ({@code META-INF/services/io.kvferry.transport.TransportProvider}), so a module adds one by
 * being on the class path.
 *
 * <p>Flow: a decode manager opens a {@link DestinationTransport} over its registered memory, handing
 * it the decode's write gate (two-sided transports land through it; one-sided ones cannot), and,
 * for each prefill rank it connects to, sends the {@link LinkOffer}'s blob in HELLO. The prefill
 * manager opens a {@link SourceTransport} over its own memory and turns an offer it can use into a
 * {@link DataPath}; one it cannot use (other host, library missing) falls back to tcp with a reason.
 * Control, status, abort and failure detection stay on the TCP control connection.
 */
public interface TransportProvider {
    /** The transport name ({@code tcp}, {@code inproc}, {@code shm}, {@code ucx}). */
    String name();

    /** Whether backend {@code auto} offers this transport (tcp is auto's fallback; inproc is chosen by name only). */
    default boolean offeredByAuto() {
        return true;
    }

    /** This transport's own settings, read from the {@link KVFerrySettings} it is handed (docs/CONFIGURATION.md lists them). */
    default List<Knob> knobs() {
        return List.of();
    }

    /**
     * Null when this transport can run in this process with these settings; otherwise why not and how
     * to fix it (a bad knob value is named here, before any link uses the transport).
     */
    String unavailableReason(KVFerrySettings settings);

    /**
     * Decode side, once per manager.
     *
     * @return the destination, or null when this memory cannot be offered (then {@code why} is told why)
     */
    DestinationTransport openDestination(RegisteredMemory memory, int engineRank, KVFerrySettings settings, WriteSink gate,
                                         Consumer<String> why) throws IOException;

    /** Prefill side, once per manager. */
    SourceTransport openSource(RegisteredMemory memory, int engineRank, KVFerrySettings settings) throws IOException;
}
