package io.kvferry.engine.kv;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * One MLA-style layer's latent cache: {@code [page][token][latent rank + rope dim]} float32, the
 * compressed KV latent then its rope key, as DeepSeek's MLA caches them. The same on every TP rank
 * (replicated), so kvferry copies pages whole ({@code is_mla}). Attention reads it in place: scores
 * against the latent (queries absorbed through the key up-projection) and sums latents by weight
 * (the value up-projection is applied after).
 */
public final class LatentPages {
    final MemorySegment buffer;
    private final int rank, rope, pageSize;
    final long pageBytes;

    LatentPages(MemorySegment buffer, int pageSize, int rank, int rope) {
        this.buffer = buffer;
        this.pageSize = pageSize;
        this.rank = rank;
        this.rope = rope;
        this.pageBytes = (long) pageSize * (rank + rope) * Float.BYTES;
    }

    private long offset(int page, int slot) {
        return page * pageBytes + (long) slot * (rank + rope) * Float.BYTES;
    }

    /** Writes one token's latent ({@code rank} floats) and rope key ({@code rope} floats). */
    public void write(int page, int slot, float[] latent, float[] ropeKey) {
        long o = offset(page, slot);
        MemorySegment.copy(latent, 0, buffer, ValueLayout.JAVA_FLOAT_UNALIGNED, o, rank);
        MemorySegment.copy(ropeKey, 0, buffer, ValueLayout.JAVA_FLOAT_UNALIGNED, o + (long) rank * Float.BYTES, rope);
    }

    /** qLatent · latent + qRope · ropeKey of the token at (page, slot). */
    public float score(int page, int slot, float[] qLatent, float[] qRope, int qRopeOff) {
        long o = offset(page, slot);
        float s = 0;
        for (int i = 0; i < rank; i++) s += qLatent[i] * buffer.get(ValueLayout.JAVA_FLOAT_UNALIGNED, o + (long) i * Float.BYTES);
        long r = o + (long) rank * Float.BYTES;
        float sr = 0;
        for (int i = 0; i < rope; i++) sr += qRope[qRopeOff + i] * buffer.get(ValueLayout.JAVA_FLOAT_UNALIGNED, r + (long) i * Float.BYTES);
        return s + sr;
    }

    /** out[0, rank) += weight × latent of the token at (page, slot). */
    public void addLatent(int page, int slot, float weight, float[] out) {
        long o = offset(page, slot);
        for (int i = 0; i < rank; i++) out[i] += weight * buffer.get(ValueLayout.JAVA_FLOAT_UNALIGNED, o + (long) i * Float.BYTES);
    }

    int pageSize() {
        return pageSize;
    }
}
