package io.kvferry.decode;

import io.kvferry.api.KVArgs;
import io.kvferry.api.KVPoll;
import io.kvferry.api.StateType;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.protocol.ControlMessage;
import io.kvferry.protocol.Coverage;
import io.kvferry.protocol.FrameCodec;
import io.kvferry.protocol.ProtocolException;
import io.kvferry.protocol.Region;
import io.kvferry.protocol.WriteList;
import io.kvferry.transport.WriteRejectedException;
import io.kvferry.transport.WriteSink;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.constraints.Size;
import net.jqwik.api.statistics.Statistics;

import java.lang.foreign.Arena;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.TreeSet;
import java.util.concurrent.atomic.AtomicLongArray;

import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * A linked prefill rank (it holds the token) sends a room any sequence of WRITEs and WRITE_LISTs it
 * likes: plausible ones (whole pages, its head slice of every token slot, aux rows, state slots, owned
 * or not) and mutations of them (shifted, shortened, lengthened, other piece shapes, other strides).
 * Whatever the gate admits must touch only bytes the room owns and the link's coverage declares, and
 * no destination byte twice; anything else is a {@link WriteRejectedException} (never another
 * throwable). A model of every byte of the decode's memory checks each admitted write.
 */
class WriteGatePropertiesTest {
    private static final long PAGE = 256, AUX = 64, SLOT = 128;
    private static final int PAGES = 16, ROWS = 4, SLOTS = 4;
    private static final Arena ARENA = Arena.ofShared(); // lives with the test JVM: a few KiB
    private static final RegisteredMemory MEMORY = memory();
    private static final String PREFILL = "10.0.0.1:7000";

    private static RegisteredMemory memory() {
        KVArgs a = new KVArgs();
        a.pageSize = 8;
        a.addKvBuffer(ARENA.allocate(PAGES * PAGE), PAGE);
        a.addAuxBuffer(ARENA.allocate(ROWS * AUX), AUX);
        a.addStateComponent(StateType.MAMBA, List.of(ARENA.allocate(SLOTS * SLOT)), List.of(SLOT));
        return RegisteredMemory.from(a);
    }

    /** One try: a room, its link's coverage, and a model of which bytes may land and which did. */
    private static final class Trial {
        final WriteGate gate;
        final boolean sliced;
        final long unit, offset, length;
        final boolean[] kvAllowed = new boolean[(int) (PAGES * PAGE)], auxAllowed = new boolean[(int) (ROWS * AUX)],
                stateAllowed = new boolean[(int) (SLOTS * SLOT)];
        final boolean[] kvLanded = new boolean[kvAllowed.length], auxLanded = new boolean[auxAllowed.length],
                stateLanded = new boolean[stateAllowed.length];
        int admitted;

        Trial(boolean sliced, int[] pages, int aux, int[] slots) {
            this.sliced = sliced;
            unit = sliced ? 32 : PAGE;
            offset = sliced ? 8 : 0;
            length = sliced ? 16 : PAGE;
            DecodeRooms rooms = new DecodeRooms();
            gate = new WriteGate(MEMORY, rooms);
            Coverage coverage = new Coverage(new long[]{unit}, new long[]{offset}, new long[]{length}, true, true,
                    new long[][]{{SLOT}}, new long[][]{{0}}, new long[][]{{SLOT}});
            DecodeRoom r = rooms.create(1, "bootstrap");
            assertTrue(r != null && r.slot.advance(KVPoll.WaitingForInput));
            PrefillLink link = new PrefillLink("bootstrap", PREFILL, null, 0);
            link.coverage = coverage;
            link.granules = LinkGranules.of(coverage, MEMORY);
            r.targets = List.of(new DecodeRoom.Target(link, 0, 0, false));
            r.landedFrom = new AtomicLongArray(1);
            int[][] state = {slots};
            long bits = link.granules.bits(pages.length, aux >= 0, state);
            r.written = new long[(int) ((bits + 63) / 64)];
            r.allowance = new DecodeRoom.Allowance(pages, pages, aux, state, state, new long[1], new int[][]{pages},
                    new int[][]{pages}, new long[]{0});
            for (int p : pages) {
                for (long u = 0; u < PAGE / unit; u++) {
                    for (long b = 0; b < length; b++) kvAllowed[(int) (p * PAGE + u * unit + offset + b)] = true;
                }
            }
            if (aux >= 0) Arrays.fill(auxAllowed, (int) (aux * AUX), (int) ((aux + 1) * AUX), true);
            for (int s : slots) Arrays.fill(stateAllowed, (int) (s * SLOT), (int) ((s + 1) * SLOT), true);
        }

        /** Marks the bytes of an admitted piece landed: each must be allowed and not landed before. */
        void landed(Region region, long at, long bytes, String what) {
            boolean[] allowed = switch (region) {
                case KV -> kvAllowed;
                case AUX -> auxAllowed;
                case STATE -> stateAllowed;
            };
            boolean[] done = switch (region) {
                case KV -> kvLanded;
                case AUX -> auxLanded;
                case STATE -> stateLanded;
            };
            for (long b = at; b < at + bytes; b++) {
                if (b < 0 || b >= allowed.length || !allowed[(int) b]) fail("admitted " + what + ": byte " + b + " of " + region
                        + " is not the room's or not the link's to write");
                if (done[(int) b]) fail("admitted " + what + ": byte " + b + " of " + region + " was written before");
                done[(int) b] = true;
            }
        }

        void write(Region region, long at, long payload, long piece, long stride) {
            boolean strided = piece != payload;
            long span = strided ? (payload / piece - 1) * stride + piece : payload;
            String what = region + " write at " + at + " of " + payload + (strided ? " in pieces of " + piece + " every " + stride : "");
            WriteSink.Landing l = new WriteSink.Landing(PREFILL, null);
            try {
                gate.begin(l, 1, region, 0, 0, at, span, payload, piece, stride);
            } catch (WriteRejectedException e) {
                assertNotNull(e.getMessage());
                return;
            } catch (Throwable t) {
                fail("the gate failed with " + t + " on a " + what, t);
            }
            admitted++;
            if (!strided) {
                landed(region, at, payload, what);
            } else {
                for (long k = 0; k < payload / piece; k++) landed(region, at + k * stride, piece, what);
            }
            gate.end(l, true);
        }

        void list(WriteList list) {
            WriteSink.Landing l = new WriteSink.Landing(PREFILL, null);
            try {
                gate.beginList(l, list);
            } catch (WriteRejectedException e) {
                assertNotNull(e.getMessage());
                return;
            } catch (Throwable t) {
                fail("the gate failed with " + t + " on a list of " + list.count() + " pieces", t);
            }
            admitted++;
            for (int i = 0; i < list.count(); i++) {
                landed(list.region(i), list.offset(i), list.length(i), "piece " + i + " of a list");
            }
            gate.end(l, true);
        }
    }

    /** A plausible write's (region, offset, payload, piece, stride), then perhaps mutated. */
    private static long[] plausible(Trial t, Random rnd) {
        int region = rnd.nextInt(4);
        long at, payload, piece, stride;
        switch (region) {
            case 0, 1 -> {
                int first = rnd.nextInt(PAGES + 1), n = 1 + rnd.nextInt(3);
                if (t.sliced) {
                    long units = n * (PAGE / t.unit);
                    at = first * PAGE + t.offset;
                    piece = t.length;
                    stride = t.unit;
                    payload = units * piece;
                } else {
                    at = first * PAGE;
                    payload = n * PAGE;
                    piece = payload;
                    stride = 0;
                }
                region = 0;
            }
            case 2 -> {
                at = rnd.nextInt(ROWS + 1) * AUX;
                payload = AUX;
                piece = payload;
                stride = 0;
            }
            default -> {
                at = rnd.nextInt(SLOTS + 1) * SLOT;
                payload = (1 + rnd.nextInt(2)) * SLOT;
                piece = payload;
                stride = 0;
                region = 3;
            }
        }
        if (rnd.nextInt(3) == 0) { // a mutation
            switch (rnd.nextInt(6)) {
                case 0 -> at += rnd.nextInt(17) - 8;
                case 1 -> payload = Math.max(1, payload + (rnd.nextInt(17) - 8) * (piece == payload ? 1 : piece));
                case 2 -> piece = Math.max(1, piece / 2);
                case 3 -> stride = Math.max(0, stride + rnd.nextInt(17) - 8);
                case 4 -> at = Math.max(0, at - PAGE / 2);
                default -> { // a contiguous write of a strided one's span, or the other way round
                    if (piece != payload) {
                        payload = (payload / piece - 1) * stride + piece;
                        piece = payload;
                    } else {
                        piece = Math.max(1, payload / 4);
                        stride = piece * 2;
                    }
                }
            }
            if (piece != payload && (payload % piece != 0 || stride < piece)) piece = payload; // what the codec lets through
            at = Math.max(0, at);
        }
        return new long[]{region == 0 ? 0 : region == 2 ? 1 : 2, at, payload, piece, stride};
    }

    private static Region region(long code) {
        return code == 0 ? Region.KV : code == 1 ? Region.AUX : Region.STATE;
    }

    @Property(seed = "20261207", tries = 500)
    void theGateAdmitsOnlyOwnedCoveredBytesEachOnce(@ForAll boolean sliced, @ForAll @Size(max = 8) List<@IntRange(min = 0, max = PAGES - 1) Integer> pageIds,
                                                    @ForAll @IntRange(min = -1, max = ROWS - 1) int aux,
                                                    @ForAll @Size(max = SLOTS) List<@IntRange(min = 0, max = SLOTS - 1) Integer> slotIds,
                                                    @ForAll long seed, @ForAll @IntRange(min = 1, max = 60) int writes) throws Exception {
        int[] pages = new TreeSet<>(pageIds).stream().mapToInt(Integer::intValue).toArray();
        int[] slots = new TreeSet<>(slotIds).stream().mapToInt(Integer::intValue).toArray();
        Trial t = new Trial(sliced, pages, aux, slots);
        Random rnd = new Random(seed);
        for (int w = 0; w < writes; w++) {
            if (rnd.nextInt(3) > 0) {
                long[] op = plausible(t, rnd);
                t.write(region(op[0]), op[1], op[2], op[3], op[4]);
                continue;
            }
            // A piece list: contiguous pieces, as the codec lets them through (ascending, not overlapping).
            int n = 1 + rnd.nextInt(4);
            WriteList built = WriteList.builder(1, n);
            for (int i = 0; i < n; i++) {
                long[] op = plausible(t, rnd);
                long bytes = op[3] == op[2] ? op[2] : op[3]; // a strided op's first piece
                built.add(region(op[0]), 0, 0, op[1], bytes);
            }
            ControlMessage decoded;
            try {
                decoded = FrameCodec.decodeFrame(FrameCodec.encode(built));
            } catch (ProtocolException | IllegalArgumentException e) {
                continue; // the decode's reader would have ended the link
            }
            t.list((WriteList) decoded);
        }
        Statistics.collect(t.admitted == 0 ? "nothing admitted" : "some admitted");
    }
}
