package io.kvferry.chaos;

import io.kvferry.chaos.net.Netns;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The chaos registry inside a network namespace leaves none of the JVM's virtual-thread carriers in
 * that namespace (a carrier there makes every virtual thread later mounted on it connect from inside:
 * after a chaos run, the test JVM's registry lookups on 127.0.0.1 were refused). Each case runs in a
 * fresh JVM ({@link NetnsCarrierProbe}), where the first carrier is created by whichever thread first
 * starts a virtual thread; the control case, with the library's default virtual request threads, shows
 * the check sees the hazard when it is there.
 */
class NetnsCarrierTest {
    private static final Pattern FIGURES = Pattern.compile("carriers=(\\d+) foreign=(\\d+)");

    @Test
    @Timeout(120)
    void theHarnesssRegistryInANamespaceCreatesNoCarrierThere() throws Exception {
        Matcher m = probe("harness");
        assertEquals(0, Integer.parseInt(m.group(2)), "carrier threads left in the namespace: " + m.group());
    }

    @Test
    @Timeout(120)
    void controlVirtualRequestThreadsStartedInsideLeaveACarrierThere() throws Exception {
        Matcher m = probe("virtual");
        assertTrue(Integer.parseInt(m.group(2)) >= 1, "the probe no longer sees the hazard it checks for: " + m.group());
    }

    private static Matcher probe(String mode) throws Exception {
        String why = Netns.unavailableReason();
        assumeTrue(why == null, () -> "skipped: " + why);
        Path log = Files.createTempFile("kvferry-netns-carrier-", ".log");
        List<String> cmd = List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "--enable-native-access=ALL-UNNAMED", "-Xmx256m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp", System.getProperty("java.class.path"), NetnsCarrierProbe.class.getName(), mode);
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log.toFile()).start();
        try {
            if (!p.waitFor(90, TimeUnit.SECONDS)) fail("the probe (" + mode + ") did not finish in 90 s:\n" + read(log.toFile()));
            String out = read(log.toFile());
            assertEquals(0, p.exitValue(), "the probe (" + mode + ") failed:\n" + out);
            assertTrue(out.contains("health-ok=4"), "the registry in the namespace did not answer every request:\n" + out);
            Matcher m = FIGURES.matcher(out);
            assertTrue(m.find(), "no carrier figures in the probe's output:\n" + out);
            return m;
        } finally {
            p.destroyForcibly();
            p.waitFor();
            Files.deleteIfExists(log);
            Netns.sweepStale(); // a probe killed at its timeout leaves its namespaces (and their link) behind
        }
    }

    private static String read(File f) throws Exception {
        return Files.readString(f.toPath(), StandardCharsets.UTF_8);
    }
}
