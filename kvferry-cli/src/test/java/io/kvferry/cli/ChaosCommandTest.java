package io.kvferry.cli;

import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** kvferry chaos's own flags: bad values are refused with exit 2 and a message naming them, before anything starts. */
class ChaosCommandTest {
    private record Run(int code, String err) {}

    private static Run run(String... args) {
        PrintStream old = System.err;
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        System.setErr(new PrintStream(buf, true, StandardCharsets.UTF_8));
        try {
            return new Run(Main.run(args), buf.toString(StandardCharsets.UTF_8));
        } finally {
            System.setErr(old);
        }
    }

    @Test
    void badLinkSettingsAndScenariosAreRefusedNamingWhatWasWrong() {
        Run r = run("chaos", "--scenario", "partition", "--netns", "--netem", "delay 1ms jitter 2ms");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("unknown 'jitter'"), r.err());
        r = run("chaos", "--scenario", "partition", "--netns", "--netns-link", "wormhole");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("--netns-link must be auto, veth or tun"), r.err());
        r = run("chaos", "--scenario", "meteor");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("corrupt") && r.err().contains("hostile-peer"), "the scenario list names the new ones: " + r.err());
    }

    @Test
    void scenariosThatAttackFromTheRootNamespaceRefuseNetns() {
        Run r = run("chaos", "--scenario", "hostile-peer", "--netns", "--netem", "none");
        assertEquals(2, r.code(), r.err());
        assertTrue(r.err().contains("does not run with --netns") || r.err().contains("--netns: "), r.err());
    }
}
