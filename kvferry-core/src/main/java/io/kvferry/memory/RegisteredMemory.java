package io.kvferry.memory;

import io.kvferry.api.KVArgs;
import io.kvferry.api.StateType;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.protocol.Region;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;

/**
 * An immutable, validated snapshot of the buffers a rank registered through {@link KVArgs}.
 * Every lookup is bounds-checked; nothing outside these segments is ever read or written.
 */
public final class RegisteredMemory {
    private final MemorySegment[] kv;
    private final long[] kvItemLens;
    private final int[] kvLayerIds;
    private final MemorySegment[] aux;
    private final long[] auxItemLens;
    private final List<StateType> stateTypes;
    private final MemorySegment[][] state;
    private final long[][] stateItemLens;
    private final int auxRoomBuffer;
    /** Per state component, per tensor: TP-sharded entries per row and rows before the slice axis (0 = unknown). */
    private final int[][] stateDims;
    private final int[][] stateOuter;

    private RegisteredMemory(MemorySegment[] kv, long[] kvItemLens, int[] kvLayerIds, MemorySegment[] aux,
                             long[] auxItemLens, List<StateType> stateTypes, MemorySegment[][] state, long[][] stateItemLens,
                             int auxRoomBuffer) {
        this.kv = kv;
        this.kvItemLens = kvItemLens;
        this.kvLayerIds = kvLayerIds;
        this.aux = aux;
        this.auxItemLens = auxItemLens;
        this.stateTypes = stateTypes;
        this.state = state;
        this.stateItemLens = stateItemLens;
        this.auxRoomBuffer = auxRoomBuffer;
        this.stateDims = new int[state.length][];
        this.stateOuter = new int[state.length][];
    }

    /** Validates {@code args} (native memory, positive item lengths, consistent list sizes) and snapshots it. */
    public static RegisteredMemory from(KVArgs args) {
        if (args.kvData.size() != args.kvItemLens.size()) {
            throw new IllegalArgumentException("KVArgs has " + args.kvData.size() + " KV buffers but "
                    + args.kvItemLens.size() + " kv_item_lens");
        }
        if (!args.kvLayerIds.isEmpty() && args.kvLayerIds.size() != args.kvData.size()) {
            throw new IllegalArgumentException("KVArgs has " + args.kvData.size() + " KV buffers but "
                    + args.kvLayerIds.size() + " kv_layer_ids");
        }
        if (args.pageSize < 1) throw new IllegalArgumentException("page_size must be >= 1, got " + args.pageSize);
        MemorySegment[] kv = new MemorySegment[args.kvData.size()];
        long[] kvItem = new long[kv.length];
        int[] layers = new int[kv.length];
        for (int i = 0; i < kv.length; i++) {
            kv[i] = check(args.kvData.get(i), args.kvItemLens.get(i), "KV buffer " + i);
            kvItem[i] = args.kvItemLens.get(i);
            Integer layer = args.kvLayerIds.isEmpty() ? Integer.valueOf(i) : args.kvLayerIds.get(i);
            if (layer == null) throw new IllegalArgumentException("kv_layer_ids[" + i + "] is null");
            layers[i] = layer;
        }
        if (args.auxData.size() != args.auxItemLens.size()) {
            throw new IllegalArgumentException("KVArgs has " + args.auxData.size() + " aux buffers but "
                    + args.auxItemLens.size() + " aux_item_lens");
        }
        MemorySegment[] aux = new MemorySegment[args.auxData.size()];
        long[] auxItem = new long[aux.length];
        for (int i = 0; i < aux.length; i++) {
            aux[i] = check(args.auxData.get(i), args.auxItemLens.get(i), "aux buffer " + i);
            auxItem[i] = args.auxItemLens.get(i);
        }
        int components = args.stateTypes.size();
        if (args.stateData.size() != components || args.stateItemLens.size() != components) {
            throw new IllegalArgumentException("KVArgs has " + components + " state types but " + args.stateData.size()
                    + " state_data lists and " + args.stateItemLens.size() + " state_item_lens lists");
        }
        MemorySegment[][] state = new MemorySegment[components][];
        long[][] stateItem = new long[components][];
        for (int c = 0; c < components; c++) {
            List<MemorySegment> tensors = args.stateData.get(c);
            List<Long> items = args.stateItemLens.get(c);
            if (args.stateTypes.get(c) == null) throw new IllegalArgumentException("state component " + c + " has no state type (null)");
            if (tensors == null || items == null) {
                throw new IllegalArgumentException("state component " + c + " has " + (tensors == null ? "no tensor list" : "no item length list")
                        + " (null)");
            }
            if (tensors.size() != items.size()) {
                throw new IllegalArgumentException("state component " + c + " has " + tensors.size() + " tensors but "
                        + items.size() + " item lengths");
            }
            state[c] = new MemorySegment[tensors.size()];
            stateItem[c] = new long[tensors.size()];
            for (int t = 0; t < tensors.size(); t++) {
                state[c][t] = check(tensors.get(t), items.get(t), "state component " + c + " tensor " + t);
                stateItem[c][t] = items.get(t);
            }
        }
        if (args.auxRoomBuffer != -1 && (args.auxRoomBuffer < 0 || args.auxRoomBuffer >= aux.length || auxItem[args.auxRoomBuffer] < 8)) {
            throw new IllegalArgumentException("auxRoomBuffer " + args.auxRoomBuffer + " must name an aux buffer with rows of at least 8 bytes"
                    + " (there are " + aux.length + " aux buffers)");
        }
        refuseOverlaps(kv, aux, state);
        RegisteredMemory m = new RegisteredMemory(kv, kvItem, layers, aux, auxItem, List.copyOf(args.stateTypes), state,
                stateItem, args.auxRoomBuffer);
        for (int c = 0; c < components; c++) {
            m.stateDims[c] = ints(args.stateDimPerTensor, c, state[c].length, "state_dim_per_tensor");
            m.stateOuter[c] = ints(args.stateSliceOuterCounts, c, state[c].length, "state_slice_outer_counts");
        }
        return m;
    }

    /** A registered buffer's bytes, for the overlap check. */
    private record Extent(long start, long end, String name) {}

    /**
     * Refuses two registered buffers that share bytes, naming both: each buffer is a destination of its own
     * (a page of one, a row of another), and the write gate accounts per buffer, so a write meant for one would
     * land in the other's pages silently. Sorted by start, each buffer must begin at or after the furthest end so far.
     */
    private static void refuseOverlaps(MemorySegment[] kv, MemorySegment[] aux, MemorySegment[][] state) {
        List<Extent> all = new ArrayList<>();
        for (int i = 0; i < kv.length; i++) all.add(extent(kv[i], "KV buffer " + i));
        for (int i = 0; i < aux.length; i++) all.add(extent(aux[i], "aux buffer " + i));
        for (int c = 0; c < state.length; c++) {
            for (int t = 0; t < state[c].length; t++) all.add(extent(state[c][t], "state component " + c + " tensor " + t));
        }
        all.sort((a, b) -> Long.compareUnsigned(a.start(), b.start()));
        Extent furthest = null;
        for (Extent e : all) {
            if (furthest != null && Long.compareUnsigned(e.start(), furthest.end()) < 0) {
                throw new IllegalArgumentException(e.name() + " [0x" + Long.toHexString(e.start()) + ", 0x" + Long.toHexString(e.end())
                        + ") overlaps " + furthest.name() + " [0x" + Long.toHexString(furthest.start()) + ", 0x"
                        + Long.toHexString(furthest.end()) + "): registered buffers must not share bytes (a write meant for one "
                        + "would land in the other)");
            }
            if (furthest == null || Long.compareUnsigned(e.end(), furthest.end()) > 0) furthest = e;
        }
    }

    private static Extent extent(MemorySegment seg, String name) {
        return new Extent(seg.address(), seg.address() + seg.byteSize(), name);
    }

    private static int[] ints(List<List<Integer>> lists, int component, int tensors, String what) {
        int[] out = new int[tensors];
        if (component >= lists.size() || lists.get(component) == null) return out;
        List<Integer> l = lists.get(component);
        if (l.size() != tensors) {
            throw new IllegalArgumentException(what + " of state component " + component + " has " + l.size()
                    + " entries for " + tensors + " tensors");
        }
        for (int t = 0; t < tensors; t++) out[t] = l.get(t) == null ? 0 : l.get(t);
        return out;
    }

    private static MemorySegment check(MemorySegment seg, Long itemLen, String what) {
        if (seg == null) throw new IllegalArgumentException(what + " is null");
        if (!seg.isNative()) {
            throw new IllegalArgumentException(what + " is heap memory; transfers need native memory (Arena or raw address)");
        }
        // A null pointer (an engine's buffer not allocated yet): any copy, CRC or digest over it from Java is a SIGSEGV
        // that takes the whole process down.
        if (seg.address() == 0) throw new IllegalArgumentException(what + " is at address 0 (a null pointer)");
        if (itemLen == null || itemLen <= 0) throw new IllegalArgumentException(what + " has item length " + itemLen + "; must be > 0");
        if (seg.byteSize() < itemLen) {
            throw new IllegalArgumentException(what + " is " + seg.byteSize() + " bytes, smaller than one item of " + itemLen);
        }
        return seg;
    }

    public int kvBufferCount() { return kv.length; }
    /** TP-sharded entries per row of a state tensor (0 when not given). */
    public int stateDim(int component, int tensor) { return stateDims[component][tensor]; }
    /** Rows before the slice axis of a state tensor (0 when not given). */
    public int stateOuterCount(int component, int tensor) { return stateOuter[component][tensor]; }
    /** The aux buffer holding the bootstrap_room column, or -1 when the metadata gate is off. */
    public int auxRoomBuffer() { return auxRoomBuffer; }
    public long[] kvItemLens() { return kvItemLens.clone(); }
    /** Global layer id of each KV buffer (its index when none were given). */
    public int[] kvLayerIds() { return kvLayerIds.clone(); }
    public long kvItemLen(int buffer) { return kvItemLens[buffer]; }
    public int auxBufferCount() { return aux.length; }
    public long[] auxItemLens() { return auxItemLens.clone(); }
    public long auxItemLen(int buffer) { return auxItemLens[buffer]; }
    public List<StateType> stateTypes() { return stateTypes; }
    public int stateComponentCount() { return state.length; }
    public int stateTensorCount(int component) { return state[component].length; }
    public long[][] stateItemLens() {
        long[][] copy = new long[stateItemLens.length][];
        for (int i = 0; i < copy.length; i++) copy[i] = stateItemLens[i].clone();
        return copy;
    }

    /** Whole pages every KV buffer can hold: the valid page ids are [0, kvPageCount). */
    public long kvPageCount() {
        long n = Long.MAX_VALUE;
        for (int i = 0; i < kv.length; i++) n = Math.min(n, kv[i].byteSize() / kvItemLens[i]);
        return kv.length == 0 ? 0 : n;
    }

    /** Rows every aux buffer can hold. */
    public long auxRowCount() {
        long n = Long.MAX_VALUE;
        for (int i = 0; i < aux.length; i++) n = Math.min(n, aux[i].byteSize() / auxItemLens[i]);
        return aux.length == 0 ? 0 : n;
    }

    /** Indices every tensor of a state component can hold. */
    public long stateIndexCount(int component) {
        long n = Long.MAX_VALUE;
        for (int t = 0; t < state[component].length; t++) {
            n = Math.min(n, state[component][t].byteSize() / stateItemLens[component][t]);
        }
        return state[component].length == 0 ? 0 : n;
    }

    /** Item length for (region, component, buffer), or -1 when no such buffer exists. */
    public long itemLen(Region region, int component, int buffer) {
        MemorySegment seg = segmentOrNull(region, component, buffer);
        if (seg == null) return -1;
        return switch (region) {
            case KV -> kvItemLens[buffer];
            case AUX -> auxItemLens[buffer];
            case STATE -> stateItemLens[component][buffer];
        };
    }

    /** The registered segment at (region, component, buffer), or null when no such buffer exists. */
    public MemorySegment segmentOrNull(Region region, int component, int buffer) {
        return switch (region) {
            case KV -> component == 0 && buffer >= 0 && buffer < kv.length ? kv[buffer] : null;
            case AUX -> component == 0 && buffer >= 0 && buffer < aux.length ? aux[buffer] : null;
            case STATE -> component >= 0 && component < state.length && buffer >= 0 && buffer < state[component].length
                    ? state[component][buffer] : null;
        };
    }

    /**
     * The slice [offset, offset+length) of a registered buffer.
     *
     * @throws IndexOutOfBoundsException naming the buffer and its size when the range falls outside it
     */
    public MemorySegment slice(Region region, int component, int buffer, long offset, long length) {
        MemorySegment seg = segmentOrNull(region, component, buffer);
        if (seg == null) {
            throw new IndexOutOfBoundsException("no registered " + region + " buffer " + component + "/" + buffer);
        }
        if (offset < 0 || length < 0 || offset > seg.byteSize() || length > seg.byteSize() - offset) {
            throw new IndexOutOfBoundsException("range [" + offset + ", +" + length + ") is outside " + region
                    + " buffer " + component + "/" + buffer + " of " + seg.byteSize() + " bytes");
        }
        return seg.asSlice(offset, length);
    }

    /** A thread that owns no confined arena: a segment it may not access is confined to one thread. */
    private static final Thread ANOTHER_THREAD = Thread.ofPlatform().unstarted(() -> { });

    /**
     * Refuses a buffer only its allocating thread may access (a confined arena's), for a manager: transfers move
     * its bytes on kvferry's threads. Registered, it failed each room at its first chunk (prefill) or killed the
     * link reader landing in it, failing every room of the link as "Lost connection" (decode).
     *
     * @return this
     */
    public RegisteredMemory requireAccessFromAnyThread() {
        forEachBuffer((region, component, buffer, segment) -> {
            if (segment.isAccessibleBy(ANOTHER_THREAD)) return;
            String what = switch (region) {
                case KV -> "KV buffer " + buffer;
                case AUX -> "aux buffer " + buffer;
                case STATE -> "state component " + component + " tensor " + buffer;
            };
            throw new IllegalArgumentException(what + " is confined to the thread that allocated it; kvferry's threads move"
                    + " its bytes: allocate it from a shared, global or automatic arena, or add it by raw address");
        });
        return this;
    }

    /** Visits every registered buffer: KV, then aux, then each state component's tensors. */
    public interface BufferVisitor<E extends Exception> {
        void visit(Region region, int component, int buffer, MemorySegment segment) throws E;
    }

    /** Calls {@code visitor} for every registered buffer, in region, component, buffer order. */
    public <E extends Exception> void forEachBuffer(BufferVisitor<E> visitor) throws E {
        for (int b = 0; b < kv.length; b++) visitor.visit(Region.KV, 0, b, kv[b]);
        for (int b = 0; b < aux.length; b++) visitor.visit(Region.AUX, 0, b, aux[b]);
        for (int c = 0; c < state.length; c++) {
            for (int t = 0; t < state[c].length; t++) visitor.visit(Region.STATE, c, t, state[c][t]);
        }
    }

    /** The shape sent to the peer in HELLO (lengths and item lengths, never addresses). */
    public MemoryDescriptor describe() {
        long[] kvLen = new long[kv.length];
        for (int i = 0; i < kv.length; i++) kvLen[i] = kv[i].byteSize();
        long[] auxLen = new long[aux.length];
        for (int i = 0; i < aux.length; i++) auxLen[i] = aux[i].byteSize();
        List<MemoryDescriptor.StateDescriptor> states = new ArrayList<>();
        for (int c = 0; c < state.length; c++) {
            long[] len = new long[state[c].length];
            for (int t = 0; t < len.length; t++) len[t] = state[c][t].byteSize();
            states.add(new MemoryDescriptor.StateDescriptor(stateTypes.get(c).wire(), len, stateItemLens[c].clone()));
        }
        return new MemoryDescriptor(kvLen, kvItemLens.clone(), kvLayerIds.clone(), auxLen, auxItemLens.clone(), states);
    }
}
