package io.kvferry.ucx;

import io.kvferry.api.KVFerrySettings;
import io.kvferry.api.Knob;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.protocol.Region;
import io.kvferry.transport.RemoteBuffers;
import org.junit.jupiter.api.Test;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.function.Consumer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The offer's wire format and the settings parsers: pure, no UCX needed (never skipped). */
class UcxOfferTest {
    static final byte[] ADDR = {1, 2, 3, 4, 5};

    static UcxOffer sample() {
        return new UcxOffer(1, 13, ADDR, List.of(
                new UcxOffer.Entry(Region.KV, 0, 0, MemoryType.HOST, 0x7f0000001000L, 4096, new byte[] {9, 9}),
                new UcxOffer.Entry(Region.KV, 0, 1, MemoryType.HOST, 0x7f0000002000L, 4096, new byte[] {8}),
                new UcxOffer.Entry(Region.AUX, 0, 0, MemoryType.HOST, 0x7f0000003000L, 256, new byte[] {7, 7, 7}),
                new UcxOffer.Entry(Region.STATE, 1, 0, MemoryType.CUDA, 0x7f0000004000L, 512, new byte[] {6})));
    }

    static MemoryDescriptor shape() {
        return new MemoryDescriptor(new long[] {4096, 4096}, new long[] {1024, 1024}, new int[] {0, 1}, new long[] {256},
                new long[] {64}, List.of(new MemoryDescriptor.StateDescriptor("mamba", new long[0], new long[0]),
                new MemoryDescriptor.StateDescriptor("swa", new long[] {512}, new long[] {64})));
    }

    @Test
    void roundTripsLittleEndian() throws Exception {
        byte[] blob = sample().encode();
        ByteBuffer b = ByteBuffer.wrap(blob).order(ByteOrder.LITTLE_ENDIAN);
        assertEquals(UcxOffer.MAGIC, b.getInt());
        assertEquals(1, b.getShort());
        assertEquals(0, b.getShort());
        assertEquals(1, b.get());
        assertEquals(13, b.get());
        assertEquals('K', blob[0]);
        UcxOffer back = UcxOffer.decode(blob);
        assertEquals(1, back.ucxMajor());
        assertEquals(13, back.ucxMinor());
        assertArrayEquals(ADDR, back.workerAddress());
        assertEquals(4, back.entries().size());
        UcxOffer.Entry e = back.entries().get(3);
        assertEquals(Region.STATE, e.region());
        assertEquals(1, e.component());
        assertEquals(MemoryType.CUDA, e.memoryType());
        assertEquals(0x7f0000004000L, e.address());
        assertEquals(512, e.length());
        assertArrayEquals(new byte[] {6}, e.rkey());
        RemoteBuffers idx = UcxOffer.buffers(back, shape(), "peer");
        assertEquals(1, idx.entry(Region.KV, 0, 1));
        assertEquals(2, idx.entry(Region.AUX, 0, 0));
        assertEquals(3, idx.entry(Region.STATE, 1, 0));
        assertEquals(-1, idx.entry(Region.KV, 0, 2));
        assertEquals(-1, idx.entry(Region.KV, 1, 0));
        assertEquals(-1, idx.entry(Region.STATE, 0, 0));
    }

    /** Patches the encoded sample and expects a Malformed naming {@code words}. */
    static void malformed(Consumer<ByteBuffer> patch, String words) {
        byte[] blob = sample().encode();
        patch.accept(ByteBuffer.wrap(blob).order(ByteOrder.LITTLE_ENDIAN));
        UcxOffer.Malformed e = assertThrows(UcxOffer.Malformed.class, () -> UcxOffer.decode(blob));
        assertTrue(e.getMessage().contains(words), e.getMessage());
    }

    // offsets in the sample: header 12, address length at 12, address 16..20, count at 21, entry 0 at 25
    static final int E0 = 25;

    @Test
    void rejectsEachKindOfDamageByName() {
        malformed(b -> b.putInt(0, 0x12345678), "magic");
        malformed(b -> b.putShort(10, (short) 1), "reserved header bits");
        malformed(b -> b.putInt(12, 0), "worker address length 0");
        malformed(b -> b.putInt(12, -1), "worker address length 4294967295");
        malformed(b -> b.putInt(12, 1 << 20), "worker address length");
        malformed(b -> b.putInt(21, 1 << 17), "buffer count");
        malformed(b -> b.putInt(21, 3), "trailing bytes");
        malformed(b -> b.put(17, (byte) 99), "checksum mismatch"); // inside the worker address
        malformed(b -> b.put(E0 + 31, (byte) 99), "checksum mismatch"); // inside a packed rkey
        malformed(b -> b.put(9, (byte) 14), "checksum mismatch"); // UCX minor version
        malformed(b -> b.put(E0, (byte) 3), "unknown region 3");
        malformed(b -> b.put(E0 + 1, (byte) 77), "unknown memory type 77");
        malformed(b -> b.putShort(E0 + 2, (short) 1), "reserved");
        malformed(b -> b.putInt(E0 + 4, 1), "component 1 (must be 0)");
        malformed(b -> b.putInt(E0 + 8, -4), "negative index");
        malformed(b -> b.putLong(E0 + 20, 0), "has length 0");
        malformed(b -> b.putLong(E0 + 20, -5), "has length -5");
        malformed(b -> b.putLong(E0 + 12, -100L), "wraps around");
        malformed(b -> b.putShort(E0 + 28, (short) 0), "remote key length 0");
        malformed(b -> b.putShort(E0 + 28, (short) 60000), "remote key length 60000");
        malformed(b -> b.putInt(E0 + 30 + 2 + 8, 0), "KV buffer 0/0 appears twice"); // entry 1's buffer index -> 0
    }

    @Test
    void newerVersionsAndUnknownFlagsAreUnsupportedNotMalformed() {
        byte[] v2 = sample().encode();
        v2[4] = 2;
        assertTrue(assertThrows(UcxOffer.Unsupported.class, () -> UcxOffer.decode(v2)).getMessage().contains("version 2"));
        byte[] flags = sample().encode();
        flags[6] = 1;
        assertTrue(assertThrows(UcxOffer.Unsupported.class, () -> UcxOffer.decode(flags)).getMessage().contains("flags"));
        assertThrows(UcxOffer.Malformed.class, () -> UcxOffer.decode(null));
        assertThrows(UcxOffer.Malformed.class, () -> UcxOffer.decode(new byte[0]));
    }

    @Test
    void checksTheOfferAgainstHello() throws Exception {
        UcxOffer o = UcxOffer.decode(sample().encode());
        MemoryDescriptor s = shape();
        MemoryDescriptor longer = new MemoryDescriptor(new long[] {4096, 8192}, s.kvItemLens(), s.kvLayerIds(), s.auxLengths(),
                s.auxItemLens(), s.states());
        assertTrue(assertThrows(RemoteBuffers.OfferMismatch.class, () -> UcxOffer.buffers(o, longer, "peer")).getMessage()
                .contains("gives KV buffer 0/1 4096 bytes but HELLO declares 8192"));
        MemoryDescriptor moreKv = new MemoryDescriptor(new long[] {4096, 4096, 4096}, new long[] {1, 1, 1}, new int[] {0, 1, 2},
                s.auxLengths(), s.auxItemLens(), s.states());
        assertTrue(assertThrows(RemoteBuffers.OfferMismatch.class, () -> UcxOffer.buffers(o, moreKv, "peer")).getMessage().contains("lacks KV buffer 2"));
        MemoryDescriptor noState = new MemoryDescriptor(s.kvLengths(), s.kvItemLens(), s.kvLayerIds(), s.auxLengths(),
                s.auxItemLens(), List.of());
        assertTrue(assertThrows(RemoteBuffers.OfferMismatch.class, () -> UcxOffer.buffers(o, noState, "peer")).getMessage()
                .contains("STATE buffer 1/0, which the decode's HELLO does not declare"));
    }

    @Test
    void fuzzedOffersDecodeOrFailCleanly() {
        byte[] good = sample().encode();
        Random r = new Random(7);
        int refused = 0;
        for (int i = 0; i < 20_000; i++) {
            byte[] bad;
            if (i % 3 == 0) {
                bad = new byte[r.nextInt(96)];
                r.nextBytes(bad);
                if (bad.length >= 4 && r.nextBoolean()) ByteBuffer.wrap(bad).order(ByteOrder.LITTLE_ENDIAN).putInt(0, UcxOffer.MAGIC);
                if (bad.length >= 8 && r.nextBoolean()) { bad[4] = 1; bad[5] = 0; bad[6] = 0; bad[7] = 0; }
            } else {
                bad = good.clone();
                for (int f = 1 + r.nextInt(3); f > 0; f--) bad[r.nextInt(bad.length)] = (byte) r.nextInt(256);
            }
            try {
                UcxOffer.buffers(UcxOffer.decode(bad), shape(), "peer");
            } catch (UcxOffer.Malformed | UcxOffer.Unsupported | RemoteBuffers.OfferMismatch e) {
                refused++;
            }
        }
        assertTrue(refused > 10_000, refused + " refused");
    }

    @Test
    void badSettingsAreNamedAndSpinsOutOfRangeAreRefused() {
        KVFerrySettings none = KVFerrySettings.defaults();
        assertNull(UcxSettings.problem(none));
        String why = UcxSettings.problem(none.with(UcxSettings.DST_SPIN, "5k"));
        assertTrue(why != null && why.contains("KVFERRY_UCX_DST_SPIN") && why.contains("'5k'"), why);
        // Out of range is refused naming the knob and its range (a link's idle counter starts at the spin
        // count: a larger one would overflow it), never capped to something else without a word.
        assertEquals("KVFERRY_UCX_DST_SPIN / kvferry.ucx.dstSpin must be in [0, 1000000000], not " + Long.MAX_VALUE,
                UcxSettings.problem(none.with(UcxSettings.DST_SPIN, Long.toString(Long.MAX_VALUE))));
        assertEquals("KVFERRY_UCX_SPIN / kvferry.ucx.spin must be in [0, 1000000000], not 1000000001",
                UcxSettings.problem(none.with(UcxSettings.SPIN, "1000000001")));
        assertEquals("KVFERRY_UCX_SPIN / kvferry.ucx.spin must be in [0, 1000000000], not -1",
                UcxSettings.problem(none.with(UcxSettings.SPIN, "-1")));
        assertEquals("KVFERRY_UCX_DST_SPIN / kvferry.ucx.dstSpin must be in [0, 1000000000], not -5",
                UcxSettings.problem(none.with(UcxSettings.DST_SPIN, "-5")));
        assertEquals(UcxSettings.MAX_SPIN, new UcxSettings(none.with(UcxSettings.SPIN, "1000000000")).spin);
        assertEquals(0, new UcxSettings(none.with(UcxSettings.DST_SPIN, "0")).dstSpin);
        String mode = UcxSettings.problem(none.with(UcxSettings.ERR_MODE, "sometimes"));
        assertTrue(mode.contains("KVFERRY_UCX_ERR_MODE"), mode);
        // The environment layer: a KVFERRY_UCX_* variable is read, a -D property wins over it, an explicit value over both.
        KVFerrySettings env = KVFerrySettings.fromEnvironment(
                Map.of("KVFERRY_UCX_WINDOW", "8"), Map.of());
        assertEquals(8, new UcxSettings(env).window);
        env = KVFerrySettings.fromEnvironment(Map.of("KVFERRY_UCX_WINDOW", "8"),
                Map.of("kvferry.ucx.window", "2"));
        assertEquals(2, new UcxSettings(env).window);
        assertEquals(16, new UcxSettings(env.with(UcxSettings.WINDOW, "16")).window);
    }

    /** The window and the batch size out of range are refused naming the knob and its range, not clamped. */
    @Test
    void windowAndBatchBytesOutOfRangeAreRefusedNamingTheRange() {
        KVFerrySettings none = KVFerrySettings.defaults();
        assertEquals("KVFERRY_UCX_WINDOW / kvferry.ucx.window must be in [1, 64], not 0",
                UcxSettings.problem(none.with(UcxSettings.WINDOW, "0")));
        assertEquals("KVFERRY_UCX_WINDOW / kvferry.ucx.window must be in [1, 64], not 65",
                UcxSettings.problem(none.with(UcxSettings.WINDOW, "65")));
        assertEquals("KVFERRY_UCX_BATCH_BYTES / kvferry.ucx.batchBytes must be in [4096, 1073741824], not 1024",
                UcxSettings.problem(none.with(UcxSettings.BATCH_BYTES, "1024")));
        assertTrue(UcxSettings.problem(none.with(UcxSettings.BATCH_BYTES, Long.toString(2L << 30))).contains("[4096, 1073741824]"));
        String timeout = UcxSettings.problem(none.with(UcxSettings.CONNECT_TIMEOUT_MS, "0"));
        assertTrue(timeout != null && timeout.contains("KVFERRY_UCX_CONNECT_TIMEOUT_MS"), timeout);
        assertEquals(64, new UcxSettings(none.with(UcxSettings.WINDOW, "64")).window);
        assertEquals(4096, new UcxSettings(none.with(UcxSettings.BATCH_BYTES, "4096")).batchBytes);
    }

    @Test
    void directAccessTransportsFromUcxTls() {
        assertTrue(UcxSettings.directAccessPossible(null));
        assertTrue(UcxSettings.directAccessPossible(" "));
        assertTrue(UcxSettings.directAccessPossible("all"));
        assertTrue(UcxSettings.directAccessPossible("posix,cma"));
        assertTrue(UcxSettings.directAccessPossible("tcp,sm"));
        assertTrue(UcxSettings.directAccessPossible("rc,cuda"));
        assertTrue(UcxSettings.directAccessPossible("^cma"));
        assertTrue(UcxSettings.directAccessPossible("\\cma"));
        assertFalse(UcxSettings.directAccessPossible("tcp"));
        assertFalse(UcxSettings.directAccessPossible("tcp,posix,sysv,self"));
        assertFalse(UcxSettings.directAccessPossible("rc_x,dc_x,ud"));
        assertFalse(UcxSettings.directAccessPossible("^sm,cuda_ipc,rocm_ipc"));
        assertFalse(UcxSettings.directAccessPossible("^cma,knem,xpmem,cuda_ipc,rocm_ipc"));
    }

    @Test
    void settingsParse() {
        KVFerrySettings none = KVFerrySettings.defaults();
        assertEquals(UcxSettings.ErrMode.PEER, new UcxSettings(none).errMode);
        assertEquals(UcxSettings.ErrMode.NONE, new UcxSettings(none.with(UcxSettings.ERR_MODE, "NONE")).errMode);
        assertTrue(assertThrows(IllegalArgumentException.class, () -> new UcxSettings(none.with(UcxSettings.ERR_MODE, "sometimes")))
                .getMessage().contains("peer or none"));
        assertTrue(UcxRuntime.INSTALL_HINT.contains("apt-get install -y libucx0"));
        assertEquals(0, MemoryType.HOST.code());
        assertEquals(MemoryType.CUDA, MemoryType.fromCode(1));
    }

    @Test
    void everyUcxKnobIsDocumented() throws Exception {
        Path doc = Path.of("..", "docs", "CONFIGURATION.md");
        String text = Files.readString(doc);
        for (Knob k : new UcxTransportProvider().knobs()) {
            assertTrue(text.contains("`" + k.env() + "`") && text.contains("`" + k.key() + "`"), k.env() + " is missing from " + doc);
        }
    }
}
