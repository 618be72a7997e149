package io.kvferry.tools;

import io.kvferry.api.KVFerrySettings;
import io.kvferry.bench.BenchResult;
import io.kvferry.bench.BenchRunner;
import io.kvferry.chaos.ChaosRunner;
import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.ModelShape;
import io.kvferry.testkit.Workload;

import io.kvferry.transport.TransportProvider;
import io.kvferry.transport.Transports;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.OutputStream;
import java.io.PrintStream;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The transport-agnostic checks — integration, parallelism, faults — across separate processes
 * (prefill and decode JVMs), once per transport. Every run verifies each byte on decode and
 * checks that the requested data path was the one used. ucx runs when UCX can load here; without
 * it the ucx cases are skipped with how to install it, unless KVFERRY_REQUIRE_UCX=1 (CI).
 */
public class TransportSuiteTest {
    private static final PrintStream QUIET = new PrintStream(OutputStream.nullOutputStream());

    static void requireTransport(String transport) {
        if (!transport.equals("ucx")) return;
        TransportProvider ucx = Transports.get("ucx");
        String why = ucx == null ? "the kvferry-ucx module is not on the class path" : ucx.unavailableReason(KVFerrySettings.fromEnvironment());
        if (why == null) return;
        String message = "UCX is not usable here (" + why + "); install it with: apt-get install -y libucx0";
        if ("1".equals(System.getenv("KVFERRY_REQUIRE_UCX"))) fail(message + " (KVFERRY_REQUIRE_UCX=1)");
        assumeTrue(false, message);
    }

    /** {@link #requireTransport} for tests in other packages (the engine demo's separate-process runs). */
    public static void requireTransportForOtherTests(String transport) {
        requireTransport(transport);
    }

    /** The data path a transport must end up on between two processes of this host. */
    static String expectedPath(String transport) {
        return transport.equals("auto") ? "shm" : transport;
    }

    private static BenchResult run(BenchConfig config) throws Exception {
        return new BenchRunner(config, QUIET).runWithoutBaselines(true);
    }

    private static void assertAllExact(BenchResult r, int requests, String transport) {
        assertEquals(requests, r.succeeded(), () -> "failures: " + r.firstFailures());
        assertEquals(0, r.corrupted());
        assertTrue(r.processes());
        // One entry per decode rank and request, all on the expected path.
        assertEquals(Set.of(expectedPath(transport)), r.dataPaths().keySet(), () -> "data paths taken: " + r.dataPaths());
        assertEquals(0, r.dataPaths().get(expectedPath(transport)) % requests, () -> "data paths taken: " + r.dataPaths());
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"tcp", "shm", "auto", "ucx"})
    @Timeout(300)
    void fragmentedChunkedRequestsWithPrefixesAndStateAreByteExact(String transport) throws Exception {
        requireTransport(transport);
        Workload w = new Workload(48, 900, 16, 256, 4, 8, 20261202L);
        BenchResult r = run(new BenchConfig(ModelShape.preset("tiny-hybrid"), w, transport, 1, "suite-token"));
        assertAllExact(r, 48, transport);
        assertTrue(r.verifiedBytes() > 64L << 20, "verified only " + r.verifiedBytes() + " bytes");
    }

    /** Rooms spread over three connections; the prefill exits right after its last status (which must not be lost). */
    @Test
    @Timeout(300)
    void stripedTcpKeepsEveryRoomsWritesAndStatusInOrder() throws Exception {
        Workload w = new Workload(48, 900, 16, 256, 4, 8, 20261203L);
        BenchResult r = run(new BenchConfig(ModelShape.preset("tiny-hybrid"), w, "tcp", 1, "suite-token").withTcpStripes(3));
        assertAllExact(r, 48, "tcp");
        assertEquals(3, r.tcpStripes());
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"tcp", "shm", "auto", "ucx"})
    @Timeout(300)
    void heterogeneousTensorParallelHeadSlicesAreByteExact(String transport) throws Exception {
        requireTransport(transport);
        // Prefill TP2 feeds decode TP1 (strided ops), and TP1 feeds TP2.
        Workload w = new Workload(12, 300, 16, 64, 3, 4, 7L);
        assertAllExact(run(new BenchConfig(ModelShape.preset("tiny").withKvHeads(4), w, transport, 2, 1, "suite-token", 0)), 12,
                transport);
        assertAllExact(run(new BenchConfig(ModelShape.preset("tiny").withKvHeads(4), w, transport, 1, 2, "suite-token", 0)), 12,
                transport);
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"tcp", "shm", "auto", "ucx"})
    @Timeout(300)
    void pipelineStagesPairByLayer(String transport) throws Exception {
        requireTransport(transport);
        Workload w = new Workload(12, 300, 16, 64, 3, 4, 11L);
        assertAllExact(run(new BenchConfig(ModelShape.preset("tiny"), w, transport, 1, 1, 2, 1, "suite-token", 0)), 12, transport);
    }

    @ParameterizedTest(name = "{0}: {1}")
    @CsvSource({"tcp,kill-prefill", "shm,kill-prefill", "auto,kill-prefill", "ucx,kill-prefill",
            "tcp,kill-decode", "shm,kill-decode", "ucx,kill-decode", "tcp,abort-storm", "shm,abort-storm", "ucx,abort-storm",
            "shm,restart-decode", "ucx,restart-prefill"})
    @Timeout(300)
    void faultsAreDetectedAndNothingHangsLeaksOrCorrupts(String transport, String scenario) throws Exception {
        requireTransport(transport);
        Workload w = new Workload(16, 512, 16, 128, 4, 0, 3L);
        BenchConfig c = new BenchConfig(ModelShape.preset("llama-3.1-8b"), w, transport, 1, "suite-token").withFaultTimeouts(2000, 90_000);
        ChaosRunner.Result r = new ChaosRunner(c, QUIET, 100).run(scenario);
        assertTrue(r.passed(), r::toString);
        if (scenario.startsWith("kill-")) {
            // null when no room was under way on the survivor at the kill (ChaosTest pins the tcp case down strictly)
            String survivor = scenario.equals("kill-prefill") ? "decode" : "prefill";
            Long detect = r.detectMs().get(survivor);
            // passed() refuses a kill after the last request concluded; one that failed none still met nothing (tcp/shm/auto:
            // 10-13 of the 16 were in flight at the kill in every run measured)
            assertTrue(r.failed() > 0, () -> "the kill met no request: " + r);
            assertTrue(detect == null || detect < 3000, () -> survivor + " detected the death after " + detect + " ms: " + r);
        }
        if (scenario.startsWith("restart-")) assertEquals(Boolean.TRUE, r.recovered(), r::toString);
    }
}
