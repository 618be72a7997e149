package io.kvferry.transfer;

import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVArgs;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.memory.SharedArena;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * MHA/GQA with different prefill and decode TP: every decode rank must end up with exactly its
 * own heads of every token, whichever prefill ranks hold them (including GQA heads replicated
 * across ranks), and nothing else in its pool may change.
 */
@Timeout(60)
class MhaHeteroTpTest extends TransferTestBase {
    static final int PS = 4;          // tokens per page
    static final int HEAD_BYTES = 64; // head_dim 32 x bf16
    static final int BUFS = 4;        // 2 layers x (K, V)
    static final int POOL = 32;

    /** One rank's KV pool with {@code heads} heads per token slot. */
    static final class Pool {
        /** Shared memory so the shm backend can serve it too (sparse: only written pages cost memory). */
        final Arena arena = SharedArena.open("mha-pool", 16 << 20);
        final int heads;
        final long pageBytes;
        final MemorySegment[] kv = new MemorySegment[BUFS];

        Pool(int heads) {
            this.heads = heads;
            this.pageBytes = (long) PS * heads * HEAD_BYTES;
            for (int b = 0; b < BUFS; b++) kv[b] = arena.allocate(pageBytes * POOL, 64);
        }

        KVArgs args(int rank, int totalHeads) {
            KVArgs a = new KVArgs();
            a.engineRank = rank;
            a.pageSize = PAGE_SIZE_UNUSED;
            a.kvCacheDtypeStr = "bf16";
            a.kvHeadNum = heads;
            a.totalKvHeadNum = totalHeads;
            for (MemorySegment b : kv) a.addKvBuffer(b, pageBytes);
            return a;
        }

        long offset(int page, int tokenInPage, int localHead) {
            return page * pageBytes + ((long) tokenInPage * heads + localHead) * HEAD_BYTES;
        }
    }

    static final int PAGE_SIZE_UNUSED = PS;

    static long value(long room, int buffer, int token, int globalHead, long off) {
        long h = room * 0x9E3779B97F4A7C15L ^ buffer * 0xC2B2AE3D27D4EB4FL ^ token * 0x165667B19E3779F9L
                ^ (globalHead + 1L) * 0xD6E8FEB86659FD93L ^ off;
        return h ^ (h >>> 29);
    }

    /** Global head held in local slot {@code j} by rank {@code r} of a TP-{@code tp} instance (GQA replication by division). */
    static int globalHead(int totalHeads, int tp, int r, int j) {
        return tp <= totalHeads ? r * (totalHeads / tp) + j : r / (tp / totalHeads);
    }

    @ParameterizedTest(name = "MHA H={2}: P{0} -> D{1} over {3}")
    @CsvSource({"4,2,8,tcp", "2,4,8,tcp", "1,4,8,tcp", "4,1,8,tcp", "8,2,8,tcp", "4,2,2,tcp", "2,4,2,tcp", "1,8,2,tcp",
            "8,1,4,tcp", "4,2,8,inproc", "2,4,2,inproc", "4,2,8,shm", "2,4,2,shm", "1,8,2,shm"})
    void everyDecodeRankGetsExactlyItsHeads(int prefillTp, int decodeTp, int totalHeads, String backend) {
        List<Pool> pp = new ArrayList<>(), dp = new ArrayList<>();
        List<KVManager> pre = new ArrayList<>(), dec = new ArrayList<>();
        for (int r = 0; r < prefillTp; r++) {
            Pool pool = new Pool(Math.max(1, totalHeads / prefillTp));
            pp.add(pool);
            closeables.add(pool.arena);
            KVManager m = KVFerry.createManager(backend, pool.args(r, totalHeads), DisaggregationMode.PREFILL,
                    cfg(prefillTp, r).build());
            closeables.add(m);
            m.registerToBootstrap();
            pre.add(m);
        }
        for (int r = 0; r < decodeTp; r++) {
            Pool pool = new Pool(Math.max(1, totalHeads / decodeTp));
            dp.add(pool);
            closeables.add(pool.arena);
            KVManager m = KVFerry.createManager(backend, pool.args(r, totalHeads), DisaggregationMode.DECODE,
                    cfg(decodeTp, r).build());
            closeables.add(m);
            dec.add(m);
        }
        long room = 99;
        int[] src = {5, 6, 7, 12, 20};
        int[] dst = {1, 2, 9, 10, 11};
        List<KVReceiver> receivers = new ArrayList<>();
        for (int r = 0; r < decodeTp; r++) {
            KVReceiver recv = dec.get(r).createReceiver(addr, room);
            bootstrap(recv, 0);
            assertEquals(KVPoll.WaitingForInput, recv.poll(), () -> "decode init failed");
            recv.sendMetadata(dst, -1, null, 0);
            receivers.add(recv);
        }
        List<KVSender> senders = new ArrayList<>();
        for (int r = 0; r < prefillTp; r++) {
            Pool pool = pp.get(r);
            for (int b = 0; b < BUFS; b++) {
                for (int j = 0; j < src.length; j++) {
                    for (int t = 0; t < PS; t++) {
                        for (int h = 0; h < pool.heads; h++) {
                            int gh = globalHead(totalHeads, prefillTp, r, h);
                            long base = pool.offset(src[j], t, h);
                            for (long o = 0; o < HEAD_BYTES; o += 8) {
                                pool.kv[b].set(ValueLayout.JAVA_LONG_UNALIGNED, base + o, value(room, b, j * PS + t, gh, o));
                            }
                        }
                    }
                }
            }
            KVSender s = pre.get(r).createSender(addr, room);
            await(s::poll, KVPoll.WaitingForInput);
            s.init(src.length);
            s.send(new int[]{5, 6});
            s.send(new int[]{7, 12, 20});
            senders.add(s);
        }
        for (KVReceiver r : receivers) await(r::poll, KVPoll.Success);
        for (KVSender s : senders) await(s::poll, KVPoll.Success);
        for (int r = 0; r < decodeTp; r++) {
            Pool pool = dp.get(r);
            for (int b = 0; b < BUFS; b++) {
                for (int page = 0; page < POOL; page++) {
                    int j = indexOf(dst, page);
                    for (int t = 0; t < PS; t++) {
                        for (int h = 0; h < pool.heads; h++) {
                            int gh = globalHead(totalHeads, decodeTp, r, h);
                            long base = pool.offset(page, t, h);
                            for (long o = 0; o < HEAD_BYTES; o += 8) {
                                long expected = j < 0 ? 0 : value(room, b, j * PS + t, gh, o);
                                long got = pool.kv[b].get(ValueLayout.JAVA_LONG_UNALIGNED, base + o);
                                if (got != expected) {
                                    throw new AssertionError("decode rank " + r + " buffer " + b + " page " + page + " token " + t
                                            + " head " + gh + ": wrong bytes");
                                }
                            }
                        }
                    }
                }
            }
        }
        long moved = senders.stream().mapToLong(s -> s.getTransferMetric().transferTotalBytes()).sum();
        assertTrue(moved >= (long) BUFS * src.length * PS * totalHeads * HEAD_BYTES, "bytes moved: " + moved);
    }

    static int indexOf(int[] a, int v) {
        for (int i = 0; i < a.length; i++) if (a[i] == v) return i;
        return -1;
    }
}
