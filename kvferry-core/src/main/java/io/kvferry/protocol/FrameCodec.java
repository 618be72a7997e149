package io.kvferry.protocol;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVPoll;

import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

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
        Sink body = new Sink();
        switch (message) {
            case Hello h -> encodeHello(body, h);
            case HelloAck a -> {
                body.u8(a.accepted() ? 1 : 0);
                body.u8(a.refusal() == null ? 0 : a.refusal().code());
                body.str(a.error());
                body.i32(a.prefillEngineRank());
                body.i32(a.prefillUniqueRank());
                body.str(a.dataPath());
                body.str(a.fallback());
            }
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
                body.i32(s.prefillUniqueRank());
                body.str(s.reason() == null ? "" : s.reason());
            }
            case WriteHeader w -> {
                ByteBuffer out = ByteBuffer.allocate(Wire.HEADER_BYTES + WriteHeader.BODY_BYTES);
                putWriteFrame(out, w.room(), w.region(), w.component(), w.buffer(), w.offset(), w.length(),
                        w.pieceLength(), w.dstStride());
                return out.flip();
            }
        }
        ByteBuffer out = ByteBuffer.allocate(Wire.HEADER_BYTES + body.size()).order(ByteOrder.LITTLE_ENDIAN);
        if (body.size() > message.type().maxBodyBytes()) {
            throw new IllegalArgumentException(message.type() + " body of " + body.size()
                    + " bytes exceeds the protocol limit of " + message.type().maxBodyBytes());
        }
        putHeader(out, message.type(), body.size());
        out.put(body.bytes(), 0, body.size());
        return out.flip();
    }

    /** Puts a complete contiguous WRITE header frame (without payload) into {@code out}. */
    public static void putWriteFrame(ByteBuffer out, long room, Region region, int component, int buffer,
                                     long offset, long length) {
        putWriteFrame(out, room, region, component, buffer, offset, length, length, length);
    }

    /** Puts a complete WRITE header frame (without payload) into {@code out}; allocation-free for the hot path. */
    public static void putWriteFrame(ByteBuffer out, long room, Region region, int component, int buffer,
                                     long offset, long length, long pieceLength, long dstStride) {
        if (component < 0 || component > 0xFFFF) throw new IllegalArgumentException("component " + component + " is outside [0, 65535]");
        if (buffer < 0) throw new IllegalArgumentException("buffer index " + buffer + " is negative");
        putHeader(out, MessageType.WRITE, WriteHeader.BODY_BYTES);
        out.putLong(room).put((byte) region.code()).put((byte) 0).putShort((short) component)
                .putInt(buffer).putLong(offset).putLong(length).putLong(pieceLength).putLong(dstStride);
    }

    private static void encodeHello(Sink b, Hello h) {
        b.str(h.authToken());
        b.str(h.sessionId());
        b.str(h.dataPath());
        b.i32(h.engineRank());
        b.i32(h.attnTpSize());
        b.i32(h.ppRank());
        b.i32(h.pageSize());
        b.str(h.kvCacheDtype());
        b.i32(h.flags());
        MemoryDescriptor m = h.memory();
        b.i32(m.kvLengths().length);
        for (int i = 0; i < m.kvLengths().length; i++) {
            b.i64(m.kvLengths()[i]);
            b.i64(m.kvItemLens()[i]);
            b.i32(m.kvLayerIds()[i]);
        }
        b.i32(m.auxLengths().length);
        for (int i = 0; i < m.auxLengths().length; i++) {
            b.i64(m.auxLengths()[i]);
            b.i64(m.auxItemLens()[i]);
        }
        b.i32(m.states().size());
        for (MemoryDescriptor.StateDescriptor s : m.states()) {
            b.str(s.type());
            b.i32(s.lengths().length);
            for (int i = 0; i < s.lengths().length; i++) {
                b.i64(s.lengths()[i]);
                b.i64(s.itemLens()[i]);
            }
        }
        if (h.offers().size() > TransportOffer.MAX_OFFERS) {
            throw new IllegalArgumentException("HELLO carries " + h.offers().size() + " offers; at most " + TransportOffer.MAX_OFFERS);
        }
        b.i32(h.offers().size());
        for (TransportOffer o : h.offers()) {
            b.str(o.transport());
            b.bytes(o.blob());
        }
    }

    private static void encodeTransferInfo(Sink b, TransferInfo t) {
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
                case HELLO -> decodeHello(body);
                case HELLO_ACK -> decodeHelloAck(body);
                case HEARTBEAT -> new Heartbeat();
                case TRANSFER_INFO -> decodeTransferInfo(body);
                case ABORT -> new Abort(body.getLong());
                case ABORT_ACK -> new AbortAck(body.getLong(), body.getInt());
                case STATUS -> decodeStatus(body);
                case WRITE -> decodeWriteInto(body, WriteHeader.reusable());
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

    private static Hello decodeHello(ByteBuffer in) throws ProtocolException {
        String token = str(in);
        String session = str(in);
        String dataPath = str(in);
        int engineRank = nonNegative(in.getInt(), "engine_rank");
        int tpSize = positive(in.getInt(), "attn_tp_size");
        int ppRank = nonNegative(in.getInt(), "pp_rank");
        int pageSize = positive(in.getInt(), "page_size");
        String dtype = str(in);
        int flags = in.getInt();
        if ((flags & ~Hello.KNOWN_FLAGS) != 0) throw new ProtocolException("unknown HELLO flags 0x" + Integer.toHexString(flags));
        int nKv = count(in, 20, "kv buffer");
        long[] kvLen = new long[nKv], kvItem = new long[nKv];
        int[] kvLayer = new int[nKv];
        for (int i = 0; i < nKv; i++) {
            kvLen[i] = nonNegative(in.getLong(), "kv buffer length");
            kvItem[i] = positive(in.getLong(), "kv item length");
            kvLayer[i] = in.getInt();
        }
        int nAux = count(in, 16, "aux buffer");
        long[] auxLen = new long[nAux], auxItem = new long[nAux];
        for (int i = 0; i < nAux; i++) {
            auxLen[i] = nonNegative(in.getLong(), "aux buffer length");
            auxItem[i] = positive(in.getLong(), "aux item length");
        }
        int nState = count(in, 6, "state component");
        List<MemoryDescriptor.StateDescriptor> states = new ArrayList<>(nState);
        for (int c = 0; c < nState; c++) {
            String stype = str(in);
            int nt = count(in, 16, "state tensor");
            long[] len = new long[nt], item = new long[nt];
            for (int i = 0; i < nt; i++) {
                len[i] = nonNegative(in.getLong(), "state tensor length");
                item[i] = positive(in.getLong(), "state item length");
            }
            states.add(new MemoryDescriptor.StateDescriptor(stype, len, item));
        }
        int nOffers = in.getInt();
        if (nOffers < 0 || nOffers > TransportOffer.MAX_OFFERS) {
            throw new ProtocolException("transport offer count " + nOffers + " is outside [0, " + TransportOffer.MAX_OFFERS + "]");
        }
        List<TransportOffer> offers = new ArrayList<>(nOffers);
        for (int i = 0; i < nOffers; i++) {
            String transport = str(in);
            if (transport.isEmpty()) throw new ProtocolException("transport offer " + i + " has no name");
            int n = in.getInt();
            if (n < 0 || n > TransportOffer.MAX_BLOB_BYTES || n > in.remaining()) {
                throw new ProtocolException("transport offer '" + transport + "' declares " + n + " bytes but "
                        + in.remaining() + " are left (limit " + TransportOffer.MAX_BLOB_BYTES + ")");
            }
            byte[] blob = new byte[n];
            in.get(blob);
            offers.add(new TransportOffer(transport, blob));
        }
        return new Hello(token, session, dataPath, engineRank, tpSize, ppRank, pageSize, dtype,
                new MemoryDescriptor(kvLen, kvItem, kvLayer, auxLen, auxItem, states), flags, offers);
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
        return new Status(room, status, kind, nonNegative(in.getInt(), "prefill rank"), str(in));
    }

    private static HelloAck decodeHelloAck(ByteBuffer in) throws ProtocolException {
        boolean accepted = bool(in, "accepted");
        FailureKind refusal = failureKind(in.get() & 0xFF, !accepted, "HELLO_ACK");
        return new HelloAck(accepted, str(in), refusal, in.getInt(), in.getInt(), str(in), str(in));
    }

    /** A failure kind byte: 0 exactly when the message reports no failure, else a known kind. */
    private static FailureKind failureKind(int code, boolean failure, String where) throws ProtocolException {
        if (!failure) {
            if (code != 0) throw new ProtocolException(where + " without a failure carries failure kind " + code);
            return null;
        }
        FailureKind kind = FailureKind.fromCode(code);
        if (kind == null) throw new ProtocolException(where + " carries unknown failure kind " + code);
        return kind;
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
        int pad = in.get() & 0xFF;
        if (pad != 0) throw new ProtocolException("WRITE pad byte must be 0, got " + pad);
        int component = in.getShort() & 0xFFFF;
        int buffer = nonNegative(in.getInt(), "buffer index");
        long offset = nonNegative(in.getLong(), "write offset");
        long length = nonNegative(in.getLong(), "write length");
        long piece = nonNegative(in.getLong(), "write piece length");
        long stride = nonNegative(in.getLong(), "write destination stride");
        if (length == 0 && piece != 0) throw new ProtocolException("an empty WRITE must have piece length 0, got " + piece);
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
        into.set(room, region, component, buffer, offset, length, piece, stride);
        return into;
    }

    // ---------------------------------------------------------------- field helpers

    private static int count(ByteBuffer in, int minBytesEach, String what) throws ProtocolException {
        int n = in.getInt();
        if (n < 0 || n > Wire.MAX_BUFFERS) throw new ProtocolException(what + " count " + n + " is out of range");
        if ((long) n * minBytesEach > in.remaining()) {
            throw new ProtocolException(what + " count " + n + " does not fit the " + in.remaining() + " bytes left");
        }
        return n;
    }

    private static int[] intArray(ByteBuffer in, String what) throws ProtocolException {
        int n = in.getInt();
        if (n < 0 || (long) n * 4 > in.remaining()) {
            throw new ProtocolException(what + " count " + n + " does not fit the " + in.remaining() + " bytes left");
        }
        int[] out = new int[n];
        in.asIntBuffer().get(out);
        in.position(in.position() + n * 4);
        return out;
    }

    private static String str(ByteBuffer in) throws ProtocolException {
        int n = in.getShort() & 0xFFFF;
        if (n > Wire.MAX_STRING_BYTES) throw new ProtocolException("string of " + n + " bytes exceeds " + Wire.MAX_STRING_BYTES);
        if (n > in.remaining()) throw new ProtocolException("string of " + n + " bytes is truncated");
        ByteBuffer slice = in.slice(in.position(), n);
        in.position(in.position() + n);
        try {
            return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT).decode(slice).toString();
        } catch (CharacterCodingException e) {
            throw new ProtocolException("string field is not valid UTF-8");
        }
    }

    private static boolean bool(ByteBuffer in, String what) throws ProtocolException {
        int v = in.get() & 0xFF;
        if (v > 1) throw new ProtocolException(what + " flag must be 0 or 1, got " + v);
        return v == 1;
    }

    private static int nonNegative(int v, String what) throws ProtocolException {
        if (v < 0) throw new ProtocolException(what + " " + v + " is negative");
        return v;
    }

    private static long nonNegative(long v, String what) throws ProtocolException {
        if (v < 0) throw new ProtocolException(what + " " + v + " is negative");
        return v;
    }

    private static int positive(int v, String what) throws ProtocolException {
        if (v <= 0) throw new ProtocolException(what + " must be positive, got " + v);
        return v;
    }

    private static long positive(long v, String what) throws ProtocolException {
        if (v <= 0) throw new ProtocolException(what + " must be positive, got " + v);
        return v;
    }

    /** A growable little-endian byte sink for encoding control bodies. */
    private static final class Sink {
        private ByteBuffer buf = ByteBuffer.allocate(256).order(ByteOrder.LITTLE_ENDIAN);

        private void ensure(int n) {
            if (buf.remaining() < n) {
                int cap = Math.max(buf.capacity() * 2, buf.position() + n);
                ByteBuffer bigger = ByteBuffer.allocate(cap).order(ByteOrder.LITTLE_ENDIAN);
                buf.flip();
                bigger.put(buf);
                buf = bigger;
            }
        }

        void u8(int v) { ensure(1); buf.put((byte) v); }
        void i32(int v) { ensure(4); buf.putInt(v); }
        void i64(long v) { ensure(8); buf.putLong(v); }

        void str(String s) {
            byte[] b = (s == null ? "" : s).getBytes(StandardCharsets.UTF_8);
            if (b.length > Wire.MAX_STRING_BYTES) {
                throw new IllegalArgumentException("string field of " + b.length + " bytes exceeds " + Wire.MAX_STRING_BYTES);
            }
            ensure(2 + b.length);
            buf.putShort((short) b.length).put(b);
        }

        void bytes(byte[] a) {
            ensure(4 + a.length);
            buf.putInt(a.length).put(a);
        }

        void intArray(int[] a) {
            ensure(4 + a.length * 4);
            buf.putInt(a.length);
            buf.asIntBuffer().put(a);
            buf.position(buf.position() + a.length * 4);
        }

        int size() { return buf.position(); }
        byte[] bytes() { return buf.array(); }
    }
}
