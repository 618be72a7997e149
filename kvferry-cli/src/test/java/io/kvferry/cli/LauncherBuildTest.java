package io.kvferry.cli;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * ./kvferry's first run builds "once (one line on stderr)" (README): a quiet Maven 3.8 still printed bare ANSI resets
 * ("[0m[0m") on a line of their own, -Dstyle.color=never notwithstanding. Run on a copy of the launcher whose
 * {@code mvn} is a stand-in printing what Maven 3.8.7 prints, so nothing is built.
 */
class LauncherBuildTest {
    private static final Path ROOT = Path.of("..").toAbsolutePath().normalize();

    private record Run(int code, String err) {}

    private static Run launch(Path dir, String mvnBody) throws Exception {
        Path root = Files.createDirectories(dir.resolve("root"));
        Files.copy(ROOT.resolve("kvferry"), root.resolve("kvferry"));
        Files.createDirectories(root.resolve("scripts"));
        Files.copy(ROOT.resolve("scripts").resolve("jdk.sh"), root.resolve("scripts").resolve("jdk.sh"));
        Files.writeString(root.resolve("pom.xml"), "");
        Path bin = Files.createDirectories(dir.resolve("bin"));
        Path mvn = bin.resolve("mvn");
        Files.writeString(mvn, "#!/usr/bin/env bash\nmkdir -p kvferry-cli/target\n" + mvnBody);
        Files.setPosixFilePermissions(mvn, PosixFilePermissions.fromString("rwx------"));
        ProcessBuilder pb = new ProcessBuilder("bash", root.resolve("kvferry").toString(), "--version");
        pb.environment().put("PATH", bin + ":" + System.getenv("PATH"));
        pb.environment().put("JAVA_HOME", System.getProperty("java.home"));
        pb.redirectOutput(ProcessBuilder.Redirect.DISCARD);
        Process p = pb.start();
        try {
            String err = new String(p.getErrorStream().readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(p.waitFor(30, TimeUnit.SECONDS), "the launcher did not end");
            return new Run(p.exitValue(), err);
        } finally {
            p.destroyForcibly();
        }
    }

    @Test
    @Timeout(60)
    void theBuildIsOneLineWithoutAnsiResets(@TempDir Path dir) throws Exception {
        Run r = launch(dir, "printf '\\033[0m\\033[0m\\033[0m\\033[0m'\n");
        assertFalse(r.err().contains("\u001b"), "ANSI escapes on stderr: " + r.err());
        String build = r.err().lines().filter(l -> !l.startsWith("Error:") && !l.startsWith("Caused by:")).reduce("", (a, b) -> a + b + "\n");
        assertEquals("kvferry: building (mvn package -DskipTests) ...\n", build, r.err());
    }

    @Test
    @Timeout(60)
    void aFailedBuildStillFailsTheLauncherWithMavensWords(@TempDir Path dir) throws Exception {
        Run r = launch(dir, "echo '[ERROR] COMPILATION ERROR'\nexit 1\n");
        assertNotEquals(0, r.code(), r.err());
        assertTrue(r.err().contains("[ERROR] COMPILATION ERROR"), r.err());
        assertFalse(Files.exists(dir.resolve("root").resolve("kvferry-cli").resolve("target").resolve("kvferry-cli.stamp")), "no stamp");
    }
}
