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
import java.util.Set;
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

    /** The write gates of this JVM's decode managers and the link each offer was made for, by offer key. */
    private static final ConcurrentHashMap<String, Offered> GATES = new ConcurrentHashMap<>();

    private record Offered(WriteSink gate, String link) {}

    /** How many offers this JVM holds (each keeps a decode's write gate reachable): tests check none outlives its link. */
    static int offersHeld() {
        return GATES.size();
    }

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
        Set<String> keys = ConcurrentHashMap.newKeySet();
        return new DestinationTransport() {
            @Override
            public String name() {
                return NAME;
            }

            /** One key per link, so the gate knows which link each write comes from. */
            @Override
            public LinkOffer offer(String peer) {
                String key = UUID.randomUUID().toString();
                GATES.put(key, new Offered(gate, peer));
                keys.add(key);
                byte[] blob = key.getBytes(StandardCharsets.US_ASCII);
                return new LinkOffer() {
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
                        GATES.remove(key);
                        keys.remove(key);
                    }
                };
            }

            @Override
            public void close() {
                for (String k : keys) GATES.remove(k);
                keys.clear();
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
                Offered target = offer.length <= 64 ? GATES.get(new String(offer, StandardCharsets.US_ASCII)) : null;
                if (target == null) {
                    throw new TransportUnavailableException("inproc needs the decode manager in the same JVM; decode " + link.peer()
                            + " is not in this one");
                }
                return new InprocDataPath(target.gate(), target.link());
            }

            @Override
            public void close() {
            }
        };
    }
}
