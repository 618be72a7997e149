package io.kvferry.protocol;

import io.kvferry.api.ChecksumMode;
import io.kvferry.api.KVPoll;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;

/** Shared fixtures for the protocol tests: sample messages, deep comparison, raw frame builders. */
final class ProtocolSamples {
    private ProtocolSamples() {}

    static MemoryDescriptor sampleMemory() {
        return new MemoryDescriptor(
                new long[] {1L << 30, 1L << 30, 123_456_789_012L},
                new long[] {4096, 4096, 8192},
                new int[] {0, 1, 7},
                new long[] {64 * 1024, 16},
                new long[] {256, 8},
                List.of(new MemoryDescriptor.StateDescriptor("mamba", new long[] {1 << 20, 2 << 20}, new long[] {512, 1024}),
                        new MemoryDescriptor.StateDescriptor("swa", new long[] {}, new long[] {}),
                        new MemoryDescriptor.StateDescriptor("c128_state", new long[] {1 << 16}, new long[] {128})));
    }

    static byte[] bytes32(int seed) {
        byte[] b = new byte[Handshake.BYTES];
        for (int i = 0; i < b.length; i++) b[i] = (byte) (seed * 31 + i * 7);
        return b;
    }

    static Hello sampleHello() {
        return new Hello("decode-session-42-\u00e9-\u4e2d\u6587-\uD83D\uDE80", "instance-7",
                new Fingerprint("0.1.0-SNAPSHOT", "stories260K@b0a507e7", "bfloat16", 16, true, 8), "auto", 3, 8, 1,
                Hello.FLAG_ALL_CP_RANKS | Hello.FLAG_RESUME, ChecksumMode.SAMPLED, sampleMemory(),
                List.of(new TransportOffer("shm", new byte[] {1, 2, 3, (byte) 0xFF}), new TransportOffer("ucx", new byte[0])),
                bytes32(1), bytes32(2), bytes32(3));
    }

    static Hello emptyHello() {
        return new Hello("", "", new Fingerprint("", "", "", 1, false, 0), "inproc", 0, 1, 0, 0, ChecksumMode.OFF,
                new MemoryDescriptor(new long[0], new long[0], new int[0], new long[0], new long[0], List.of()), List.of(),
                null, null, null);
    }

    static Coverage sampleCoverage() {
        return new Coverage(new long[] {256, 4096, 1}, new long[] {128, 0, 0}, new long[] {64, 4096, 0}, true, false,
                new long[][] {{512, 1024}, {}, {128}}, new long[][] {{0, 256}, {}, {0}}, new long[][] {{512, 256}, {}, {128}});
    }

    static TransferInfo sampleTransferInfo() {
        return new TransferInfo(0x0123_4567_89AB_CDEFL, new int[] {10, 11, 12, 20, Integer.MAX_VALUE, 0}, 5,
                new int[][] {{1, 2, 3}, {}, {7}}, 4, 128, false);
    }

    static TransferInfo dummyTransferInfo() {
        return new TransferInfo(-1L, new int[0], -1, new int[0][], 1, 0, true);
    }

    /** At least one instance of every message type, with awkward values. */
    static List<ControlMessage> all() {
        List<ControlMessage> out = new ArrayList<>();
        out.add(sampleHello());
        out.add(emptyHello());
        out.add(new HelloAck(true, "", 2, 17));
        out.add(new HelloAck(false, "bad auth token \u2014 refused", 0, 0));
        out.add(new HelloAck(true, "", 1, 3, "shm", "ucx not used: not enabled on this prefill"));
        out.add(new HelloAck(true, "", null, 4, 9, "tcp", "", ChecksumMode.FULL, sampleCoverage(), bytes32(9)));
        out.add(new Challenge(bytes32(5)));
        out.add(new Heartbeat());
        out.add(sampleTransferInfo());
        out.add(dummyTransferInfo());
        out.add(new Abort(42L));
        out.add(new Abort(Long.MIN_VALUE));
        out.add(new AbortAck(Long.MAX_VALUE, 7));
        for (KVPoll p : KVPoll.values()) {
            out.add(new Status(1000L + p.value(), p, p.value() * 3, p == KVPoll.Failed ? "Failed to send kv chunk of 1004" : ""));
        }
        out.add(Status.success(77, 5, 123_456_789L, 0xDEADBEEFCAFEL, true));
        out.add(Status.success(78, 5, 0, 0, false));
        out.add(new WriteHeader(9L, Region.KV, 0, 3, 4096L * 100, 4096L * 3));
        out.add(new WriteHeader(9L, Region.AUX, 0, 1, 256, 256));
        out.add(new WriteHeader(Long.MIN_VALUE, Region.STATE, 0xFFFF, Integer.MAX_VALUE, Long.MAX_VALUE, 0));
        out.add(new WriteHeader(10L, Region.KV, 0, 2, 512, 64 * 4, 64, 256, 0x89ABCDEF));
        return out;
    }

    static byte[] bytes(ByteBuffer b) {
        ByteBuffer d = b.duplicate();
        byte[] out = new byte[d.remaining()];
        d.get(out);
        return out;
    }

    static byte[] encoded(ControlMessage m) {
        return bytes(FrameCodec.encode(m));
    }

    static byte[] body(ControlMessage m) {
        byte[] f = encoded(m);
        byte[] out = new byte[f.length - Wire.HEADER_BYTES];
        System.arraycopy(f, Wire.HEADER_BYTES, out, 0, out.length);
        return out;
    }

    static byte[] header(int magic, int version, int type, int flags, int bodyLength) {
        return ByteBuffer.allocate(Wire.HEADER_BYTES).order(ByteOrder.LITTLE_ENDIAN)
                .putInt(magic).put((byte) version).put((byte) type).putShort((short) flags).putInt(bodyLength).array();
    }

    /** A well-formed header for {@code type} followed by {@code body}, with the body's true length. */
    static byte[] frame(MessageType type, byte[] body) {
        return concat(header(Wire.MAGIC, Wire.VERSION, type.code(), 0, body.length), body);
    }

    static byte[] concat(byte[] a, byte[] b) {
        byte[] out = new byte[a.length + b.length];
        System.arraycopy(a, 0, out, 0, a.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }

    /** Little-endian body builder for hand-made (usually malformed) bodies. */
    static final class Body {
        private final ByteBuffer buf = ByteBuffer.allocate(1 << 16).order(ByteOrder.LITTLE_ENDIAN);

        Body u8(int v) { buf.put((byte) v); return this; }
        Body u16(int v) { buf.putShort((short) v); return this; }
        Body i32(int v) { buf.putInt(v); return this; }
        Body i64(long v) { buf.putLong(v); return this; }
        Body raw(byte... b) { buf.put(b); return this; }

        Body str(String s) {
            byte[] b = s.getBytes(StandardCharsets.UTF_8);
            return u16(b.length).raw(b);
        }

        byte[] bytes() {
            byte[] out = new byte[buf.position()];
            buf.duplicate().flip().get(out);
            return out;
        }
    }

    // ------------------------------------------------------------------ deep comparison

    static void assertSameMessage(ControlMessage expected, ControlMessage actual) {
        assertNotNull(actual);
        assertEquals(expected.type(), actual.type());
        switch (expected) {
            case Hello e -> {
                Hello a = assertInstanceOf(Hello.class, actual);
                assertEquals(nz(e.sessionId()), a.sessionId(), "sessionId");
                assertEquals(e.instanceId(), a.instanceId(), "instanceId");
                assertEquals(e.fingerprint(), a.fingerprint(), "fingerprint");
                assertEquals(nz(e.dataPath()), a.dataPath(), "dataPath");
                assertEquals(e.engineRank(), a.engineRank(), "engineRank");
                assertEquals(e.attnTpSize(), a.attnTpSize(), "attnTpSize");
                assertEquals(e.ppRank(), a.ppRank(), "ppRank");
                assertEquals(e.checksum(), a.checksum(), "checksum");
                assertSameMemory(e.memory(), a.memory());
                assertEquals(e.flags(), a.flags(), "flags");
                assertEquals(e.offers(), a.offers(), "offers");
                assertArrayEquals(e.decodeNonce(), a.decodeNonce(), "decodeNonce");
                assertArrayEquals(e.resumeProof(), a.resumeProof(), "resumeProof");
                assertArrayEquals(e.mac(), a.mac(), "mac");
                assertEquals(e, a);
            }
            case TransferInfo e -> {
                TransferInfo a = assertInstanceOf(TransferInfo.class, actual);
                assertEquals(e.room(), a.room(), "room");
                assertArrayEquals(e.dstKvIndices(), a.dstKvIndices(), "dstKvIndices");
                assertEquals(e.auxIndex(), a.auxIndex(), "auxIndex");
                int[][] es = e.stateIndices() == null ? new int[0][] : e.stateIndices();
                assertNotNull(a.stateIndices(), "stateIndices");
                assertEquals(es.length, a.stateIndices().length, "stateIndices.length");
                for (int i = 0; i < es.length; i++) {
                    assertArrayEquals(es[i] == null ? new int[0] : es[i], a.stateIndices()[i], "stateIndices[" + i + "]");
                }
                assertEquals(e.requiredDstInfoNum(), a.requiredDstInfoNum(), "requiredDstInfoNum");
                assertEquals(e.decodePrefixLen(), a.decodePrefixLen(), "decodePrefixLen");
                assertEquals(e.dummy(), a.dummy(), "dummy");
            }
            case Status e -> assertEquals(e, assertInstanceOf(Status.class, actual));
            case HelloAck e -> assertEquals(e, assertInstanceOf(HelloAck.class, actual));
            case Challenge e -> assertEquals(e, actual);
            // records without arrays: equals is field-wise
            case Abort e -> assertEquals(e, actual);
            case AbortAck e -> assertEquals(e, actual);
            case WriteHeader e -> assertEquals(e, actual);
            case Heartbeat e -> assertEquals(e, actual);
        }
    }

    static void assertSameMemory(MemoryDescriptor e, MemoryDescriptor a) {
        assertArrayEquals(e.kvLengths(), a.kvLengths(), "kvLengths");
        assertArrayEquals(e.kvItemLens(), a.kvItemLens(), "kvItemLens");
        assertArrayEquals(e.kvLayerIds(), a.kvLayerIds(), "kvLayerIds");
        assertArrayEquals(e.auxLengths(), a.auxLengths(), "auxLengths");
        assertArrayEquals(e.auxItemLens(), a.auxItemLens(), "auxItemLens");
        assertEquals(e.states().size(), a.states().size(), "states.size");
        for (int i = 0; i < e.states().size(); i++) {
            MemoryDescriptor.StateDescriptor es = e.states().get(i), as = a.states().get(i);
            assertEquals(es.type(), as.type(), "states[" + i + "].type");
            assertArrayEquals(es.lengths(), as.lengths(), "states[" + i + "].lengths");
            assertArrayEquals(es.itemLens(), as.itemLens(), "states[" + i + "].itemLens");
        }
    }

    private static String nz(String s) {
        return s == null ? "" : s;
    }
}
