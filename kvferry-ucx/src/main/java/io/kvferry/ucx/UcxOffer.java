package io.kvferry.ucx;

import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.protocol.Region;
import io.kvferry.transport.RemoteBuffers;

import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.zip.CRC32C;

/**
 * The {@code ucx} offer a decode sends in HELLO: the UCX worker address of this link and, for every
 * registered buffer, its coordinates, remote address, length, memory type and packed remote key.
 *
 * <p>Format (version 1, strictly little-endian):
 * <pre>
 *   u32 magic 0x5855464B ("KFUX")   u16 version = 1   u16 flags = 0
 *   u8 UCX major  u8 UCX minor  u16 reserved = 0        (the decode's libucp version)
 *   u32 worker address length       bytes
 *   u32 entry count
 *   entry: u8 region  u8 memory type  u16 reserved = 0  u32 component  u32 buffer
 *          u64 address  u64 length  u16 rkey length  bytes
 *   u32 CRC32C of every byte before it
 * </pre>
 * Decoding checks every length against the bytes left before reading, rejects unknown regions,
 * memory types, flags and reserved bits, duplicate buffers, empty or wrapping ranges and trailing
 * bytes, then the checksum. A newer version is {@link Unsupported} (the link falls back to TCP);
 * anything else wrong is {@link Malformed}.
 *
 * <p>Why a checksum: the worker address and the packed rkeys are UCX's own formats, parsed by
 * libucp, which asserts (aborting the process) on a damaged address and reads a packed rkey without
 * knowing its length. The CRC stops accidental damage before UCX sees the bytes; authenticity is
 * the control connection's job (HELLO's token), as for every other HELLO field.
 */
record UcxOffer(int ucxMajor, int ucxMinor, byte[] workerAddress, List<Entry> entries) {
    static final int MAGIC = 0x5855464B;
    static final int VERSION = 1;
    static final int MAX_WORKER_ADDRESS = 64 << 10;
    static final int MAX_RKEY = 16 << 10;
    static final int MAX_ENTRIES = 1 << 16;
    /** Fixed bytes of one entry (everything but the rkey bytes). */
    static final int ENTRY_FIXED = 1 + 1 + 2 + 4 + 4 + 8 + 8 + 2;
    static final int HEADER = 4 + 2 + 2 + 1 + 1 + 2;

    /** One registered decode buffer. */
    record Entry(Region region, int component, int buffer, MemoryType memoryType, long address, long length, byte[] rkey) {}

    /** The bytes are not a well-formed ucx offer. */
    static final class Malformed extends Exception {
        Malformed(String message) {
            super(message);
        }
    }

    /** A well-framed offer this code cannot use (newer version, unknown flags). */
    static final class Unsupported extends Exception {
        Unsupported(String message) {
            super(message);
        }
    }

    byte[] encode() {
        long size = HEADER + 4 + workerAddress.length + 4 + 4;
        for (Entry e : entries) size += ENTRY_FIXED + e.rkey.length;
        if (workerAddress.length == 0 || workerAddress.length > MAX_WORKER_ADDRESS) {
            throw new IllegalArgumentException("worker address of " + workerAddress.length + " bytes");
        }
        if (entries.size() > MAX_ENTRIES) throw new IllegalArgumentException(entries.size() + " buffers; at most " + MAX_ENTRIES);
        ByteBuffer b = ByteBuffer.allocate(Math.toIntExact(size)).order(ByteOrder.LITTLE_ENDIAN);
        b.putInt(MAGIC).putShort((short) VERSION).putShort((short) 0);
        b.put((byte) ucxMajor).put((byte) ucxMinor).putShort((short) 0);
        b.putInt(workerAddress.length).put(workerAddress);
        b.putInt(entries.size());
        for (Entry e : entries) {
            if (e.rkey.length == 0 || e.rkey.length > MAX_RKEY) throw new IllegalArgumentException("rkey of " + e.rkey.length + " bytes");
            b.put((byte) e.region.code()).put((byte) e.memoryType.code()).putShort((short) 0);
            b.putInt(e.component).putInt(e.buffer).putLong(e.address).putLong(e.length);
            b.putShort((short) e.rkey.length).put(e.rkey);
        }
        b.putInt(crc(b.array(), b.position()));
        return b.array();
    }

    static UcxOffer decode(byte[] blob) throws Malformed, Unsupported {
        if (blob == null) throw new Malformed("no offer bytes");
        ByteBuffer b = ByteBuffer.wrap(blob).order(ByteOrder.LITTLE_ENDIAN);
        try {
            int magic = b.getInt();
            if (magic != MAGIC) throw new Malformed("not a ucx offer (magic 0x" + Integer.toHexString(magic) + ")");
            int version = b.getShort() & 0xFFFF;
            int flags = b.getShort() & 0xFFFF;
            if (version != VERSION) {
                throw new Unsupported("ucx offer version " + version + "; this kvferry-ucx understands version " + VERSION);
            }
            if (flags != 0) throw new Unsupported("ucx offer flags 0x" + Integer.toHexString(flags) + " are unknown here");
            int major = b.get() & 0xFF, minor = b.get() & 0xFF;
            int headerReserved = b.getShort() & 0xFFFF;
            if (headerReserved != 0) throw new Malformed("reserved header bits 0x" + Integer.toHexString(headerReserved));
            int addrLen = b.getInt();
            if (addrLen <= 0 || addrLen > MAX_WORKER_ADDRESS || addrLen > b.remaining()) {
                throw new Malformed("worker address length " + Integer.toUnsignedString(addrLen) + " is not in [1, "
                        + Math.min(MAX_WORKER_ADDRESS, b.remaining()) + "]");
            }
            byte[] addr = new byte[addrLen];
            b.get(addr);
            int n = b.getInt();
            if (n < 0 || n > MAX_ENTRIES || (long) n * ENTRY_FIXED + 4 > b.remaining()) {
                throw new Malformed("buffer count " + Integer.toUnsignedString(n) + " does not fit the " + b.remaining()
                        + " bytes left (at most " + MAX_ENTRIES + ")");
            }
            List<Entry> entries = new ArrayList<>(n);
            Set<Long> seen = new HashSet<>();
            for (int i = 0; i < n; i++) {
                if (b.remaining() < ENTRY_FIXED) throw new Malformed("buffer " + i + " is truncated");
                int regionCode = b.get() & 0xFF;
                Region region = null;
                for (Region r : Region.values()) if (r.code() == regionCode) region = r;
                if (region == null) throw new Malformed("buffer " + i + " has unknown region " + regionCode);
                int typeCode = b.get() & 0xFF;
                MemoryType type = MemoryType.fromCode(typeCode);
                if (type == null) throw new Malformed("buffer " + i + " has unknown memory type " + typeCode);
                int reserved = b.getShort() & 0xFFFF;
                if (reserved != 0) throw new Malformed("buffer " + i + " has reserved bits 0x" + Integer.toHexString(reserved));
                int component = b.getInt(), buffer = b.getInt();
                long address = b.getLong(), length = b.getLong();
                int rkeyLen = b.getShort() & 0xFFFF;
                if (component < 0 || buffer < 0) {
                    throw new Malformed("buffer " + i + " has a negative index (" + component + "/" + buffer + ")");
                }
                if (region != Region.STATE && component != 0) {
                    throw new Malformed("buffer " + i + " is " + region + " with component " + component + " (must be 0)");
                }
                if (length <= 0) throw new Malformed(region + " buffer " + component + "/" + buffer + " has length " + length);
                if (Long.compareUnsigned(address, -length) > 0) {
                    throw new Malformed(region + " buffer " + component + "/" + buffer + " [0x" + Long.toHexString(address) + ", +"
                            + length + ") wraps around the address space");
                }
                if (rkeyLen == 0 || rkeyLen > MAX_RKEY || rkeyLen > b.remaining()) {
                    throw new Malformed(region + " buffer " + component + "/" + buffer + " has remote key length " + rkeyLen
                            + " (1.." + Math.min(MAX_RKEY, b.remaining()) + " allowed)");
                }
                byte[] rkey = new byte[rkeyLen];
                b.get(rkey);
                long key = ((long) region.code() << 62) | ((long) component << 31) | buffer;
                if (!seen.add(key)) throw new Malformed(region + " buffer " + component + "/" + buffer + " appears twice");
                entries.add(new Entry(region, component, buffer, type, address, length, rkey));
            }
            int end = b.position();
            int crc = b.getInt();
            if (b.hasRemaining()) throw new Malformed(b.remaining() + " trailing bytes");
            if (crc != crc(blob, end)) throw new Malformed("checksum mismatch (the offer was damaged)");
            return new UcxOffer(major, minor, addr, List.copyOf(entries));
        } catch (BufferUnderflowException e) {
            throw new Malformed("truncated ucx offer (" + blob.length + " bytes)");
        }
    }

    /** The offer's buffers checked against what the decode declared in HELLO (see {@link RemoteBuffers}). */
    static RemoteBuffers buffers(UcxOffer offer, MemoryDescriptor shape, String peer) throws RemoteBuffers.OfferMismatch {
        RemoteBuffers.Builder b = RemoteBuffers.builder(shape, peer);
        for (Entry e : offer.entries) b.add(e.region, e.component, e.buffer, e.length);
        return b.build();
    }

    static int crc(byte[] bytes, int length) {
        CRC32C c = new CRC32C();
        c.update(bytes, 0, length);
        return (int) c.getValue();
    }
}
