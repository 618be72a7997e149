package io.kvferry.protocol;

import io.kvferry.api.ChecksumMode;
import io.kvferry.api.FailureKind;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

/**
 * Strict field readers of the wire format (the decoders' half): every count is checked against the
 * bytes left before an array is allocated, strings must be valid UTF-8 within their limit, flags
 * must be 0 or 1, and each failure names the field.
 */
final class WireReader {
    private WireReader() {}

    static ChecksumMode checksum(int code, String where) throws ProtocolException {
        ChecksumMode m = ChecksumMode.fromCode(code);
        if (m == null) throw new ProtocolException(where + " carries unknown checksum mode " + code);
        return m;
    }

    /** A failure kind byte: 0 exactly when the message reports no failure, else a known kind. */
    static FailureKind failureKind(int code, boolean failure, String where) throws ProtocolException {
        if (!failure) {
            if (code != 0) throw new ProtocolException(where + " without a failure carries failure kind " + code);
            return null;
        }
        FailureKind kind = FailureKind.fromCode(code);
        if (kind == null) throw new ProtocolException(where + " carries unknown failure kind " + code);
        return kind;
    }

    static int count(ByteBuffer in, int minBytesEach, String what) throws ProtocolException {
        int n = in.getInt();
        if (n < 0 || n > Wire.MAX_BUFFERS) throw new ProtocolException(what + " count " + n + " is out of range");
        if ((long) n * minBytesEach > in.remaining()) {
            throw new ProtocolException(what + " count " + n + " does not fit the " + in.remaining() + " bytes left");
        }
        return n;
    }

    static int[] intArray(ByteBuffer in, String what) throws ProtocolException {
        int n = in.getInt();
        if (n < 0 || (long) n * 4 > in.remaining()) {
            throw new ProtocolException(what + " count " + n + " does not fit the " + in.remaining() + " bytes left");
        }
        int[] out = new int[n];
        in.asIntBuffer().get(out);
        in.position(in.position() + n * 4);
        return out;
    }

    static String str(ByteBuffer in) throws ProtocolException {
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

    static byte[] raw(ByteBuffer in, int n) throws ProtocolException {
        if (in.remaining() < n) throw new ProtocolException("truncated: " + n + " bytes expected, " + in.remaining() + " left");
        byte[] out = new byte[n];
        in.get(out);
        return out;
    }

    static boolean bool(ByteBuffer in, String what) throws ProtocolException {
        int v = in.get() & 0xFF;
        if (v > 1) throw new ProtocolException(what + " flag must be 0 or 1, got " + v);
        return v == 1;
    }

    static int nonNegative(int v, String what) throws ProtocolException {
        if (v < 0) throw new ProtocolException(what + " " + v + " is negative");
        return v;
    }

    static long nonNegative(long v, String what) throws ProtocolException {
        if (v < 0) throw new ProtocolException(what + " " + v + " is negative");
        return v;
    }

    static int positive(int v, String what) throws ProtocolException {
        if (v <= 0) throw new ProtocolException(what + " must be positive, got " + v);
        return v;
    }

    static long positive(long v, String what) throws ProtocolException {
        if (v <= 0) throw new ProtocolException(what + " must be positive, got " + v);
        return v;
    }
}
