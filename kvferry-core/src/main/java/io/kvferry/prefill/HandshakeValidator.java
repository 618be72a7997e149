package io.kvferry.prefill;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.StateType;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.plan.HeadSlice;
import io.kvferry.plan.LayerPairing;
import io.kvferry.plan.RankMapping;
import io.kvferry.plan.StateSlice;
import io.kvferry.plan.TransferPlanner;
import io.kvferry.protocol.Coverage;
import io.kvferry.protocol.Fingerprint;
import io.kvferry.protocol.Handshake;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.protocol.TransferInfo;

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
    private final Fingerprint fingerprint;
    private final int pageSize;
    private final int totalKvHeads;
    private final boolean hasConvShardGroups;
    /** The HMAC key of the cluster token (a fixed public value without one: insecure mode). */
    private final byte[] key;

    HandshakeValidator(RegisteredMemory memory, KVManagerConfig config, Fingerprint fingerprint, boolean hasConvShardGroups) {
        this.memory = memory;
        this.config = config;
        this.fingerprint = fingerprint;
        this.pageSize = fingerprint.pageSize();
        this.totalKvHeads = fingerprint.totalKvHeads();
        this.hasConvShardGroups = hasConvShardGroups;
        this.key = Handshake.key(config.authToken());
    }

    /** The cluster key HELLOs are signed with and acceptances are signed back with. */
    byte[] key() {
        return key.clone();
    }

    /** Null when the HELLO answers {@code challenge} with this cluster's key (constant time); else the refusal. */
    Refusal checkMac(Hello h, byte[] challenge) {
        return h.verify(key, challenge) ? null
                : new Refusal(FailureKind.HANDSHAKE_REFUSED, "Unauthorized: HELLO not signed with this cluster's auth token");
    }

    /** Returns why an authenticated decode's registration cannot be served, or null. */
    Refusal checkHello(Hello h) {
        Fingerprint theirs = h.fingerprint();
        if (!theirs.kvferryVersion().equals(fingerprint.kvferryVersion())) {
            return handshake(fingerprint.differenceFrom(theirs));
        }
        String differs = fingerprint.differenceFrom(theirs);
        if (differs != null) return new Refusal(FailureKind.LAYOUT_REFUSED, differs);
        if (!h.dataPath().matches("[a-z0-9_-]{1,32}")) {
            return handshake("malformed data path name '" + h.dataPath() + "'");
        }
        boolean decodeAllCp = (h.flags() & Hello.FLAG_ALL_CP_RANKS) != 0;
        if (config.attnCpSize() > 1 && decodeAllCp != config.allCpRanksTransfer()) {
            return handshake("all-CP-ranks transfer differs: prefill " + (config.allCpRanksTransfer() ? "on" : "off") + ", decode "
                    + (decodeAllCp ? "on" : "off") + "; set it the same on both sides");
        }
        String target = checkTarget(h);
        if (target != null) return new Refusal(FailureKind.LAYOUT_REFUSED, target);
        String layout = checkLayout(h);
        return layout == null ? null : new Refusal(FailureKind.LAYOUT_REFUSED, layout);
    }

    /**
     * Null when this rank is one the decode rank reads from (SGLang's rank mapping); else why not. A
     * decode rank reaching another one (a stale or wrong route) would be sent this rank's heads as if
     * they were its own: pages copy whole between equal TP sizes, and a head slice is cut for the
     * decode rank named, not for the rank that holds them.
     */
    private String checkTarget(Hello h) {
        if (Math.max(h.attnTpSize(), config.attnTpSize()) % Math.min(h.attnTpSize(), config.attnTpSize()) != 0) {
            return "attention TP sizes must divide one another: prefill " + config.attnTpSize() + ", decode " + h.attnTpSize();
        }
        RankMapping mapping = RankMapping.resolve(config.attnTpSize(), h.attnTpSize(), h.engineRank(), config.isMla(), 1, false, 1, 1, 0);
        if (mapping.targetTpRanks().contains(config.attnTpRank())) return null;
        return "decode attention TP rank " + h.engineRank() % h.attnTpSize() + " of " + h.attnTpSize() + " reads from prefill attention TP "
                + "ranks " + mapping.targetTpRanks() + ", not from this rank " + config.attnTpRank() + " of " + config.attnTpSize()
                + "; its route to this address is stale or wrong";
    }

    private static Refusal handshake(String reason) {
        return new Refusal(FailureKind.HANDSHAKE_REFUSED, reason);
    }

    private String checkLayout(Hello h) {
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

    /**
     * Which of the decode's bytes this rank writes for every room of an accepted link (HELLO_ACK):
     * each KV buffer it holds a layer of (whole pages, or its heads' slice of every token slot), the
     * aux row and the state — except a non-zero CP rank under all-CP-ranks transfer, which sends
     * only its share of the KV pages.
     */
    Coverage coverage(Hello h, int[] bufferMap, HeadSlice[] slices) {
        MemoryDescriptor d = h.memory();
        int n = d.kvItemLens().length;
        long[] unit = new long[n], offset = new long[n], length = new long[n];
        Arrays.fill(unit, 1);
        for (int b = 0; b < bufferMap.length; b++) {
            int db = bufferMap[b];
            if (slices == null) {
                unit[db] = d.kvItemLens()[db];
                length[db] = d.kvItemLens()[db];
            } else {
                HeadSlice s = slices[b];
                unit[db] = s.dstTokenBytes();
                offset[db] = s.dstHeadStart() * s.headBytes();
                length[db] = s.pieceBytes();
            }
        }
        boolean auxAndState = !(config.allCpRanksTransfer() && config.attnCpSize() > 1 && config.attnCpRank() != 0);
        int components = d.states().size();
        long[][] sUnit = new long[components][], sOffset = new long[components][], sLength = new long[components][];
        boolean resliced = slicesHeads(h);
        for (int c = 0; c < components; c++) {
            long[] items = d.states().get(c).itemLens();
            sUnit[c] = new long[items.length];
            sOffset[c] = new long[items.length];
            sLength[c] = new long[items.length];
            for (int t = 0; t < items.length; t++) {
                sUnit[c][t] = items[t];
                if (!auxAndState) continue;
                if (!resliced) {
                    sLength[c][t] = items[t];
                    continue;
                }
                int outer = memory.stateOuterCount(c, t);
                if (outer < 1) continue; // not re-sliceable: checkHello refused such a link already
                if (memory.stateTypes().get(c) == StateType.SWA) {
                    // Head-sliced window pages (StateSlice.pageHeads): per token slot, this rank's heads' slice.
                    HeadSlice s = StateSlice.pageHeads(c, t, memory.stateItemLens()[c][t], items[t], outer, memory.stateDim(c, t),
                            config.attnTpSize(), config.attnTpRank(), h.attnTpSize(), h.engineRank() % h.attnTpSize());
                    sUnit[c][t] = s.dstTokenBytes();
                    sOffset[c][t] = s.dstHeadStart() * s.headBytes();
                    sLength[c][t] = s.pieceBytes();
                    continue;
                }
                // Re-sliced mamba state (StateSlice): per row, this rank's entries (P >= D) or the whole row (P < D).
                long dstRow = items[t] / outer;
                long srcRow = memory.stateItemLens()[c][t] / outer;
                sUnit[c][t] = dstRow;
                if (config.attnTpSize() >= h.attnTpSize()) {
                    int group = config.attnTpSize() / h.attnTpSize();
                    sOffset[c][t] = (long) (config.attnTpRank() % group) * srcRow;
                    sLength[c][t] = srcRow;
                } else {
                    sLength[c][t] = dstRow;
                }
            }
        }
        return new Coverage(unit, offset, length, auxAndState && d.auxItemLens().length > 0, auxAndState, sUnit, sOffset, sLength);
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
