package io.kvferry.protocol;

import io.kvferry.api.ChecksumMode;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Combinators;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.Tuple;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.constraints.Size;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import static io.kvferry.protocol.ProtocolSamples.all;
import static io.kvferry.protocol.ProtocolSamples.assertSameMessage;
import static io.kvferry.protocol.ProtocolSamples.concat;
import static io.kvferry.protocol.ProtocolSamples.encoded;
import static io.kvferry.protocol.ProtocolSamples.frame;
import static io.kvferry.protocol.ProtocolSamples.header;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

/**
 * Hostile input never escapes {@link FrameCodec} as anything but {@link ProtocolException}: no
 * BufferUnderflow, IndexOutOfBounds, NegativeArraySize, IllegalArgument or OutOfMemory.
 */
class FrameFuzzTest {
    private static final int TRIES = 2000;
    /** Properties whose inputs have less room to vary (truncations, extensions, round trips). */
    private static final int FEWER_TRIES = 1000;

    /**
     * Decodes {@code bytes}; a {@link ProtocolException} (with a message) is a legal answer and gives
     * null. Any other throwable propagates and fails the property. An accepted frame must survive
     * re-encoding to the same message.
     */
    static ControlMessage decodeOrReject(byte[] bytes) {
        ControlMessage m;
        try {
            m = FrameCodec.decodeFrame(ByteBuffer.wrap(bytes));
        } catch (ProtocolException e) {
            assertNotNull(e.getMessage(), "ProtocolException without a message");
            return null;
        }
        assertNotNull(m);
        ControlMessage again;
        try {
            again = FrameCodec.decodeFrame(FrameCodec.encode(m));
        } catch (ProtocolException e) {
            throw new AssertionError("accepted " + m + " but its re-encoding is rejected: " + e.getMessage(), e);
        }
        assertSameMessage(m, again);
        if (m.type() != MessageType.WRITE) {
            // control bodies have one canonical encoding (WRITE's pad byte is ignored on decode)
            assertArrayEquals(bytes, encoded(m), "accepted a non-canonical encoding of " + m);
        }
        return m;
    }

    // ================================================================== pure noise

    @Property(seed = "20261207", tries = TRIES)
    void randomBytes(@ForAll @Size(max = 96) byte[] bytes) {
        decodeOrReject(bytes);
    }

    @Property(seed = "20261207", tries = TRIES)
    void randomBodyBehindAnHonestHeader(@ForAll("types") MessageType type, @ForAll @Size(max = 300) byte[] body) {
        decodeOrReject(frame(type, body));
    }

    @Property(seed = "20261207", tries = TRIES)
    void randomBodyStraightIntoDecodeBody(@ForAll("types") MessageType type, @ForAll @Size(max = 300) byte[] body) {
        try {
            ControlMessage m = FrameCodec.decodeBody(type, ByteBuffer.wrap(body));
            assertEquals(type, m.type());
        } catch (ProtocolException e) {
            assertNotNull(e.getMessage());
        }
    }

    @Property(seed = "20261207", tries = TRIES)
    void randomHeaderFields(@ForAll("magics") int magic, @ForAll @IntRange(min = 0, max = 3) int version,
                            @ForAll @IntRange(min = 0, max = 11) int type, @ForAll("flags") int flags,
                            @ForAll("lengths") int declared, @ForAll @Size(max = 64) byte[] body) {
        decodeOrReject(concat(header(magic, version, type, flags, declared), body));
    }

    /** Bodies built from small structured pieces (counts, strings, flags) get deeper than pure noise. */
    @Property(seed = "20261207", tries = TRIES)
    void structuredNoiseBodies(@ForAll("types") MessageType type, @ForAll("pieces") List<byte[]> pieces) {
        byte[] body = new byte[0];
        for (byte[] p : pieces) body = concat(body, p);
        decodeOrReject(frame(type, body));
    }

    // ================================================================== mutated valid frames

    @Property(seed = "20261207", tries = TRIES)
    void flippedBytes(@ForAll("validFrames") byte[] frame,
                      @ForAll @Size(min = 1, max = 6) List<@IntRange(min = 0, max = 1 << 20) Integer> positions,
                      @ForAll @Size(min = 1, max = 6) List<@IntRange(min = 1, max = 255) Integer> xors) {
        byte[] f = frame.clone();
        for (int i = 0; i < positions.size(); i++) {
            int pos = positions.get(i) % f.length;
            f[pos] ^= (byte) (int) xors.get(i % xors.size());
        }
        decodeOrReject(f);
    }

    @Property(seed = "20261207", tries = TRIES)
    void flippedBodyBytesBehindAValidHeader(@ForAll("validFrames") byte[] frame,
                                            @ForAll @Size(min = 1, max = 4) List<@IntRange(min = 0, max = 1 << 20) Integer> positions,
                                            @ForAll @Size(min = 1, max = 4) List<@IntRange(min = 1, max = 255) Integer> xors) {
        byte[] f = frame.clone();
        int body = f.length - Wire.HEADER_BYTES;
        if (body == 0) return;
        for (int i = 0; i < positions.size(); i++) {
            int pos = Wire.HEADER_BYTES + positions.get(i) % body;
            f[pos] ^= (byte) (int) xors.get(i % xors.size());
        }
        decodeOrReject(f);
    }

    /** Overwrites 4 body bytes at any offset with a value that often breaks a count or index. */
    @Property(seed = "20261207", tries = TRIES)
    void interestingIntsInTheBody(@ForAll("validFrames") byte[] frame, @ForAll @IntRange(min = 0, max = 1 << 20) int at,
                                  @ForAll("interestingInts") int value) {
        int body = frame.length - Wire.HEADER_BYTES;
        if (body < 4) return;
        byte[] f = frame.clone();
        ByteBuffer.wrap(f).order(ByteOrder.LITTLE_ENDIAN).putInt(Wire.HEADER_BYTES + at % (body - 3), value);
        decodeOrReject(f);
    }

    @Property(seed = "20261207", tries = FEWER_TRIES)
    void truncatedFramesAreAlwaysRejected(@ForAll("validFrames") byte[] frame, @ForAll @IntRange(min = 0, max = 1 << 20) int cut) {
        byte[] f = Arrays.copyOf(frame, cut % frame.length);
        assertThrows(ProtocolException.class, () -> FrameCodec.decodeFrame(ByteBuffer.wrap(f)));
    }

    @Property(seed = "20261207", tries = FEWER_TRIES)
    void truncatedBodiesBehindAnHonestHeaderAreAlwaysRejected(@ForAll("validFrames") byte[] frame,
                                                              @ForAll @IntRange(min = 0, max = 1 << 20) int cut) throws Exception {
        int body = frame.length - Wire.HEADER_BYTES;
        if (body == 0) return;
        MessageType type = FrameCodec.readHeader(ByteBuffer.wrap(frame)).type();
        byte[] shorter = Arrays.copyOfRange(frame, Wire.HEADER_BYTES, Wire.HEADER_BYTES + cut % body);
        assertThrows(ProtocolException.class, () -> FrameCodec.decodeFrame(ByteBuffer.wrap(frame(type, shorter))));
    }

    @Property(seed = "20261207", tries = FEWER_TRIES)
    void extendedFramesAreAlwaysRejected(@ForAll("validFrames") byte[] frame, @ForAll @Size(min = 1, max = 40) byte[] extra,
                                         @ForAll boolean fixHeader) throws Exception {
        byte[] f;
        if (fixHeader) {
            MessageType type = FrameCodec.readHeader(ByteBuffer.wrap(frame)).type();
            f = frame(type, concat(Arrays.copyOfRange(frame, Wire.HEADER_BYTES, frame.length), extra));
        } else {
            f = concat(frame, extra);
        }
        assertThrows(ProtocolException.class, () -> FrameCodec.decodeFrame(ByteBuffer.wrap(f)));
    }

    // ================================================================== round trips

    @Property(seed = "20261207", tries = FEWER_TRIES)
    void transferInfoRoundTrips(@ForAll("transferInfos") TransferInfo t) throws Exception {
        assertSameMessage(t, FrameCodec.decodeFrame(FrameCodec.encode(t)));
    }

    @Property(seed = "20261207", tries = FEWER_TRIES)
    void writeListRoundTrips(@ForAll("writeLists") WriteList l) throws Exception {
        assertSameMessage(l, FrameCodec.decodeFrame(FrameCodec.encode(l)));
    }

    /**
     * Any list of pieces, in any order and any sizes: decoded only when its pieces ascend without
     * overlapping, are non-empty and add up to the declared payload within the limits; else a
     * ProtocolException, never anything else.
     */
    @Property(seed = "20261207", tries = TRIES)
    void arbitraryPieceListsAreDecodedExactlyWhenTheyAscendWithoutOverlapping(@ForAll("rawPieces") List<long[]> pieces,
                                                                              @ForAll @IntRange(min = -2, max = 2) int payloadSkew) {
        if (pieces.isEmpty()) return;
        WriteList l = WriteList.builder(5, pieces.size());
        for (long[] p : pieces) l.add(Region.values()[(int) p[0]], (int) p[1], (int) p[2], p[3], p[4]);
        byte[] frame = encoded(l);
        ByteBuffer.wrap(frame).order(ByteOrder.LITTLE_ENDIAN).putLong(Wire.HEADER_BYTES + 16, l.payloadLength() + payloadSkew);
        boolean valid = payloadSkew == 0 && l.payloadLength() > 0 && l.payloadLength() <= WriteList.MAX_PAYLOAD_BYTES;
        long prevEnd = 0;
        long[] prev = null;
        for (long[] p : pieces) {
            valid &= p[4] > 0 && p[3] >= 0 && p[3] <= Long.MAX_VALUE - p[4];
            if (prev != null) {
                int order = p[0] != prev[0] ? Long.compare(p[0], prev[0]) : p[1] != prev[1] ? Long.compare(p[1], prev[1])
                        : Long.compare(p[2], prev[2]);
                valid &= order > 0 || order == 0 && p[3] >= prevEnd;
            }
            prev = p;
            prevEnd = p[3] + p[4];
        }
        ControlMessage m = decodeOrReject(frame);
        assertEquals(valid, m != null, (m == null ? "rejected" : "accepted") + " " + l);
    }

    @Property(seed = "20261207", tries = FEWER_TRIES)
    void helloRoundTrips(@ForAll("hellos") Hello h) throws Exception {
        assertSameMessage(h, FrameCodec.decodeFrame(FrameCodec.encode(h)));
    }

    // ================================================================== arbitraries

    @Provide
    Arbitrary<MessageType> types() {
        return Arbitraries.of(MessageType.class);
    }

    @Provide
    Arbitrary<byte[]> validFrames() {
        List<byte[]> frames = new ArrayList<>();
        for (ControlMessage m : all()) frames.add(encoded(m));
        return Arbitraries.of(frames);
    }

    @Provide
    Arbitrary<Integer> magics() {
        return Arbitraries.frequencyOf(
                Tuple.of(8, Arbitraries.just(Wire.MAGIC)),
                Tuple.of(1, Arbitraries.integers()));
    }

    @Provide
    Arbitrary<Integer> flags() {
        return Arbitraries.frequencyOf(
                Tuple.of(8, Arbitraries.just(0)),
                Tuple.of(1, Arbitraries.integers().between(0, 0xFFFF)));
    }

    @Provide
    Arbitrary<Integer> lengths() {
        return Arbitraries.oneOf(Arbitraries.integers().between(0, 80), interestingInts(), Arbitraries.integers());
    }

    @Provide
    Arbitrary<Integer> interestingInts() {
        return Arbitraries.of(0, 1, 2, 3, 4, -1, -2, 0x7fffffff, 0x80000000, 0x7ffffffe, 0xffff, 0x10000, 0x10001,
                1 << 20, (1 << 20) + 1, Wire.MAX_BODY_BYTES, Wire.MAX_BODY_BYTES + 1, Wire.MAX_STRING_BYTES,
                Wire.MAX_STRING_BYTES + 1, Wire.MAX_BUFFERS, Wire.MAX_BUFFERS + 1, 0x40000000, 0x3fffffff, 0xC0000000);
    }

    @Provide
    Arbitrary<List<byte[]>> pieces() {
        Arbitrary<byte[]> i32 = interestingInts().map(v -> ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putInt(v).array());
        Arbitrary<byte[]> small = Arbitraries.integers().between(-2, 6)
                .map(v -> ByteBuffer.allocate(4).order(ByteOrder.LITTLE_ENDIAN).putInt(v).array());
        Arbitrary<byte[]> i64 = Arbitraries.longs().map(v -> ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(v).array());
        Arbitrary<byte[]> u8 = Arbitraries.integers().between(0, 6).map(v -> new byte[] {(byte) (int) v});
        Arbitrary<byte[]> str = unicodeStrings().map(s -> new ProtocolSamples.Body().str(s).bytes());
        Arbitrary<byte[]> u16 = Arbitraries.integers().between(0, 0xFFFF)
                .map(v -> ByteBuffer.allocate(2).order(ByteOrder.LITTLE_ENDIAN).putShort((short) (int) v).array());
        return Arbitraries.oneOf(i32, small, small, i64, u8, u8, str, u16).list().ofMaxSize(24);
    }

    static Arbitrary<String> unicodeStrings() {
        Arbitrary<Integer> codePoint = Arbitraries.oneOf(
                Arbitraries.integers().between(0x20, 0x7E),
                Arbitraries.integers().between(0, 0x10FFFF).filter(cp -> cp < 0xD800 || cp > 0xDFFF));
        return codePoint.list().ofMaxSize(24).map(cps -> {
            StringBuilder sb = new StringBuilder();
            for (int cp : cps) sb.appendCodePoint(cp);
            return sb.toString();
        });
    }

    @Provide
    Arbitrary<TransferInfo> transferInfos() {
        Arbitrary<int[]> pages = Arbitraries.integers().array(int[].class).ofMaxSize(300);
        Arbitrary<int[][]> states = Arbitraries.integers().array(int[].class).ofMaxSize(20).array(int[][].class).ofMaxSize(6);
        return Combinators.combine(
                Arbitraries.longs(),
                pages,
                Arbitraries.integers().between(-1, Integer.MAX_VALUE),
                states,
                Arbitraries.integers().between(1, Integer.MAX_VALUE),
                Arbitraries.integers().between(0, Integer.MAX_VALUE),
                Arbitraries.of(true, false)
        ).as(TransferInfo::new);
    }

    /** Ascending, non-overlapping pieces: valid WRITE_LISTs. */
    @Provide
    Arbitrary<WriteList> writeLists() {
        Arbitrary<long[]> step = Combinators.combine(Arbitraries.integers().between(0, 3), Arbitraries.longs().between(0, 1 << 20),
                Arbitraries.longs().between(1, 1 << 16)).as((jump, gap, len) -> new long[] {jump, gap, len});
        return Combinators.combine(Arbitraries.longs(), step.list().ofMinSize(1).ofMaxSize(40), Arbitraries.of(true, false),
                Arbitraries.integers()).as((room, steps, crc, value) -> {
                    WriteList l = WriteList.builder(room, steps.size());
                    int region = 0, component = 0, buffer = 0;
                    long at = 0;
                    for (long[] s : steps) {
                        switch ((int) s[0]) {
                            case 1 -> { buffer++; at = 0; }
                            case 2 -> { component++; buffer = 0; at = 0; }
                            case 3 -> {
                                if (region < 2) {
                                    region++;
                                    component = 0;
                                    buffer = 0;
                                } else {
                                    buffer++;
                                }
                                at = 0;
                            }
                            default -> { }
                        }
                        at += s[1];
                        l.add(Region.values()[region], component, buffer, at, s[2]);
                        at += s[2];
                    }
                    return crc ? l.withCrc(value) : l;
                });
    }

    /** Pieces as (region, component, buffer, offset, length) with small values, so orders and overlaps collide often. */
    @Provide
    Arbitrary<List<long[]>> rawPieces() {
        return Combinators.combine(Arbitraries.integers().between(0, 2), Arbitraries.integers().between(0, 2),
                Arbitraries.integers().between(0, 2), Arbitraries.oneOf(Arbitraries.longs().between(0, 64), Arbitraries.of(Long.MAX_VALUE - 8)),
                Arbitraries.oneOf(Arbitraries.longs().between(-1, 16), Arbitraries.of(WriteList.MAX_PAYLOAD_BYTES + 1)))
                .as((r, c, b, off, len) -> new long[] {r, c, b, off, len}).list().ofMaxSize(12);
    }

    record Kv(long len, long item, int layer) {}

    record Pair(long len, long item) {}

    @Provide
    Arbitrary<Hello> hellos() {
        Arbitrary<Long> nonNeg = Arbitraries.longs().between(0, Long.MAX_VALUE);
        Arbitrary<Long> pos = Arbitraries.longs().between(1, Long.MAX_VALUE);
        Arbitrary<List<Kv>> kv = Combinators.combine(nonNeg, pos, Arbitraries.integers()).as(Kv::new).list().ofMaxSize(12);
        Arbitrary<List<Pair>> pairs = Combinators.combine(nonNeg, pos).as(Pair::new).list().ofMaxSize(6);
        Arbitrary<MemoryDescriptor.StateDescriptor> state = Combinators.combine(unicodeStrings(), pairs).as((type, ps) ->
                new MemoryDescriptor.StateDescriptor(type,
                        ps.stream().mapToLong(Pair::len).toArray(), ps.stream().mapToLong(Pair::item).toArray()));
        Arbitrary<MemoryDescriptor> memory = Combinators.combine(kv, pairs, state.list().ofMaxSize(4)).as((k, a, s) ->
                new MemoryDescriptor(k.stream().mapToLong(Kv::len).toArray(), k.stream().mapToLong(Kv::item).toArray(),
                        k.stream().mapToInt(Kv::layer).toArray(), a.stream().mapToLong(Pair::len).toArray(),
                        a.stream().mapToLong(Pair::item).toArray(), s));
        Arbitrary<List<Integer>> ranks = Combinators.combine(
                Arbitraries.integers().between(0, Integer.MAX_VALUE), Arbitraries.integers().between(1, Integer.MAX_VALUE),
                Arbitraries.integers().between(0, Integer.MAX_VALUE), Arbitraries.integers().between(1, Integer.MAX_VALUE))
                .as(List::of);
        return Combinators.combine(unicodeStrings().list().ofSize(6), ranks, memory).as((s, r, m) ->
                new Hello(s.get(0), s.get(1), new Fingerprint(s.get(2), s.get(3), s.get(4), r.get(3), r.get(0) % 2 == 0, r.get(0) % 64),
                        s.get(5), r.get(0), r.get(1), r.get(2), 0, ChecksumMode.FULL, m, List.of(), null, null, null));
    }
}
