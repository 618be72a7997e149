package io.kvferry.prefill;

import io.kvferry.api.ChecksumMode;
import io.kvferry.api.KVFerrySettings;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.plan.CopyPlan;
import io.kvferry.protocol.Fingerprint;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.protocol.TransportOffer;
import io.kvferry.transport.Backend;
import io.kvferry.transport.DataPath;
import io.kvferry.transport.DestinationTransport;
import io.kvferry.transport.PeerLink;
import io.kvferry.transport.SourceTransport;
import io.kvferry.transport.TransportProvider;
import io.kvferry.transport.WriteSink;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.function.BooleanSupplier;
import java.util.function.Consumer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Which offered transport a prefill takes: under auto a path known to be slower than tcp (UCX
 * emulating its puts over its tcp transport) is closed and passed over for the next offer, with the
 * reason for the decode; an explicit backend keeps it and says so. Transports here are fakes (no UCX needed): each connect makes a path that
 * records whether it was closed.
 */
class OfferNegotiatorTest {
    private static final String EMULATION = "puts are emulated over active messages";

    /** A transport whose paths are slower than tcp when {@code emulation} is non-null. */
    private record FakeTransport(String name, String emulation, List<FakePath> made) implements TransportProvider {
        FakeTransport(String name, String emulation) {
            this(name, emulation, new ArrayList<>());
        }

        @Override
        public String unavailableReason(KVFerrySettings settings) {
            return null;
        }

        @Override
        public DestinationTransport openDestination(RegisteredMemory memory, int engineRank, KVFerrySettings settings, WriteSink gate,
                                                    Consumer<String> why) {
            throw new UnsupportedOperationException("prefill side only");
        }

        @Override
        public SourceTransport openSource(RegisteredMemory memory, int engineRank, KVFerrySettings settings) {
            return new SourceTransport() {
                @Override
                public String name() {
                    return name;
                }

                @Override
                public DataPath connect(byte[] offer, MemoryDescriptor destination, PeerLink link) {
                    FakePath p = new FakePath(name, emulation);
                    made.add(p);
                    return p;
                }

                @Override
                public void close() {}
            };
        }
    }

    private static final class FakePath implements DataPath {
        final String name;
        final String emulation;
        boolean closed;

        FakePath(String name, String emulation) {
            this.name = name;
            this.emulation = emulation;
        }

        @Override
        public String name() {
            return name;
        }

        @Override
        public void write(long room, CopyPlan plan, RegisteredMemory source, BooleanSupplier cancelled) {}

        @Override
        public String slowerThanTcp() {
            return emulation;
        }

        @Override
        public void close() {
            closed = true;
        }
    }

    private static Hello hello(String... offered) {
        List<TransportOffer> offers = new ArrayList<>();
        for (String o : offered) offers.add(new TransportOffer(o, new byte[0]));
        return new Hello("s1", "decode-1", new Fingerprint("v", "m", "bf16", 16, false, 8), "auto", 0, 1, 0, 0, ChecksumMode.OFF,
                new MemoryDescriptor(new long[0], new long[0], new int[0], new long[0], new long[0], List.of()), offers,
                null, null, null);
    }

    @Test
    void autoClosesAnEmulatedPathAndTakesTheNextOfferSayingWhy() throws Exception {
        FakeTransport slow = new FakeTransport("ucx", EMULATION), fast = new FakeTransport("shm", null);
        try (OfferNegotiator n = new OfferNegotiator(Backend.of("auto"), List.of(slow, fast), null, 0, KVFerrySettings.defaults())) {
            StringBuilder fallback = new StringBuilder();
            DataPath chosen = n.choose(hello("ucx", "shm"), PeerLink.named("decode-1"), fallback);
            assertSame(fast.made().get(0), chosen);
            assertTrue(slow.made().get(0).closed, "the emulated path is released, not left open");
            assertTrue(fallback.toString().startsWith("ucx not used: slower than tcp here (" + EMULATION + ")"), fallback.toString());
        }
    }

    @Test
    void anExplicitBackendKeepsTheEmulatedPathAndNotesIt() throws Exception {
        FakeTransport slow = new FakeTransport("ucx", EMULATION);
        // Any backend but auto: the transports it accepts are given here (the fake stands for an explicit ucx).
        try (OfferNegotiator n = new OfferNegotiator(Backend.of("tcp"), List.of(slow), null, 0, KVFerrySettings.defaults())) {
            StringBuilder fallback = new StringBuilder();
            DataPath chosen = n.choose(hello("ucx"), PeerLink.named("decode-1"), fallback);
            assertSame(slow.made().get(0), chosen);
            assertFalse(slow.made().get(0).closed);
            assertEquals("ucx is slower than tcp here: " + EMULATION, fallback.toString());
        }
    }

    @Test
    void aPathThatDoesNotEmulateIsTakenWithoutANote() throws Exception {
        FakeTransport fast = new FakeTransport("shm", null);
        try (OfferNegotiator n = new OfferNegotiator(Backend.of("auto"), List.of(fast), null, 0, KVFerrySettings.defaults())) {
            StringBuilder fallback = new StringBuilder();
            DataPath chosen = n.choose(hello("shm"), PeerLink.named("decode-1"), fallback);
            assertSame(fast.made().get(0), chosen);
            assertEquals("", fallback.toString());
        }
    }
}
