package io.kvferry.prefill;

import io.kvferry.api.KVArgs;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.StateType;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.plan.CopyPlan;
import io.kvferry.plan.HeadSlice;
import io.kvferry.plan.LayerPairing;
import io.kvferry.plan.PageRuns;
import io.kvferry.plan.RankMapping;
import io.kvferry.plan.TransferPlanner;
import io.kvferry.protocol.Coverage;
import io.kvferry.protocol.Fingerprint;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.protocol.Region;
import io.kvferry.protocol.TransferInfo;
import net.jqwik.api.Assume;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.statistics.Statistics;
import org.junit.jupiter.api.Test;
import net.jqwik.api.constraints.IntRange;

import java.lang.foreign.Arena;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.function.BiConsumer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * Which bytes go where, checked against an independent model of SGLang's layout (not the planner's
 * arithmetic): for random small geometries — prefill and decode attention TP (KV heads divisible by
 * TP or replicated over it), MLA, PP on each side with layers split unevenly, head sizes, page sizes
 * of a few tokens, chunks of zero or more pages, mamba state re-sliced along its TP-sharded
 * dimension and swa window pages — every decode rank's prefill targets ({@link RankMapping}) accept
 * its HELLO ({@link HandshakeValidator}), plan their chunk as {@code ChunkExecutor} does, and the
 * bytes those plans move are applied to a map of the decode's memory. Each moved byte must carry the
 * (layer, K/V, token, global head, byte) — or (state row, global entry, byte) — the model says that
 * decode byte holds; every byte the decode asked for must be written; no link writes a byte twice;
 * and each link writes exactly what its HELLO_ACK coverage declares (what the gate and the byte
 * accounting trust).
 */
class ByteMappingPropertyTest {
    private static final int POOL = 8;
    private static final int[] HEADS = {1, 2, 3, 4, 6, 8};
    private static final long AUX_ROW = 8;
    /** Mamba rows before the sharded axis and bytes per entry. */
    private static final int ROWS = 2, ENTRY = 2;

    /** What one byte holds, in model terms; positions are the byte's place in the request, not page ids. */
    record Label(String what, int layer, int kind, int position, int token, int head, int inHead) {}

    /** A geometry. {@code cuts}: layer boundaries of the prefill PP stages (stage s holds [cuts[s], cuts[s+1])). */
    record Geometry(int heads, int prefillTp, int decodeTp, boolean mla, int headBytes, int pageSize, int[] cuts, boolean decodePpEqual,
                    boolean state, int entriesPerRank) {
        int prefillPp() { return cuts.length - 1; }
        @Override
        public String toString() {
            return "H=" + heads + " P" + prefillTp + " -> D" + decodeTp + (mla ? " mla" : "") + " head " + headBytes + " B, page "
                    + pageSize + " tokens, prefill PP stages at layers " + Arrays.toString(cuts) + ", decode PP " + decodePp()
                    + (state ? ", mamba + swa state" : "");
        }
        int decodePp() { return decodePpEqual ? prefillPp() : 1; }
        int headsPerRank(int tp) { return mla ? 1 : Math.max(1, heads / tp); }
        /** The global head of a rank's local head (MLA: the one latent). */
        int globalHead(int tp, int rank, int local) {
            if (mla) return 0;
            return tp <= heads ? rank * (heads / tp) + local : rank / (tp / heads);
        }
        long headItem() { return mla ? 3L * headBytes : headBytes; }
        long tokenBytes(int tp) { return headsPerRank(tp) * headItem(); }
        long kvItem(int tp) { return pageSize * tokenBytes(tp); }
        /** Mamba entries of the sharded dimension over all ranks. */
        int totalEntries() { return entriesPerRank * Math.max(prefillTp, decodeTp); }
        int[] layers(int stage, boolean decode) {
            int from = decode && !decodePpEqual ? cuts[0] : cuts[stage], to = decode && !decodePpEqual ? cuts[cuts.length - 1] : cuts[stage + 1];
            int[] ids = new int[to - from];
            for (int i = 0; i < ids.length; i++) ids[i] = from + i;
            return ids;
        }
    }

    @Property(seed = "20261207", tries = 500)
    void everyDecodeByteComesFromTheRightPrefillByte(@ForAll @IntRange(min = 0, max = 5) int headsChoice,
                                                     @ForAll @IntRange(min = 0, max = 3) int pLog, @ForAll @IntRange(min = 0, max = 3) int dLog,
                                                     @ForAll boolean mla, @ForAll @IntRange(min = 1, max = 3) int headBytes,
                                                     @ForAll @IntRange(min = 1, max = 3) int pageSize,
                                                     @ForAll @IntRange(min = 1, max = 5) int layers, @ForAll @IntRange(min = 1, max = 3) int pp,
                                                     @ForAll boolean decodePpEqual, @ForAll boolean state,
                                                     @ForAll @IntRange(min = 0, max = 5) int pages, @ForAll long seed) {
        int heads = HEADS[headsChoice], prefillTp = 1 << pLog, decodeTp = 1 << dLog;
        Assume.that(divides(heads, prefillTp) && divides(heads, decodeTp));
        Assume.that(pp <= layers);
        Random rnd = new Random(seed);
        int[] cuts = new int[pp + 1];
        cuts[pp] = layers;
        // Uneven split: stage boundaries anywhere, each stage at least one layer.
        for (int s = 1; s < pp; s++) cuts[s] = cuts[s - 1] + 1 + rnd.nextInt(layers - cuts[s - 1] - (pp - s));
        // State moves by position, so it needs the same PP on both sides; MLA state is copied whole (equal TP).
        boolean withState = state && (decodePpEqual || pp == 1) && (!mla || prefillTp == decodeTp);
        Geometry g = new Geometry(heads, prefillTp, decodeTp, mla, 2 * headBytes, pageSize, cuts, decodePpEqual, withState,
                1 + rnd.nextInt(3));
        int[] srcPages = distinct(rnd, pages), dstPages = distinct(rnd, pages);
        int window = rnd.nextInt(4); // the window may outlive a fully prefix-cached prompt: state-only transfers
        int[] srcWindow = distinct(rnd, window), dstWindow = distinct(rnd, window);
        int srcSlot = rnd.nextInt(POOL), dstSlot = rnd.nextInt(POOL), srcAux = rnd.nextInt(4), dstAux = rnd.nextInt(4);
        try (Arena arena = Arena.ofConfined()) {
            for (int ds = 0; ds < g.decodePp(); ds++) {
                for (int d = 0; d < decodeTp; d++) {
                    RegisteredMemory decode = RegisteredMemory.from(args(arena, g, decodeTp, ds, true));
                    Hello hello = new Hello("s", "i", fingerprint(g), "tcp", d, decodeTp, ds, 0, null, decode.describe(), List.of(), null,
                            null, null);
                    Map<String, Label[]> written = new HashMap<>();
                    RankMapping mapping = RankMapping.resolve(prefillTp, decodeTp, d, mla, 1, false, pp, g.decodePp(), ds);
                    for (int p : mapping.targetTpRanks()) {
                        if (mapping.isDummy(p, mla)) continue;
                        for (int s : mapping.targetPpRanks()) {
                            RegisteredMemory prefill = RegisteredMemory.from(args(arena, g, prefillTp, s, false));
                            KVManagerConfig config = KVManagerConfig.builder().attnTp(prefillTp, p).mla(mla).ppSize(pp).build();
                            HandshakeValidator v = new HandshakeValidator(prefill, config, fingerprint(g), false);
                            String at = "prefill rank " + p + " stage " + s + " -> decode rank " + d + " stage " + ds + " of " + g;
                            HandshakeValidator.Refusal refusal = v.checkHello(hello);
                            assertNull(refusal, () -> at + ": " + refusal.reason());
                            int[] map = LayerPairing.pair(prefill.kvLayerIds(), decode.kvLayerIds());
                            HeadSlice[] slices = v.headSlices(hello, map);
                            Coverage coverage = v.coverage(hello, map, slices);
                            assertNull(coverage.checkAgainst(decode.describe()), at);
                            int[][] srcState = withState ? new int[][] {{srcSlot}, srcWindow} : null;
                            int[][] dstState = withState ? new int[][] {{dstSlot}, dstWindow} : null;
                            CopyPlan plan = plan(prefill, hello, map, slices, config, srcPages, dstPages, srcAux, dstAux, srcState, dstState);
                            Model src = new Model(g, prefill, prefillTp, p, s, srcPages, srcAux, srcSlot, srcWindow);
                            Model dst = new Model(g, decode, decodeTp, d, ds, dstPages, dstAux, dstSlot, dstWindow);
                            Map<String, boolean[]> mine = new HashMap<>();
                            for (int op = 0; op < plan.size(); op++) {
                                long pieces = plan.pieces(op), piece = plan.pieceLength(op);
                                for (long k = 0; k < pieces; k++) {
                                    for (long b = 0; b < piece; b++) {
                                        long from = plan.srcOffset(op) + k * plan.srcStride(op) + b;
                                        long to = plan.dstOffset(op) + k * plan.dstStride(op) + b;
                                        Label have = src.label(plan.region(op), plan.component(op), plan.buffer(op), from);
                                        Label want = dst.label(plan.region(op), plan.component(op), plan.dstBuffer(op), to);
                                        if (want == null) fail(at + ": op " + op + " writes outside what the room owns: " + plan);
                                        if (!want.equals(have)) {
                                            fail(at + ": decode byte " + want + " receives " + have + " (op " + op + " of " + plan + ")");
                                        }
                                        String key = plan.region(op) + "/" + plan.component(op) + "/" + plan.dstBuffer(op);
                                        int size = (int) dst.size(plan.region(op), plan.component(op), plan.dstBuffer(op));
                                        boolean[] once = mine.computeIfAbsent(key, x -> new boolean[size]);
                                        assertTrue(!once[(int) to], () -> at + ": writes " + key + " byte " + to + " twice");
                                        once[(int) to] = true;
                                        written.computeIfAbsent(key, x -> new Label[once.length])[(int) to] = have;
                                        assertTrue(covers(coverage, decode, plan.region(op), plan.component(op), plan.dstBuffer(op), to),
                                                () -> at + ": writes " + key + " byte " + to + ", outside its declared coverage");
                                    }
                                }
                            }
                            assertEquals(owed(coverage, decode, dstPages.length, dstState), plan.totalBytes(),
                                    at + ": moves other than the bytes its coverage owes: " + plan);
                        }
                    }
                    Model owner = new Model(g, decode, decodeTp, d, ds, dstPages, dstAux, dstSlot, dstWindow);
                    String who = "decode rank " + d + " stage " + ds;
                    owner.forEachOwnedByte((key, offset) -> {
                        Label[] w = written.get(key);
                        assertTrue(w != null && w[(int) (long) offset] != null,
                                () -> who + " " + key + " byte " + offset + " is written by no prefill rank: " + g);
                    });
                }
            }
        }
    }

    /**
     * A KV head count that neither TP size divides, nor is a divisor of, cannot be sliced: before this
     * was refused, H=3 from prefill TP 1 to decode TP 2 was accepted and head 2 reached no decode rank.
     */
    @Test
    void headCountsThatDoNotSplitOverTpAreRefusedAtHello() {
        int tried = 0;
        for (int heads : HEADS) {
            for (int prefillTp = 1; prefillTp <= 8; prefillTp *= 2) {
                for (int decodeTp = 1; decodeTp <= 8; decodeTp *= 2) {
                    if (prefillTp == decodeTp || divides(heads, prefillTp) && divides(heads, decodeTp)) continue;
                    for (int rank = 0; rank < decodeTp; rank++) {
                        assertHeadSplitRefused(heads, prefillTp, decodeTp, rank);
                        tried++;
                    }
                }
            }
        }
        assertTrue(tried > 0);
    }

    private static void assertHeadSplitRefused(int heads, int prefillTp, int decodeTp, int rank) {
        Geometry g = new Geometry(heads, prefillTp, decodeTp, false, 4, 2, new int[] {0, 1}, true, false, 1);
        try (Arena arena = Arena.ofConfined()) {
            RegisteredMemory decode = RegisteredMemory.from(args(arena, g, decodeTp, 0, true));
            Hello hello = new Hello("s", "i", fingerprint(g), "tcp", rank, decodeTp, 0, 0, null, decode.describe(), List.of(), null, null,
                    null);
            int target = RankMapping.resolve(prefillTp, decodeTp, rank, false, 1, false, 1, 1, 0).targetTpRanks().getFirst();
            KVManagerConfig config = KVManagerConfig.builder().attnTp(prefillTp, target).build();
            HandshakeValidator v = new HandshakeValidator(RegisteredMemory.from(args(arena, g, prefillTp, 0, false)), config,
                    fingerprint(g), false);
            HandshakeValidator.Refusal refusal = v.checkHello(hello);
            assertTrue(refusal != null, () -> "accepted " + g + ", decode rank " + rank);
            String side = divides(heads, prefillTp) ? "decode attention TP " + decodeTp : "prefill attention TP " + prefillTp;
            assertTrue(refusal.reason().contains("the model's " + heads + " KV heads cannot be split over " + side), refusal.reason());
        }
    }

    /**
     * A hostile or broken decode's HELLO geometry — item and buffer lengths halved, doubled, off by one,
     * near {@code Long.MAX_VALUE}, layer ids repeated, TP sizes that do not divide, engine ranks past the
     * TP size — is refused with a reason, or, where accepted, every op planned for indices its
     * TRANSFER_INFO check lets through lies inside the buffers that decode declared, and its coverage
     * fits them: no arithmetic overflow turns a declared size into a write elsewhere.
     */
    @Property(seed = "20261207", tries = 400)
    void hostileDecodeGeometryIsRefusedOrPlannedInsideItsBuffers(@ForAll @IntRange(min = 0, max = 2) int pLog,
                                                                  @ForAll @IntRange(min = 1, max = 12) int decodeTp,
                                                                  @ForAll @IntRange(min = 0, max = 40) int engineRank, @ForAll long seed) {
        int prefillTp = 1 << pLog;
        Random rnd = new Random(seed);
        int honestTp = 1 << rnd.nextInt(4);
        Geometry g = new Geometry(8, prefillTp, honestTp, false, 4, 2, new int[] {0, 2}, true, true, 2);
        try (Arena arena = Arena.ofConfined()) {
            RegisteredMemory prefill = RegisteredMemory.from(args(arena, g, prefillTp, 0, false));
            MemoryDescriptor honest = RegisteredMemory.from(args(arena, g, honestTp, 0, true)).describe();
            long[] kvLen = mutate(rnd, honest.kvLengths()), kvItem = mutatePositive(rnd, honest.kvItemLens());
            int[] layers = honest.kvLayerIds();
            if (rnd.nextInt(4) == 0) layers[rnd.nextInt(layers.length)] = layers[rnd.nextInt(layers.length)];
            List<MemoryDescriptor.StateDescriptor> states = new ArrayList<>();
            for (MemoryDescriptor.StateDescriptor sd : honest.states()) {
                states.add(new MemoryDescriptor.StateDescriptor(sd.type(), mutate(rnd, sd.lengths()), mutatePositive(rnd, sd.itemLens())));
            }
            MemoryDescriptor hostile = new MemoryDescriptor(kvLen, kvItem, layers, mutate(rnd, honest.auxLengths()),
                    mutatePositive(rnd, honest.auxItemLens()), states);
            int tp = rnd.nextBoolean() ? honestTp : decodeTp;
            Hello hello = new Hello("s", "i", fingerprint(g), "tcp", engineRank, tp, 0, 0, null, hostile, List.of(), null, null, null);
            KVManagerConfig config = KVManagerConfig.builder().attnTp(prefillTp, rnd.nextInt(prefillTp)).build();
            HandshakeValidator v = new HandshakeValidator(prefill, config, fingerprint(g), false);
            HandshakeValidator.Refusal refusal = v.checkHello(hello);
            Statistics.collect(refusal == null ? "accepted" : "refused");
            if (refusal != null) {
                assertTrue(!refusal.reason().isBlank());
                return;
            }
            int[] map = LayerPairing.pair(prefill.kvLayerIds(), hostile.kvLayerIds());
            HeadSlice[] slices = v.headSlices(hello, map);
            Coverage coverage = v.coverage(hello, map, slices);
            assertNull(coverage.checkAgainst(hostile), "an accepted HELLO's coverage must fit the decode's memory");
            int pages = rnd.nextInt(4);
            int[] srcPages = distinct(rnd, pages), dstPages = new int[pages];
            for (int i = 0; i < pages; i++) dstPages[i] = rnd.nextInt(1 << rnd.nextInt(31));
            int[] window = distinct(rnd, Math.min(pages, 2));
            int[] dstWindow = new int[window.length];
            for (int i = 0; i < window.length; i++) dstWindow[i] = rnd.nextInt(POOL * 4);
            int[][] dstState = {{rnd.nextInt(POOL * 4)}, dstWindow};
            int dstAux = rnd.nextInt(8);
            if (HandshakeValidator.checkTransferInfo(hostile, new TransferInfo(1, dstPages, dstAux, dstState, 1, 0, false)) != null) return;
            CopyPlan plan = plan(prefill, hello, map, slices, config, srcPages, dstPages, 0, dstAux, new int[][] {{0}, window}, dstState);
            for (int op = 0; op < plan.size(); op++) {
                long[] lengths = switch (plan.region(op)) {
                    case KV -> hostile.kvLengths();
                    case AUX -> hostile.auxLengths();
                    case STATE -> hostile.states().get(plan.component(op)).lengths();
                };
                long end = plan.dstOffset(op) + plan.dstSpan(op);
                assertTrue(plan.dstOffset(op) >= 0 && end > plan.dstOffset(op) && end <= lengths[plan.dstBuffer(op)],
                        "op " + op + " of " + plan + " leaves the decode's buffer of " + lengths[plan.dstBuffer(op)] + " bytes");
            }
        }
    }

    private static long[] mutate(Random rnd, long[] honest) {
        return mutate(rnd, honest, 3);
    }

    /** Each value changed with probability 1/{@code odds}. */
    private static long[] mutate(Random rnd, long[] honest, int odds) {
        long[] out = honest.clone();
        for (int i = 0; i < out.length; i++) {
            if (rnd.nextInt(odds) != 0) continue;
            out[i] = switch (rnd.nextInt(6)) {
                case 0 -> out[i] / 2;
                case 1 -> out[i] * 2;
                case 2 -> out[i] + 1;
                case 3 -> Long.MAX_VALUE;
                case 4 -> Long.MAX_VALUE / (1 + rnd.nextInt(7));
                default -> 0;
            };
        }
        return out;
    }

    private static long[] mutatePositive(Random rnd, long[] honest) {
        long[] out = mutate(rnd, honest, 12);
        for (int i = 0; i < out.length; i++) if (out[i] <= 0) out[i] = 1;
        return out;
    }

    private static boolean divides(int heads, int tp) {
        return heads % tp == 0 || tp % heads == 0;
    }

    private static int[] distinct(Random rnd, int n) {
        List<Integer> ids = new ArrayList<>();
        for (int i = 0; i < POOL; i++) ids.add(i);
        Collections.shuffle(ids, rnd);
        int[] out = new int[n];
        for (int i = 0; i < n; i++) out[i] = ids.get(i);
        // Runs as a fresh pool gives them, now and then.
        if (n > 1 && rnd.nextBoolean()) Arrays.sort(out);
        return out;
    }

    private static Fingerprint fingerprint(Geometry g) {
        return Fingerprint.of("m", "bf16", g.pageSize(), g.mla(), g.heads());
    }

    /** A rank's registration: KV buffers of its stage's layers (MHA: all K, then all V), one aux buffer, mamba and swa state. */
    private static KVArgs args(Arena arena, Geometry g, int tp, int stage, boolean decode) {
        KVArgs a = new KVArgs();
        a.pageSize = g.pageSize();
        a.kvCacheDtypeStr = "bf16";
        a.totalKvHeadNum = g.heads();
        int[] layers = g.layers(stage, decode);
        long item = g.kvItem(tp);
        for (int kind = 0; kind < (g.mla() ? 1 : 2); kind++) {
            for (int layer : layers) {
                a.addKvBuffer(arena.allocate(POOL * item), item);
                a.kvLayerIds.add(layer);
            }
        }
        a.addAuxBuffer(arena.allocate(4 * AUX_ROW), AUX_ROW);
        if (g.state()) {
            int dim = g.totalEntries() / tp;
            long slot = (long) ROWS * dim * ENTRY;
            a.addStateComponent(StateType.MAMBA, List.of(arena.allocate(POOL * slot)), List.of(slot));
            a.stateDimPerTensor.add(List.of(dim));
            a.stateSliceOuterCounts.add(List.of(ROWS));
            long windowPage = g.pageSize() * g.tokenBytes(tp);
            a.addStateComponent(StateType.SWA, List.of(arena.allocate(POOL * windowPage)), List.of(windowPage));
            a.stateDimPerTensor.add(List.of(g.headsPerRank(tp)));
            a.stateSliceOuterCounts.add(List.of(g.pageSize()));
        }
        return a;
    }

    /** The last chunk's plan for one destination, as {@code ChunkExecutor.sendTo} builds it. */
    private static CopyPlan plan(RegisteredMemory prefill, Hello h, int[] map, HeadSlice[] slices, KVManagerConfig config, int[] srcPages,
                                 int[] dstPages, int srcAux, int dstAux, int[][] srcState, int[][] dstState) {
        CopyPlan plan = CopyPlan.reusable();
        PageRuns runs = PageRuns.reusable().regroup(srcPages, 0, dstPages, 0, srcPages.length).sortByDestination();
        if (slices == null) {
            TransferPlanner.appendKv(plan, runs, prefill.kvItemLens(), map);
        } else {
            TransferPlanner.appendKvSliced(plan, runs, prefill.kvItemLens(), h.memory().kvItemLens(), h.pageSize(), slices, map);
        }
        TransferPlanner.appendAux(plan, srcAux, dstAux, prefill.auxItemLens());
        if (slices == null) {
            TransferPlanner.appendState(plan, prefill.stateTypes(), srcState, dstState, prefill.stateItemLens(), w -> fail(w));
        } else {
            int n = prefill.stateComponentCount();
            long[][] dstItems = new long[n][];
            int[][] dims = new int[n][], outer = new int[n][];
            for (int c = 0; c < n; c++) {
                dstItems[c] = h.memory().states().get(c).itemLens();
                dims[c] = new int[] {prefill.stateDim(c, 0)};
                outer[c] = new int[] {prefill.stateOuterCount(c, 0)};
            }
            TransferPlanner.appendStateSliced(plan, prefill.stateTypes(), srcState, dstState, prefill.stateItemLens(), dstItems, dims, outer,
                    config.attnTpSize(), config.attnTpRank(), h.attnTpSize(), h.engineRank() % h.attnTpSize());
        }
        return plan;
    }

    private static boolean covers(Coverage c, RegisteredMemory decode, Region region, int component, int buffer, long offset) {
        return switch (region) {
            case KV -> inRange(offset % decode.kvItemLen(buffer), c.kvUnit()[buffer], c.kvOffset()[buffer], c.kvLength()[buffer]);
            case AUX -> c.aux();
            case STATE -> c.state() && inRange(offset % decode.stateItemLens()[component][buffer], c.stateUnit()[component][buffer],
                    c.stateOffset()[component][buffer], c.stateLength()[component][buffer]);
        };
    }

    private static boolean inRange(long inItem, long unit, long offset, long length) {
        long inUnit = inItem % unit;
        return length > 0 && inUnit >= offset && inUnit < offset + length;
    }

    private static long owed(Coverage c, RegisteredMemory decode, int pages, int[][] state) {
        long bytes = 0;
        for (int b = 0; b < decode.kvBufferCount(); b++) bytes += c.kvBytesPerPage(b, decode.kvItemLen(b)) * pages;
        if (c.aux()) bytes += AUX_ROW;
        if (c.state() && state != null) {
            for (int k = 0; k < state.length; k++) bytes += c.stateBytesPerItem(k, 0, decode.stateItemLens()[k][0]) * state[k].length;
        }
        return bytes;
    }

    /** One rank's memory in model terms: what each byte of the room's pages, aux row and state slots holds. */
    private record Model(Geometry g, RegisteredMemory memory, int tp, int rank, int stage, int[] pages, int auxRow, int slot,
                         int[] window) {
        /** Null when the byte is in none of the room's items. */
        Label label(Region region, int component, int buffer, long offset) {
            return switch (region) {
                case AUX -> offset / AUX_ROW == auxRow ? new Label("aux", buffer, 0, 0, 0, 0, (int) (offset % AUX_ROW)) : null;
                case KV -> {
                    int[] ids = memory.kvLayerIds();
                    int kind = 0;
                    for (int b = 0; b < buffer; b++) if (ids[b] == ids[buffer]) kind++;
                    yield paged("kv", ids[buffer], kind, pages, memory.kvItemLen(buffer), offset);
                }
                case STATE -> component == 1 ? paged("swa", stage, 0, window, memory.stateItemLens()[1][0], offset) : mamba(offset);
            };
        }

        private Label paged(String what, int layer, int kind, int[] ids, long item, long offset) {
            int position = indexOf(ids, (int) (offset / item));
            if (position < 0) return null;
            long inPage = offset % item, token = inPage / g.tokenBytes(tp), inToken = inPage % g.tokenBytes(tp);
            int head = g.globalHead(tp, rank, (int) (inToken / g.headItem()));
            return new Label(what, layer, kind, position, (int) token, head, (int) (inToken % g.headItem()));
        }

        private Label mamba(long offset) {
            long item = memory.stateItemLens()[0][0];
            if (offset / item != slot) return null;
            int dim = g.totalEntries() / tp;
            long inSlot = offset % item, row = inSlot / ((long) dim * ENTRY), entry = inSlot % ((long) dim * ENTRY) / ENTRY;
            return new Label("mamba", stage, 0, 0, (int) row, rank * dim + (int) entry, (int) (inSlot % ENTRY));
        }

        long size(Region region, int component, int buffer) {
            return switch (region) {
                case KV -> POOL * memory.kvItemLen(buffer);
                case AUX -> 4 * AUX_ROW;
                case STATE -> POOL * memory.stateItemLens()[component][buffer];
            };
        }

        /** Every byte the room asked for: its pages of every KV buffer, its aux row, its state slot and window pages. */
        void forEachOwnedByte(BiConsumer<String, Long> each) {
            for (int b = 0; b < memory.kvBufferCount(); b++) {
                long item = memory.kvItemLen(b);
                for (int p : pages) for (long i = 0; i < item; i++) each.accept(Region.KV + "/0/" + b, p * item + i);
            }
            for (long i = 0; i < AUX_ROW; i++) each.accept(Region.AUX + "/0/0", auxRow * AUX_ROW + i);
            if (!g.state()) return;
            long slotItem = memory.stateItemLens()[0][0], windowItem = memory.stateItemLens()[1][0];
            for (long i = 0; i < slotItem; i++) each.accept(Region.STATE + "/0/0", slot * slotItem + i);
            for (int p : window) for (long i = 0; i < windowItem; i++) each.accept(Region.STATE + "/1/0", p * windowItem + i);
        }
    }

    private static int indexOf(int[] ids, int id) {
        for (int i = 0; i < ids.length; i++) if (ids[i] == id) return i;
        return -1;
    }
}
