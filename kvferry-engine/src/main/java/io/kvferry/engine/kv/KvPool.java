package io.kvferry.engine.kv;

import com.sun.management.OperatingSystemMXBean;
import io.kvferry.api.KVArgs;
import io.kvferry.api.StateType;
import io.kvferry.engine.model.LlamaConfig;
import io.kvferry.engine.model.Model;
import io.kvferry.memory.SharedArena;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.List;

/**
 * The caches of one engine shard (one TP rank of one PP stage), in the very memory kvferry
 * registers: attention writes into these pages and reads them in place, and the transfer layer moves
 * the same memory. Per local layer, by its {@link io.kvferry.engine.model.LayerKind}:
 * <ul>
 * <li>attention: a K and a V buffer of {@code pages} pages ({@link HeadPages}), registered as KV
 * buffers in SGLang's MHA order (all K, then all V);
 * <li>latent: one latent buffer of {@code pages} pages ({@link LatentPages}), registered as a KV
 * buffer, replicated on every TP rank (the manager is created {@code is_mla});
 * <li>window: a K and a V buffer in the window pool ({@link HeadPages}): each request owns a ring of
 * {@link Model#windowPagesPerRequest} window pages, pages {@code [row·R, (row+1)·R)} for aux row
 * {@code row}; registered as one {@code swa} state component whose indices are the window's pages;
 * <li>recurrent: a conv and a scan state tensor with one slot per aux row ({@link RecurrentState}),
 * registered as one {@code mamba} state component whose index is the request's slot (its aux row).
 * </ul>
 * Per-request fixed-size state is indexed by the aux row, so it needs no allocator of its own.
 *
 * <p>Aux (metadata) buffers, one row per in-flight request, as SGLang's metadata buffers: the first
 * output token and its logprob, the first token's logits, and the bootstrap room last (kvferry's
 * metadata gate). Page ids and aux rows are the same on every shard of an engine (one allocator per
 * engine, {@link PageAllocator}). The memory is written by the engine's owner thread only; the
 * transfer layer reads (prefill) or writes (decode) what the owner has handed to a room.
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
    private final Model model;
    public final int pageSize, pages, auxRows, firstLayer, layers, kvHeads, headSize, windowRing;
    private final int[] indexOfLayer; // local layer -> index among the local layers of its kind
    private final List<HeadPages> attention = new ArrayList<>(), window = new ArrayList<>();
    private final List<LatentPages> latent = new ArrayList<>();
    private final List<RecurrentState> recurrent = new ArrayList<>();
    private final List<Integer> attentionIds = new ArrayList<>(), latentIds = new ArrayList<>(), windowIds = new ArrayList<>(),
            recurrentIds = new ArrayList<>();
    private final MemorySegment tokenRows, logitRows, roomRows;

    /**
     * @param tp           the engine's TP size: this shard holds kvHeads/tp KV heads and inner/tp recurrent channels
     * @param firstLayer   first global layer of this stage; {@code layers} of them
     * @param sharedMemory allocate in one shared-memory file so a same-host prefill can write it (shm)
     */
    public KvPool(Model model, int pageSize, int pages, int auxRows, int firstLayer, int layers, int tp,
                  boolean sharedMemory, String label) {
        if (pageSize < 1 || pages < 1 || auxRows < 1) {
            throw new IllegalArgumentException("page size, pages and aux rows must be positive: " + pageSize + ", " + pages + ", " + auxRows);
        }
        LlamaConfig c = model.config;
        this.model = model;
        this.pageSize = pageSize;
        this.pages = pages;
        this.auxRows = auxRows;
        this.firstLayer = firstLayer;
        this.layers = layers;
        this.kvHeads = c.kvHeads() / tp;
        this.headSize = c.headSize();
        this.windowRing = model.windowPagesPerRequest(pageSize);
        int channels = model.inner / tp;
        long headPage = (long) pageSize * kvHeads * headSize * Float.BYTES;
        long latentPage = (long) pageSize * (model.latentRank + model.ropeDim) * Float.BYTES;
        long windowPages = (long) auxRows * windowRing;
        long convSlot = (long) (model.convKernel - 1) * channels * Float.BYTES, scanSlot = (long) channels * model.stateSize * Float.BYTES;
        long logitBytes = (long) c.vocabSize() * Float.BYTES;
        long capacity = (TOKEN_ROW_BYTES + logitBytes + 8) * auxRows + 3 * 64 + 4096;
        for (int l = firstLayer; l < firstLayer + layers; l++) {
            capacity += switch (model.kind(l)) {
                case ATTENTION -> 2 * (headPage * pages + 64);
                case LATENT -> latentPage * pages + 64;
                case WINDOW -> 2 * (headPage * windowPages + 64);
                case RECURRENT -> (convSlot + scanSlot) * auxRows + 2 * 64;
            };
        }
        // An engine's pool is sized by its flags: a size the machine cannot hold is the user's error, named, and
        // the memory already taken is given back (an OutOfMemoryError would leave the caller's servers running).
        long physical = physicalMemory();
        if (physical > 0 && capacity > physical) {
            throw tooLarge(label, capacity, pages, pageSize, auxRows, "the machine has " + physical + " bytes of memory", null);
        }
        Arena a = null;
        try {
            a = sharedMemory ? SharedArena.open(label, capacity) : Arena.ofShared();
            this.arena = a;
            indexOfLayer = new int[layers];
            for (int i = 0; i < layers; i++) {
                int l = firstLayer + i;
                switch (model.kind(l)) {
                    case ATTENTION -> {
                        indexOfLayer[i] = attention.size();
                        attention.add(new HeadPages(arena.allocate(headPage * pages, 64), arena.allocate(headPage * pages, 64), pageSize,
                                kvHeads, headSize));
                        attentionIds.add(l);
                    }
                    case LATENT -> {
                        indexOfLayer[i] = latent.size();
                        latent.add(new LatentPages(arena.allocate(latentPage * pages, 64), pageSize, model.latentRank, model.ropeDim));
                        latentIds.add(l);
                    }
                    case WINDOW -> {
                        indexOfLayer[i] = window.size();
                        window.add(new HeadPages(arena.allocate(headPage * windowPages, 64), arena.allocate(headPage * windowPages, 64),
                                pageSize, kvHeads, headSize));
                        windowIds.add(l);
                    }
                    case RECURRENT -> {
                        indexOfLayer[i] = recurrent.size();
                        recurrent.add(new RecurrentState(arena.allocate(convSlot * auxRows, 64), arena.allocate(scanSlot * auxRows, 64),
                                model.convKernel - 1, channels, model.stateSize));
                        recurrentIds.add(l);
                    }
                }
            }
            tokenRows = arena.allocate(TOKEN_ROW_BYTES * auxRows, 64);
            logitRows = arena.allocate(logitBytes * auxRows, 64);
            roomRows = arena.allocate(8L * auxRows, 64);
        } catch (OutOfMemoryError e) {
            if (a != null) a.close();
            throw tooLarge(label, capacity, pages, pageSize, auxRows, "the allocation failed: " + e.getMessage(), e);
        }
    }

    private static IllegalArgumentException tooLarge(String label, long capacity, int pages, int pageSize, int auxRows, String why,
                                                     Throwable cause) {
        return new IllegalArgumentException("the KV pool " + label + " needs " + capacity + " bytes (" + pages + " pages of " + pageSize
                + " tokens, " + auxRows + " request rows) but " + why + ": lower --pages, --page-size or --max-requests",
                cause);
    }

    /** Physical memory of this machine in bytes, or -1 where the JVM cannot tell. */
    private static long physicalMemory() {
        return ManagementFactory.getOperatingSystemMXBean() instanceof OperatingSystemMXBean os ? os.getTotalMemorySize() : -1;
    }

    /** The KVArgs that register this pool with kvferry. */
    public KVArgs kvArgs(int engineRank, int ppRank) {
        KVArgs a = new KVArgs();
        a.engineRank = engineRank;
        a.pageSize = pageSize;
        a.kvCacheDtypeStr = "float32";
        boolean mla = !latent.isEmpty();
        a.kvHeadNum = mla ? 1 : kvHeads;
        a.totalKvHeadNum = mla ? 1 : model.config.kvHeads();
        for (HeadPages h : attention) a.addKvBuffer(h.k, h.pageBytes);
        for (HeadPages h : attention) a.addKvBuffer(h.v, h.pageBytes);
        a.kvLayerIds.addAll(attentionIds);
        a.kvLayerIds.addAll(attentionIds);
        for (LatentPages p : latent) a.addKvBuffer(p.buffer, p.pageBytes);
        a.kvLayerIds.addAll(latentIds);
        a.ppRank = ppRank;
        a.prefillStartLayer = firstLayer;
        a.prefillEndLayer = firstLayer + layers;
        a.addAuxBuffer(tokenRows, TOKEN_ROW_BYTES);
        a.addAuxBuffer(logitRows, (long) model.config.vocabSize() * Float.BYTES);
        a.addAuxBuffer(roomRows, 8);
        a.auxRoomBuffer = AUX_ROOM;
        if (!window.isEmpty()) {
            List<MemorySegment> tensors = new ArrayList<>();
            List<Long> items = new ArrayList<>();
            List<Integer> dims = new ArrayList<>(), outer = new ArrayList<>(), ids = new ArrayList<>();
            for (int i = 0; i < window.size(); i++) {
                for (MemorySegment t : List.of(window.get(i).k, window.get(i).v)) {
                    tensors.add(t);
                    items.add(window.get(i).pageBytes);
                    dims.add(kvHeads); // TP-sharded entries per token: this rank's heads
                    outer.add(pageSize); // rows before the head axis: the page's tokens
                    ids.add(windowIds.get(i));
                }
            }
            addState(a, StateType.SWA, tensors, items, dims, outer, ids);
        }
        if (!recurrent.isEmpty()) {
            List<MemorySegment> tensors = new ArrayList<>();
            List<Long> items = new ArrayList<>();
            List<Integer> dims = new ArrayList<>(), outer = new ArrayList<>(), ids = new ArrayList<>();
            for (int i = 0; i < recurrent.size(); i++) {
                RecurrentState r = recurrent.get(i);
                tensors.add(r.conv);
                items.add(r.convSlotBytes);
                dims.add(r.channels);
                outer.add(r.rows);
                tensors.add(r.scan);
                items.add(r.scanSlotBytes);
                dims.add(r.channels);
                outer.add(1);
                ids.add(recurrentIds.get(i));
                ids.add(recurrentIds.get(i));
            }
            addState(a, StateType.MAMBA, tensors, items, dims, outer, ids);
        }
        return a;
    }

    private static void addState(KVArgs a, StateType type, List<MemorySegment> tensors, List<Long> items, List<Integer> dims,
                                 List<Integer> outer, List<Integer> ids) {
        a.addStateComponent(type, tensors, items);
        a.stateDimPerTensor.add(dims);
        a.stateSliceOuterCounts.add(outer);
        a.stateLayerIds.add(ids);
    }

    /** Whether this pool holds latent (MLA) buffers: its manager must be created {@code is_mla}. */
    public boolean latent() {
        return !latent.isEmpty();
    }

    /** The window pool page of logical page {@code logicalPage} of the request on aux row {@code row}. */
    public int windowPage(int row, int logicalPage) {
        return row * windowRing + logicalPage % windowRing;
    }

    /**
     * The state indices of a request on aux row {@code row} whose prompt has {@code promptTokens}
     * tokens, per registered component: swa, the window pages holding positions
     * [promptTokens - window + 1, promptTokens) (what the first decode step attends besides itself);
     * mamba, the slot {@code row}. Null when this pool registers no state. Prefill and decode compute
     * them alike, so their lists are equally long.
     */
    public int[][] stateIndices(int row, int promptTokens) {
        List<int[]> out = new ArrayList<>();
        if (!window.isEmpty()) {
            int first = Math.max(0, promptTokens - model.window + 1) / pageSize, last = (promptTokens - 1) / pageSize;
            int[] w = new int[last - first + 1];
            for (int p = first; p <= last; p++) w[p - first] = windowPage(row, p);
            out.add(w);
        }
        if (!recurrent.isEmpty()) out.add(new int[]{row});
        return out.isEmpty() ? null : out.toArray(int[][]::new);
    }

    /** Starts a request on aux row {@code row}: its recurrent state is zero (window pages are written before they are read). */
    public void resetState(int row) {
        for (RecurrentState r : recurrent) r.clear(row);
    }

    /** Whether this pool holds recurrent state (a request's state is then more than its pages). */
    public boolean hasRecurrentState() {
        return !recurrent.isEmpty();
    }

    /**
     * A copy of the recurrent state of the request on aux row {@code row}, every recurrent layer of this pool (the prefill's
     * prefix cache keeps it with the page where it was taken: a later request resumes from it, {@link #restoreRecurrent}).
     */
    public byte[] snapshotRecurrent(int row) {
        long n = 0;
        for (RecurrentState r : recurrent) n += r.slotBytes();
        byte[] out = new byte[Math.toIntExact(n)];
        int o = 0;
        for (RecurrentState r : recurrent) {
            r.save(row, out, o);
            o += (int) r.slotBytes();
        }
        return out;
    }

    /** Sets the recurrent state of aux row {@code row} to a {@link #snapshotRecurrent} of this pool. */
    public void restoreRecurrent(int row, byte[] snapshot) {
        int o = 0;
        for (RecurrentState r : recurrent) {
            r.restore(row, snapshot, o);
            o += (int) r.slotBytes();
        }
        if (o != snapshot.length) throw new IllegalArgumentException("a snapshot of " + snapshot.length + " bytes for " + o + " bytes of state");
    }

    /** Bytes a request moves to this shard: {@code kvPages} pages of every KV buffer, its state and its aux row. */
    public long transferBytes(int kvPages, int promptTokens) {
        long b = TOKEN_ROW_BYTES + (long) model.config.vocabSize() * Float.BYTES + 8;
        for (HeadPages h : attention) b += 2L * kvPages * h.pageBytes;
        for (LatentPages p : latent) b += (long) kvPages * p.pageBytes;
        int[][] state = stateIndices(0, promptTokens);
        if (!window.isEmpty()) for (HeadPages h : window) b += 2L * state[0].length * h.pageBytes;
        for (RecurrentState r : recurrent) b += r.convSlotBytes + r.scanSlotBytes;
        return b;
    }

    /** The local layer's attention pages; {@code layer} is local to this stage. */
    public HeadPages attention(int layer) {
        return attention.get(indexOfLayer[layer]);
    }

    public HeadPages window(int layer) {
        return window.get(indexOfLayer[layer]);
    }

    public LatentPages latent(int layer) {
        return latent.get(indexOfLayer[layer]);
    }

    public RecurrentState recurrent(int layer) {
        return recurrent.get(indexOfLayer[layer]);
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
        float[] out = new float[model.config.vocabSize()];
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
