package io.kvferry.transfer;

import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.api.StateType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Every state family end to end: a mamba slot, SWA window pages, DSA and minimax indexer pages,
 * DeepSeek-V4 ring rows and request rows, and block scales — all with the last chunk, with
 * SGLang's length rules (paged lists truncate to the shorter, positional ones must match), and
 * nothing written outside the indices each component named.
 */
@Timeout(60)
class StateTypesTest extends TransferTestBase {
    static final StateType[] TYPES = {StateType.MAMBA, StateType.SWA, StateType.DSA, StateType.MINIMAX_INDEX_K,
            StateType.SWA_RING, StateType.DSV4_REQUEST_STATE, StateType.BLOCK_SCALE, StateType.BLOCK_SCALE_SWA};
    static final long ITEM = 128;
    static final int ENTRIES = 16;

    static final class Side {
        final Arena arena = Arena.ofShared();
        final MemorySegment kv = arena.allocate(PAGE_BYTES * PAGES, 64);
        final MemorySegment[] state = new MemorySegment[TYPES.length];

        Side() {
            for (int c = 0; c < TYPES.length; c++) state[c] = arena.allocate(ITEM * ENTRIES, 64);
        }

        KVArgs args() {
            KVArgs a = new KVArgs();
            a.pageSize = PAGE_SIZE;
            a.kvCacheDtypeStr = "bf16";
            a.addKvBuffer(kv, PAGE_BYTES);
            for (int c = 0; c < TYPES.length; c++) a.addStateComponent(TYPES[c], List.of(state[c]), List.of(ITEM));
            return a;
        }
    }

    static long value(long room, int component, int logicalIndex, long off) {
        long h = room * 0x9E3779B97F4A7C15L ^ (component + 1L) * 0xC2B2AE3D27D4EB4FL ^ (logicalIndex + 1L) * 0x165667B19E3779F9L ^ off;
        return h ^ (h >>> 31);
    }

    @Test
    void everyStateTypeLandsWhereItsIndicesSayAndNowhereElse() {
        Side p = new Side(), d = new Side();
        closeables.add(p.arena);
        closeables.add(d.arena);
        KVManager pm = KVFerry.createManager("tcp", p.args(), DisaggregationMode.PREFILL, cfg(1, 0).build());
        closeables.add(pm);
        pm.registerToBootstrap();
        KVManager dm = KVFerry.createManager("tcp", d.args(), DisaggregationMode.DECODE, cfg(1, 0).build());
        closeables.add(dm);
        // Prefill indices per component, and decode's. SWA sends 3 window pages but decode kept 2:
        // truncated to 2. Everything else matches in length.
        int[][] src = {{2}, {4, 5, 6}, {1, 2, 3, 4}, {7, 8}, {9}, {3}, {10, 11}, {12}};
        int[][] dst = {{5}, {8, 9}, {12, 13, 14, 15}, {0, 1}, {6}, {11}, {2, 3}, {7}};
        long room = 808;
        for (int c = 0; c < TYPES.length; c++) {
            for (int i = 0; i < src[c].length; i++) {
                MemorySegment item = p.state[c].asSlice(src[c][i] * ITEM, ITEM);
                for (long o = 0; o < ITEM; o += 8) item.set(ValueLayout.JAVA_LONG_UNALIGNED, o, value(room, c, i, o));
            }
        }
        KVReceiver recv = dm.createReceiver(addr, room);
        bootstrap(recv, 0);
        recv.sendMetadata(new int[]{1, 2}, -1, dst, 0);
        KVSender send = pm.createSender(addr, room);
        await(send::poll, KVPoll.WaitingForInput);
        send.init(2);
        send.send(new int[]{3}, src); // state on a non-last chunk is ignored
        send.send(new int[]{4}, src);
        await(recv::poll, KVPoll.Success);
        await(send::poll, KVPoll.Success);
        for (int c = 0; c < TYPES.length; c++) {
            for (int e = 0; e < ENTRIES; e++) {
                int i = indexOf(dst[c], e);
                if (i >= src[c].length) i = -1; // beyond the truncated length: must stay untouched
                MemorySegment item = d.state[c].asSlice(e * ITEM, ITEM);
                for (long o = 0; o < ITEM; o += 8) {
                    long expected = i < 0 ? 0 : value(room, c, i, o);
                    assertEquals(expected, item.get(ValueLayout.JAVA_LONG_UNALIGNED, o),
                            TYPES[c].wire() + " entry " + e);
                }
            }
        }
    }

    @Test
    void aPositionalStateLengthMismatchFailsTheRoomClearly() {
        Side p = new Side(), d = new Side();
        closeables.add(p.arena);
        closeables.add(d.arena);
        KVManager pm = KVFerry.createManager("tcp", p.args(), DisaggregationMode.PREFILL, cfg(1, 0).build());
        closeables.add(pm);
        pm.registerToBootstrap();
        KVManager dm = KVFerry.createManager("tcp", d.args(), DisaggregationMode.DECODE, cfg(1, 0).build());
        closeables.add(dm);
        int[][] src = {{2}, {}, {}, {}, {9, 10}, {}, {}, {}};
        int[][] dst = {{5}, {}, {}, {}, {6}, {}, {}, {}};
        KVReceiver recv = dm.createReceiver(addr, 9);
        bootstrap(recv, 0);
        recv.sendMetadata(new int[]{1}, -1, dst, 0);
        KVSender send = pm.createSender(addr, 9);
        await(send::poll, KVPoll.WaitingForInput);
        send.init(1);
        send.send(new int[]{3}, src);
        await(recv::poll, KVPoll.Failed);
        String why = failure(recv::failureException);
        assertTrue(why.contains("state component 4 (swa_ring) index count mismatch: prefill 2 vs decode 1"), why);
    }

    @Test
    void aLastChunkWithoutTheStateTheDecodeAskedForFailsTheRoomClearly() {
        Side p = new Side(), d = new Side();
        closeables.add(p.arena);
        closeables.add(d.arena);
        KVManager pm = KVFerry.createManager("tcp", p.args(), DisaggregationMode.PREFILL, cfg(1, 0).build());
        closeables.add(pm);
        pm.registerToBootstrap();
        KVManager dm = KVFerry.createManager("tcp", d.args(), DisaggregationMode.DECODE, cfg(1, 0).build());
        closeables.add(dm);
        int[][] dst = {{5}, {}, {}, {}, {}, {}, {}, {}};
        KVReceiver recv = dm.createReceiver(addr, 10);
        bootstrap(recv, 0);
        recv.sendMetadata(new int[]{1}, -1, dst, 0);
        KVSender send = pm.createSender(addr, 10);
        await(send::poll, KVPoll.WaitingForInput);
        send.init(1);
        send.send(new int[]{3}, null); // the decode's mamba slot would stay unwritten
        await(send::poll, KVPoll.Failed);
        String prefillWhy = failure(send::failureException);
        assertTrue(prefillWhy.contains("state component 0 (mamba): the decode asked for 1 index but this prefill rank sent none"),
                prefillWhy);
        await(recv::poll, KVPoll.Failed);
        String why = failure(recv::failureException);
        assertTrue(why.contains("state component 0 (mamba): the decode asked for 1 index but this prefill rank sent none"), why);
    }

    static int indexOf(int[] a, int v) {
        for (int i = 0; i < a.length; i++) if (a[i] == v) return i;
        return -1;
    }
}
