package io.kvferry.bench.jmh;

import io.kvferry.plan.CopyPlan;
import io.kvferry.protocol.WriteHeader;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The JMH benchmarks measure what they claim: their inputs are valid and their bodies do the work (nothing is timed here). */
class MicrobenchSetupTest {
    @Test
    void frameCodecBenchEncodesAndDecodesARealWriteHeader() throws Exception {
        FrameCodecBench b = new FrameCodecBench();
        b.setUp();
        assertEquals(b.frame.remaining(), b.encodeWriteHeader().position(), "encode writes one whole header frame");
        WriteHeader w = assertInstanceOf(WriteHeader.class, b.decodeWriteHeader());
        assertEquals(42, w.room());
        assertEquals(16384, w.length());
    }

    @Test
    void headSliceBenchSendsEveryHeadSlicedByteThroughARealConnection() throws Exception {
        for (String pages : new String[]{"contiguous", "fragmented"}) {
            HeadSliceGatherBench b = new HeadSliceGatherBench();
            b.pages = pages;
            b.setUp();
            try {
                long sliceBytes = (long) HeadSliceGatherBench.PAGES * HeadSliceGatherBench.PAGE_SIZE * 2
                        * HeadSliceGatherBench.HEAD_BYTES * HeadSliceGatherBench.BUFFERS;
                CopyPlan plan = b.planOnly();
                assertEquals(sliceBytes, plan.totalBytes(), pages);
                for (int op = 0; op < plan.size(); op++) assertTrue(plan.strided(op), "every op gathers pieces: " + pages);
                assertEquals(sliceBytes, b.planAndSend());
                // The drain thread sees the slice plus one header per op, once the kernel delivered it.
                long deadline = System.nanoTime() + 30_000_000_000L;
                while (b.drained.get() <= sliceBytes && System.nanoTime() < deadline) Thread.onSpinWait();
                assertTrue(b.drained.get() > sliceBytes, pages + ": drained " + b.drained.get());
            } finally {
                b.tearDown();
            }
        }
    }

    @Test
    void plannerBenchPlansEveryPageOfEveryBuffer() {
        for (String pages : new String[]{"contiguous", "fragmented"}) {
            PlannerBench b = new PlannerBench();
            b.pages = pages;
            b.setUp();
            CopyPlan plan = b.planKv();
            assertEquals(4096L * 32 * 16 * 1024, plan.totalBytes(), pages);
            if (pages.equals("fragmented")) assertEquals(true, plan.size() > 4096, "shuffled free lists give about one op per page");
        }
    }

    @Test
    void metricsBenchRecordsAWholeChunkAndARoom() {
        MetricsBench b = new MetricsBench();
        b.registry = "prometheus";
        b.setUp();
        assertEquals(64, b.plan.size(), "one op per buffer: a contiguous 256-page chunk");
        assertEquals(256L * 16 * 1024, b.plan.length(0));
        b.recordWrite();
        b.recordConcludedRoom();
        assertEquals(1L, b.telemetry.roomsConcluded());
    }
}
