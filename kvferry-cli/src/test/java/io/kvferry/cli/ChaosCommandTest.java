package io.kvferry.cli;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** kvferry chaos's own flags: bad values are refused with exit 2 and a message naming them, before anything starts. */
class ChaosCommandTest {
    @Test
    void badLinkSettingsAndScenariosAreRefusedNamingWhatWasWrong() {
        CliRun r = CliRun.of("chaos", "--scenario", "partition", "--netns", "--netem", "delay 1ms jitter 2ms");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("unknown 'jitter'"), r.err());
        r = CliRun.of("chaos", "--scenario", "partition", "--netns", "--netns-link", "wormhole");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("--netns-link must be auto, veth or tun"), r.err());
        r = CliRun.of("chaos", "--scenario", "meteor");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("corrupt") && r.err().contains("hostile-peer"), "the scenario list names the new ones: " + r.err());
    }

    @Test
    void scenariosThatAttackFromTheRootNamespaceRefuseNetns() {
        CliRun r = CliRun.of("chaos", "--scenario", "hostile-peer", "--netns", "--netem", "none");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("does not run with --netns") || r.err().contains("--netns: "), r.err());
    }
}
