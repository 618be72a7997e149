package io.kvferry.protocol;

import com.sun.management.ThreadMXBean;
import io.kvferry.api.FailureKind;
import io.kvferry.api.ChecksumMode;
import io.kvferry.api.KVPoll;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.function.Executable;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.provider.ValueSource;

import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Stream;

import static io.kvferry.protocol.ProtocolSamples.Body;
import static io.kvferry.protocol.ProtocolSamples.all;
import static io.kvferry.protocol.ProtocolSamples.assertSameMessage;
import static io.kvferry.protocol.ProtocolSamples.body;
import static io.kvferry.protocol.ProtocolSamples.bytes;
import static io.kvferry.protocol.ProtocolSamples.concat;
import static io.kvferry.protocol.ProtocolSamples.encoded;
import static io.kvferry.protocol.ProtocolSamples.frame;
import static io.kvferry.protocol.ProtocolSamples.header;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class FrameCodecTest {

    // ================================================================== helpers

    private static ProtocolException rejectsFrame(byte[] frame, String... expectedFragments) {
        ProtocolException e = assertThrows(ProtocolException.class, () -> FrameCodec.decodeFrame(ByteBuffer.wrap(frame)),
                () -> "frame " + Arrays.toString(frame) + " was not rejected with a ProtocolException");
        assertMentions(e, expectedFragments);
        return e;
    }

    private static void assertMentions(Exception e, String... fragments) {
        String msg = e.getMessage();
        assertTrue(msg != null && !msg.isBlank(), "exception without a message");
        for (String f : fragments) {
            assertTrue(msg.toLowerCase().contains(f.toLowerCase()), () -> "message '" + msg + "' does not mention '" + f + "'");
        }
    }

    private static byte[] withHeaderByte(byte[] frame, int index, int value) {
        byte[] copy = frame.clone();
        copy[index] = (byte) value;
        return copy;
    }

    private static ControlMessage decode(byte[] frame) throws ProtocolException {
        return FrameCodec.decodeFrame(ByteBuffer.wrap(frame));
    }

    /** Bytes allocated by the current thread while running {@code r}, or -1 when the JVM cannot say. */
    private static long allocatedBy(Executable r) throws Throwable {
        if (!(ManagementFactory.getThreadMXBean() instanceof ThreadMXBean mx)
                || !mx.isThreadAllocatedMemorySupported() || !mx.isThreadAllocatedMemoryEnabled()) {
            r.execute();
            return -1;
        }
        long before = mx.getCurrentThreadAllocatedBytes();
        r.execute();
        return mx.getCurrentThreadAllocatedBytes() - before;
    }

    // ================================================================== round trips

    @TestFactory
    Stream<DynamicTest> everyMessageRoundTrips() {
        return all().stream().map(m -> DynamicTest.dynamicTest(m.type() + " " + m.getClass().getSimpleName(), () -> {
            ByteBuffer frame = FrameCodec.encode(m);
            assertEquals(0, frame.position(), "encode returns a flipped buffer");
            ControlMessage back = FrameCodec.decodeFrame(frame);
            assertSameMessage(m, back);
            assertEquals(m.type(), back.type());
        }));
    }

    @Test
    void everyMessageTypeIsCoveredBySamples() {
        assertEquals(Arrays.stream(MessageType.values()).toList(),
                all().stream().map(ControlMessage::type).distinct().sorted().toList());
    }

    @Test
    void headerLayoutIsLittleEndianMagicVersionTypeFlagsLength() {
        byte[] f = encoded(new Abort(7));
        assertEquals(Wire.HEADER_BYTES + 8, f.length);
        assertArrayEquals(new byte[] {'K', 'V', 'F', 'Y'}, Arrays.copyOf(f, 4), "magic spells KVFY on the wire");
        assertEquals(Wire.VERSION, f[4]);
        assertEquals(MessageType.ABORT.code(), f[5]);
        assertEquals(0, f[6]);
        assertEquals(0, f[7]);
        assertEquals(8, ByteBuffer.wrap(f, 8, 4).order(ByteOrder.LITTLE_ENDIAN).getInt());
        assertEquals(7L, ByteBuffer.wrap(f, 12, 8).order(ByteOrder.LITTLE_ENDIAN).getLong());
    }

    @Test
    void readHeaderThenDecodeBodyOverAStreamOfFrames() throws Exception {
        List<ControlMessage> msgs = all();
        byte[] stream = new byte[0];
        for (ControlMessage m : msgs) stream = concat(stream, encoded(m));
        ByteBuffer in = ByteBuffer.wrap(stream).order(ByteOrder.BIG_ENDIAN); // readHeader must not rely on the caller's order
        for (ControlMessage m : msgs) {
            int start = in.position();
            FrameCodec.Header h = FrameCodec.readHeader(in);
            assertEquals(start + Wire.HEADER_BYTES, in.position(), "readHeader consumes exactly the header");
            assertEquals(m.type(), h.type());
            ByteBuffer body = in.slice(in.position(), h.bodyLength()).order(ByteOrder.BIG_ENDIAN);
            in.position(in.position() + h.bodyLength());
            assertSameMessage(m, FrameCodec.decodeBody(h.type(), body));
        }
        assertTrue(!in.hasRemaining());
    }

    @Test
    void nullStringsEncodeAsEmpty() throws Exception {
        assertEquals(new Status(1, KVPoll.Success, 0, ""), decode(encoded(new Status(1, KVPoll.Success, 0, null))));
        assertEquals(new HelloAck(true, "", 1, 2), decode(encoded(new HelloAck(true, null, 1, 2))));
        Hello h = ProtocolSamples.sampleHello();
        Hello withNull = new Hello(null, null, new Fingerprint(null, null, null, 16, false, 0), h.dataPath(), h.engineRank(),
                h.attnTpSize(), h.ppRank(), 0, null, h.memory(), null, null, null, null);
        Hello back = assertInstanceOf(Hello.class, decode(encoded(withNull)));
        assertEquals("", back.sessionId());
        assertEquals("", back.kvCacheDtype());
        assertEquals(ChecksumMode.OFF, back.checksum());
    }

    @Test
    void nullStateIndicesEncodeAsEmptyLists() throws Exception {
        TransferInfo none = new TransferInfo(3, new int[] {1}, -1, null, 1, 0, false);
        TransferInfo back = assertInstanceOf(TransferInfo.class, decode(encoded(none)));
        assertEquals(0, back.stateIndices().length);

        TransferInfo holes = new TransferInfo(3, new int[] {1}, -1, new int[][] {null, {4, 5}}, 1, 0, false);
        back = assertInstanceOf(TransferInfo.class, decode(encoded(holes)));
        assertEquals(2, back.stateIndices().length);
        assertArrayEquals(new int[0], back.stateIndices()[0]);
        assertArrayEquals(new int[] {4, 5}, back.stateIndices()[1]);
    }

    @Test
    void stringAtTheLimitRoundTrips() throws Exception {
        String max = "x".repeat(Wire.MAX_STRING_BYTES);
        assertEquals(new HelloAck(false, max, 0, 0), decode(encoded(new HelloAck(false, max, 0, 0))));
    }

    @Test
    void largestTransferInfoRoundTrips() throws Exception {
        // body = room 8 + dummy 1 + aux 4 + required 4 + prefix 4 + page count 4 + 4n + state count 4
        int n = (Wire.MAX_BODY_BYTES - 33) / 4;
        int[] pages = new int[n];
        for (int i = 0; i < n; i++) pages[i] = i;
        TransferInfo t = new TransferInfo(1, pages, 0, new int[0][], 1, 0, false);
        ByteBuffer f = FrameCodec.encode(t);
        assertTrue(f.remaining() - Wire.HEADER_BYTES <= Wire.MAX_BODY_BYTES);
        assertSameMessage(t, FrameCodec.decodeFrame(f));
    }

    // ================================================================== WRITE

    @ParameterizedTest
    @EnumSource(Region.class)
    void putWriteFrameDecodesToTheSameHeader(Region region) throws Exception {
        ByteBuffer out = ByteBuffer.allocate(100).order(ByteOrder.BIG_ENDIAN);
        out.put(new byte[5]); // the hot path appends into a shared buffer
        FrameCodec.putWriteFrame(out, 0xDEAD_BEEF_0000_0001L, region, 65535, 12, 4096L * 1_000_000, Wire.MAX_WRITE_BYTES);
        assertEquals(5 + Wire.HEADER_BYTES + WriteHeader.BODY_BYTES, out.position());
        out.flip().position(5);
        WriteHeader w = assertInstanceOf(WriteHeader.class, FrameCodec.decodeFrame(out));
        assertEquals(new WriteHeader(0xDEAD_BEEF_0000_0001L, region, 65535, 12, 4096L * 1_000_000, Wire.MAX_WRITE_BYTES), w);
    }

    /**
     * The decode lands a contiguous WRITE through one ByteBuffer view of its destination (and its CRC reads one): a payload
     * past 2 GiB - 1 into a buffer larger than that made the view throw in the reader (an unchecked exception, so the link's
     * rooms failed blaming the decode). Refused by the codec as the peer's protocol error, whatever the buffer's size.
     */
    @ParameterizedTest
    @ValueSource(longs = {Integer.MAX_VALUE + 1L, 3L << 30, 7L << 33, Long.MAX_VALUE})
    void contiguousWriteOverTwoGibIsAProtocolError(long length) {
        for (boolean crc : new boolean[] {false, true}) {
            ByteBuffer out = ByteBuffer.allocate(Wire.HEADER_BYTES + WriteHeader.BODY_BYTES);
            FrameCodec.putWriteFrame(out, 9, Region.KV, 0, 0, 1L << 31, length, length, length, crc, crc ? 7 : 0);
            ProtocolException e = assertThrows(ProtocolException.class, () -> FrameCodec.decodeFrame(out.flip()));
            assertTrue(e.getMessage().contains("exceeds " + Wire.MAX_WRITE_BYTES), e.getMessage());
            ByteBuffer body = out.position(Wire.HEADER_BYTES).slice(); // as the reader decodes it, into its reused header
            assertThrows(ProtocolException.class, () -> FrameCodec.decodeWriteInto(body, WriteHeader.reusable()));
        }
    }

    @Test
    void encodeOfWriteHeaderEqualsPutWriteFrame() {
        WriteHeader w = new WriteHeader(5, Region.STATE, 2, 3, 64, 128);
        ByteBuffer direct = ByteBuffer.allocate(Wire.HEADER_BYTES + WriteHeader.BODY_BYTES);
        FrameCodec.putWriteFrame(direct, 5, Region.STATE, 2, 3, 64, 128);
        assertArrayEquals(direct.array(), encoded(w));
    }

    @Test
    void writeBodyMustBeExactly56Bytes() {
        for (int len : new int[] {0, 48, 55}) {
            ProtocolException e = assertThrows(ProtocolException.class, () -> FrameCodec.readHeader(
                    ByteBuffer.wrap(header(Wire.MAGIC, Wire.VERSION, MessageType.WRITE.code(), 0, len))));
            assertMentions(e, "WRITE", "56");
        }
        assertThrows(ProtocolException.class, () -> FrameCodec.readHeader(
                ByteBuffer.wrap(header(Wire.MAGIC, Wire.VERSION, MessageType.WRITE.code(), 0, 57))));
    }

    private static byte[] writeBody(long room, int region, int component, int buffer, long offset, long length) {
        return writeBody(room, region, 0, component, buffer, offset, length, 0, 0);
    }

    private static byte[] writeBody(long room, int region, int flags, int component, int buffer, long offset, long length, int crc,
                                    int pad) {
        return new Body().i64(room).u8(region).u8(flags).u16(component).i32(buffer).i64(offset).i64(length)
                .i64(length).i64(length).i32(crc).i32(pad).bytes();
    }

    @Test
    void writeCrcFlagsAndPadAreStrict() throws Exception {
        WriteHeader with = assertInstanceOf(WriteHeader.class, decode(frame(MessageType.WRITE, writeBody(1, 0, 1, 0, 0, 0, 8, 0x1234, 0))));
        assertTrue(with.hasCrc());
        assertEquals(0x1234, with.crc());
        rejectsFrame(frame(MessageType.WRITE, writeBody(1, 0, 2, 0, 0, 0, 8, 0, 0)), "flags");
        rejectsFrame(frame(MessageType.WRITE, writeBody(1, 0, 0, 0, 0, 0, 8, 5, 0)), "without a CRC");
        rejectsFrame(frame(MessageType.WRITE, writeBody(1, 0, 1, 0, 0, 0, 8, 5, 1)), "pad");
    }

    @Test
    void writeRejectsNegativeOffsetLengthAndBuffer() {
        rejectsFrame(frame(MessageType.WRITE, writeBody(1, 0, 0, 0, -1, 10)), "offset", "negative");
        rejectsFrame(frame(MessageType.WRITE, writeBody(1, 0, 0, 0, Long.MIN_VALUE, 10)), "offset", "negative");
        rejectsFrame(frame(MessageType.WRITE, writeBody(1, 0, 0, 0, 0, -1)), "length", "negative");
        rejectsFrame(frame(MessageType.WRITE, writeBody(1, 0, 0, -1, 0, 1)), "buffer", "negative");
    }

    @ParameterizedTest
    @ValueSource(ints = {3, 4, 127, 255})
    void writeRejectsUnknownRegion(int region) {
        rejectsFrame(frame(MessageType.WRITE, writeBody(1, region, 0, 0, 0, 1)), "region", String.valueOf(region));
    }

    // ================================================================== header rejection

    @Test
    void badMagicIsRejected() {
        byte[] f = encoded(new Abort(1));
        rejectsFrame(withHeaderByte(f, 0, 'X'), "magic");
        rejectsFrame(concat(header(0x4B565946 /* KVFY big-endian */, 1, 4, 0, 8), new byte[8]), "magic");
        rejectsFrame(new byte[Wire.HEADER_BYTES + 8], "magic");
    }

    @ParameterizedTest
    @ValueSource(ints = {0, 1, 2, 3, 4, 6, 255})
    void unsupportedVersionIsRejected(int version) {
        rejectsFrame(withHeaderByte(encoded(new Abort(1)), 4, version), "version", String.valueOf(version));
    }

    @ParameterizedTest
    @ValueSource(ints = {0, 11, 99, 255})
    void unknownTypeIsRejected(int type) {
        rejectsFrame(withHeaderByte(encoded(new Abort(1)), 5, type), "type", String.valueOf(type));
        assertThrows(ProtocolException.class, () -> MessageType.fromCode(type));
    }

    @Test
    void nonZeroFlagsAreRejected() {
        rejectsFrame(withHeaderByte(encoded(new Abort(1)), 6, 1), "flags");
        rejectsFrame(withHeaderByte(encoded(new Abort(1)), 7, 0x80), "flags");
    }

    @Test
    void forgedTwoGibTransferInfoLengthIsRejectedByReadHeader() throws Throwable {
        byte[] h = header(Wire.MAGIC, Wire.VERSION, MessageType.TRANSFER_INFO.code(), 0, 0x8000_0000);
        long allocated = allocatedBy(() -> {
            ProtocolException e = assertThrows(ProtocolException.class, () -> FrameCodec.readHeader(ByteBuffer.wrap(h)));
            assertMentions(e, "TRANSFER_INFO", "2147483648", "exceeds");
        });
        assertTrue(allocated < (1 << 20), "rejecting a forged length allocated " + allocated + " bytes");
        // and the whole-frame entry point reports the length, not a short body
        rejectsFrame(h, "exceeds");
        rejectsFrame(header(Wire.MAGIC, Wire.VERSION, MessageType.TRANSFER_INFO.code(), 0, -1), "4294967295", "exceeds");
    }

    @ParameterizedTest
    @EnumSource(MessageType.class)
    void bodyOneByteAboveTheTypeMaximumIsRejected(MessageType type) {
        ProtocolException e = assertThrows(ProtocolException.class, () -> FrameCodec.readHeader(
                ByteBuffer.wrap(header(Wire.MAGIC, Wire.VERSION, type.code(), 0, type.maxBodyBytes() + 1))));
        assertMentions(e, type.name());
    }

    @ParameterizedTest
    @EnumSource(value = MessageType.class, names = "WRITE", mode = EnumSource.Mode.EXCLUDE)
    void bodyAtTheTypeMaximumPassesReadHeader(MessageType type) throws Exception {
        FrameCodec.Header h = FrameCodec.readHeader(
                ByteBuffer.wrap(header(Wire.MAGIC, Wire.VERSION, type.code(), 0, type.maxBodyBytes())));
        assertEquals(new FrameCodec.Header(type, type.maxBodyBytes()), h);
    }

    @Test
    void truncatedHeaderIsRejected() {
        byte[] f = encoded(new Abort(1));
        for (int n = 0; n < Wire.HEADER_BYTES; n++) {
            byte[] prefix = Arrays.copyOf(f, n);
            ProtocolException e = assertThrows(ProtocolException.class, () -> FrameCodec.readHeader(ByteBuffer.wrap(prefix)));
            assertMentions(e, "truncated", "header");
            rejectsFrame(prefix, "truncated");
        }
    }

    // ================================================================== body rejection

    @TestFactory
    Stream<DynamicTest> everyProperPrefixOfEveryBodyIsRejected() {
        return all().stream().map(m -> DynamicTest.dynamicTest(m.type() + " " + m, () -> {
            byte[] body = body(m);
            for (int n = 0; n < body.length; n++) {
                byte[] prefix = Arrays.copyOf(body, n);
                // decodeBody on the short body
                ProtocolException e = assertThrows(ProtocolException.class,
                        () -> FrameCodec.decodeBody(m.type(), ByteBuffer.wrap(prefix)), "prefix of " + n + " bytes accepted");
                assertMentions(e);
                // a header that admits the short length (WRITE's header fixes the length, so it fails there)
                assertThrows(ProtocolException.class, () -> decode(frame(m.type(), prefix)));
                // a header that declares the full length but the frame is cut short
                byte[] cut = Arrays.copyOf(encoded(m), Wire.HEADER_BYTES + n);
                assertThrows(ProtocolException.class, () -> decode(cut));
            }
        }));
    }

    @Test
    void truncatedBodyMessagesSayTruncatedOrDeclared() {
        byte[] abort = encoded(new Abort(5));
        rejectsFrame(Arrays.copyOf(abort, abort.length - 1), "declares", "8");
        rejectsFrame(frame(MessageType.ABORT, new byte[7]), "truncated", "ABORT");
    }

    @TestFactory
    Stream<DynamicTest> trailingBytesAreRejected() {
        return all().stream().filter(m -> m.type() != MessageType.WRITE)
                .map(m -> DynamicTest.dynamicTest(m.type() + " " + m, () -> {
                    byte[] longer = concat(body(m), new byte[] {0});
                    // A type whose body is exactly its maximum is refused by that limit before decoding even starts.
                    rejectsFrame(frame(m.type(), longer), body(m).length == m.type().maxBodyBytes() ? "exceeds" : "trailing");
                    ProtocolException e = assertThrows(ProtocolException.class,
                            () -> FrameCodec.decodeBody(m.type(), ByteBuffer.wrap(longer)));
                    assertMentions(e, "trailing");
                    // extra bytes after a frame whose header is honest about its own length
                    rejectsFrame(concat(encoded(m), new byte[] {1, 2, 3}), "declares");
                }));
    }

    @Test
    void aSuccessStatusFramedInPlaceIsTheEncodedStatusByteForByte() throws ProtocolException {
        ByteBuffer b = ByteBuffer.allocateDirect(FrameCodec.SUCCESS_STATUS_FRAME_BYTES + 3);
        for (boolean digest : new boolean[] {false, true}) {
            Status s = Status.success(Long.MIN_VALUE + 5, 7, 123_456_789_012L, digest ? 0xDEADBEEFL : 0, digest);
            b.clear();
            FrameCodec.putSuccessStatusFrame(b, s.room(), s.prefillUniqueRank(), s.bytes(), s.digest(), s.hasDigest());
            assertEquals(FrameCodec.SUCCESS_STATUS_FRAME_BYTES, b.position());
            assertArrayEquals(encoded(s), bytes(b.flip()));
            assertEquals(s, FrameCodec.decodeFrame(b.duplicate()));
        }
    }

    /** Hostile piece lists: each is refused by the decoder with a reason naming what is wrong. */
    @Test
    void hostilePieceListsAreRefusedNamingWhatIsWrong() {
        WriteList overlapping = WriteList.builder(1, 2).add(Region.KV, 0, 0, 0, 4096).add(Region.KV, 0, 0, 2048, 4096);
        rejectsFrame(encoded(overlapping), "overlaps or precedes");
        WriteList descending = WriteList.builder(1, 2).add(Region.KV, 0, 1, 0, 64).add(Region.KV, 0, 0, 4096, 64);
        rejectsFrame(encoded(descending), "overlaps or precedes");
        WriteList twice = WriteList.builder(1, 2).add(Region.AUX, 0, 0, 64, 64).add(Region.AUX, 0, 0, 64, 64);
        rejectsFrame(encoded(twice), "overlaps or precedes");
        WriteList empty = WriteList.builder(1, 2).add(Region.KV, 0, 0, 0, 64).add(Region.KV, 0, 0, 64, 0);
        rejectsFrame(encoded(empty), "length 0");
        WriteList wraps = WriteList.builder(1, 1).add(Region.KV, 0, 0, Long.MAX_VALUE - 10, 64);
        rejectsFrame(encoded(wraps), "overflows");
        WriteList huge = WriteList.builder(1, 1).add(Region.KV, 0, 0, 0, WriteList.MAX_PAYLOAD_BYTES + 1);
        rejectsFrame(encoded(huge), "payload");
        // Counts that do not fit: more pieces declared than the body holds, fewer, zero, far too many.
        byte[] two = encoded(WriteList.builder(1, 2).add(Region.KV, 0, 0, 0, 64).add(Region.KV, 0, 0, 64, 64));
        for (int count : new int[] {3, 1, 0, -1, WriteList.MAX_PIECES + 1}) {
            byte[] f = two.clone();
            ByteBuffer.wrap(f).order(ByteOrder.LITTLE_ENDIAN).putInt(Wire.HEADER_BYTES + 12, count);
            rejectsFrame(f, "WRITE_LIST");
        }
        byte[] sumOff = two.clone();
        ByteBuffer.wrap(sumOff).order(ByteOrder.LITTLE_ENDIAN).putLong(Wire.HEADER_BYTES + 16, 100);
        rejectsFrame(sumOff, "declared payload");
        byte[] badRegion = two.clone();
        badRegion[Wire.HEADER_BYTES + WriteList.FIXED_BYTES] = 7;
        rejectsFrame(badRegion, "region");
        byte[] crcWithoutFlag = two.clone();
        ByteBuffer.wrap(crcWithoutFlag).order(ByteOrder.LITTLE_ENDIAN).putInt(Wire.HEADER_BYTES + 24, 5);
        rejectsFrame(crcWithoutFlag, "CRC");
        rejectsFrame(frame(MessageType.WRITE_LIST, new byte[WriteList.FIXED_BYTES]), "shorter than one piece");
        rejectsFrame(frame(MessageType.WRITE_LIST, new byte[WriteList.MAX_BODY_BYTES + WriteList.PIECE_BYTES]), "exceeds");
    }

    /** Decoding a WRITE_LIST into a reader's reused list allocates nothing. */
    @Test
    void decodingAPieceListIntoAReusedListAllocatesNothing() throws ProtocolException {
        WriteList l = WriteList.builder(3, 300);
        for (int i = 0; i < 300; i++) l.add(Region.KV, 0, i % 3, (i / 3) * 8192L, 2048);
        ByteBuffer body = ByteBuffer.allocateDirect(WriteList.bodyBytes(300)).order(ByteOrder.LITTLE_ENDIAN);
        body.put(FrameCodec.encode(sortedByBuffer(l)).position(Wire.HEADER_BYTES)).flip();
        WriteList into = WriteList.reusable();
        for (int i = 0; i < 2000; i++) FrameCodec.decodeWriteListInto(body.clear(), into);
        if (!(ManagementFactory.getThreadMXBean() instanceof ThreadMXBean mx) || !mx.isThreadAllocatedMemoryEnabled()) {
            return;
        }
        long before = mx.getCurrentThreadAllocatedBytes();
        for (int i = 0; i < 1000; i++) FrameCodec.decodeWriteListInto(body.clear(), into);
        long allocated = mx.getCurrentThreadAllocatedBytes() - before;
        assertTrue(allocated < 16 * 1000, allocated + " bytes allocated decoding 1000 lists");
        assertEquals(300, into.count());
    }

    private static WriteList sortedByBuffer(WriteList l) {
        WriteList s = WriteList.builder(l.room(), l.count());
        for (int b = 0; b < 3; b++) {
            for (int i = 0; i < l.count(); i++) if (l.buffer(i) == b) s.add(l.region(i), 0, b, l.offset(i), l.length(i));
        }
        return s;
    }

    @Test
    void writeWithExtraBytesAfterTheFixedBodyIsRejected() {
        rejectsFrame(concat(encoded(new WriteHeader(1, Region.KV, 0, 0, 0, 0)), new byte[1]));
        assertThrows(ProtocolException.class, () -> FrameCodec.decodeBody(MessageType.WRITE,
                ByteBuffer.wrap(concat(writeBody(1, 0, 0, 0, 0, 0), new byte[4]))));
    }

    private static Body transferInfoPrefix(long room, int dummy, int aux, int required, int prefix) {
        return new Body().i64(room).u8(dummy).i32(aux).i32(required).i32(prefix);
    }

    @Test
    void oversizedCountsInsideABodyAreRejectedWithoutAllocating() throws Throwable {
        List<byte[]> attacks = new ArrayList<>();
        attacks.add(frame(MessageType.TRANSFER_INFO, transferInfoPrefix(1, 0, -1, 1, 0).i32(0x7fffffff).bytes()));
        attacks.add(frame(MessageType.TRANSFER_INFO, transferInfoPrefix(1, 0, -1, 1, 0).i32(1 << 20).i32(0).bytes()));
        attacks.add(frame(MessageType.TRANSFER_INFO, transferInfoPrefix(1, 0, -1, 1, 0).i32(0).i32(0x7fffffff).bytes()));
        attacks.add(frame(MessageType.TRANSFER_INFO, transferInfoPrefix(1, 0, -1, 1, 0).i32(0).i32(Wire.MAX_BUFFERS).bytes()));
        attacks.add(frame(MessageType.TRANSFER_INFO, transferInfoPrefix(1, 0, -1, 1, 0).i32(0).i32(1).i32(0x7fffffff).bytes()));
        attacks.add(frame(MessageType.HELLO, helloPrefix().i32(0x7fffffff).bytes()));
        attacks.add(frame(MessageType.HELLO, helloPrefix().i32(Wire.MAX_BUFFERS).bytes()));
        attacks.add(frame(MessageType.HELLO, helloPrefix().i32(0).i32(Wire.MAX_BUFFERS).bytes()));
        attacks.add(frame(MessageType.HELLO, helloPrefix().i32(0).i32(0).i32(Wire.MAX_BUFFERS).bytes()));
        attacks.add(frame(MessageType.HELLO, helloPrefix().i32(0).i32(0).i32(1).str("mamba").i32(0x7fffffff).bytes()));
        for (byte[] f : attacks) assertThrows(ProtocolException.class, () -> decode(f)); // warm-up
        for (byte[] f : attacks) {
            long allocated = allocatedBy(() -> {
                ProtocolException e = assertThrows(ProtocolException.class, () -> decode(f));
                assertMentions(e, "count");
            });
            assertTrue(allocated < (256 << 10), "rejecting a forged count allocated " + allocated + " bytes");
        }
    }

    @ParameterizedTest
    @ValueSource(ints = {-1, -2, Integer.MIN_VALUE})
    void negativeCountsAreRejected(int count) {
        rejectsFrame(frame(MessageType.TRANSFER_INFO, transferInfoPrefix(1, 0, -1, 1, 0).i32(count).i32(0).bytes()),
                "count", String.valueOf(count));
        rejectsFrame(frame(MessageType.TRANSFER_INFO, transferInfoPrefix(1, 0, -1, 1, 0).i32(0).i32(count).bytes()),
                "count", String.valueOf(count));
        rejectsFrame(frame(MessageType.HELLO, helloPrefix().i32(count).i32(0).i32(0).bytes()), "count");
        rejectsFrame(frame(MessageType.HELLO, helloPrefix().i32(0).i32(count).i32(0).bytes()), "count");
        rejectsFrame(frame(MessageType.HELLO, helloPrefix().i32(0).i32(0).i32(count).bytes()), "count");
    }

    @Test
    void countsJustFittingTheBodyAreAccepted() throws Exception {
        TransferInfo t = assertInstanceOf(TransferInfo.class, decode(frame(MessageType.TRANSFER_INFO,
                transferInfoPrefix(1, 0, -1, 1, 0).i32(2).i32(7).i32(8).i32(0).bytes())));
        assertArrayEquals(new int[] {7, 8}, t.dstKvIndices());
        // three page ids declared, two present: the count check fires before the read
        rejectsFrame(frame(MessageType.TRANSFER_INFO, transferInfoPrefix(1, 0, -1, 1, 0).i32(3).i32(7).i32(8).bytes()),
                "count 3", "does not fit");
    }

    /** HELLO up to its KV buffer count: session, instance, fingerprint, data path, ranks, flags, checksum. */
    private static Body helloPrefix() {
        return helloHead(0, 1, 0, 16).i32(0).u8(0); // flags, checksum
    }

    private static Body helloHead(int engineRank, int tp, int pp, int pageSize) {
        return new Body().str("sess").str("inst").str("0.1").str("model").str("fp16").i32(pageSize).u8(0).i32(8).str("tcp")
                .i32(engineRank).i32(tp).i32(pp);
    }

    @Test
    void invalidUtf8IsRejected() {
        byte[][] bad = {{(byte) 0xC3, 0x28}, {(byte) 0xFF}, {(byte) 0xE2, (byte) 0x82}, {(byte) 0xED, (byte) 0xA0, (byte) 0x80}};
        for (byte[] s : bad) {
            rejectsFrame(frame(MessageType.HELLO_ACK, new Body().u8(0).u8(6).u16(s.length).raw(s).i32(0).i32(0).bytes()), "UTF-8");
            rejectsFrame(frame(MessageType.STATUS, new Body().i64(1).u8(0).u8(1).u8(0).i32(0).i64(0).i64(0).u16(s.length).raw(s)
                    .bytes()), "UTF-8");
            rejectsFrame(frame(MessageType.HELLO, new Body().u16(s.length).raw(s).bytes()), "UTF-8");
        }
    }

    @Test
    void overlongStringOnTheWireIsRejected() {
        int n = Wire.MAX_STRING_BYTES + 1;
        rejectsFrame(frame(MessageType.HELLO_ACK, new Body().u8(0).u8(6).u16(n).raw(new byte[n]).i32(0).i32(0).bytes()),
                String.valueOf(n), "exceeds");
        rejectsFrame(frame(MessageType.HELLO_ACK, new Body().u8(0).u8(6).u16(100).raw(new byte[10]).bytes()), "truncated");
    }

    @Test
    void boolFlagMustBeZeroOrOne() {
        rejectsFrame(frame(MessageType.HELLO_ACK, new Body().u8(2).str("").i32(0).i32(0).bytes()), "accepted", "2");
        rejectsFrame(frame(MessageType.HELLO_ACK, new Body().u8(255).str("").i32(0).i32(0).bytes()), "accepted", "255");
        rejectsFrame(frame(MessageType.TRANSFER_INFO, transferInfoPrefix(1, 2, -1, 1, 0).i32(0).i32(0).bytes()), "dummy", "2");
    }

    @ParameterizedTest
    @ValueSource(ints = {5, 6, 128, 255})
    void unknownKvPollInStatusIsRejected(int value) {
        rejectsFrame(frame(MessageType.STATUS, status(value, 0, 0, 0, 0, 0, "")), "poll", String.valueOf(value));
    }

    /** A STATUS body: room 1, then each field as given. */
    private static byte[] status(int poll, int kind, int hasDigest, int rank, long bytes, long digest, String reason) {
        return new Body().i64(1).u8(poll).u8(kind).u8(hasDigest).i32(rank).i64(bytes).i64(digest).str(reason).bytes();
    }

    /** PROTOCOL.md: a negative rank is a protocol error, in every frame that carries one (HELLO_ACK and ABORT_ACK were read as sent). */
    @Test
    void ackFramesRejectNegativeRanks() throws Exception {
        rejectsFrame(frame(MessageType.ABORT_ACK, new Body().i64(9).i32(-1).bytes()), "prefill rank", "negative");
        assertEquals(new AbortAck(9, 0), decode(frame(MessageType.ABORT_ACK, new Body().i64(9).i32(0).bytes())));
        for (int field = 0; field < 2; field++) {
            Body b = new Body().u8(0).u8(FailureKind.HANDSHAKE_REFUSED.code()).str("no").i32(field == 0 ? -1 : 0).i32(field == 1 ? -7 : 0)
                    .str("").str("").u8(0).i32(0).u8(0).u8(0).i32(0).raw(new byte[32]);
            rejectsFrame(frame(MessageType.HELLO_ACK, b.bytes()), field == 0 ? "prefill engine rank" : "prefill unique rank", "negative");
        }
    }

    @Test
    void statusRejectsNegativePrefillRank() {
        rejectsFrame(frame(MessageType.STATUS, status(4, 0, 0, -1, 0, 0, "")), "rank", "negative");
    }

    @Test
    void statusByteCountAndDigestAreStrict() throws Exception {
        rejectsFrame(frame(MessageType.STATUS, status(4, 0, 0, 0, -1, 0, "")), "byte count", "negative");
        rejectsFrame(frame(MessageType.STATUS, status(4, 0, 0, 0, 10, 7, "")), "without a digest");
        rejectsFrame(frame(MessageType.STATUS, status(4, 0, 2, 0, 10, 7, "")), "digest present");
        rejectsFrame(frame(MessageType.STATUS, status(0, 9, 0, 0, 10, 0, "x")), "byte count or digest");
        Status ok = assertInstanceOf(Status.class, decode(frame(MessageType.STATUS, status(4, 0, 1, 3, 10, -7, ""))));
        assertEquals(Status.success(1, 3, 10, -7, true), ok);
    }

    @Test
    void failureKindMustMatchTheStatus() throws Exception {
        rejectsFrame(frame(MessageType.STATUS, status(4, 1, 0, 0, 0, 0, "")), "without a failure", "kind 1");
        rejectsFrame(frame(MessageType.STATUS, status(0, 0, 0, 0, 0, 0, "x")), "unknown failure kind 0");
        rejectsFrame(frame(MessageType.STATUS, status(0, 200, 0, 0, 0, 0, "x")), "unknown failure kind 200");
        rejectsFrame(frame(MessageType.HELLO_ACK, new Body().u8(1).u8(6).str("").i32(0).i32(0).str("tcp").str("").bytes()),
                "HELLO_ACK without a failure");
        rejectsFrame(frame(MessageType.HELLO_ACK, new Body().u8(1).u8(0).str("").i32(0).i32(0).str("tcp").str("").u8(7).bytes()),
                "checksum mode 7");
        for (FailureKind k : FailureKind.values()) {
            Status s = new Status(9, KVPoll.Failed, k, 2, "why");
            assertEquals(s, decode(encoded(s)), "kind " + k + " round-trips");
        }
        HelloAck refused = HelloAck.refused(FailureKind.LAYOUT_REFUSED, "page_size mismatch", 1, 2);
        assertEquals(refused, decode(encoded(refused)));
    }

    @ParameterizedTest
    @ValueSource(ints = {-2, -3, Integer.MIN_VALUE})
    void auxIndexBelowMinusOneIsRejected(int aux) {
        rejectsFrame(frame(MessageType.TRANSFER_INFO, transferInfoPrefix(1, 0, aux, 1, 0).i32(0).i32(0).bytes()),
                "aux index", String.valueOf(aux));
    }

    @Test
    void auxIndexMinusOneMeansNone() throws Exception {
        TransferInfo t = assertInstanceOf(TransferInfo.class,
                decode(frame(MessageType.TRANSFER_INFO, transferInfoPrefix(1, 0, -1, 1, 0).i32(0).i32(0).bytes())));
        assertEquals(-1, t.auxIndex());
    }

    @ParameterizedTest
    @ValueSource(ints = {0, -1, Integer.MIN_VALUE})
    void requiredDstInfoNumMustBePositive(int required) {
        rejectsFrame(frame(MessageType.TRANSFER_INFO, transferInfoPrefix(1, 0, -1, required, 0).i32(0).i32(0).bytes()),
                "required_dst_info_num", String.valueOf(required));
    }

    @Test
    void negativeDecodePrefixLenIsRejected() {
        rejectsFrame(frame(MessageType.TRANSFER_INFO, transferInfoPrefix(1, 0, -1, 1, -5).i32(0).i32(0).bytes()),
                "decode_prefix_len", "-5");
    }

    @Test
    void helloFieldValidation() throws Exception {
        byte[] tail = new Body().i32(0).u8(0).i32(0).i32(0).i32(0).i32(0).raw(new byte[3 * Handshake.BYTES]).bytes();
        rejectsFrame(frame(MessageType.HELLO, concat(helloHead(-1, 1, 0, 16).bytes(), tail)), "engine_rank");
        rejectsFrame(frame(MessageType.HELLO, concat(helloHead(0, 0, 0, 16).bytes(), tail)), "attn_tp_size");
        rejectsFrame(frame(MessageType.HELLO, concat(helloHead(0, 1, -1, 16).bytes(), tail)), "pp_rank");
        rejectsFrame(frame(MessageType.HELLO, concat(helloHead(0, 1, 0, 0).bytes(), tail)), "page_size");
        rejectsFrame(frame(MessageType.HELLO, helloHead(0, 1, 0, 16).i32(0).u8(3).bytes()), "checksum mode 3");
        assertInstanceOf(Hello.class, decode(frame(MessageType.HELLO, concat(helloHead(0, 1, 0, 16).bytes(), tail))));
        rejectsFrame(frame(MessageType.HELLO, helloPrefix().i32(1).i64(-1).i64(16).i32(0).i32(0).i32(0).bytes()), "kv buffer length");
        rejectsFrame(frame(MessageType.HELLO, helloPrefix().i32(1).i64(16).i64(0).i32(0).i32(0).i32(0).bytes()), "kv item length");
        rejectsFrame(frame(MessageType.HELLO, helloPrefix().i32(0).i32(1).i64(16).i64(0).i32(0).bytes()), "aux item length");
        rejectsFrame(frame(MessageType.HELLO, helloPrefix().i32(0).i32(0).i32(1).str("mamba").i32(1).i64(-8).i64(8).bytes()),
                "state tensor length");
    }

    // ================================================================== encode limits

    @Test
    void encodingAnIdOverTheLimitThrowsIllegalArgument() {
        String tooLong = "x".repeat(Wire.MAX_STRING_BYTES + 1);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> FrameCodec.encode(new HelloAck(true, "", 0, 0, tooLong, "")));
        assertMentions(e, String.valueOf(Wire.MAX_STRING_BYTES));
        // the limit is in UTF-8 bytes, not chars: 2049 two-byte chars are 4098 bytes
        String wide = "\u00e9".repeat(Wire.MAX_STRING_BYTES / 2 + 1);
        assertTrue(wide.length() < Wire.MAX_STRING_BYTES);
        assertThrows(IllegalArgumentException.class, () -> FrameCodec.encode(new HelloAck(true, "", 0, 0, wide, "")));
    }

    /** Reasons quote what peers sent (a session id may be 4 KiB): they are clipped, never refused by the encoder. */
    @Test
    void aReasonOverTheLimitIsClippedOnACodePointBoundary() throws Exception {
        String ascii = "x".repeat(Wire.MAX_STRING_BYTES + 1);
        Status s = (Status) decode(encoded(new Status(1, KVPoll.Failed, 0, ascii)));
        assertTrue(s.reason().getBytes(StandardCharsets.UTF_8).length <= Wire.MAX_STRING_BYTES, s.reason().length() + " chars");
        assertTrue(s.reason().startsWith("xxxx") && s.reason().endsWith("(clipped from " + ascii.length() + " bytes)"), s.reason());
        // four-byte code points: no half of a surrogate pair is left behind
        String emoji = "\uD83D\uDE00".repeat(Wire.MAX_STRING_BYTES);
        HelloAck a = (HelloAck) decode(encoded(new HelloAck(false, emoji, 0, 0)));
        String kept = a.error().substring(0, a.error().indexOf('…'));
        assertEquals(0, kept.length() % 2);
        assertTrue(kept.codePoints().allMatch(cp -> cp == 0x1F600), "a code point was cut");
        assertTrue(a.error().getBytes(StandardCharsets.UTF_8).length <= Wire.MAX_STRING_BYTES);
        String atLimit = "y".repeat(Wire.MAX_STRING_BYTES);
        assertEquals(atLimit, new Status(1, KVPoll.Failed, 0, atLimit).reason(), "a reason at the limit is kept whole");
    }

    @Test
    void encodingABodyOverTheTypeMaximumThrowsIllegalArgument() {
        TransferInfo huge = new TransferInfo(1, new int[Wire.MAX_BODY_BYTES / 4], 0, new int[0][], 1, 0, false);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> FrameCodec.encode(huge));
        assertMentions(e, "TRANSFER_INFO");
    }

    @Test
    void readHeaderBytesMatchEncodedLength() throws Exception {
        for (ControlMessage m : all()) {
            ByteBuffer f = FrameCodec.encode(m);
            FrameCodec.Header h = FrameCodec.readHeader(f.duplicate());
            assertEquals(m.type(), h.type());
            assertEquals(f.remaining() - Wire.HEADER_BYTES, h.bodyLength());
            assertArrayEquals(bytes(f), encoded(m), "encoding is deterministic");
        }
    }

    @Test
    void unknownHelloFlagsAreRejected() throws Exception {
        Hello h = ProtocolSamples.sampleHello();
        Hello flagged = withFlags(h, Hello.FLAG_ALL_CP_RANKS);
        assertEquals(Hello.FLAG_ALL_CP_RANKS, ((Hello) FrameCodec.decodeFrame(FrameCodec.encode(flagged))).flags());
        Hello unknown = withFlags(h, 0x10);
        ProtocolException e = assertThrows(ProtocolException.class, () -> FrameCodec.decodeFrame(FrameCodec.encode(unknown)));
        assertTrue(e.getMessage().contains("unknown HELLO flags"), e.getMessage());
    }

    private static Hello withFlags(Hello h, int flags) {
        return new Hello(h.sessionId(), h.instanceId(), h.fingerprint(), h.dataPath(), h.engineRank(), h.attnTpSize(), h.ppRank(),
                flags, h.checksum(), h.memory(), h.offers(), h.decodeNonce(), h.resumeProof(), h.mac());
    }

    @Test
    void stridedWritesRoundTripAndBadPieceLayoutsAreRejected() throws Exception {
        WriteHeader w = new WriteHeader(3, Region.KV, 0, 1, 4096, 64 * 10, 64, 256);
        assertEquals(w, FrameCodec.decodeFrame(FrameCodec.encode(w)));
        assertTrue(w.strided());
        assertEquals(10, w.pieces());
        assertEquals(9 * 256 + 64, w.span());
        ByteBuffer notWhole = ByteBuffer.allocate(Wire.HEADER_BYTES + WriteHeader.BODY_BYTES);
        FrameCodec.putWriteFrame(notWhole, 3, Region.KV, 0, 1, 0, 100, 64, 256, false, 0);
        ProtocolException e1 = assertThrows(ProtocolException.class, () -> FrameCodec.decodeFrame(notWhole.flip()));
        assertTrue(e1.getMessage().contains("whole number"), e1.getMessage());
        ByteBuffer overlapping = ByteBuffer.allocate(Wire.HEADER_BYTES + WriteHeader.BODY_BYTES);
        FrameCodec.putWriteFrame(overlapping, 3, Region.KV, 0, 1, 0, 128, 64, 32, false, 0);
        ProtocolException e2 = assertThrows(ProtocolException.class, () -> FrameCodec.decodeFrame(overlapping.flip()));
        assertTrue(e2.getMessage().contains("overlap"), e2.getMessage());
        ByteBuffer overflow = ByteBuffer.allocate(Wire.HEADER_BYTES + WriteHeader.BODY_BYTES);
        FrameCodec.putWriteFrame(overflow, 3, Region.KV, 0, 1, 0, 1L << 40, 1, Long.MAX_VALUE / 2, false, 0);
        assertThrows(ProtocolException.class, () -> FrameCodec.decodeFrame(overflow.flip()));
    }
}
