package io.kvferry.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
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
                "datapath_gbps", "transfer_gbps", "datapath_op_bytes", "ucx_perftest_gbps", "ratio_transfer_to_ucx_perftest"}) {
            assertTrue(j.has(f), "missing " + f + " in " + j);
        }
        // 16 measured requests after the default warm-up, every one verified.
        assertEquals(BenchCommand.DEFAULT_WARMUP, j.get("warmup").asInt());
        assertEquals(16 + BenchCommand.DEFAULT_WARMUP, j.get("requests").asInt());
        assertEquals(16 + BenchCommand.DEFAULT_WARMUP, j.get("succeeded").asInt());
        assertTrue(j.get("datapath_gbps").asDouble() > 0);
        assertEquals(0, j.get("failed").asInt());
        assertTrue(j.get("verified_bytes").asLong() > 16L * 256 * 2048);
        assertTrue(j.get("latency_ms").has("p50") && j.get("latency_ms").has("p99"));
    }

    @Test
    void inprocAndFakeBackendsRunTheSameJob() throws Exception {
        assertEquals(0, run("bench", "--model", "tiny", "--requests", "8", "--prompt-tokens", "128", "--transport", "inproc", "--warmup", "0").code());
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
