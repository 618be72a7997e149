package io.kvferry.prefill;

import io.kvferry.api.KVFerrySettings;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.metrics.LogSafe;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.TransportOffer;
import io.kvferry.transport.Backend;
import io.kvferry.transport.DataPath;
import io.kvferry.transport.PeerLink;
import io.kvferry.transport.SourceTransport;
import io.kvferry.transport.TransportProvider;
import io.kvferry.transport.TransportUnavailableException;
import io.kvferry.transport.Transports;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Picks the data path for a decode link from the transports the decode offered in HELLO: the first
 * one this prefill's backend allows and can use, else tcp. Each transport's source side is opened
 * once, on first use, and closed with the manager.
 */
final class OfferNegotiator implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(OfferNegotiator.class);

    private final Backend backend;
    private final List<TransportProvider> providers;
    private final RegisteredMemory memory;
    private final int engineRank;
    /** Guarded by itself. */
    private final Map<String, SourceTransport> sources = new HashMap<>();

    private final KVFerrySettings settings;

    OfferNegotiator(Backend backend, RegisteredMemory memory, int engineRank, KVFerrySettings settings) {
        this(backend, backend.offeredTransports(), memory, engineRank, settings);
    }

    /** With the transports {@code backend} accepts given explicitly (tests: transports that are not on the class path). */
    OfferNegotiator(Backend backend, List<TransportProvider> providers, RegisteredMemory memory, int engineRank,
                    KVFerrySettings settings) {
        this.settings = settings;
        this.backend = backend;
        this.providers = List.copyOf(providers);
        this.memory = memory;
        this.engineRank = engineRank;
    }

    /**
     * The first offered transport that is allowed and usable, else tcp; {@code fallback} collects
     * why earlier offers were passed over (and why the chosen one is slow, when an explicit backend
     * keeps such a path). Under backend {@code auto} a path known to be slower than tcp
     * ({@link DataPath#slowerThanTcp()}) is not usable.
     */
    DataPath choose(Hello h, PeerLink link, StringBuilder fallback) throws IOException {
        String peer = link.peer();
        for (TransportOffer offer : h.offers()) {
            String name = offer.transport();
            TransportProvider provider = providers.stream().filter(p -> p.name().equals(name)).findFirst().orElse(null);
            String why;
            if (provider == null) {
                why = "not enabled on this prefill (backend " + backend + ")";
            } else if (provider.unavailableReason(settings) != null) {
                why = provider.unavailableReason(settings);
            } else {
                try {
                    DataPath path = source(provider).connect(offer.blob(), h.memory(), link);
                    String slow = path.slowerThanTcp();
                    if (slow == null) return path;
                    if (!backend.isAuto()) {
                        log.warn("decode {}: {} is slower than kvferry's tcp data path here: {} (backend auto takes tcp)",
                                peer, name, slow);
                        if (!fallback.isEmpty()) fallback.append("; ");
                        fallback.append(name).append(" is slower than tcp here: ").append(slow);
                        return path;
                    }
                    path.close();
                    why = "slower than tcp here (" + slow + "); backend auto takes the next offer or tcp";
                } catch (TransportUnavailableException e) {
                    why = e.getMessage() != null ? e.getMessage() : e.getClass().getSimpleName();
                } catch (IOException | RuntimeException e) {
                    why = "unusable offer: " + e.getMessage();
                    log.warn("decode {}: {} offer refused: {}", peer, LogSafe.text(name), LogSafe.text(e.getMessage())); // the decode's text
                }
            }
            if (!fallback.isEmpty()) fallback.append("; ");
            fallback.append(name).append(" not used: ").append(why);
        }
        try {
            return source(Transports.fallback()).connect(new byte[0], h.memory(), link);
        } catch (TransportUnavailableException e) {
            throw new IOException("no data path to decode " + peer + ": " + e.getMessage(), e);
        }
    }

    private SourceTransport source(TransportProvider provider) throws IOException {
        synchronized (sources) {
            SourceTransport s = sources.get(provider.name());
            if (s == null) {
                s = provider.openSource(memory, engineRank, settings);
                sources.put(provider.name(), s);
            }
            return s;
        }
    }

    @Override
    public void close() {
        synchronized (sources) {
            for (SourceTransport s : sources.values()) s.close();
            sources.clear();
        }
    }
}
