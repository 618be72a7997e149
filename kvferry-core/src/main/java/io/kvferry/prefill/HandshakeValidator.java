package io.kvferry.prefill;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.plan.HeadSlice;
import io.kvferry.plan.LayerPairing;
import io.kvferry.plan.TransferPlanner;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.protocol.TransferInfo;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.Arrays;

/**
 * Decides whether a decode's HELLO and TRANSFER_INFOs can be served by this prefill rank's memory:
 * pure (no sockets, no state beyond the immutable layout it was built with), so every refusal is
 * unit-tested directly. A refusal names the differing field and both values.
 */
final class HandshakeValidator {
    /** Why a HELLO was refused. */
    record Refusal(FailureKind kind, String reason) {}

    private final RegisteredMemory memory;
    private final KVManagerConfig config;
    private final int pageSize;
    private final String kvCacheDtype;
    private final int totalKvHeads;
    private final boolean hasConvShardGroups;
    private final byte[] authToken;

    HandshakeValidator(RegisteredMemory memory, KVManagerConfig config, int pageSize, String kvCacheDtype, int totalKvHeads,
                       boolean hasConvShardGroups) {
        this.memory = memory;
        this.config = config;
        this.pageSize = pageSize;
        this.kvCacheDtype = kvCacheDtype;
        this.totalKvHeads = totalKvHeads;
        this.hasConvShardGroups = hasConvShardGroups;
        this.authToken = config.authToken() == null ? null : config.authToken().getBytes(StandardCharsets.UTF_8);
    }

    /** Null when the token matches (or none is required); else the refusal. Constant-time comparison. */
    Refusal checkToken(Hello h) {
        if (authToken == null) return null;
        return MessageDigest.isEqual(authToken, h.authToken().getBytes(StandardCharsets.UTF_8))
                ? null
                : new Refusal(FailureKind.HANDSHAKE_REFUSED, "Unauthorized: wrong or missing cluster auth token");
    }

    /** Returns why a decode's registration cannot be served, or null. */
    Refusal checkHello(Hello h) {
        Refusal token = checkToken(h);
        if (token != null) return token;
        if (!h.dataPath().matches("[a-z0-9_-]{1,32}")) {
            return handshake("malformed data path name '" + h.dataPath() + "'");
        }
        boolean decodeAllCp = (h.flags() & Hello.FLAG_ALL_CP_RANKS) != 0;
        if (config.attnCpSize() > 1 && decodeAllCp != config.allCpRanksTransfer()) {
            return handshake("all-CP-ranks transfer differs: prefill " + (config.allCpRanksTransfer() ? "on" : "off") + ", decode "
                    + (decodeAllCp ? "on" : "off") + "; set it the same on both sides");
        }
        String layout = checkLayout(h);
        return layout == null ? null : new Refusal(FailureKind.LAYOUT_REFUSED, layout);
    }

    private static Refusal handshake(String reason) {
        return new Refusal(FailureKind.HANDSHAKE_REFUSED, reason);
    }

    private String checkLayout(Hello h) {
        if (h.pageSize() != pageSize) {
            return "page_size mismatch: prefill uses " + pageSize + ", decode uses " + h.pageSize()
                    + "; both servers must use the same --page-size value";
        }
        if (!h.kvCacheDtype().equals(kvCacheDtype)) {
            return "kv_cache_dtype mismatch: prefill uses " + kvCacheDtype + ", decode uses " + h.kvCacheDtype();
        }
        MemoryDescriptor d = h.memory();
        int[] map;
        try {
            map = LayerPairing.pair(memory.kvLayerIds(), d.kvLayerIds());
        } catch (RuntimeException e) {
            return "KV buffers do not pair by layer id: " + e.getMessage();
        }
        boolean sliced = slicesHeads(h);
        String kv = sliced ? checkSliced(h, map) : checkPageCopies(d, map);
        if (kv != null) return kv;
        long[] aux = memory.auxItemLens();
        if (!Arrays.equals(aux, d.auxItemLens())) {
            return "aux buffers differ: prefill item lengths " + Arrays.toString(aux) + ", decode " + Arrays.toString(d.auxItemLens());
        }
        if (d.states().size() != memory.stateComponentCount()) {
            return "state component count mismatch: prefill " + memory.stateComponentCount() + ", decode " + d.states().size();
        }
        long[][] stateItems = memory.stateItemLens();
        for (int c = 0; c < stateItems.length; c++) {
            MemoryDescriptor.StateDescriptor s = d.states().get(c);
            if (!s.type().equals(memory.stateTypes().get(c).wire())) {
                return "state component " + c + " type differs: prefill " + memory.stateTypes().get(c).wire() + ", decode " + s.type();
            }
            if (!sliced && !Arrays.equals(stateItems[c], s.itemLens())) {
                return "state component " + c + " item lengths differ: prefill " + Arrays.toString(stateItems[c])
                        + ", decode " + Arrays.toString(s.itemLens());
            }
        }
        return null;
    }

    /** True when this decode's pages carry another slice of the KV heads (MHA with another attention TP). */
    boolean slicesHeads(Hello h) {
        return !config.isMla() && h.attnTpSize() != config.attnTpSize();
    }

    private String checkPageCopies(MemoryDescriptor d, int[] map) {
        long[] mine = memory.kvItemLens();
        for (int i = 0; i < mine.length; i++) {
            if (d.kvItemLens()[map[i]] != mine[i]) {
                return "KV buffer " + i + " page size in bytes differs: prefill " + mine[i] + ", decode buffer " + map[i]
                        + " " + d.kvItemLens()[map[i]];
            }
        }
        return null;
    }

    private String checkSliced(Hello h, int[] map) {
        MemoryDescriptor d = h.memory();
        int big = Math.max(h.attnTpSize(), config.attnTpSize()), small = Math.min(h.attnTpSize(), config.attnTpSize());
        if (big % small != 0) {
            return "attention TP sizes must divide one another: prefill " + config.attnTpSize() + ", decode " + h.attnTpSize();
        }
        try {
            headSlices(h, map);
        } catch (RuntimeException e) {
            return "cannot slice KV heads between prefill TP " + config.attnTpSize() + " and decode TP " + h.attnTpSize()
                    + ": " + e.getMessage();
        }
        if (hasConvShardGroups) {
            return "state with conv shard groups (GDN q/k/v sub-blocks) cannot be resharded between prefill TP "
                    + config.attnTpSize() + " and decode TP " + h.attnTpSize() + " by this version";
        }
        if (d.states().size() != memory.stateComponentCount()) {
            return "state component count mismatch: prefill " + memory.stateComponentCount() + ", decode " + d.states().size();
        }
        for (int c = 0; c < memory.stateComponentCount(); c++) {
            String state = checkStateReshard(h, c);
            if (state != null) return state;
        }
        return null;
    }

    private String checkStateReshard(Hello h, int c) {
        MemoryDescriptor d = h.memory();
        if (d.states().get(c).itemLens().length != memory.stateTensorCount(c)) {
            return "state component " + c + " tensor count differs: prefill " + memory.stateTensorCount(c) + ", decode "
                    + d.states().get(c).itemLens().length;
        }
        for (int t = 0; t < memory.stateTensorCount(c); t++) {
            try {
                TransferPlanner.checkStateReshard(memory.stateTypes().get(c), c, t, memory.stateItemLens()[c][t],
                        d.states().get(c).itemLens()[t], memory.stateOuterCount(c, t), memory.stateDim(c, t),
                        config.attnTpSize(), config.attnTpRank(), h.attnTpSize(), h.engineRank() % h.attnTpSize());
            } catch (RuntimeException e) {
                return e.getMessage();
            }
        }
        return null;
    }

    /** Head slices for an MHA decode with another attention-TP size; null when pages copy whole. */
    HeadSlice[] headSlices(Hello h, int[] bufferMap) {
        if (!slicesHeads(h)) return null;
        long[] mine = memory.kvItemLens();
        HeadSlice[] slices = new HeadSlice[mine.length];
        for (int b = 0; b < mine.length; b++) {
            slices[b] = HeadSlice.resolve(totalKvHeads, config.attnTpSize(), config.attnTpRank(), h.attnTpSize(),
                    h.engineRank() % h.attnTpSize(), mine[b], h.memory().kvItemLens()[bufferMap[b]], pageSize);
        }
        return slices;
    }

    /** Checks a decode's indices against the memory that decode registered; returns the problem or null. */
    static String checkTransferInfo(MemoryDescriptor d, TransferInfo t) {
        long pages = Long.MAX_VALUE;
        for (int i = 0; i < d.kvLengths().length; i++) pages = Math.min(pages, d.kvLengths()[i] / d.kvItemLens()[i]);
        for (int p : t.dstKvIndices()) {
            if (p < 0 || p >= pages) {
                return "destination page id " + p + " is outside the decode KV pool of " + pages + " pages";
            }
        }
        if (t.auxIndex() >= 0) {
            long rows = Long.MAX_VALUE;
            for (int i = 0; i < d.auxLengths().length; i++) rows = Math.min(rows, d.auxLengths()[i] / d.auxItemLens()[i]);
            if (d.auxLengths().length == 0 || t.auxIndex() >= rows) {
                return "destination aux index " + t.auxIndex() + " is outside the decode metadata pool of "
                        + (d.auxLengths().length == 0 ? 0 : rows) + " rows";
            }
        }
        if (t.stateIndices().length > d.states().size()) {
            return "transfer info has " + t.stateIndices().length + " state index lists but decode registered "
                    + d.states().size() + " state components";
        }
        for (int c = 0; c < t.stateIndices().length; c++) {
            MemoryDescriptor.StateDescriptor s = d.states().get(c);
            long n = Long.MAX_VALUE;
            for (int i = 0; i < s.lengths().length; i++) n = Math.min(n, s.lengths()[i] / s.itemLens()[i]);
            for (int idx : t.stateIndices()[c]) {
                if (idx < 0 || idx >= n) return "destination state index " + idx + " of component " + c + " is outside its " + n + " entries";
            }
        }
        return null;
    }
}
