package io.kvferry.ucx;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * What a machine without libucx0 sees: a child JVM in its own mount namespace with /dev/null
 * bind-mounted over libucp.so.0. Needs root and util-linux's unshare; skipped otherwise.
 */
class UcxMissingLibraryTest {
    @Test
    @Timeout(60)
    void withoutLibucpTheProviderSaysHowToInstallUcx() throws Exception {
        Path lib = null;
        for (String dir : List.of("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")) {
            Path p = Path.of(dir, "libucp.so.0");
            if (Files.exists(p)) {
                lib = p.toRealPath();
                break;
            }
        }
        assumeTrue(lib != null, "libucp.so.0 is not installed here: nothing to hide");
        assumeTrue(run("id", "-u").strip().equals("0"), "needs root (mount namespace)");
        assumeTrue(Files.isExecutable(Path.of("/usr/bin/unshare")), "needs /usr/bin/unshare");
        String java = ProcessHandle.current().info().command().orElseThrow();
        String cp = System.getProperty("java.class.path");
        String script = "mount --bind /dev/null '" + lib + "' && exec '" + java + "' --enable-native-access=ALL-UNNAMED -cp '" + cp
                + "' io.kvferry.ucx.ProbeMain";
        String probeNs = run("/usr/bin/unshare", "-m", "true");
        assumeTrue(probeNs != null, "unshare -m is not permitted here");
        String out = run("/usr/bin/unshare", "-m", "sh", "-c", script);
        assertTrue(out.contains("REASON=UCX is not installed: libucp.so.0 cannot be loaded"), out);
        assertTrue(out.contains("apt-get install -y libucx0"), out);
        assertTrue(out.contains("DESTINATION=null WHY=[UCX is not installed"), out);
        assertTrue(out.contains("SOURCE=IOException UCX is not installed"), out);
    }

    /** stdout+stderr, or null when the command failed. */
    private static String run(String... cmd) throws Exception {
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        byte[] out = p.getInputStream().readAllBytes();
        if (!p.waitFor(45, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            return null;
        }
        String s = new String(out, StandardCharsets.UTF_8);
        if (p.exitValue() != 0) {
            if (cmd[cmd.length - 1].equals("true")) return null;
            assertEquals(0, p.exitValue(), s);
        }
        return s;
    }
}
