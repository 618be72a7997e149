package io.kvferry.cli;

import io.kvferry.api.ChecksumMode;
import io.kvferry.testkit.BenchConfig;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;

import java.util.function.Function;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/** The bench's knob flags: without the flag the knob (-D property, which --set writes, or environment) decides, checked. */
class WorkloadKnobsTest {
    @AfterEach
    void clear() {
        System.clearProperty("kvferry.tcpStripes");
        System.clearProperty("kvferry.checksum");
    }

    private static BenchConfig config(String... args) {
        return CommandLine.populateCommand(new WorkloadOptions(), args).toConfig(true);
    }

    @Test
    void theKnobDecidesWithoutTheFlagAndTheFlagWins() {
        System.setProperty("kvferry.tcpStripes", "4");
        System.setProperty("kvferry.checksum", "full");
        BenchConfig c = config("--model", "tiny");
        assertEquals(4, c.tcpStripes());
        assertEquals(ChecksumMode.FULL, c.checksum());
        BenchConfig flags = config("--model", "tiny", "--tcp-stripes", "2", "--checksum", "sampled");
        assertEquals(2, flags.tcpStripes());
        assertEquals(ChecksumMode.SAMPLED, flags.checksum());
    }

    @Test
    void aBadKnobIsRefusedNamingIt() {
        System.setProperty("kvferry.tcpStripes", "garbage");
        String e = assertThrows(IllegalArgumentException.class, () -> config("--model", "tiny")).getMessage();
        assertTrue(e.contains("KVFERRY_TCP_STRIPES / kvferry.tcpStripes") && e.contains("'garbage'"), e);
        System.clearProperty("kvferry.tcpStripes");
        System.setProperty("kvferry.checksum", "maybe");
        e = assertThrows(IllegalArgumentException.class, () -> config("--model", "tiny")).getMessage();
        assertTrue(e.contains("KVFERRY_CHECKSUM") && e.contains("maybe"), e);
    }

    @Test
    void theBenchSizesItsRequestsAndWarmUpByTheBytesARequestMoves() {
        Function<String[], BenchConfig> bench =
                args -> CommandLine.populateCommand(new WorkloadOptions(), args).toConfig(true, true);
        // 32 KiB rooms: 1 GiB of warm-up, 2 GiB measured, each under its cap.
        BenchConfig tiny = bench.apply(new String[]{"--model", "tiny", "--prompt-tokens", "16"});
        assertEquals(32 * 1024, tiny.shape().bytesPerToken(1) * 16);
        assertEquals(32_768, tiny.workload().warmup());
        assertEquals(65_536, tiny.workload().requests());
        // 128 MiB rooms (the default bench): the floors, 8 and 64.
        BenchConfig big = bench.apply(new String[]{});
        assertEquals(8, big.workload().warmup());
        assertEquals(64, big.workload().requests());
        // One token of the tiny model (2 KiB): the caps.
        BenchConfig one = bench.apply(new String[]{"--model", "tiny", "--prompt-tokens", "1"});
        assertEquals(WorkloadOptions.BenchDefaults.MAX_WARMUP, one.workload().warmup());
        assertEquals(WorkloadOptions.BenchDefaults.MAX_REQUESTS, one.workload().requests());
        // Many in flight: 16 windows of them measured, up to 200,000.
        assertEquals(160_000, bench.apply(new String[]{"--model", "tiny", "--prompt-tokens", "16", "--concurrency", "10000"})
                .workload().requests());
        assertEquals(200_000, bench.apply(new String[]{"--model", "tiny", "--prompt-tokens", "16", "--concurrency", "50000"})
                .workload().requests());
        // Flags win; open loop keeps 64 measured requests; the role and chaos commands have no warm-up unless given.
        BenchConfig flags = bench.apply(new String[]{"--model", "tiny", "--prompt-tokens", "16", "--requests", "7", "--warmup", "0"});
        assertEquals(7, flags.workload().requests());
        assertEquals(0, flags.workload().warmup());
        assertEquals(64, bench.apply(new String[]{"--model", "tiny", "--prompt-tokens", "16", "--rate", "100"}).workload().requests());
        BenchConfig plain = config("--model", "tiny", "--prompt-tokens", "16");
        assertEquals(0, plain.workload().warmup());
        assertEquals(64, plain.workload().requests());
    }

    @Test
    void withNeitherTheDefaultsHold() {
        assumeTrue(System.getenv("KVFERRY_TCP_STRIPES") == null && System.getenv("KVFERRY_CHECKSUM") == null, "set in the environment");
        BenchConfig c = config("--model", "tiny");
        assertEquals(1, c.tcpStripes());
        assertEquals(ChecksumMode.OFF, c.checksum());
    }

    @Test
    void nanFaultProbabilitiesAndANegativePrefixEveryAreRefusedNamingThem() {
        for (String flag : new String[] {"--abort-prob", "--failure-prob", "--corrupt-prob"}) {
            String e = assertThrows(IllegalArgumentException.class, () -> config("--model", "tiny", flag, "NaN")).getMessage();
            assertTrue(e.contains("[0, 1]") && e.contains(flag + " NaN"), e);
        }
        String e = assertThrows(IllegalArgumentException.class, () -> config("--model", "tiny", "--prefix-every", "-3")).getMessage();
        assertTrue(e.contains("--prefix-every must be >= 0") && e.contains("-3"), e);
    }

    @Test
    void theDpBalanceIsOneOfSglangsTwoKindsAndReachesTheWorkload() {
        assertTrue(config("--model", "tiny", "--prefill-dp", "2", "--prefill-dp-balance", "round_robin").workload().dpRoundRobin());
        assertFalse(config("--model", "tiny", "--prefill-dp", "2").workload().dpRoundRobin());
        String e = assertThrows(IllegalArgumentException.class,
                () -> config("--model", "tiny", "--prefill-dp-balance", "random")).getMessage();
        assertTrue(e.contains("--prefill-dp-balance must be follow_bootstrap_room or round_robin, got 'random'"), e);
    }
}
