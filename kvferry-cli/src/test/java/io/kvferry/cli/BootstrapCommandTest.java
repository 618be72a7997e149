package io.kvferry.cli;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The registry's slow-client limits are settable by flag, and a bad one is refused naming it before anything listens. */
@Timeout(30)
class BootstrapCommandTest {
    private static String stderrOf(int[] code, String... args) {
        PrintStream old = System.err;
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        System.setErr(new PrintStream(buf, true, StandardCharsets.UTF_8));
        try {
            code[0] = Main.run(args);
        } finally {
            System.setErr(old);
        }
        return buf.toString(StandardCharsets.UTF_8);
    }

    @Test
    void badSlowClientLimitsAreRefusedNamingTheLimit() {
        int[] code = new int[1];
        String err = stderrOf(code, "bootstrap", "--port", "0", "--no-auth", "--max-connections", "0");
        assertEquals(2, code[0], err);
        assertTrue(err.contains("maxConnections must be >= 1, got 0"), err);
        err = stderrOf(code, "bootstrap", "--port", "0", "--no-auth", "--request-timeout-ms", "0");
        assertEquals(2, code[0], err);
        assertTrue(err.contains("requestTimeout must be at least 1 ms"), err);
    }

    /** Issue 13 item 12: a token on the command line is readable by any local user in /proc/PID/cmdline. */
    @Test
    void aTokenOnTheCommandLineIsRefusedEverywhere() {
        int[] code = new int[1];
        for (String[] args : new String[][]{{"bootstrap", "--port", "0", "--auth-token", "s3cret"},
                {"bench", "--requests", "1", "--auth-token", "s3cret"},
                {"serve", "--role", "prefill", "--auth-token", "s3cret"}}) {
            String err = stderrOf(code, args);
            assertEquals(2, code[0], String.join(" ", args) + ": " + err);
            assertTrue(err.contains("/proc/PID/cmdline") && err.contains("KVFERRY_AUTH_TOKEN") && err.contains("--auth-token-file"), err);
            assertTrue(!err.contains("s3cret"), "the refusal does not echo the token: " + err);
        }
    }
}
