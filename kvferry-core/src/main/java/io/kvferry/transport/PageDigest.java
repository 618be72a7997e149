package io.kvferry.transport;

import io.kvferry.api.ChecksumMode;
import io.kvferry.api.RoomChoice;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.memory.SegmentCrc;
import io.kvferry.plan.CopyPlan;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.protocol.Region;

import java.lang.foreign.MemorySegment;

/**
 * The digest of a room's bytes as they sit in the decode's items (KV pages, aux rows, state slots),
 * for data paths whose writes the decode does not see one by one (shm, ucx, inproc): the prefill
 * computes it from its source while planning each write, the decode recomputes it from its own
 * memory at Success, and STATUS carries it.
 *
 * <p>Each item the link writes contributes {@code entry(key, crc)}: the CRC32C of the bytes the
 * link writes into that item, in ascending destination order, keyed by (region, component, buffer,
 * item). Entries are added (mod 2^64), so the digest does not depend on how the prefill split the
 * room into chunks, runs or ops. With {@link ChecksumMode#SAMPLED} only items chosen by a hash of
 * (room, key) count — both sides choose the same — and every aux row.
 */
public final class PageDigest {
    private PageDigest() {}

    /** One in this many items is digested in sampled mode. */
    public static final int SAMPLE_ONE_IN = 8;

    /** The key of one destination item. */
    public static long key(Region region, int component, int buffer, long item) {
        return mix(((long) region.code() << 56) ^ ((long) component << 40) ^ ((long) buffer << 20) ^ mix(item));
    }

    /** Whether an item (tcp: a WRITE, keyed by its destination) is digested in this mode. */
    public static boolean sampled(ChecksumMode mode, long room, Region region, long key) {
        return switch (mode) {
            case OFF -> false;
            case FULL -> true;
            case SAMPLED -> region == Region.AUX || Long.remainderUnsigned(mix(room ^ key), SAMPLE_ONE_IN) == 0;
        };
    }

    /** What one item adds to a digest. */
    public static long entry(long key, int crc) {
        return mix(key + 0x9E3779B97F4A7C15L * ((crc & 0xFFFFFFFFL) + 1));
    }

    /**
     * Prefill side: the digest of what {@code plan} writes, read from {@code source} (before the
     * write, so anything that changes the bytes on their way is caught).
     *
     * @param destination the decode's layout (item sizes per region and buffer)
     */
    public static long ofPlan(CopyPlan plan, RegisteredMemory source, MemoryDescriptor destination, long room,
                              ChecksumMode mode, SegmentCrc crc) {
        if (mode == ChecksumMode.OFF) return 0;
        long digest = 0;
        long current = 0;
        boolean open = false, take = false;
        crc.reset();
        for (int op = 0; op < plan.size(); op++) {
            Region region = plan.region(op);
            int component = plan.component(op), dstBuffer = plan.dstBuffer(op);
            long item = itemLen(destination, region, component, dstBuffer);
            MemorySegment src = source.segmentOrNull(region, component, plan.buffer(op));
            if (src == null || item <= 0) throw new IllegalArgumentException("op " + op + " names no buffer on one side");
            long pieces = plan.pieces(op), piece = plan.pieceLength(op);
            for (long i = 0; i < pieces; i++) {
                long dst = plan.dstOffset(op) + i * plan.dstStride(op);
                long from = plan.srcOffset(op) + i * plan.srcStride(op);
                long left = piece;
                while (left > 0) {
                    long index = dst / item;
                    long n = Math.min(left, (index + 1) * item - dst);
                    long k = key(region, component, dstBuffer, index);
                    if (!open || k != current) {
                        if (open && take) digest += entry(current, crc.value());
                        current = k;
                        open = true;
                        take = sampled(mode, room, region, k);
                        crc.reset();
                    }
                    if (take) crc.update(src, from, n);
                    dst += n;
                    from += n;
                    left -= n;
                }
            }
        }
        if (open && take) digest += entry(current, crc.value());
        return digest;
    }

    /**
     * Decode side: the entry of one item, if sampled: the CRC32C of bytes {@code [offset, offset +
     * length)} of each {@code unit}-byte unit of the item at {@code itemIndex} (0 when not sampled).
     */
    public static long ofItem(MemorySegment segment, Region region, int component, int buffer, long itemIndex, long itemLen,
                              long unit, long offset, long length, long room, ChecksumMode mode, SegmentCrc crc) {
        long k = key(region, component, buffer, itemIndex);
        if (length == 0 || !sampled(mode, room, region, k)) return 0;
        crc.reset();
        long base = itemIndex * itemLen;
        if (offset == 0 && length == unit) {
            crc.update(segment, base, itemLen);
        } else {
            for (long u = 0, units = itemLen / unit; u < units; u++) crc.update(segment, base + u * unit + offset, length);
        }
        return entry(k, crc.value());
    }

    private static long itemLen(MemoryDescriptor d, Region region, int component, int buffer) {
        return switch (region) {
            case KV -> buffer < d.kvItemLens().length ? d.kvItemLens()[buffer] : -1;
            case AUX -> buffer < d.auxItemLens().length ? d.auxItemLens()[buffer] : -1;
            case STATE -> component < d.states().size() && buffer < d.states().get(component).itemLens().length
                    ? d.states().get(component).itemLens()[buffer] : -1;
        };
    }

    private static long mix(long z) {
        return RoomChoice.mix(z);
    }
}
