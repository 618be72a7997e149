package io.kvferry.transport.shm;

import io.kvferry.api.KVArgs;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.memory.SharedArena;
import io.kvferry.transport.DataPath;
import io.kvferry.transport.PeerLink;
import io.kvferry.transport.TransportUnavailableException;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.constraints.Size;
import net.jqwik.api.lifecycle.AfterContainer;
import net.jqwik.api.lifecycle.BeforeContainer;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * A hostile decode's shm offer, as bytes: random and mutated offers (flipped bytes in the magic, the
 * strings, the nonce, the slot, the entry count, a window's offset and length; truncations) are refused
 * by {@link ShmOffer#decode} with an {@link IllegalArgumentException} only, and by the prefill's
 * {@link ShmSource#connect} with an {@link IOException} or {@link TransportUnavailableException} only —
 * never another throwable (an {@code InvalidPathException} for a NUL in a path, an
 * {@code IndexOutOfBoundsException} for a slot past the fence) — and whatever it maps lies inside the
 * offering decode's files, checked by every op.
 */
class ShmOfferFuzzTest {
    private static final List<AutoCloseable> CLOSE = new ArrayList<>();
    private static RegisteredMemory dst;
    private static byte[] offer;
    private static ShmSource source;

    @BeforeContainer
    static void offer() throws IOException {
        SharedArena pool = SharedArena.open("offer-fuzz", 1 << 20);
        CLOSE.add(pool);
        KVArgs a = new KVArgs();
        a.pageSize = 16;
        a.addKvBuffer(pool.allocate(4096L * 16, 64), 4096);
        a.addAuxBuffer(pool.allocate(64L * 4, 64), 64);
        dst = RegisteredMemory.from(a);
        List<String> why = new ArrayList<>();
        ShmDestination d = ShmDestination.open(dst, 0, why::add);
        assertNotNull(d, "not offered: " + why);
        CLOSE.add(d);
        offer = d.offer("fuzz").blob();
        source = new ShmSource();
        CLOSE.add(source);
    }

    @AfterContainer
    static void close() throws Exception {
        for (int i = CLOSE.size() - 1; i >= 0; i--) CLOSE.get(i).close();
        CLOSE.clear();
    }

    private static void decodeOrRefuse(byte[] blob) {
        try {
            ShmOffer.decode(blob);
        } catch (IllegalArgumentException e) {
            assertNotNull(e.getMessage());
        } catch (Throwable t) {
            fail("ShmOffer.decode failed with " + t, t);
        }
    }

    private static void connectOrRefuse(byte[] blob) {
        try {
            DataPath path = source.connect(blob, dst.describe(), PeerLink.named("hostile"));
            path.close(); // accepted: a mutation that changed nothing the checks read (a nonce byte the fence agrees with cannot)
        } catch (IOException | TransportUnavailableException e) {
            assertNotNull(e.getMessage());
        } catch (Throwable t) {
            fail("ShmSource.connect failed with " + t, t);
        }
    }

    @Property(seed = "20261207", tries = 300)
    void mutatedOffersAreRefusedCleanly(@ForAll @Size(min = 1, max = 6) List<@IntRange(min = 0, max = 1 << 20) Integer> positions,
                                        @ForAll @Size(min = 1, max = 6) List<@IntRange(min = 1, max = 255) Integer> xors,
                                        @ForAll @IntRange(min = 0, max = 1 << 20) int cut, @ForAll boolean truncate) {
        byte[] b = offer.clone();
        for (int i = 0; i < positions.size(); i++) b[positions.get(i) % b.length] ^= (byte) (int) xors.get(i % xors.size());
        if (truncate) b = Arrays.copyOf(b, cut % b.length);
        decodeOrRefuse(b);
        connectOrRefuse(b);
    }

    @Property(seed = "20261207", tries = 300)
    void randomOffersAreRefusedCleanly(@ForAll @Size(max = 600) byte[] noise) {
        decodeOrRefuse(noise);
        connectOrRefuse(noise);
    }

    /** A NUL in a path (Java cannot even make a Path of it), a slot past the fence, windows past the file. */
    @Property(seed = "20261207", tries = 50)
    void pathsSlotsAndWindowsOutsideTheArenaAreRefused(@ForAll @IntRange(min = 0, max = 5) int which) {
        ShmOffer o = ShmOffer.decode(offer);
        List<ShmOffer.Entry> entries = new ArrayList<>(o.entries());
        ShmOffer.Entry e = entries.get(0);
        String fence = o.fencePath();
        int slot = o.slot();
        switch (which) {
            case 0 -> entries.set(0, new ShmOffer.Entry(e.region(), e.component(), e.buffer(), e.path() + "\0x", e.offset(), e.length()));
            case 1 -> fence = fence + "\0";
            case 2 -> slot = Integer.MAX_VALUE;
            case 3 -> entries.set(0, new ShmOffer.Entry(e.region(), e.component(), e.buffer(), e.path(), Long.MAX_VALUE - 10, e.length()));
            case 4 -> entries.set(0, new ShmOffer.Entry(e.region(), e.component(), e.buffer(), e.path(), 1L << 40, e.length()));
            default -> entries.set(0, new ShmOffer.Entry(e.region(), e.component(), e.buffer(), "/dev/shm/../etc/passwd", e.offset(),
                    e.length()));
        }
        byte[] blob = new ShmOffer(o.hostId(), fence, o.nonceHi(), o.nonceLo(), slot, entries).encode();
        try {
            DataPath path = source.connect(blob, dst.describe(), PeerLink.named("hostile"));
            path.close();
            fail("accepted a hostile offer (" + which + ")");
        } catch (IOException | TransportUnavailableException ex) {
            assertNotNull(ex.getMessage());
        } catch (Throwable t) {
            fail("ShmSource.connect failed with " + t + " on hostile offer " + which, t);
        }
    }
}
