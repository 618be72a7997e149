package io.kvferry.cli;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * A flag whose default is an environment variable: a bad variable is refused naming the variable (not the flag),
 * an empty one is the default, and the flag wins. The commands run as processes: the environment is theirs.
 */
@Timeout(120)
class EnvDefaultTest {
    private record Run(int code, String err) {}

    private static Run run(Map<String, String> env, String... args) throws Exception {
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--enable-native-access=ALL-UNNAMED", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", System.getProperty("java.class.path"),
                "io.kvferry.cli.Main"));
        cmd.addAll(List.of(args));
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectOutput(ProcessBuilder.Redirect.DISCARD);
        pb.environment().keySet().removeIf(k -> k.startsWith("KVFERRY_"));
        pb.environment().putAll(env);
        Process p = pb.start();
        String err = new String(p.getErrorStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), "still running: " + String.join(" ", args));
        return new Run(p.exitValue(), err);
    }

    private static void assertRefused(Run r, String line) {
        assertEquals(2, r.code(), r.err());
        assertEquals(line, r.err().strip(), "one line naming the variable");
    }

    @Test
    void badEnvironmentValuesNameTheVariable() throws Exception {
        assertRefused(run(Map.of("KVFERRY_STATUS_TIMEOUT_MS", "abc"), "status", "--bootstrap", "127.0.0.1:1"),
                "kvferry status: KVFERRY_STATUS_TIMEOUT_MS=abc is not a whole number (unset or empty: 5000)");
        assertRefused(run(Map.of("KVFERRY_REGISTRY_MAX_CONNECTIONS", "lots"), "bootstrap", "--port", "0", "--no-auth"),
                "kvferry bootstrap: KVFERRY_REGISTRY_MAX_CONNECTIONS=lots is not a whole number (unset or empty: 1024)");
        assertRefused(run(Map.of("KVFERRY_REGISTRY_REQUEST_TIMEOUT_MS", "0"), "bootstrap", "--port", "0", "--no-auth"),
                "kvferry bootstrap: KVFERRY_REGISTRY_REQUEST_TIMEOUT_MS=0: requestTimeout must be at least 1 ms, got PT0S");
        assertRefused(run(Map.of("KVFERRY_STATUS_PORT", "x", "KVFERRY_AUTH_TOKEN", "t"), "prefill", "--bootstrap", "127.0.0.1:1",
                "--model", "tiny"), "kvferry prefill: KVFERRY_STATUS_PORT=x is not a whole number (unset or empty: 0)");
    }

    @Test
    void anEmptyVariableIsTheDefaultAndTheFlagWins() throws Exception {
        // Empty: the default timeout; nothing listens at port 1, so it ends as an unreachable registry (exit 1), not a bad value.
        Run r = run(Map.of("KVFERRY_STATUS_TIMEOUT_MS", ""), "status", "--bootstrap", "127.0.0.1:1");
        assertEquals(1, r.code(), r.err());
        assertTrue(r.err().startsWith("kvferry status: cannot reach"), r.err());
        EnvDefault flag = EnvDefault.of("--timeout-ms", 7L, "KVFERRY_NO_SUCH_VARIABLE");
        assertEquals(7, flag.get(5000, 1, Long.MAX_VALUE));
        assertEquals(5000, EnvDefault.of("--timeout-ms", null, "KVFERRY_NO_SUCH_VARIABLE").get(5000, 1, Long.MAX_VALUE));
        assertEquals(5000, new EnvDefault("--timeout-ms", "KVFERRY_STATUS_TIMEOUT_MS", " ").get(5000, 1, Long.MAX_VALUE));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> EnvDefault.of("--status-port", 70000, "KVFERRY_STATUS_PORT").get(0, -1, 65535));
        assertEquals("--status-port 70000 is outside [-1, 65535]", e.getMessage());
        e = assertThrows(IllegalArgumentException.class,
                () -> new EnvDefault("--timeout-ms", "KVFERRY_STATUS_TIMEOUT_MS", "0").get(5000, 1, Long.MAX_VALUE));
        assertFalse(e.getMessage().contains("--timeout-ms"), e.getMessage());
        assertEquals("KVFERRY_STATUS_TIMEOUT_MS=0 must be >= 1", e.getMessage());
    }

    /** A value above an int's range for a limit checked only by its type was refused as "must be >= -2147483648". */
    @Test
    void aValueAboveTheTypeNamesTheUpperBound() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> new EnvDefault("--max-connections",
                "KVFERRY_REGISTRY_MAX_CONNECTIONS", "99999999999").get(1024, Integer.MIN_VALUE, Integer.MAX_VALUE));
        assertEquals("KVFERRY_REGISTRY_MAX_CONNECTIONS=99999999999 must be <= 2147483647", e.getMessage());
    }
}
