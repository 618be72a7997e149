package io.kvferry.cli;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * scripts/bench-targets.sh, the one command behind issue 16's target table: it runs the bench, reads the
 * JSON it prints and makes a row of the ratio with its median. Run here on a two-request smoke workload
 * (the figures mean nothing; the plumbing from bench flags to JSON keys to the table is what breaks when
 * a key is renamed), through a launcher running this test's classes.
 */
class BenchTargetsScriptTest {
    private static final Path SCRIPT = Path.of("..", "scripts", "bench-targets.sh").toAbsolutePath().normalize();

    record Result(int code, String out) {}

    static Result script(Path launcher, String... args) throws IOException, InterruptedException {
        List<String> cmd = new ArrayList<>(List.of("bash", SCRIPT.toString()));
        cmd.addAll(List.of(args));
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true);
        pb.environment().put("KVFERRY_BIN", launcher.toString());
        Process p = pb.start();
        try {
            String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(p.waitFor(150, TimeUnit.SECONDS), "the script did not end");
            return new Result(p.exitValue(), out);
        } finally {
            p.destroyForcibly();
        }
    }

    /**
     * The bench runs' own logs (the script names them; the temporary directory is gone once the test ends), their last
     * 80 lines each: a CI failure whose bench exited non-zero once showed only "exited 1; see …/shm.1.log".
     */
    static String runLogs(Path out) throws IOException {
        StringBuilder b = new StringBuilder();
        if (!Files.isDirectory(out)) return "";
        try (var files = Files.list(out)) {
            for (Path f : files.filter(x -> x.toString().endsWith(".log")).sorted().toList()) {
                List<String> lines = Files.readAllLines(f, StandardCharsets.UTF_8);
                b.append("\n---- ").append(f.getFileName()).append(" (last 80 of ").append(lines.size()).append(" lines)\n");
                for (String line : lines.subList(Math.max(0, lines.size() - 80), lines.size())) b.append(line).append('\n');
            }
        }
        return b.toString();
    }

    /** A launcher like ./kvferry that runs the CLI from this test JVM's class path (no build, no stamp). */
    static Path launcher(Path dir) throws IOException {
        Path l = dir.resolve("kvferry");
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        Files.writeString(l, "#!/usr/bin/env bash\nexec '" + java + "' --enable-native-access=ALL-UNNAMED -Xmx1g -cp '"
                + System.getProperty("java.class.path").replace(File.pathSeparator, ":") + "' io.kvferry.cli.Main \"$@\"\n");
        Files.setPosixFilePermissions(l, PosixFilePermissions.fromString("rwx------"));
        return l;
    }

    @Test
    @Timeout(180)
    void aSmokeRoundPrintsTheShmRowFromTheBenchsJson(@TempDir Path dir) throws Exception {
        Path out = dir.resolve("runs");
        Result r = script(launcher(dir), "--rounds", "1", "--only", "shm", "--out", out.toString(),
                "--extra", "--requests 2 --warmup 0 --prompt-tokens 64");
        assertEquals(0, r.code(), r.out() + runLogs(out));
        assertTrue(Pattern.compile("\\| shm data path ÷ paired memcpy \\| [0-9.]+ \\| [0-9.]+ \\| ≥ 1\\.0 \\|").matcher(r.out()).find(),
                r.out() + runLogs(out));
        assertTrue(Files.readString(out.resolve("shm.1.json")).contains("\"ratio_datapath_to_paired_memcpy\""));
    }

    @Test
    @Timeout(60)
    void badArgumentsAreNamed(@TempDir Path dir) throws Exception {
        Path l = launcher(dir);
        Result only = script(l, "--only", "rdma");
        assertEquals(2, only.code());
        assertTrue(only.out().contains("--only takes page, tiny, tcp, ucx or shm, got 'rdma'"), only.out());
        Result rounds = script(l, "--rounds", "0");
        assertEquals(2, rounds.code());
        assertTrue(rounds.out().contains("--rounds must be 1..99"), rounds.out());
        Result missing = script(dir.resolve("absent"), "--rounds", "1");
        assertEquals(2, missing.code());
        assertTrue(missing.out().contains("not found or not executable"), missing.out());
    }
}
