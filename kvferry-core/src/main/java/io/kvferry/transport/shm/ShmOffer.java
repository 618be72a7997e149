package io.kvferry.transport.shm;

import io.kvferry.protocol.ProtocolException;
import io.kvferry.protocol.Region;

import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * The {@code shm} offer a decode sends in HELLO (little-endian): which host it runs on, the fence
 * file and slot this link uses, the nonce proving the prefill sees the same file, and where each
 * registered buffer lives in shared memory. Decoding is strict; a bad offer never maps anything.
 */
record ShmOffer(String hostId, String fencePath, long nonceHi, long nonceLo, int slot, List<Entry> entries) {
    static final int MAGIC = 0x4D485346; // "FSHM"
    static final int MAX_ENTRIES = 1 << 16;
    static final int MAX_PATH = 512;

    /** One registered buffer: its coordinates and its file window. */
    record Entry(Region region, int component, int buffer, String path, long offset, long length) {}

    byte[] encode() {
        int size = 4 + 2 + hostId.length() * 3 + 2 + fencePath.length() * 3 + 16 + 4 + 4;
        for (Entry e : entries) size += 1 + 4 + 4 + 2 + e.path.length() * 3 + 16;
        ByteBuffer b = ByteBuffer.allocate(size).order(ByteOrder.LITTLE_ENDIAN);
        b.putInt(MAGIC);
        str(b, hostId);
        str(b, fencePath);
        b.putLong(nonceHi).putLong(nonceLo).putInt(slot).putInt(entries.size());
        for (Entry e : entries) {
            b.put((byte) e.region.code()).putInt(e.component).putInt(e.buffer);
            str(b, e.path);
            b.putLong(e.offset).putLong(e.length);
        }
        byte[] out = new byte[b.position()];
        b.flip().get(out);
        return out;
    }

    static ShmOffer decode(byte[] blob) throws IllegalArgumentException {
        ByteBuffer b = ByteBuffer.wrap(blob).order(ByteOrder.LITTLE_ENDIAN);
        try {
            if (b.getInt() != MAGIC) throw new IllegalArgumentException("not an shm offer (bad magic)");
            String host = str(b);
            String fence = str(b);
            long hi = b.getLong(), lo = b.getLong();
            int slot = b.getInt();
            int n = b.getInt();
            if (slot < 0) throw new IllegalArgumentException("fence slot " + slot + " is negative");
            if (n < 0 || n > MAX_ENTRIES || (long) n * 31 > b.remaining()) {
                throw new IllegalArgumentException("entry count " + n + " does not fit the " + b.remaining() + " bytes left");
            }
            List<Entry> entries = new ArrayList<>(n);
            for (int i = 0; i < n; i++) {
                int code = b.get() & 0xFF;
                Region region;
                try {
                    region = Region.fromCode(code);
                } catch (ProtocolException e) {
                    throw new IllegalArgumentException(e.getMessage());
                }
                int component = b.getInt(), buffer = b.getInt();
                String path = str(b);
                long offset = b.getLong(), length = b.getLong();
                if (component < 0 || buffer < 0 || offset < 0 || length < 0) {
                    throw new IllegalArgumentException("entry " + i + " has a negative field");
                }
                entries.add(new Entry(region, component, buffer, path, offset, length));
            }
            if (b.hasRemaining()) throw new IllegalArgumentException(b.remaining() + " trailing bytes");
            return new ShmOffer(host, fence, hi, lo, slot, entries);
        } catch (BufferUnderflowException e) {
            throw new IllegalArgumentException("truncated shm offer");
        }
    }

    private static void str(ByteBuffer b, String s) {
        byte[] bytes = s.getBytes(StandardCharsets.UTF_8);
        if (bytes.length > MAX_PATH) throw new IllegalArgumentException("string of " + bytes.length + " bytes is too long");
        b.putShort((short) bytes.length).put(bytes);
    }

    /**
     * A string of the offer: valid UTF-8 without NUL (the strings are file paths and a boot id; Java cannot
     * even make a {@code Path} of one with a NUL, and an {@code InvalidPathException} is not a refusal).
     */
    private static String str(ByteBuffer b) {
        int n = b.getShort() & 0xFFFF;
        if (n > MAX_PATH || n > b.remaining()) throw new IllegalArgumentException("string of " + n + " bytes does not fit");
        ByteBuffer bytes = b.slice(b.position(), n);
        b.position(b.position() + n);
        String s;
        try {
            s = StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT).decode(bytes).toString();
        } catch (CharacterCodingException e) {
            throw new IllegalArgumentException("a string of " + n + " bytes is not valid UTF-8");
        }
        if (s.indexOf('\0') >= 0) throw new IllegalArgumentException("a string holds a NUL character");
        return s;
    }
}
