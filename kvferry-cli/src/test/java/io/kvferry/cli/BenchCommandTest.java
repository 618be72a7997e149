package io.kvferry.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import io.kvferry.bench.sweep.SweepRunner;

import javax.imageio.ImageIO;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The CLI as a user runs it: exit codes, the human summary and the --json last line. */
@Timeout(120)
class BenchCommandTest {
    record Run(int code, String out) {}

    static Run run(String... args) {
        PrintStream old = System.out;
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        System.setOut(new PrintStream(buf, true, StandardCharsets.UTF_8));
        try {
            int code = Main.run(args);
            return new Run(code, buf.toString(StandardCharsets.UTF_8));
        } finally {
            System.setOut(old);
        }
    }

    static JsonNode lastJson(String out) throws Exception {
        String[] lines = out.strip().split("\n");
        return new ObjectMapper().readTree(lines[lines.length - 1]);
    }

    @Test
    void embeddedBenchPrintsAJsonSummaryAsTheLastLine() throws Exception {
        Run r = run("bench", "--model", "tiny-hybrid", "--requests", "16", "--prompt-tokens", "300", "--json");
        assertEquals(0, r.code(), r.out());
        JsonNode j = lastJson(r.out());
        for (String f : new String[]{"requests", "warmup", "succeeded", "failed", "verified_bytes", "gbps", "latency_ms",
                "datapath_gbps", "transfer_gbps", "datapath_op_bytes", "ucx_perftest_gbps", "ratio_transfer_to_ucx_perftest",
                "ratio_transfer_to_iperf3", "checksum"}) {
            assertTrue(j.has(f), "missing " + f + " in " + j);
        }
        // 16 measured requests after the default warm-up (1 GiB of 600 KiB rooms), every one verified.
        int warmup = WorkloadOptions.BenchDefaults.warmupRequests(300L * 2048);
        assertEquals(warmup, j.get("warmup").asInt());
        assertEquals(16 + warmup, j.get("requests").asInt());
        assertEquals(16 + warmup, j.get("succeeded").asInt());
        assertTrue(j.get("datapath_gbps").asDouble() > 0);
        assertEquals(0, j.get("failed").asInt());
        assertTrue(j.get("verified_bytes").asLong() > 16L * 256 * 2048);
        assertTrue(j.get("latency_ms").has("p50") && j.get("latency_ms").has("p99"));
    }

    @Test
    void inprocAndFakeBackendsRunTheSameJob() throws Exception {
        Run inproc = run("bench", "--model", "tiny", "--requests", "8", "--prompt-tokens", "128", "--transport", "inproc",
                "--warmup", "0", "--checksum", "full", "--json");
        assertEquals(0, inproc.code(), inproc.out());
        assertEquals("full", lastJson(inproc.out()).get("checksum").asText(), "the JSON names the checksum mode it ran with");
        Run fake = run("bench", "--model", "tiny", "--requests", "4", "--prompt-tokens", "64", "--transport", "fake", "--warmup", "0", "--json");
        // Nothing moves on the fake backend, so verification must fail: the bench does not pretend.
        assertEquals(1, fake.code());
        assertEquals(4, lastJson(fake.out()).get("corrupted").asInt());
    }

    @Test
    void heterogeneousLayoutsAreVerifiedByteForByte() throws Exception {
        for (String[] layout : new String[][]{
                {"--kv-heads", "4", "--prefill-tp", "4", "--decode-tp", "2"},
                {"--kv-heads", "2", "--prefill-tp", "1", "--decode-tp", "4"},
                {"--mla", "--prefill-tp", "1", "--decode-tp", "4"},
                {"--mla", "--prefill-tp", "4", "--decode-tp", "2"},
                {"--prefill-pp", "2"},
                {"--prefill-pp", "2", "--decode-pp", "2"},
                {"--kv-heads", "4", "--prefill-pp", "4", "--prefill-tp", "2", "--decode-tp", "4"}}) {
            List<String> args = new ArrayList<>(List.of(
                    "bench", "--model", "tiny", "--requests", "6", "--prompt-tokens", "200", "--warmup", "0", "--json"));
            args.addAll(List.of(layout));
            Run r = run(args.toArray(String[]::new));
            assertEquals(0, r.code(), String.join(" ", layout) + "\n" + r.out());
            JsonNode j = lastJson(r.out());
            assertEquals(6, j.get("succeeded").asInt());
            assertEquals(0, j.get("corrupted").asInt());
        }
    }

    @Test
    void hybridModelsReshardTheirMambaStateAcrossTp() throws Exception {
        for (String[] tps : new String[][]{{"1", "4"}, {"2", "1"}}) {
            Run r = run("bench", "--model", "tiny-hybrid", "--requests", "6", "--prompt-tokens", "200", "--warmup", "0", "--prefill-tp", tps[0],
                    "--decode-tp", tps[1], "--json");
            assertEquals(0, r.code(), r.out());
            assertEquals(6, lastJson(r.out()).get("succeeded").asInt());
        }
    }

    // ---- benchmark suite (issue 16)

    @Test
    void everyRunReportsTheNixlbenchAndRoomRateColumns() throws Exception {
        Run r = run("bench", "--warmup", "8", "--model", "tiny", "--prompt-tokens", "16", "--concurrency", "64", "--requests", "400", "--json");
        assertEquals(0, r.code(), r.out());
        JsonNode j = lastJson(r.out());
        for (String f : new String[]{"pages", "achieved_rate", "rooms_per_s", "request_latency_ms", "block_bytes", "batch_size",
                "avg_latency_ms", "prepare_ms", "post_ms", "transfer_ms", "cpu_us_per_room"}) {
            assertTrue(j.has(f), "missing " + f + " in " + j);
        }
        assertEquals("fragmented", j.get("pages").asText());
        assertTrue(j.get("rooms_per_s").asDouble() > 0 && j.get("block_bytes").asLong() > 0 && j.get("batch_size").asDouble() >= 1);
        JsonNode lat = j.get("request_latency_ms");
        assertTrue(lat.get("p50").asDouble() <= lat.get("p99").asDouble() && lat.get("p99").asDouble() <= lat.get("p999").asDouble(), lat.toString());
        for (String phase : new String[]{"prepare_ms", "post_ms", "transfer_ms"}) {
            assertTrue(j.get(phase).get("avg").asDouble() > 0, phase + " " + j.get(phase));
        }
        JsonNode cpu = j.get("cpu_us_per_room");
        assertEquals("threads", cpu.get("method").asText(), "one JVM: by thread group");
        assertTrue(cpu.get("prefill").asDouble() > 0 && cpu.get("decode").asDouble() > 0, cpu.toString());
        assertTrue(r.out().contains("nixl: block ") && r.out().contains("rooms/s; CPU per room"), r.out());
        // Each role's scheduler polled every room to its end: its poll lag, from the role's scrape.
        for (String role : new String[]{"prefill", "decode"}) {
            JsonNode lag = j.get("poll_lag_ms").get(role);
            assertTrue(lag != null && lag.get("avg").asDouble() >= 0 && lag.get("p50").asDouble() <= lag.get("p99").asDouble(), j.toString());
        }
        assertTrue(r.out().contains("poll lag (Success/Failed to the scheduler's first poll that saw it): decode avg "), r.out());
    }

    @Test
    void openLoopRateReportsLatencyFromArrivalAndTheAchievedRate() throws Exception {
        Run r = run("bench", "--warmup", "8", "--model", "tiny", "--prompt-tokens", "16", "--concurrency", "16", "--requests", "300",
                "--rate", "600", "--json");
        assertEquals(0, r.code(), r.out());
        JsonNode j = lastJson(r.out());
        assertEquals(600.0, j.get("offered_rate").asDouble());
        assertEquals(300 + 8, j.get("succeeded").asInt());
        // 300 Poisson arrivals at 600/s take about half a second: the run cannot finish faster than they arrive.
        assertTrue(j.get("elapsed_s").asDouble() > 0.3, "elapsed " + j.get("elapsed_s"));
        assertTrue(j.get("achieved_rate").asDouble() > 0 && j.get("achieved_rate").asDouble() < 1000, j.toString());
        assertTrue(j.get("request_latency_ms").get("p999").asDouble() > 0);
        assertTrue(r.out().contains("offered 600.0 requests/s"), r.out());
    }

    @Test
    void contiguousPagesMoveAChunkInFewerLargerOps() throws Exception {
        JsonNode frag = lastJson(run("bench", "--model", "tiny", "--prompt-tokens", "512", "--requests", "6", "--warmup", "1",
                "--json").out());
        JsonNode cont = lastJson(run("bench", "--model", "tiny", "--prompt-tokens", "512", "--requests", "6", "--warmup", "1",
                "--pages", "contiguous", "--huge-pages", "off", "--json").out());
        assertEquals("contiguous", cont.get("pages").asText());
        assertEquals("off", cont.get("huge_pages").asText());
        assertTrue(frag.get("huge_pages").asText().startsWith("on (thp "), frag.toString());
        assertEquals(7, cont.get("succeeded").asInt());
        assertEquals(0, cont.get("corrupted").asInt());
        assertTrue(cont.get("batch_size").asDouble() < frag.get("batch_size").asDouble() / 2,
                "ops per request: contiguous " + cont.get("batch_size") + ", fragmented " + frag.get("batch_size"));
        assertTrue(cont.get("block_bytes").asLong() > 2 * frag.get("block_bytes").asLong());
    }

    /**
     * The drivers on the managers' change feed poll only what it hands out: a change, deadline or
     * injected failure it missed would leave a request hung until the deadline, counted as failed.
     */
    @Test
    void changeFeedDriversConcludeEveryRequestUnderAbortsAndInjectedFailures() throws Exception {
        Run clean = run("bench", "--warmup", "8", "--model", "tiny", "--prompt-tokens", "64", "--concurrency", "48", "--requests", "400",
                "--poll", "feed", "--deadline-ms", "60000", "--json");
        assertEquals(0, clean.code(), clean.out());
        assertEquals(400 + 8, lastJson(clean.out()).get("succeeded").asInt());
        Run faulty = run("bench", "--warmup", "8", "--model", "tiny", "--prompt-tokens", "64", "--concurrency", "48", "--requests", "400",
                "--poll", "feed", "--abort-prob", "0.1", "--failure-prob", "0.05", "--deadline-ms", "60000", "--json");
        JsonNode j = lastJson(faulty.out());
        assertEquals(1, faulty.code(), "aborted and injected requests fail the run: " + faulty.out());
        assertEquals(0, j.get("corrupted").asInt(), j.toString());
        assertTrue(j.get("failed").asInt() > 0 && j.get("succeeded").asInt() > 0, j.toString());
        assertEquals(400 + 8, j.get("succeeded").asInt() + j.get("failed").asInt(), j.toString());
        assertTrue(j.get("elapsed_s").asDouble() < 50, "no request waited for the deadline: " + j);
        Run parked = run("bench", "--warmup", "8", "--model", "tiny", "--prompt-tokens", "16", "--concurrency", "300", "--requests", "100",
                "--poll", "feed", "--room-memory", "--deadline-ms", "60000", "--json");
        assertEquals(0, parked.code(), parked.out());
        assertEquals(300, lastJson(parked.out()).get("room_memory").get("both").get("rooms").asInt());
    }

    @Test
    void roomMemoryIsMeasuredWithRoomsParkedInFlight() throws Exception {
        Run r = run("bench", "--warmup", "8", "--model", "tiny", "--prompt-tokens", "16", "--concurrency", "500", "--requests", "200",
                "--room-memory", "--json");
        assertEquals(0, r.code(), r.out());
        JsonNode j = lastJson(r.out());
        // The parked rooms are extra warm-up requests: verified, left out of the timed figures.
        assertEquals(8 + 500, j.get("warmup").asInt());
        assertEquals(200 + 8 + 500, j.get("succeeded").asInt());
        JsonNode m = j.get("room_memory").get("both");
        assertEquals(500, m.get("rooms").asInt());
        // A room's state on both sides is some objects: more than nothing, far less than a megabyte of heap; a room holds
        // no native memory of its own, so what native memory moved is noise of a few bytes per room, not kilobytes.
        assertTrue(m.get("heap_bytes_per_room").asLong() > 0 && m.get("heap_bytes_per_room").asLong() < 1 << 20, m.toString());
        assertTrue(Math.abs(m.get("native_bytes_per_room").asLong()) < 4096, m.toString());
        assertEquals(m.get("heap_bytes_per_room").asLong() + m.get("native_bytes_per_room").asLong(),
                m.get("total_bytes_per_room").asLong());
        assertTrue(r.out().contains("per in-flight room, 500 rooms parked"), r.out());
    }

    @Test
    void sweepQuickWritesWellFormedPointsCsvAndCharts(@TempDir Path dir) throws Exception {
        Path out = dir.resolve("sweep");
        Run r = run("bench", "--sweep-quick", "--out", out.toString());
        assertEquals(0, r.code(), r.out());
        ObjectMapper json = new ObjectMapper();
        List<Path> points;
        try (Stream<Path> files = Files.list(out.resolve("points"))) {
            points = files.sorted().toList();
        }
        assertEquals(6, points.size(), points.toString()); // 2 page sizes x tcp, inproc + 2 offered loads
        for (Path p : points) {
            JsonNode j = json.readTree(p.toFile());
            assertEquals(p.getFileName().toString(), j.get("id").asText() + ".json");
            assertEquals(0, j.get("failed").asInt(), j.toString());
            assertTrue(j.get("gbps").asDouble() > 0 && j.get("block_bytes").asLong() > 0, j.toString());
            if (j.get("kind").asText().equals("bandwidth")) assertTrue(j.get("memcpy_gbps").asDouble() > 0, j.toString());
            else assertTrue(j.get("offered_rate").asDouble() > 0, j.toString());
        }
        json.readTree(out.resolve("baselines.json").toFile());
        List<String> csv = Files.readAllLines(out.resolve("sweep.csv"));
        assertEquals(String.join(",", SweepRunner.CSV_COLUMNS), csv.get(0).replace("\"", ""));
        assertEquals(1 + points.size(), csv.size());
        for (String row : csv.subList(1, csv.size())) {
            assertEquals(SweepRunner.CSV_COLUMNS.size(), row.split(",", -1).length, row);
        }
        for (String png : new String[]{"bandwidth_vs_op_size.png", "latency_vs_offered_load.png"}) {
            byte[] b = Files.readAllBytes(out.resolve(png));
            assertTrue(b.length > 1000, png + " is " + b.length + " bytes");
            assertArrayEquals(new byte[]{(byte) 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'}, Arrays.copyOf(b, 8), png);
            assertNotNull(ImageIO.read(out.resolve(png).toFile()), png + " decodes as an image");
        }
        assertTrue(r.out().contains("sweep: 6 points (0 failed)"), r.out());
    }

    @Test
    void badSuiteOptionsGiveAClearErrorAndExitCode() {
        assertEquals(2, run("bench", "--pages", "sparse").code());
        assertEquals(2, run("bench", "--huge-pages", "maybe").code());
        assertEquals(2, run("bench", "--poll", "sometimes").code());
        assertEquals(2, run("bench", "--rate", "0").code());
        assertEquals(2, run("bench", "--rate", "-3").code());
        assertEquals(2, run("bench", "--rate", "1e-300").code()); // ran for ever waiting for its first arrival
        assertEquals(2, run("bench", "--sweep-quick", "--processes").code());
        assertTrue(run("bench", "--rate", "fast").code() != 0);
        // Open loop and the chaos harness check both roles' pools before anything starts, as the closed loop does.
        assertEquals(2, run("bench", "--rate", "100", "--requests", "1", "--concurrency", "100000", "--prompt-tokens", "4096").code());
        assertEquals(2, run("chaos", "--scenario", "kill-prefill", "--concurrency", "100000", "--prompt-tokens", "4096").code());
    }

    @Test
    void badOptionsGiveAClearErrorAndExitCode() {
        assertEquals(2, run("bench", "--transport", "carrier-pigeon").code());
        assertEquals(2, run("bench", "--model", "gpt-17").code());
        assertEquals(2, run("bench", "--transport", "inproc", "--processes").code());
        assertEquals(2, run("bench", "--prefill-tp", "3", "--decode-tp", "2").code());
        assertEquals(2, run("bench", "--prefill-pp", "3").code());
        assertEquals(2, run("bench", "--prefill-pp", "2", "--decode-pp", "4").code());
        assertEquals(2, run("bench", "--model", "qwen3-next", "--prefill-pp", "2").code());
        assertTrue(run("bench", "--requests", "many").code() != 0);
        // Pools for 100,000 in-flight 4096-token Llama-8B requests fit no machine: refused before any is allocated.
        assertEquals(2, run("bench", "--requests", "1", "--warmup", "0", "--concurrency", "100000", "--prompt-tokens", "4096").code());
        assertEquals(2, run("bench", "--warmup", "-1").code());
    }
}
