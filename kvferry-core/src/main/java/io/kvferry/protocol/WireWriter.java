package io.kvferry.protocol;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;

/** A growable little-endian byte sink for encoding control bodies (the encoders' half of the wire format). */
final class WireWriter {
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

    void raw(byte[] a) {
        ensure(a.length);
        buf.put(a);
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
