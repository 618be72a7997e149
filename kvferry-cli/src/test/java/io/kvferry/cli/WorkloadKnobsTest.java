package io.kvferry.cli;

import io.kvferry.api.ChecksumMode;
import io.kvferry.testkit.BenchConfig;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;

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
