package io.kvferry.plan;

import io.kvferry.protocol.Region;
import io.kvferry.protocol.Wire;

import java.util.Arrays;

/**
 * The ordered list of byte copies for one chunk to one destination: each op moves {@code length}
 * bytes from {@code srcOffset} of a local buffer to {@code dstOffset} of the peer's buffer with
 * the same (region, component, buffer) coordinates. Built by {@link TransferPlanner}; not changed
 * once built, except that a transfer worker's {@linkplain #reusable() reusable} plan is {@link #reset}
 * and rebuilt for each chunk it sends (so planning allocates nothing once its arrays have grown);
 * struct-of-arrays so it holds no object per op.
 */
public final class CopyPlan {
    private Region[] region;
    private int[] component;
    private int[] buffer;
    private int[] dstBuffer;
    private long[] srcOffset;
    private long[] dstOffset;
    private long[] length;
    private long[] pieceLength;
    private long[] srcStride;
    private long[] dstStride;
    private int size;

    /** A throwaway plan for validating a layout without keeping its ops. */
    public static CopyPlan probe() {
        return new CopyPlan(1);
    }

    /** An empty plan to be rebuilt over and over by one thread (a transfer worker's): see {@link #reset}. */
    public static CopyPlan reusable() {
        return new CopyPlan(64);
    }

    /** Empties the plan, keeping its arrays. */
    public void reset() {
        size = 0;
        nextDstBuffer = -1;
    }

    CopyPlan(int expected) {
        int cap = Math.max(4, expected);
        region = new Region[cap];
        component = new int[cap];
        buffer = new int[cap];
        dstBuffer = new int[cap];
        srcOffset = new long[cap];
        dstOffset = new long[cap];
        length = new long[cap];
        pieceLength = new long[cap];
        srcStride = new long[cap];
        dstStride = new long[cap];
    }

    /**
     * The largest single op: longer runs are split, so one op never pins a destination for long
     * (clear() waits for landing ops) and fits a ByteBuffer view.
     */
    public static final long MAX_OP_BYTES = Wire.MAX_STRIDED_WRITE_BYTES;

    /** Destination buffer for the following adds; -1 means "same index as the source buffer". */
    private int nextDstBuffer = -1;
    private int targetBuffer;

    void targetBuffer(int dst) {
        nextDstBuffer = dst;
    }

    /**
     * Adds {@code items} consecutive whole items of {@code item} bytes, contiguous on both sides (a
     * run of KV pages, state slots or an aux row): ops of as many whole items as fit one, or, for an
     * item larger than an op, one op per {@linkplain Granules granule}.
     */
    void addItems(Region r, int comp, int buf, long src, long dst, long item, long items) {
        addContiguous(r, comp, buf, src, dst, item, 1, items);
    }

    /** As {@link #addItems}, each item being {@code units} units of {@code unit} bytes (the cuts follow {@link Granules}). */
    private void addContiguous(Region r, int comp, int buf, long src, long dst, long unit, long units, long items) {
        long item = unit * units, granule = Granules.granuleBytes(unit, units, true);
        if (granule == item) {
            long perOp = Math.max(1, MAX_OP_BYTES / item);
            for (long done = 0; done < items; done += perOp) {
                long n = Math.min(perOp, items - done);
                addOne(r, comp, buf, src + done * item, dst + done * item, n * item);
            }
            return;
        }
        for (long i = 0; i < items; i++) {
            for (long at = 0; at < item; at += granule) {
                addOne(r, comp, buf, src + i * item + at, dst + i * item + at, Math.min(granule, item - at));
            }
        }
    }

    private void addOne(Region r, int comp, int buf, long src, long dst, long len) {
        addStrided(r, comp, buf, src, dst, len, len, len, len);
    }

    /**
     * Adds {@code items} items of {@code piecesPerItem} pieces of {@code piece} bytes each: piece i
     * moves from {@code src + i*srcStride} to {@code dst + i*dstStride}. Cut where {@link Granules}
     * says: ops of whole items when an item's pieces fit one op, else one op per granule of an item.
     *
     * @throws PlanException when one piece that is not contiguous on both sides is larger than an op
     */
    void addPieces(Region r, int comp, int buf, long src, long dst, long piece, long piecesPerItem, long items, long srcStride,
                   long dstStride) {
        if (piece == srcStride && piece == dstStride) {
            addContiguous(r, comp, buf, src, dst, piece, piecesPerItem, items);
            return;
        }
        if (piece > MAX_OP_BYTES) {
            throw new PlanException("a strided piece of " + piece + " bytes is larger than the largest op (" + MAX_OP_BYTES + " bytes)");
        }
        long itemPayload = piece * piecesPerItem, granule = Granules.granuleBytes(piece, piecesPerItem, piece == dstStride);
        if (granule == itemPayload) {
            // Whole items fit an op: ops run across items.
            long perOp = Math.max(1, MAX_OP_BYTES / itemPayload) * piecesPerItem;
            addPieceRange(r, comp, buf, src, dst, piece, srcStride, dstStride, 0, piecesPerItem * items, perOp);
        } else {
            for (long i = 0; i < items; i++) {
                addPieceRange(r, comp, buf, src, dst, piece, srcStride, dstStride, i * piecesPerItem, (i + 1) * piecesPerItem,
                        granule / piece);
            }
        }
    }

    /** Pieces {@code [from, to)} in ops of at most {@code perOp} pieces. */
    private void addPieceRange(Region r, int comp, int buf, long src, long dst, long piece, long srcStride, long dstStride, long from,
                               long to, long perOp) {
        for (long done = from; done < to; done += perOp) {
            long n = Math.min(perOp, to - done);
            addStrided(r, comp, buf, src + done * srcStride, dst + done * dstStride, n * piece, piece, srcStride, dstStride);
        }
    }

    private void addStrided(Region r, int comp, int buf, long src, long dst, long len, long piece, long sStride, long dStride) {
        if (len == 0) return;
        targetBuffer = nextDstBuffer < 0 ? buf : nextDstBuffer;
        if (size == region.length) {
            int cap = size * 2;
            region = Arrays.copyOf(region, cap);
            component = Arrays.copyOf(component, cap);
            buffer = Arrays.copyOf(buffer, cap);
            dstBuffer = Arrays.copyOf(dstBuffer, cap);
            srcOffset = Arrays.copyOf(srcOffset, cap);
            dstOffset = Arrays.copyOf(dstOffset, cap);
            length = Arrays.copyOf(length, cap);
            pieceLength = Arrays.copyOf(pieceLength, cap);
            srcStride = Arrays.copyOf(srcStride, cap);
            dstStride = Arrays.copyOf(dstStride, cap);
        }
        region[size] = r;
        component[size] = comp;
        buffer[size] = buf;
        dstBuffer[size] = targetBuffer;
        srcOffset[size] = src;
        dstOffset[size] = dst;
        length[size] = len;
        pieceLength[size] = piece;
        srcStride[size] = sStride;
        dstStride[size] = dStride;
        size++;
    }

    public int size() { return size; }
    public Region region(int op) { return region[op]; }
    public int component(int op) { return component[op]; }
    /** The source buffer of the op. */
    public int buffer(int op) { return buffer[op]; }
    /** The destination buffer (differs from {@link #buffer} when buffers pair by layer id, e.g. under PP). */
    public int dstBuffer(int op) { return dstBuffer[op]; }
    public long srcOffset(int op) { return srcOffset[op]; }
    public long dstOffset(int op) { return dstOffset[op]; }
    /** Payload bytes of the op (all pieces). */
    public long length(int op) { return length[op]; }
    /** Bytes of one piece; equals {@link #length} for a contiguous op. */
    public long pieceLength(int op) { return pieceLength[op]; }
    public long srcStride(int op) { return srcStride[op]; }
    public long dstStride(int op) { return dstStride[op]; }
    public boolean strided(int op) { return pieceLength[op] != length[op]; }
    public long pieces(int op) { return length[op] / pieceLength[op]; }
    /** Bytes from the first piece's start to the last piece's end, at the source. */
    public long srcSpan(int op) { return strided(op) ? (pieces(op) - 1) * srcStride[op] + pieceLength[op] : length[op]; }
    /** Bytes from the first piece's start to the last piece's end, at the destination. */
    public long dstSpan(int op) { return strided(op) ? (pieces(op) - 1) * dstStride[op] + pieceLength[op] : length[op]; }

    public long totalBytes() {
        long t = 0;
        for (int i = 0; i < size; i++) t += length[i];
        return t;
    }

    @Override
    public String toString() {
        StringBuilder sb = new StringBuilder("CopyPlan[");
        for (int i = 0; i < size; i++) {
            if (i > 0) sb.append(", ");
            sb.append(region[i]).append(':').append(component[i]).append('/').append(buffer[i]);
            if (dstBuffer[i] != buffer[i]) sb.append("->").append(dstBuffer[i]);
            sb.append(' ')
                    .append(srcOffset[i]).append("->").append(dstOffset[i]).append(" x").append(length[i]);
            if (pieceLength[i] != length[i]) {
                sb.append(" (pieces of ").append(pieceLength[i]).append(", strides ").append(srcStride[i]).append('/')
                        .append(dstStride[i]).append(')');
            }
        }
        return sb.append(']').toString();
    }
}
