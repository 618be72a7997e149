package io.kvferry.engine.kv;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * One layer's K and V pages for a rank's heads: {@code [page][token][head][headSize]} float32, the
 * layout kvferry head-slices (KV pages, and window pages as swa state). Attention writes one token's
 * K and V and reads them back in place.
 */
public final class HeadPages {
    final MemorySegment k, v;
    private final int heads, headSize, pageSize;
    final long pageBytes;

    HeadPages(MemorySegment k, MemorySegment v, int pageSize, int heads, int headSize) {
        this.k = k;
        this.v = v;
        this.pageSize = pageSize;
        this.heads = heads;
        this.headSize = headSize;
        this.pageBytes = (long) pageSize * heads * headSize * Float.BYTES;
    }

    private long offset(int page, int slot, int head) {
        return page * pageBytes + ((long) slot * heads + head) * headSize * Float.BYTES;
    }

    /** Writes one token's K and V of local head {@code head} at (page, slot). */
    public void write(int page, int slot, int head, float[] kSrc, int kOff, float[] vSrc, int vOff) {
        long o = offset(page, slot, head);
        MemorySegment.copy(kSrc, kOff, k, ValueLayout.JAVA_FLOAT_UNALIGNED, o, headSize);
        MemorySegment.copy(vSrc, vOff, v, ValueLayout.JAVA_FLOAT_UNALIGNED, o, headSize);
    }

    /** q · K[page, slot, head] (q at {@code qOff}, headSize floats). */
    public float dotK(int page, int slot, int head, float[] q, int qOff) {
        long o = offset(page, slot, head);
        float s = 0;
        for (int i = 0; i < headSize; i++) s += q[qOff + i] * k.get(ValueLayout.JAVA_FLOAT_UNALIGNED, o + (long) i * Float.BYTES);
        return s;
    }

    /** out += weight × V[page, slot, head]. */
    public void addV(int page, int slot, int head, float weight, float[] out, int outOff) {
        long o = offset(page, slot, head);
        for (int i = 0; i < headSize; i++) out[outOff + i] += weight * v.get(ValueLayout.JAVA_FLOAT_UNALIGNED, o + (long) i * Float.BYTES);
    }

    int pageSize() {
        return pageSize;
    }
}
