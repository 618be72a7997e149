package io.kvferry.protocol;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVPoll;

import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

import static io.kvferry.protocol.WireReader.bool;
import static io.kvferry.protocol.WireReader.count;
import static io.kvferry.protocol.WireReader.failureKind;
import static io.kvferry.protocol.WireReader.intArray;
import static io.kvferry.protocol.WireReader.nonNegative;
import static io.kvferry.protocol.WireReader.positive;
import static io.kvferry.protocol.WireReader.raw;
import static io.kvferry.protocol.WireReader.str;

/**
 * Encodes and strictly decodes kvferry control frames (docs/PROTOCOL.md). Pure: no I/O.
 *
 * <p>Decoding never trusts a length: a body length is checked against the type's maximum before
 * the caller reads it, every count inside a body is checked against the bytes that remain before
 * an array is allocated, and a body with bytes left over is rejected.
 */
public final class FrameCodec {
    private FrameCodec() {}

    /** A validated frame header. */
    public record Header(MessageType type, int bodyLength) {}

    // ---------------------------------------------------------------- header

    public static void putHeader(ByteBuffer out, MessageType type, int bodyLength) {
        out.order(ByteOrder.LITTLE_ENDIAN);
        out.putInt(Wire.MAGIC).put((byte) Wire.VERSION).put((byte) type.code()).putShort((short) 0).putInt(bodyLength);
    }

    /** Reads and validates {@link Wire#HEADER_BYTES} bytes. */
    public static Header readHeader(ByteBuffer in) throws ProtocolException {
        long packed = readHeaderPacked(in);
        return new Header(packedType(packed), packedBodyLength(packed));
    }

    /**
     * As {@link #readHeader}, without allocating (a reader's hot path): the type's code in the high
     * and the body length in the low 32 bits; see {@link #packedType} and {@link #packedBodyLength}.
     */
    public static long readHeaderPacked(ByteBuffer in) throws ProtocolException {
        in.order(ByteOrder.LITTLE_ENDIAN);
        if (in.remaining() < Wire.HEADER_BYTES) throw new ProtocolException("truncated frame header");
        int magic = in.getInt();
        if (magic != Wire.MAGIC) {
            throw new ProtocolException(String.format("bad frame magic 0x%08x (not a kvferry peer?)", magic));
        }
        int version = in.get() & 0xFF;
        if (version != Wire.VERSION) {
            throw new ProtocolException("unsupported protocol version " + version + " (this side speaks " + Wire.VERSION + ")");
        }
        MessageType type = MessageType.fromCode(in.get() & 0xFF);
        int flags = in.getShort() & 0xFFFF;
        if (flags != 0) throw new ProtocolException("unknown frame flags 0x" + Integer.toHexString(flags));
        long bodyLength = in.getInt() & 0xFFFFFFFFL;
        if (bodyLength > type.maxBodyBytes()) {
            throw new ProtocolException(type + " body of " + bodyLength + " bytes exceeds the limit of " + type.maxBodyBytes());
        }
        if (type == MessageType.WRITE && bodyLength != WriteHeader.BODY_BYTES) {
            throw new ProtocolException("WRITE body must be " + WriteHeader.BODY_BYTES + " bytes, got " + bodyLength);
        }
        if (type == MessageType.WRITE_LIST) {
            if (bodyLength < WriteList.bodyBytes(1)) {
                throw new ProtocolException("WRITE_LIST body of " + bodyLength + " bytes is shorter than one piece ("
                        + WriteList.bodyBytes(1) + " bytes)");
            }
            long trailing = (bodyLength - WriteList.FIXED_BYTES) % WriteList.PIECE_BYTES;
            if (trailing != 0) {
                throw new ProtocolException("WRITE_LIST body of " + bodyLength + " bytes has " + trailing + " trailing bytes after its "
                        + (bodyLength - WriteList.FIXED_BYTES) / WriteList.PIECE_BYTES + " pieces of " + WriteList.PIECE_BYTES);
            }
        }
        return ((long) type.code() << 32) | bodyLength;
    }

    public static MessageType packedType(long packed) {
        try {
            return MessageType.fromCode((int) (packed >>> 32));
        } catch (ProtocolException e) {
            throw new IllegalArgumentException("not a packed header: " + packed);
        }
    }

    public static int packedBodyLength(long packed) {
        return (int) packed;
    }

    // ---------------------------------------------------------------- encode

    /** Encodes a whole frame (header + body) into a new buffer, ready to write. Not for WRITE payloads. */
    public static ByteBuffer encode(ControlMessage message) {
        if (message instanceof WriteHeader w) {
            ByteBuffer out = ByteBuffer.allocate(Wire.HEADER_BYTES + WriteHeader.BODY_BYTES);
            putWriteFrame(out, w.room(), w.region(), w.component(), w.buffer(), w.offset(), w.length(),
                    w.pieceLength(), w.dstStride(), w.hasCrc(), w.crc());
            return out.flip();
        }
        if (message instanceof WriteList l) {
            ByteBuffer out = ByteBuffer.allocate(Wire.HEADER_BYTES + WriteList.bodyBytes(l.count())).order(ByteOrder.LITTLE_ENDIAN);
            for (int i = 0; i < l.count(); i++) {
                putWriteListPiece(out, Wire.HEADER_BYTES + WriteList.bodyBytes(i), l.region(i), l.component(i), l.buffer(i),
                        l.offset(i), l.length(i));
            }
            putWriteListHeader(out, 0, l.room(), l.count(), l.payloadLength(), l.hasCrc(), l.crc());
            return out.limit(out.capacity()).position(0);
        }
        WireWriter body = encodeBody(message);
        if (body.size() > message.type().maxBodyBytes()) {
            throw new IllegalArgumentException(message.type() + " body of " + body.size()
                    + " bytes exceeds the protocol limit of " + message.type().maxBodyBytes());
        }
        ByteBuffer out = ByteBuffer.allocate(Wire.HEADER_BYTES + body.size()).order(ByteOrder.LITTLE_ENDIAN);
        putHeader(out, message.type(), body.size());
        out.put(body.bytes(), 0, body.size());
        return out.flip();
    }

    /**
     * Encodes control frames into buffers it keeps, for one owner at a time (a connection's writer,
     * under its write lock): a frame allocates nothing once the buffers have grown to the largest one.
     */
    public static final class FrameBuffer {
        /** Frames up to this size are encoded into a kept buffer (a TRANSFER_INFO of some thousand pages). */
        private static final int KEPT_FRAME_BYTES = 256 << 10;
        private final WireWriter body = new WireWriter();
        /** Heap: a control frame is small, and a connection keeps no native memory for it. */
        private ByteBuffer frame = ByteBuffer.allocate(1024).order(ByteOrder.LITTLE_ENDIAN);

        /** The whole frame of {@code message} (not a WRITE or WRITE_LIST), valid until the next call. */
        public ByteBuffer encode(ControlMessage message) {
            body.reset();
            encodeBody(body, message);
            if (body.size() > message.type().maxBodyBytes()) {
                throw new IllegalArgumentException(message.type() + " body of " + body.size()
                        + " bytes exceeds the protocol limit of " + message.type().maxBodyBytes());
            }
            int bytes = Wire.HEADER_BYTES + body.size();
            ByteBuffer out = frame;
            if (out.capacity() < bytes) {
                out = ByteBuffer.allocate(Math.max(bytes, 2 * out.capacity())).order(ByteOrder.LITTLE_ENDIAN);
                if (bytes <= KEPT_FRAME_BYTES) frame = out; // a rare huge frame is not kept
            }
            out.clear();
            putHeader(out, message.type(), body.size());
            out.put(body.bytes(), 0, body.size());
            return out.flip();
        }
    }

    /** The body bytes of a message as the wire carries them (what a handshake MAC is computed over). */
    public static ByteBuffer body(ControlMessage message) {
        WireWriter body = encodeBody(message);
        return ByteBuffer.wrap(body.bytes(), 0, body.size()).slice().order(ByteOrder.LITTLE_ENDIAN);
    }

    private static WireWriter encodeBody(ControlMessage message) {
        WireWriter body = new WireWriter();
        encodeBody(body, message);
        return body;
    }

    private static void encodeBody(WireWriter body, ControlMessage message) {
        switch (message) {
            case Hello h -> HandshakeCodec.encodeHello(body, h);
            case HelloAck a -> HandshakeCodec.encodeHelloAck(body, a);
            case Challenge c -> body.raw(c.nonce());
            case Heartbeat hb -> {
                // no body
            }
            case TransferInfo t -> encodeTransferInfo(body, t);
            case Abort a -> body.i64(a.room());
            case AbortAck a -> {
                body.i64(a.room());
                body.i32(a.prefillUniqueRank());
            }
            case Status s -> {
                body.i64(s.room());
                body.u8(s.status().value());
                body.u8(s.kind() == null ? 0 : s.kind().code());
                body.u8(s.hasDigest() ? 1 : 0);
                body.i32(s.prefillUniqueRank());
                body.i64(s.bytes());
                body.i64(s.digest());
                body.str(s.reason());
            }
            case WriteHeader w -> throw new IllegalArgumentException("a WRITE is framed by putWriteFrame");
            case WriteList l -> throw new IllegalArgumentException("a WRITE_LIST is framed by putWriteListHeader");
        }
    }

    /** Puts a complete contiguous WRITE header frame (without payload) into {@code out}. */
    public static void putWriteFrame(ByteBuffer out, long room, Region region, int component, int buffer,
                                     long offset, long length) {
        putWriteFrame(out, room, region, component, buffer, offset, length, length, length, false, 0);
    }

    /**
     * Puts a complete WRITE header frame (without payload) into {@code out}; allocation-free for the
     * hot path. With {@code hasCrc}, {@code crc} is the payload's CRC32C in payload order.
     */
    public static void putWriteFrame(ByteBuffer out, long room, Region region, int component, int buffer,
                                     long offset, long length, long pieceLength, long dstStride, boolean hasCrc, int crc) {
        if (component < 0 || component > 0xFFFF) throw new IllegalArgumentException("component " + component + " is outside [0, 65535]");
        if (buffer < 0) throw new IllegalArgumentException("buffer index " + buffer + " is negative");
        putHeader(out, MessageType.WRITE, WriteHeader.BODY_BYTES);
        out.putLong(room).put((byte) region.code()).put((byte) (hasCrc ? WriteHeader.FLAG_CRC : 0)).putShort((short) component)
                .putInt(buffer).putLong(offset).putLong(length).putLong(pieceLength).putLong(dstStride)
                .putInt(hasCrc ? crc : 0).putInt(0);
    }

    /**
     * Puts a WRITE_LIST frame header and the list's fixed body fields at {@code at} of {@code out}
     * (absolute: the pieces may be put first, then this once the payload's CRC is known).
     * Allocation-free. The frame is {@code Wire.HEADER_BYTES + WriteList.bodyBytes(count)} bytes.
     */
    public static void putWriteListHeader(ByteBuffer out, int at, long room, int count, long payloadLength, boolean hasCrc, int crc) {
        if (count < 1 || count > WriteList.MAX_PIECES) throw new IllegalArgumentException("a WRITE_LIST holds 1 to "
                + WriteList.MAX_PIECES + " pieces, not " + count);
        out.order(ByteOrder.LITTLE_ENDIAN);
        out.putInt(at, Wire.MAGIC).put(at + 4, (byte) Wire.VERSION).put(at + 5, (byte) MessageType.WRITE_LIST.code())
                .putShort(at + 6, (short) 0).putInt(at + 8, WriteList.bodyBytes(count));
        int b = at + Wire.HEADER_BYTES;
        out.putLong(b, room).put(b + 8, (byte) (hasCrc ? WriteList.FLAG_CRC : 0)).put(b + 9, (byte) 0).putShort(b + 10, (short) 0)
                .putInt(b + 12, count).putLong(b + 16, payloadLength).putInt(b + 24, hasCrc ? crc : 0).putInt(b + 28, 0);
    }

    /** Puts one piece of a WRITE_LIST at {@code at} of {@code out} (absolute; {@link WriteList#PIECE_BYTES} bytes). */
    public static void putWriteListPiece(ByteBuffer out, int at, Region region, int component, int buffer, long offset, long length) {
        if (component < 0 || component > 0xFFFF) throw new IllegalArgumentException("component " + component + " is outside [0, 65535]");
        if (buffer < 0) throw new IllegalArgumentException("buffer index " + buffer + " is negative");
        out.put(at, (byte) region.code()).put(at + 1, (byte) 0).putShort(at + 2, (short) component).putInt(at + 4, buffer)
                .putLong(at + 8, offset).putLong(at + 16, length);
    }

    /** Bytes of a Success STATUS frame (empty reason), as {@link #putSuccessStatusFrame} puts it. */
    public static final int SUCCESS_STATUS_FRAME_BYTES = Wire.HEADER_BYTES + 33;

    /**
     * Puts a whole Success STATUS frame (empty reason) at {@code out}'s position; allocation-free (a
     * transfer worker encodes each room's Success into one reused buffer).
     */
    public static void putSuccessStatusFrame(ByteBuffer out, long room, int prefillUniqueRank, long bytes, long digest,
                                             boolean hasDigest) {
        putHeader(out, MessageType.STATUS, SUCCESS_STATUS_FRAME_BYTES - Wire.HEADER_BYTES);
        out.putLong(room).put((byte) KVPoll.Success.value()).put((byte) 0).put((byte) (hasDigest ? 1 : 0)).putInt(prefillUniqueRank)
                .putLong(bytes).putLong(hasDigest ? digest : 0).putShort((short) 0);
    }

    private static void encodeTransferInfo(WireWriter b, TransferInfo t) {
        b.i64(t.room());
        b.u8(t.dummy() ? 1 : 0);
        b.i32(t.auxIndex());
        b.i32(t.requiredDstInfoNum());
        b.i32(t.decodePrefixLen());
        b.intArray(t.dstKvIndices());
        int[][] states = t.stateIndices() == null ? new int[0][] : t.stateIndices();
        b.i32(states.length);
        for (int[] s : states) b.intArray(s == null ? new int[0] : s);
    }

    // ---------------------------------------------------------------- decode

    /** Decodes a body whose header was already validated by {@link #readHeader}. */
    public static ControlMessage decodeBody(MessageType type, ByteBuffer body) throws ProtocolException {
        body.order(ByteOrder.LITTLE_ENDIAN);
        try {
            ControlMessage m = switch (type) {
                case HELLO -> HandshakeCodec.decodeHello(body);
                case HELLO_ACK -> HandshakeCodec.decodeHelloAck(body);
                case CHALLENGE -> new Challenge(raw(body, Handshake.BYTES));
                case HEARTBEAT -> new Heartbeat();
                case TRANSFER_INFO -> decodeTransferInfo(body);
                case ABORT -> new Abort(body.getLong());
                case ABORT_ACK -> new AbortAck(body.getLong(), nonNegative(body.getInt(), "prefill rank"));
                case STATUS -> decodeStatus(body);
                case WRITE -> decodeWriteInto(body, WriteHeader.reusable());
                case WRITE_LIST -> decodeWriteListInto(body, WriteList.reusable());
            };
            if (body.hasRemaining()) {
                throw new ProtocolException(type + " body has " + body.remaining() + " unexpected trailing bytes");
            }
            return m;
        } catch (BufferUnderflowException e) {
            throw new ProtocolException("truncated " + type + " body");
        }
    }

    /** Decodes one whole frame held in {@code frame} (header + body), as a test or fuzz entry point. */
    public static ControlMessage decodeFrame(ByteBuffer frame) throws ProtocolException {
        Header h = readHeader(frame);
        if (frame.remaining() != h.bodyLength()) {
            throw new ProtocolException("frame declares a " + h.bodyLength() + "-byte body but " + frame.remaining() + " bytes follow");
        }
        return decodeBody(h.type(), frame.slice().order(ByteOrder.LITTLE_ENDIAN));
    }

    private static TransferInfo decodeTransferInfo(ByteBuffer in) throws ProtocolException {
        long room = in.getLong();
        boolean dummy = bool(in, "dummy");
        int aux = in.getInt();
        if (aux < -1) throw new ProtocolException("aux index " + aux + " is negative");
        int required = positive(in.getInt(), "required_dst_info_num");
        int prefix = nonNegative(in.getInt(), "decode_prefix_len");
        int[] pages = intArray(in, "dst kv indices");
        int nState = count(in, 4, "state index list");
        int[][] states = new int[nState][];
        for (int i = 0; i < nState; i++) states[i] = intArray(in, "state indices");
        return new TransferInfo(room, pages, aux, states, required, prefix, dummy);
    }

    private static Status decodeStatus(ByteBuffer in) throws ProtocolException {
        long room = in.getLong();
        int raw = in.get() & 0xFF;
        KVPoll status;
        try {
            status = KVPoll.fromValue(raw);
        } catch (IllegalArgumentException e) {
            throw new ProtocolException("STATUS carries unknown poll value " + raw);
        }
        FailureKind kind = failureKind(in.get() & 0xFF, status == KVPoll.Failed, "STATUS");
        boolean hasDigest = bool(in, "digest present");
        int rank = nonNegative(in.getInt(), "prefill rank");
        long bytes = nonNegative(in.getLong(), "STATUS byte count");
        long digest = in.getLong();
        if (!hasDigest && digest != 0) throw new ProtocolException("STATUS without a digest carries digest bits");
        if (status != KVPoll.Success && (bytes != 0 || hasDigest)) {
            throw new ProtocolException("a " + status + " STATUS carries a byte count or digest");
        }
        return new Status(room, status, kind, rank, str(in), bytes, digest, hasDigest);
    }

    /**
     * Decodes a WRITE body into {@code into} in place (a reader's reused header: no allocation per
     * frame), with every check {@link #decodeBody} makes.
     */
    public static WriteHeader decodeWriteInto(ByteBuffer in, WriteHeader into) throws ProtocolException {
        in.order(ByteOrder.LITTLE_ENDIAN);
        if (in.remaining() != WriteHeader.BODY_BYTES) {
            throw new ProtocolException("WRITE body must be " + WriteHeader.BODY_BYTES + " bytes, got " + in.remaining());
        }
        long room = in.getLong();
        Region region = Region.fromCode(in.get() & 0xFF);
        int flags = in.get() & 0xFF;
        if ((flags & ~WriteHeader.FLAG_CRC) != 0) throw new ProtocolException("unknown WRITE flags 0x" + Integer.toHexString(flags));
        int component = in.getShort() & 0xFFFF;
        int buffer = nonNegative(in.getInt(), "buffer index");
        long offset = nonNegative(in.getLong(), "write offset");
        long length = nonNegative(in.getLong(), "write length");
        long piece = nonNegative(in.getLong(), "write piece length");
        long stride = nonNegative(in.getLong(), "write destination stride");
        int crc = in.getInt();
        int pad = in.getInt();
        boolean hasCrc = (flags & WriteHeader.FLAG_CRC) != 0;
        if (pad != 0) throw new ProtocolException("WRITE pad must be 0, got " + pad);
        if (!hasCrc && crc != 0) throw new ProtocolException("WRITE without a CRC carries CRC bits");
        if (length == 0 && piece != 0) throw new ProtocolException("an empty WRITE must have piece length 0, got " + piece);
        if (length > Wire.MAX_WRITE_BYTES) {
            // One ByteBuffer view lands a contiguous payload (and feeds its CRC): a longer one made the decode's reader throw.
            throw new ProtocolException("WRITE of " + length + " bytes exceeds " + Wire.MAX_WRITE_BYTES);
        }
        if (piece != length && length > Wire.MAX_STRIDED_WRITE_BYTES) {
            throw new ProtocolException("strided WRITE of " + length + " bytes exceeds " + Wire.MAX_STRIDED_WRITE_BYTES);
        }
        if (length > 0 && (piece == 0 || length % piece != 0)) {
            throw new ProtocolException("WRITE length " + length + " is not a whole number of " + piece + "-byte pieces");
        }
        if (piece != length && stride < piece) {
            throw new ProtocolException("strided WRITE pieces of " + piece + " bytes overlap at stride " + stride);
        }
        if (piece != length && (length / piece - 1) > (Long.MAX_VALUE - piece) / Math.max(1, stride)) {
            throw new ProtocolException("strided WRITE span overflows");
        }
        into.set(room, region, component, buffer, offset, length, piece, stride, hasCrc, crc);
        return into;
    }

    /**
     * Decodes a WRITE_LIST body into {@code into} in place (a reader's reused list: no allocation per
     * frame). Strict: the piece count must match the body, every piece be non-empty and end inside
     * the address range, pieces strictly ascend by (region, component, buffer, offset) without
     * overlapping, and their lengths add up to the declared payload of at most
     * {@link WriteList#MAX_PAYLOAD_BYTES}.
     */
    public static WriteList decodeWriteListInto(ByteBuffer in, WriteList into) throws ProtocolException {
        in.order(ByteOrder.LITTLE_ENDIAN);
        if (in.remaining() < WriteList.FIXED_BYTES) {
            throw new ProtocolException("WRITE_LIST body of " + in.remaining() + " bytes is shorter than its fixed " + WriteList.FIXED_BYTES);
        }
        long room = in.getLong();
        int flags = in.get() & 0xFF;
        if ((flags & ~WriteList.FLAG_CRC) != 0) throw new ProtocolException("unknown WRITE_LIST flags 0x" + Integer.toHexString(flags));
        int pad = in.get() & 0xFF;
        int reserved = in.getShort() & 0xFFFF;
        if (pad != 0 || reserved != 0) throw new ProtocolException("WRITE_LIST pad bytes must be 0");
        int count = in.getInt();
        if (count < 1 || count > WriteList.MAX_PIECES || count > into.capacity()) {
            throw new ProtocolException("WRITE_LIST piece count " + Integer.toUnsignedString(count) + " is outside [1, "
                    + WriteList.MAX_PIECES + "]");
        }
        long payload = in.getLong();
        int crc = in.getInt();
        int pad2 = in.getInt();
        if (pad2 != 0) throw new ProtocolException("WRITE_LIST pad must be 0, got " + pad2);
        boolean hasCrc = (flags & WriteList.FLAG_CRC) != 0;
        if (!hasCrc && crc != 0) throw new ProtocolException("WRITE_LIST without a CRC carries CRC bits");
        if (payload <= 0 || payload > WriteList.MAX_PAYLOAD_BYTES) {
            throw new ProtocolException("WRITE_LIST payload of " + payload + " bytes is outside [1, " + WriteList.MAX_PAYLOAD_BYTES + "]");
        }
        long expected = (long) count * WriteList.PIECE_BYTES;
        if (expected < in.remaining()) {
            throw new ProtocolException("WRITE_LIST has " + (in.remaining() - expected) + " trailing bytes after its " + count + " pieces");
        }
        if (expected > in.remaining()) {
            throw new ProtocolException("truncated WRITE_LIST: " + count + " pieces declared, " + in.remaining() + " bytes of them follow");
        }
        long sum = 0;
        int prevRegion = -1, prevComponent = -1, prevBuffer = -1;
        long prevEnd = 0;
        for (int i = 0; i < count; i++) {
            int regionCode = in.get() & 0xFF;
            Region region = Region.fromCode(regionCode);
            if (in.get() != 0) throw new ProtocolException("WRITE_LIST piece " + i + " pad must be 0");
            int component = in.getShort() & 0xFFFF;
            int buffer = nonNegative(in.getInt(), "WRITE_LIST piece buffer index");
            long offset = nonNegative(in.getLong(), "WRITE_LIST piece offset");
            long length = in.getLong();
            if (length <= 0 || length > payload) {
                throw new ProtocolException("WRITE_LIST piece " + i + " length " + length + " is outside [1, " + payload + "]");
            }
            if (offset > Long.MAX_VALUE - length) throw new ProtocolException("WRITE_LIST piece " + i + " range overflows");
            int order = regionCode != prevRegion ? Integer.compare(regionCode, prevRegion)
                    : component != prevComponent ? Integer.compare(component, prevComponent) : Integer.compare(buffer, prevBuffer);
            if (order < 0 || order == 0 && offset < prevEnd) {
                throw new ProtocolException("WRITE_LIST piece " + i + " (" + region + " " + component + "/" + buffer + " at " + offset
                        + ") overlaps or precedes the piece before it: pieces must ascend without overlapping");
            }
            sum += length;
            if (sum > payload) throw new ProtocolException("WRITE_LIST pieces add up to more than the declared payload of " + payload);
            into.set(i, region, component, buffer, offset, length);
            prevRegion = regionCode;
            prevComponent = component;
            prevBuffer = buffer;
            prevEnd = offset + length;
        }
        if (sum != payload) throw new ProtocolException("WRITE_LIST pieces add up to " + sum + " bytes, not the declared " + payload);
        into.begin(room, hasCrc, crc, count, payload);
        return into;
    }

}
