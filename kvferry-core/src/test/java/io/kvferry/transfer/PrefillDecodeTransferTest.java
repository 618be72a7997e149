package io.kvferry.transfer;

import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** End-to-end transfers between prefill and decode managers in one JVM, over real loopback TCP. */
@Timeout(60)
class PrefillDecodeTransferTest extends TransferTestBase {
    @ParameterizedTest
    @ValueSource(strings = {"tcp", "inproc", "shm", "auto"})
    void equalTpMovesFragmentedChunkedRequestsByteExact(String backend) {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, backend, 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, backend, cfg(1, 0).build(), 0, PAGE_SIZE);
        Random rnd = new Random(7);
        for (int round = 0; round < 6; round++) {
            // Three rooms in flight at once, disjoint pages on each side.
            int[] srcAll = distinctPages(rnd, 36, PAGES), dstAll = distinctPages(rnd, 36, PAGES);
            List<Transfer> ts = new ArrayList<>();
            for (int k = 0; k < 3; k++) {
                int n = 1 + rnd.nextInt(12);
                long room = 1 + rnd.nextLong(Long.MAX_VALUE - 1);
                ts.add(start(p, pm, d, room, Arrays.copyOfRange(srcAll, k * 12, k * 12 + n),
                        Arrays.copyOfRange(dstAll, k * 12, k * 12 + n), k, ROWS - 1 - k, 0));
            }
            for (Transfer t : ts) assertLanded(t, dm);
            String expected = "auto".equals(backend) ? "shm" : backend;
            assertEquals(expected, ts.get(0).receiver().getTransferMetric().transport(), "data path chosen for " + backend);
        }
        assertTrue(dm.canariesIntact());
        assertEquals(0, d.stats().trackedRooms());
        assertEquals(0, p.stats().trackedRooms());
    }

    @Test
    void decodePrefixAndZeroPageLastChunkDeliverStateAndAux() {
        TestRank pm = rank(), dm = rank();
        KVManager p = prefill(pm, "tcp", 1, 0, PAGE_SIZE);
        KVManager d = decode(dm, "tcp", cfg(1, 0).build(), 0, PAGE_SIZE);
        // 5 pages already on decode: prefill sends the remaining 4, logical pages 5..8.
        assertLanded(start(p, pm, d, 11, new int[]{3, 4, 9, 10}, new int[]{20, 21, 22, 40}, 1, 2, 5), dm);
        // Decode holds everything: a zero-page last chunk still carries state and aux.
        assertLanded(start(p, pm, d, 12, new int[0], new int[0], 3, 4, 7), dm);
    }

    @Test
    void tensorParallelTwoOnBothSides() {
        TestRank p0 = rank(), p1 = rank(), d0 = rank(), d1 = rank();
        KVManager pr0 = prefill(p0, "tcp", 2, 0, PAGE_SIZE);
        KVManager pr1 = prefill(p1, "tcp", 2, 1, PAGE_SIZE);
        KVManager de0 = decode(d0, "tcp", cfg(2, 0).build(), 0, PAGE_SIZE);
        KVManager de1 = decode(d1, "tcp", cfg(2, 1).build(), 1, PAGE_SIZE);
        Transfer a = start(pr0, p0, de0, 77, new int[]{1, 2, 3, 8}, new int[]{30, 31, 5, 6}, 0, 1, 0);
        Transfer b = start(pr1, p1, de1, 77, new int[]{9, 10, 11, 12}, new int[]{2, 4, 6, 8}, 2, 3, 0);
        assertLanded(a, d0);
        assertLanded(b, d1);
        // Each decode rank got its own prefill rank's shard, not the other's.
        assertTrue(d0.pageIsZero(2) && d1.pageIsZero(30));
    }

    @Test
    void fakeBackendSucceedsWithoutMovingData() {
        KVManager p = KVFerry.createManager("fake", null, DisaggregationMode.PREFILL, cfg(1, 0).build());
        KVManager d = KVFerry.createManager("fake", null, DisaggregationMode.DECODE, cfg(1, 0).build());
        KVReceiver r = d.createReceiver("2.2.2.2:1", 5);
        bootstrap(r, 0);
        r.sendMetadata(new int[]{1, 2}, 0);
        assertEquals(KVPoll.Success, r.poll());
        KVSender s = p.createSender("2.2.2.2:1", 5);
        assertEquals(KVPoll.WaitingForInput, s.poll());
        s.init(2, 0);
        s.send(new int[]{3, 4});
        assertEquals(KVPoll.Success, s.poll());
    }

    @Test
    void unknownBackendIsAClearError() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> KVFerry.createManager("rdma9", null, DisaggregationMode.PREFILL, cfg(1, 0).build()));
        assertTrue(e.getMessage().contains("rdma9"));
    }
}
