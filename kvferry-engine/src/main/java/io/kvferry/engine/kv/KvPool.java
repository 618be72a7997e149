package io.kvferry.engine.kv;

import io.kvferry.api.KVArgs;
import io.kvferry.engine.model.LlamaConfig;
import io.kvferry.memory.SharedArena;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * The KV cache of one engine shard (one TP rank of one PP stage), in the very memory kvferry
 * registers: attention writes K and V into these pages and reads them in place, and the transfer
 * layer moves the same pages. One K and one V buffer per local layer (SGLang's MHA order: all K, then
 * all V); a page holds {@code pageSize} tokens × this rank's KV heads × head size float32, token-major
 * ([token][head][dim], the layout kvferry's head slicing expects).
 *
 * <p>Aux (metadata) buffers, one row per in-flight request, as SGLang's metadata buffers: the first
 * output token and its logprob, the first token's logits, and the bootstrap room last (kvferry's
 * metadata gate). Page ids and aux rows are the same on every shard of an engine (one allocator per
 * engine, {@link PageAllocator}). The memory is written by the engine's owner thread only; the
 * transfer layer reads (prefill) or writes (decode) pages that the owner has handed to a room.
 */
public final class KvPool implements AutoCloseable {
    /** Aux buffer 0: int32 first output token, float32 its logprob, int32 prompt tokens, int32 reserved. */
    public static final int AUX_TOKEN = 0;
    public static final long TOKEN_ROW_BYTES = 16;
    /** Aux buffer 1: float32 logits of the first output token (vocab entries). */
    public static final int AUX_LOGITS = 1;
    /** Aux buffer 2: the bootstrap room, int64 (last, as SGLang puts it). */
    public static final int AUX_ROOM = 2;

    private final Arena arena;
    private final LlamaConfig model;
    public final int pageSize, pages, auxRows, firstLayer, layers, kvHeads, headSize;
    private final long pageBytes;
    private final MemorySegment[] k, v;
    private final MemorySegment tokenRows, logitRows, roomRows;

    /**
     * @param kvHeads      KV heads this rank holds
     * @param firstLayer   first global layer of this stage; {@code layers} of them
     * @param sharedMemory allocate in one shared-memory file so a same-host prefill can write it (shm)
     */
    public KvPool(LlamaConfig model, int pageSize, int pages, int auxRows, int firstLayer, int layers, int kvHeads,
                  boolean sharedMemory, String label) {
        if (pageSize < 1 || pages < 1 || auxRows < 1) {
            throw new IllegalArgumentException("page size, pages and aux rows must be positive: " + pageSize + ", " + pages + ", " + auxRows);
        }
        this.model = model;
        this.pageSize = pageSize;
        this.pages = pages;
        this.auxRows = auxRows;
        this.firstLayer = firstLayer;
        this.layers = layers;
        this.kvHeads = kvHeads;
        this.headSize = model.headSize();
        this.pageBytes = (long) pageSize * kvHeads * headSize * Float.BYTES;
        long logitBytes = (long) model.vocabSize() * Float.BYTES;
        long capacity = 2L * layers * (pageBytes * pages + 64) + (TOKEN_ROW_BYTES + logitBytes + 8) * auxRows + 3 * 64 + 4096;
        this.arena = sharedMemory ? SharedArena.open(label, capacity) : Arena.ofShared();
        k = new MemorySegment[layers];
        v = new MemorySegment[layers];
        for (int i = 0; i < layers; i++) k[i] = arena.allocate(pageBytes * pages, 64);
        for (int i = 0; i < layers; i++) v[i] = arena.allocate(pageBytes * pages, 64);
        tokenRows = arena.allocate(TOKEN_ROW_BYTES * auxRows, 64);
        logitRows = arena.allocate(logitBytes * auxRows, 64);
        roomRows = arena.allocate(8L * auxRows, 64);
    }

    /** The KVArgs that register this pool with kvferry. */
    public KVArgs kvArgs(int engineRank, int ppRank) {
        KVArgs a = new KVArgs();
        a.engineRank = engineRank;
        a.pageSize = pageSize;
        a.kvCacheDtypeStr = "float32";
        a.kvHeadNum = kvHeads;
        a.totalKvHeadNum = model.kvHeads();
        for (MemorySegment b : k) a.addKvBuffer(b, pageBytes);
        for (MemorySegment b : v) a.addKvBuffer(b, pageBytes);
        for (int i = 0; i < 2 * layers; i++) a.kvLayerIds.add(firstLayer + i % layers);
        a.ppRank = ppRank;
        a.prefillStartLayer = firstLayer;
        a.prefillEndLayer = firstLayer + layers;
        a.addAuxBuffer(tokenRows, TOKEN_ROW_BYTES);
        a.addAuxBuffer(logitRows, (long) model.vocabSize() * Float.BYTES);
        a.addAuxBuffer(roomRows, 8);
        a.auxRoomBuffer = AUX_ROOM;
        return a;
    }

    /** Bytes a request of {@code pages} pages occupies here: its K and V pages of every local layer and its aux row. */
    public long requestBytes(int pages) {
        return 2L * layers * pages * pageBytes + TOKEN_ROW_BYTES + (long) model.vocabSize() * Float.BYTES + 8;
    }

    public long pageBytes() {
        return pageBytes;
    }

    /** Byte offset of (token slot, local head) in a page buffer: [page][token][head][dim]. */
    private long offset(int page, int slot, int head) {
        return page * pageBytes + ((long) slot * kvHeads + head) * headSize * Float.BYTES;
    }

    /** Writes one token's K and V of local head {@code head} at (page, slot) of local layer {@code layer}. */
    public void writeKv(int layer, int page, int slot, int head, float[] kSrc, int kOff, float[] vSrc, int vOff) {
        long o = offset(page, slot, head);
        MemorySegment.copy(kSrc, kOff, k[layer], ValueLayout.JAVA_FLOAT_UNALIGNED, o, headSize);
        MemorySegment.copy(vSrc, vOff, v[layer], ValueLayout.JAVA_FLOAT_UNALIGNED, o, headSize);
    }

    /** q · K[pos] for local head {@code head} (q at {@code qOff}, headSize floats). */
    public float dotK(int layer, int page, int slot, int head, float[] q, int qOff) {
        MemorySegment seg = k[layer];
        long o = offset(page, slot, head);
        float s = 0;
        for (int i = 0; i < headSize; i++) s += q[qOff + i] * seg.get(ValueLayout.JAVA_FLOAT_UNALIGNED, o + (long) i * Float.BYTES);
        return s;
    }

    /** out += weight × V[pos] for local head {@code head}. */
    public void addV(int layer, int page, int slot, int head, float weight, float[] out, int outOff) {
        MemorySegment seg = v[layer];
        long o = offset(page, slot, head);
        for (int i = 0; i < headSize; i++) out[outOff + i] += weight * seg.get(ValueLayout.JAVA_FLOAT_UNALIGNED, o + (long) i * Float.BYTES);
    }

    /** Copies one page of every local layer's K and V to another pool's page (the colocated hand-over). */
    public MemorySegment kPage(int layer, int page) {
        return k[layer].asSlice(page * pageBytes, pageBytes);
    }

    public MemorySegment vPage(int layer, int page) {
        return v[layer].asSlice(page * pageBytes, pageBytes);
    }

    public void writeFirstToken(int row, int token, float logprob, int promptTokens, float[] logits, long room) {
        long o = row * TOKEN_ROW_BYTES;
        tokenRows.set(ValueLayout.JAVA_INT_UNALIGNED, o, token);
        tokenRows.set(ValueLayout.JAVA_FLOAT_UNALIGNED, o + 4, logprob);
        tokenRows.set(ValueLayout.JAVA_INT_UNALIGNED, o + 8, promptTokens);
        MemorySegment.copy(logits, 0, logitRows, ValueLayout.JAVA_FLOAT_UNALIGNED, (long) row * logits.length * Float.BYTES, logits.length);
        roomRows.set(ValueLayout.JAVA_LONG_UNALIGNED, row * 8L, room);
    }

    public int firstToken(int row) {
        return tokenRows.get(ValueLayout.JAVA_INT_UNALIGNED, row * TOKEN_ROW_BYTES);
    }

    public float firstLogprob(int row) {
        return tokenRows.get(ValueLayout.JAVA_FLOAT_UNALIGNED, row * TOKEN_ROW_BYTES + 4);
    }

    public int promptTokens(int row) {
        return tokenRows.get(ValueLayout.JAVA_INT_UNALIGNED, row * TOKEN_ROW_BYTES + 8);
    }

    public float[] firstLogits(int row) {
        float[] out = new float[model.vocabSize()];
        MemorySegment.copy(logitRows, ValueLayout.JAVA_FLOAT_UNALIGNED, (long) row * out.length * Float.BYTES, out, 0, out.length);
        return out;
    }

    public long room(int row) {
        return roomRows.get(ValueLayout.JAVA_LONG_UNALIGNED, row * 8L);
    }

    @Override
    public void close() {
        arena.close();
    }
}
