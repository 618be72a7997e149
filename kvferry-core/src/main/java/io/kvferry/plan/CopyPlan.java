package io.kvferry.plan;

import io.kvferry.protocol.Region;

import java.util.Arrays;

/**
 * The ordered list of byte copies for one chunk to one destination: each op moves {@code length}
 * bytes from {@code srcOffset} of a local buffer to {@code dstOffset} of the peer's buffer with
 * the same (region, component, buffer) coordinates. Built by {@link TransferPlanner}; immutable
 * once built; struct-of-arrays so it holds no object per op.
 */
public final class CopyPlan {
    private Region[] region;
    private int[] component;
    private int[] buffer;
    private long[] srcOffset;
    private long[] dstOffset;
    private long[] length;
    private int size;

    CopyPlan(int expected) {
        int cap = Math.max(4, expected);
        region = new Region[cap];
        component = new int[cap];
        buffer = new int[cap];
        srcOffset = new long[cap];
        dstOffset = new long[cap];
        length = new long[cap];
    }

    /**
     * The largest single op: longer runs are split, so one op never pins a destination for long
     * (clear() waits for landing ops) and fits a ByteBuffer view.
     */
    public static final long MAX_OP_BYTES = 4L << 20;

    void add(Region r, int comp, int buf, long src, long dst, long len) {
        while (len > MAX_OP_BYTES) {
            addOne(r, comp, buf, src, dst, MAX_OP_BYTES);
            src += MAX_OP_BYTES;
            dst += MAX_OP_BYTES;
            len -= MAX_OP_BYTES;
        }
        addOne(r, comp, buf, src, dst, len);
    }

    private void addOne(Region r, int comp, int buf, long src, long dst, long len) {
        if (len == 0) return;
        if (size == region.length) {
            int cap = size * 2;
            region = Arrays.copyOf(region, cap);
            component = Arrays.copyOf(component, cap);
            buffer = Arrays.copyOf(buffer, cap);
            srcOffset = Arrays.copyOf(srcOffset, cap);
            dstOffset = Arrays.copyOf(dstOffset, cap);
            length = Arrays.copyOf(length, cap);
        }
        region[size] = r;
        component[size] = comp;
        buffer[size] = buf;
        srcOffset[size] = src;
        dstOffset[size] = dst;
        length[size] = len;
        size++;
    }

    public int size() { return size; }
    public Region region(int op) { return region[op]; }
    public int component(int op) { return component[op]; }
    public int buffer(int op) { return buffer[op]; }
    public long srcOffset(int op) { return srcOffset[op]; }
    public long dstOffset(int op) { return dstOffset[op]; }
    public long length(int op) { return length[op]; }

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
            sb.append(region[i]).append(':').append(component[i]).append('/').append(buffer[i]).append(' ')
                    .append(srcOffset[i]).append("->").append(dstOffset[i]).append(" x").append(length[i]);
        }
        return sb.append(']').toString();
    }
}
