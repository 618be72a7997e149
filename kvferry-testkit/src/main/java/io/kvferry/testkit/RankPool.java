package io.kvferry.testkit;


import io.kvferry.api.KVArgs;

import io.kvferry.memory.HugePageArena;
import io.kvferry.memory.SharedArena;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;

/**
 * The memory of one bench rank: KV buffers, aux (metadata) rows and state slots, with simple
 * allocators. By default ({@link PageLayout#FRAGMENTED}) pages come off a free list shuffled in small
 * blocks, so page lists are fragmented and differ between prefill and decode, as in a busy server;
 * with {@link PageLayout#CONTIGUOUS} each request gets a slot of consecutive pages. Owned by one
 * driver thread.
 */
public final class RankPool implements AutoCloseable {
    /**
     * Aux buffers shaped like SGLang's metadata buffers (§4.9), row bytes of each: output_ids,
     * cached_tokens, token logprob val/idx (16 × 4 B), top-logprobs val/idx (128 × 4 B), EAGLE
     * topk_p (16 × f32), topk_index (16 × i64), hidden_states (4096 × bf16), bootstrap_room (8 × i64) last.
     */
    static final long[] AUX_ROW_BYTES = {64, 64, 64, 64, 512, 512, 64, 128, 8192, 64};
    /** The aux buffer whose row starts with the request's bootstrap_room (int64), as in SGLang. */
    static final int ROOM_BUFFER = AUX_ROW_BYTES.length - 1;

    /** Private memory, or a {@link SharedArena} when a same-host peer should write it directly (shm, auto). */
    private final Arena arena;
    final ModelShape shape;
    final int pageSize;
    final int tp;
    final int rank;
    public final long pageBytes;
    public final MemorySegment[] kv;
    final MemorySegment[] aux;
    final MemorySegment[] state;
    final int pages;
    final int auxRows;
    private final ArrayDeque<Integer> freePages = new ArrayDeque<>();
    private final ArrayDeque<Integer> freeRows = new ArrayDeque<>();
    /** How pages are handed out; with CONTIGUOUS, {@link #freeSlots} replaces {@link #freePages}. */
    private final PageLayout layout;
    /** CONTIGUOUS: pages per slot (the most one request needs); slot s holds pages [s × slotPages, (s + 1) × slotPages). */
    private final int slotPages;
    private final ArrayDeque<Integer> freeSlots = new ArrayDeque<>();
    private final int slots;

    /** Pipeline stage of this pool and the layers it holds: [firstLayer, firstLayer + layers). */
    final int ppRank;
    final int firstLayer;
    final int layers;

    public RankPool(ModelShape shape, int pageSize, int tp, int rank, int pages, int auxRows, long seed) {
        this(shape, pageSize, tp, rank, 1, 0, pages, auxRows, seed);
    }

    /** A pool for TP rank {@code rank} of pipeline stage {@code ppRank} of {@code ppSize}. */
    public RankPool(ModelShape shape, int pageSize, int tp, int rank, int ppSize, int ppRank, int pages, int auxRows,
                    long seed) {
        this(shape, pageSize, tp, rank, ppSize, ppRank, pages, auxRows, seed, false);
    }

    /** Whether pools for this transfer backend go in shared memory (so the shm data path can be used). */
    public static boolean sharedFor(String transport) {
        return "shm".equals(transport) || "auto".equals(transport);
    }

    /** @param sharedMemory allocate every buffer in one shared-memory file (see {@link SharedArena}) */
    public RankPool(ModelShape shape, int pageSize, int tp, int rank, int ppSize, int ppRank, int pages, int auxRows,
                    long seed, boolean sharedMemory) {
        this(shape, pageSize, tp, rank, ppSize, ppRank, pages, auxRows, seed, sharedMemory, PageLayout.FRAGMENTED, 1);
    }

    /**
     * @param layout    how pages are handed out
     * @param slotPages CONTIGUOUS: the most pages one request takes (the slot size); ignored for FRAGMENTED
     */
    public RankPool(ModelShape shape, int pageSize, int tp, int rank, int ppSize, int ppRank, int pages, int auxRows,
                    long seed, boolean sharedMemory, PageLayout layout, int slotPages) {
        this(shape, pageSize, tp, rank, ppSize, ppRank, pages, auxRows, seed, sharedMemory, layout, slotPages, false);
    }

    /** @param hugePages private memory from a {@link HugePageArena} (buffers of 2 MiB and more on transparent huge pages) */
    public RankPool(ModelShape shape, int pageSize, int tp, int rank, int ppSize, int ppRank, int pages, int auxRows,
                    long seed, boolean sharedMemory, PageLayout layout, int slotPages, boolean hugePages) {
        if (layout == PageLayout.CONTIGUOUS && (slotPages < 1 || slotPages > pages)) {
            throw new IllegalArgumentException("contiguous pages need a slot of 1.." + pages + " pages, got " + slotPages);
        }
        this.layout = layout;
        this.slotPages = layout == PageLayout.CONTIGUOUS ? slotPages : 1;
        this.slots = layout == PageLayout.CONTIGUOUS ? pages / slotPages : 0;
        for (int sl = 0; sl < slots; sl++) freeSlots.add(sl);
        this.arena = sharedMemory
                ? SharedArena.open("pool-tp" + rank + "-pp" + ppRank, capacity(shape, pageSize, tp, ppSize, pages, auxRows))
                : hugePages ? new HugePageArena() : Arena.ofShared();
        this.ppRank = ppRank;
        this.layers = shape.layers() / ppSize;
        this.firstLayer = ppRank * layers;
        this.shape = shape;
        this.pageSize = pageSize;
        this.tp = tp;
        this.rank = rank;
        this.pages = pages;
        this.auxRows = auxRows;
        this.pageBytes = shape.pageBytes(pageSize, tp);
        kv = new MemorySegment[shape.mla() ? layers : 2 * layers];
        for (int i = 0; i < kv.length; i++) kv[i] = arena.allocate(pageBytes * pages, 64);
        aux = new MemorySegment[AUX_ROW_BYTES.length];
        for (int i = 0; i < aux.length; i++) aux[i] = arena.allocate(AUX_ROW_BYTES[i] * auxRows, 64);
        state = new MemorySegment[shape.stateBytes().size()];
        for (int i = 0; i < state.length; i++) state[i] = arena.allocate(stateSlotBytes(i) * auxRows, 64);
        // Blocks of 1..4 contiguous pages in random order: fragmented, but with some runs to coalesce.
        Random rnd = new Random(seed);
        List<int[]> blocks = new ArrayList<>();
        for (int p = 0; p < pages; ) {
            int len = Math.min(pages - p, 1 + rnd.nextInt(4));
            blocks.add(new int[]{p, len});
            p += len;
        }
        Collections.shuffle(blocks, rnd);
        if (layout == PageLayout.FRAGMENTED) for (int[] b : blocks) for (int i = 0; i < b[1]; i++) freePages.add(b[0] + i);
        for (int r = 0; r < auxRows; r++) freeRows.add(r);
    }

    /** The KVArgs registering this pool. */
    public KVArgs kvArgs(int engineRank) {
        KVArgs args = new KVArgs();
        args.engineRank = engineRank;
        args.pageSize = pageSize;
        args.kvCacheDtypeStr = "bf16";
        args.kvHeadNum = shape.headsPerRank(tp);
        args.totalKvHeadNum = shape.mla() ? 1 : shape.kvHeads();
        for (MemorySegment b : kv) args.addKvBuffer(b, pageBytes);
        for (int i = 0; i < kv.length; i++) args.kvLayerIds.add(firstLayer + i % layers);
        args.ppRank = ppRank;
        args.prefillStartLayer = firstLayer;
        args.prefillEndLayer = firstLayer + layers;
        for (int i = 0; i < aux.length; i++) args.addAuxBuffer(aux[i], AUX_ROW_BYTES[i]);
        args.auxRoomBuffer = ROOM_BUFFER; // SGLang's metadata gate: bootstrap_room is the last metadata buffer
        if (state.length > 0) {
            List<Long> items = new ArrayList<>();
            List<Integer> dims = new ArrayList<>(), outer = new ArrayList<>();
            for (int t = 0; t < state.length; t++) {
                items.add(stateSlotBytes(t));
                dims.add(STATE_ENTRIES / tp);
                outer.add(1);
            }
            args.addStateComponent(shape.stateType(), List.of(state), items);
            args.stateDimPerTensor.add(dims);
            args.stateSliceOuterCounts.add(outer);
        }
        return args;
    }

    public boolean hasState() {
        return state.length > 0;
    }

    /** Pages (contiguous: slots) and rows handed out and not returned (0 once every request concluded and was released). */
    public int outstanding() {
        int taken = layout == PageLayout.CONTIGUOUS ? slots - freeSlots.size() : pages - freePages.size();
        return taken + (auxRows - freeRows.size());
    }

    public PageLayout layout() {
        return layout;
    }

    public boolean canAllocate(int n) {
        if (freeRows.isEmpty()) return false;
        if (layout == PageLayout.CONTIGUOUS) return n == 0 || (n <= slotPages && !freeSlots.isEmpty());
        return freePages.size() >= n;
    }

    public int[] allocatePages(int n) {
        if (layout == PageLayout.CONTIGUOUS) {
            if (n == 0) return new int[0];
            if (n > slotPages) throw new IllegalStateException("a request of " + n + " pages exceeds the slot of " + slotPages);
            Integer slot = freeSlots.poll();
            if (slot == null) throw new IllegalStateException("pool exhausted: all " + slots + " page slots in use");
            int[] out = new int[n];
            for (int i = 0; i < n; i++) out[i] = slot * slotPages + i;
            return out;
        }
        if (freePages.size() < n) throw new IllegalStateException("pool exhausted: need " + n + " pages, " + freePages.size() + " free");
        int[] out = new int[n];
        for (int i = 0; i < n; i++) out[i] = freePages.poll();
        return out;
    }

    public void freePages(int[] ps) {
        if (layout == PageLayout.CONTIGUOUS) {
            if (ps.length > 0) freeSlots.add(ps[0] / slotPages); // a slot's pages always start at its first page
            return;
        }
        for (int p : ps) freePages.add(p);
    }

    /** Rows double as state slots: one per in-flight request. */
    public int allocateRow() {
        Integer r = freeRows.poll();
        if (r == null) throw new IllegalStateException("no free aux row");
        return r;
    }

    public void freeRow(int row) {
        freeRows.add(row);
    }

    /**
     * Mamba-like state: a slot is one row of {@value #STATE_ENTRIES} entries sharded over TP, so a
     * rank's slot is the model's slot bytes / TP and the entries it holds are [rank × n, (rank+1) × n).
     */
    static final int STATE_ENTRIES = 64;

    /** Bytes every buffer of such a pool takes, with alignment slack. */
    public static long capacity(ModelShape shape, int pageSize, int tp, int ppSize, int pages, int auxRows) {
        int layers = shape.layers() / ppSize;
        long bytes = (shape.mla() ? layers : 2L * layers) * (shape.pageBytes(pageSize, tp) * pages + 64);
        for (long row : AUX_ROW_BYTES) bytes += row * auxRows + 64;
        for (long s : shape.stateBytes()) bytes += (s + 64) * auxRows + 64;
        return bytes + 4096;
    }

    public long stateSlotBytes(int tensor) {
        return shape.stateBytes().get(tensor) / tp;
    }

    public long stateEntryBytes(int tensor) {
        return shape.stateBytes().get(tensor) / STATE_ENTRIES;
    }

    /** Global state entries this rank's slot holds, in order. */
    public int[] stateEntries() {
        int n = STATE_ENTRIES / tp;
        int[] out = new int[n];
        for (int i = 0; i < n; i++) out[i] = rank * n + i;
        return out;
    }

    /** The full model's index of local KV buffer {@code i} ([K_0..K_L-1, V_0..V_L-1], or one per layer for MLA). */
    public int globalBuffer(int i) {
        int layer = firstLayer + i % layers;
        return shape.mla() ? layer : (i / layers) * shape.layers() + layer;
    }

    /** Global head ids of this rank's local head slots. */
    public int[] globalHeads() {
        return shape.globalHeads(tp, rank);
    }

    public long maxItemBytes() {
        long m = pageBytes;
        for (long a : AUX_ROW_BYTES) m = Math.max(m, a);
        for (long s : shape.stateBytes()) m = Math.max(m, s);
        return m;
    }

    public MemorySegment page(int buffer, int page) {
        return kv[buffer].asSlice(page * pageBytes, pageBytes);
    }

    public MemorySegment auxRow(int buffer, int row) {
        return aux[buffer].asSlice(row * AUX_ROW_BYTES[buffer], AUX_ROW_BYTES[buffer]);
    }

    public MemorySegment stateSlot(int tensor, int slot) {
        long b = stateSlotBytes(tensor);
        return state[tensor].asSlice(slot * b, b);
    }

    /** Bytes of one request: KV pages + aux row + state slot. */
    public long requestBytes(int numPages) {
        long b = (long) numPages * pageBytes * kv.length;
        for (long a : AUX_ROW_BYTES) b += a;
        for (int t = 0; t < state.length; t++) b += stateSlotBytes(t);
        return b;
    }

    @Override
    public void close() {
        arena.close();
    }
}
