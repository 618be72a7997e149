package io.kvferry.bench.sweep;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.ModelShape;
import io.kvferry.testkit.Workload;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.file.Path;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** A point's JSON carries the sweep's baselines and ratios that agree with them. */
class SweepRunnerTest {
    @TempDir
    Path dir;

    @Test
    void pointRatiosAreToTheSweepsBaselinesAndNullWhereNoBaselineWasMeasured() throws Exception {
        BenchConfig base = new BenchConfig(ModelShape.preset("tiny"), new Workload(2, 64, 16, 64, 1, 0, 5L, 1), "inproc", 1, "t");
        SweepPlan.Grid grid = new SweepPlan.Grid("tiny", List.of(16), List.of("inproc"), List.of(1), 64, 2, 1,
                "tiny", 16, 4, List.of(200.0), 0.1, 20);
        SweepPlan plan = SweepPlan.of(base, grid, false, false, false);
        SweepRunner.Outcome o = new SweepRunner(plan, dir, new PrintStream(OutputStream.nullOutputStream()), false).run();
        assertEquals(0, o.failedPoints());
        ObjectMapper json = new ObjectMapper();
        JsonNode bw = json.readTree(dir.resolve("points/bw-inproc-page16-c1.json").toFile());
        double memcpy = bw.get("memcpy_gbps").asDouble();
        assertTrue(memcpy > 0, bw.toString());
        assertEquals(Math.round(bw.get("gbps").asDouble() / memcpy * 1000) / 1000.0, bw.get("ratio_to_memcpy").asDouble(), 1e-9,
                bw.toString());
        assertEquals(Math.round(bw.get("transfer_gbps").asDouble() / memcpy * 1000) / 1000.0,
                bw.get("ratio_transfer_to_memcpy").asDouble(), 1e-9, bw.toString());
        assertTrue(bw.get("ratio_transfer_to_memcpy").asDouble() > 0, "data moved, so the ratio is not 0: " + bw);
        assertTrue(bw.get("iperf3_gbps").isNull() && bw.get("ratio_to_iperf3").isNull(), "no iperf3 in this sweep: " + bw);

        JsonNode load = json.readTree(dir.resolve("points/load-tcp-rate200.json").toFile());
        for (String f : List.of("memcpy_gbps", "ratio_to_memcpy", "ratio_transfer_to_memcpy", "ratio_datapath_to_memcpy")) {
            assertTrue(load.get(f).isNull(), "no memcpy baseline for load points, so no ratio to one: " + f + " in " + load);
        }
    }
}
