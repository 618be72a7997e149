package io.kvferry.api;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;

/**
 * What a rank registers for transfer (SGLang's {@code KVArgs}). Filled by the engine, then handed
 * to {@link io.kvferry.KVFerry#createManager}, which validates it and keeps an immutable snapshot; later
 * changes to this object have no effect on the manager.
 *
 * <p>Buffers are native {@link MemorySegment}s. Memory owned elsewhere (e.g. a pool allocated by
 * another library) is added by raw address and length with the {@code add…(long address, …)}
 * methods. The {@code …Ptrs}/{@code …Lens} lists of the seed are derived from the segments.
 *
 * <p>KV buffers follow SGLang's MHA order: all K layers, then all V layers, then draft-model
 * buffers; MLA has one buffer per layer. {@code kvItemLens[i]} is the bytes of one page of buffer i.
 */
public final class KVArgs {
    /**
     * Prefill: the rank's tp_rank. Decode: its attention TP rank (SGLang: tp_rank % attn_tp_size), which picks
     * the prefill ranks and KV heads it receives; one whose remainder mod attn_tp_size is not the config's
     * attn_tp_rank is refused.
     */
    public int engineRank;
    public final List<MemorySegment> kvData = new ArrayList<>();
    public final List<Long> kvItemLens = new ArrayList<>();
    /** Global layer id per KV buffer (for PP and draft pairing); may be left empty. */
    public final List<Integer> kvLayerIds = new ArrayList<>();
    public String kvCacheDtypeStr = "auto";

    public final List<MemorySegment> auxData = new ArrayList<>();
    public final List<Long> auxItemLens = new ArrayList<>();
    /**
     * Decode: index of the aux buffer whose row starts with the request's bootstrap_room (int64,
     * little-endian) — SGLang puts it last. With it set, decode zeroes that column when it sends
     * metadata and reports Success only once the column holds the request's room ("Metadata
     * corruption detected - bootstrap_room mismatch" otherwise). -1 turns the gate off.
     */
    public int auxRoomBuffer = -1;

    public final List<StateType> stateTypes = new ArrayList<>();
    public final List<List<MemorySegment>> stateData = new ArrayList<>();
    public final List<List<Long>> stateItemLens = new ArrayList<>();
    public final List<List<Integer>> stateLayerIds = new ArrayList<>();
    public final List<List<Integer>> stateDimPerTensor = new ArrayList<>();
    public final List<List<Integer>> stateSliceOuterCounts = new ArrayList<>();
    /** Per state tensor: conv sub-block dims, or null when one contiguous slice fits. */
    public final List<List<List<Integer>>> stateConvShardGroups = new ArrayList<>();
    public boolean isHybridMlaBackend;

    public String ibDevice = "";
    public int gpuId;
    public int kvHeadNum;
    public int totalKvHeadNum;
    public int pageSize = 1;
    public int systemDpRank;
    /** Port of a local route registry listener; null where none exists. */
    public Integer rustHttpPort;
    public int ppRank;
    public int prefillStartLayer;
    /** Exclusive end layer of this prefill PP stage; null means "to the last layer". */
    public Integer prefillEndLayer;
    public List<Integer> mlaCompressionRatios;
    public int kvBufGroups = 1;
    public int hiddenKvLayers;
    public int draftKvLayers;
    public int numDraftEntries;

    /** Adds one KV buffer (one layer's K, V, or MLA latent) whose pages are {@code itemLen} bytes each. */
    public KVArgs addKvBuffer(MemorySegment buffer, long itemLen) {
        kvData.add(buffer);
        kvItemLens.add(itemLen);
        return this;
    }

    /** Adds a KV buffer owned elsewhere, by raw address and byte length. */
    public KVArgs addKvBuffer(long address, long length, long itemLen) {
        return addKvBuffer(MemorySegment.ofAddress(address).reinterpret(length), itemLen);
    }

    /** Adds one metadata buffer whose rows are {@code itemLen} bytes each. */
    public KVArgs addAuxBuffer(MemorySegment buffer, long itemLen) {
        auxData.add(buffer);
        auxItemLens.add(itemLen);
        return this;
    }

    public KVArgs addAuxBuffer(long address, long length, long itemLen) {
        return addAuxBuffer(MemorySegment.ofAddress(address).reinterpret(length), itemLen);
    }

    /** Adds one state component: its tensors and the bytes of one index (slot, row or page) in each. */
    public KVArgs addStateComponent(StateType type, List<MemorySegment> tensors, List<Long> itemLens) {
        stateTypes.add(type);
        stateData.add(List.copyOf(tensors));
        stateItemLens.add(List.copyOf(itemLens));
        return this;
    }

    public List<Long> kvDataPtrs() {
        return kvData.stream().map(MemorySegment::address).toList();
    }

    public List<Long> kvDataLens() {
        return kvData.stream().map(MemorySegment::byteSize).toList();
    }

    public List<Long> auxDataPtrs() {
        return auxData.stream().map(MemorySegment::address).toList();
    }

    public List<Long> auxDataLens() {
        return auxData.stream().map(MemorySegment::byteSize).toList();
    }

    public List<List<Long>> stateDataPtrs() {
        return stateData.stream().map(l -> l.stream().map(MemorySegment::address).toList()).toList();
    }

    public List<List<Long>> stateDataLens() {
        return stateData.stream().map(l -> l.stream().map(MemorySegment::byteSize).toList()).toList();
    }
}
