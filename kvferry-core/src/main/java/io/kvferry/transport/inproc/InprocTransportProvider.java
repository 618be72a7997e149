package io.kvferry.transport.inproc;

import io.kvferry.api.KVFerrySettings;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.transport.DataPath;
import io.kvferry.transport.DestinationTransport;
import io.kvferry.transport.LinkOffer;
import io.kvferry.transport.PeerLink;
import io.kvferry.transport.SourceTransport;
import io.kvferry.transport.TransportProvider;
import io.kvferry.transport.TransportUnavailableException;
import io.kvferry.transport.WriteSink;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Consumer;

/**
 * Prefill and decode in one JVM (tests, the reference engine's colocated mode): the prefill copies
 * straight into the decode's memory, through the decode's write gate like a tcp write. The offer
 * is a random key under which the decode's gate is found in this JVM; a prefill in another JVM
 * cannot use it and its link falls back to tcp. Chosen by name only, never by {@code auto}.
 */
public final class InprocTransportProvider implements TransportProvider {
    public static final String NAME = "inproc";

    /** The write gates of this JVM's decode managers, by offer key. */
    private static final ConcurrentHashMap<String, WriteSink> GATES = new ConcurrentHashMap<>();

    @Override
    public String name() {
        return NAME;
    }

    @Override
    public boolean offeredByAuto() {
        return false;
    }

    @Override
    public String unavailableReason(KVFerrySettings settings) {
        return null;
    }

    @Override
    public DestinationTransport openDestination(RegisteredMemory memory, int engineRank, KVFerrySettings settings, WriteSink gate,
                                                Consumer<String> why) {
        String key = UUID.randomUUID().toString();
        GATES.put(key, gate);
        byte[] blob = key.getBytes(StandardCharsets.US_ASCII);
        LinkOffer offer = new LinkOffer() {
            @Override
            public boolean oneSided() {
                return false;
            }

            @Override
            public byte[] blob() {
                return blob.clone();
            }

            /** The gate fences these writes (clear() waits for those in flight), so nothing is left to withdraw. */
            @Override
            public boolean revoke(Duration timeout) {
                return true;
            }

            @Override
            public void close() {
            }
        };
        return new DestinationTransport() {
            @Override
            public String name() {
                return NAME;
            }

            @Override
            public LinkOffer offer(String peer) {
                return offer;
            }

            @Override
            public void close() {
                GATES.remove(key, gate);
            }
        };
    }

    @Override
    public SourceTransport openSource(RegisteredMemory memory, int engineRank, KVFerrySettings settings) {
        return new SourceTransport() {
            @Override
            public String name() {
                return NAME;
            }

            @Override
            public DataPath connect(byte[] offer, MemoryDescriptor destination, PeerLink link) throws TransportUnavailableException {
                WriteSink gate = offer.length <= 64 ? GATES.get(new String(offer, StandardCharsets.US_ASCII)) : null;
                if (gate == null) {
                    throw new TransportUnavailableException("inproc needs the decode manager in the same JVM; decode " + link.peer()
                            + " is not in this one");
                }
                return new InprocDataPath(gate);
            }

            @Override
            public void close() {
            }
        };
    }
}
