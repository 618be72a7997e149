package io.kvferry.ucx;

import io.kvferry.api.KVFerrySettings;
import io.kvferry.memory.RegisteredMemory;
import io.kvferry.transport.DestinationTransport;
import io.kvferry.transport.LinkOffer;
import io.kvferry.transport.PeerLink;
import io.kvferry.transport.SourceTransport;
import io.kvferry.transport.TransportUnavailableException;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * A hostile decode's UCX offers (issue 13, hostile input 3). libucp aborts the whole process on a
 * worker address it cannot parse, so these run the prefill in a child JVM ({@link HostileOfferMain})
 * and read its exit status: a crash is a crash, not a failed assertion. Skipped when UCX is not
 * installed, unless KVFERRY_REQUIRE_UCX=1.
 */
@Timeout(180)
class UcxHostileOfferTest {
    @BeforeAll
    static void requireUcx() {
        String reason = UcxRuntime.unavailableReason();
        if (reason != null && "1".equals(System.getenv("KVFERRY_REQUIRE_UCX"))) fail("KVFERRY_REQUIRE_UCX=1 but UCX is unavailable: " + reason);
        assumeTrue(reason == null, "UCX tests skipped: " + reason);
    }

    record Child(int exit, String output) {
        String line(String prefix) {
            return output.lines().filter(l -> l.startsWith(prefix)).findFirst().orElse(null);
        }
    }

    /** Runs {@link HostileOfferMain} with {@code args} in a child JVM, behind {@code prefix} (e.g. unshare), in a scratch directory. */
    static Child child(List<String> prefix, String... args) throws Exception {
        return child(prefix, Map.of(), args);
    }

    static Child child(List<String> prefix, Map<String, String> env, String... args) throws Exception {
        List<String> cmd = new ArrayList<>(prefix);
        cmd.add(ProcessHandle.current().info().command().orElseThrow());
        cmd.add("--enable-native-access=ALL-UNNAMED");
        cmd.add("-Xmx256m");
        cmd.add("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn");
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(HostileOfferMain.class.getName());
        cmd.addAll(List.of(args));
        Path dir = Files.createTempDirectory("kvferry-ucx-hostile"); // where a crashing JVM may leave its files
        ProcessBuilder pb = new ProcessBuilder(cmd).directory(dir.toFile()).redirectErrorStream(true);
        pb.environment().putAll(env);
        Process p = pb.start();
        try {
            byte[] out = p.getInputStream().readAllBytes();
            if (!p.waitFor(150, TimeUnit.SECONDS)) fail("the child did not finish: " + String.join(" ", cmd));
            return new Child(p.exitValue(), new String(out, StandardCharsets.UTF_8));
        } finally {
            p.destroyForcibly();
            p.waitFor();
            try (var files = Files.list(dir)) {
                for (Path f : files.toList()) Files.deleteIfExists(f);
            }
            Files.deleteIfExists(dir);
        }
    }

    @Test
    void withoutTheCheckARandomWorkerAddressKillsTheProcess() throws Exception {
        // What the check is for (and proof that the child's crash is seen): libucp given a random address directly.
        Child c = child(List.of(), "unchecked", "1");
        assertNotEquals(0, c.exit(), c.output());
        assertFalse(c.output().contains("SURVIVED"), c.output());
    }

    @Test
    void randomWorkerAddressesWithAValidChecksumAreRefusedAndThePrefillLives() throws Exception {
        Child c = child(List.of(), "random", "7", "200");
        assertEquals(0, c.exit(), c.output());
        assertTrue(c.output().contains("COUNTS refused=200 unusable=0 connected=0"), c.output());
        assertTrue(c.output().contains("ALIVE"), "a real link still works after them: " + c.output());
        String refusal = c.line("REFUSED ");
        assertNotNull(refusal, c.output());
        assertTrue(refusal.contains("refused: its UCX worker address or remote keys do not have the structure"), refusal);
        String version = c.line("UCX_VERSION ").substring("UCX_VERSION ".length()).strip();
        assertFalse(refusal.contains(version), "the refusal, sent to the peer, names no UCX version: " + refusal);
        assertFalse(refusal.contains("address format version"), "nor what the check found (that is logged here): " + refusal);
    }

    @Test
    void damagedAddressesThatPassTheCheckNeverKillThePrefill() throws Exception {
        // The mutated addresses name ports and hosts UCX then connects to: only in a network namespace
        // of this test's own (nothing but loopback, nothing else listening) may it do that.
        assumeTrue(Files.isExecutable(Path.of("/usr/bin/unshare")) && Files.isExecutable(Path.of("/usr/sbin/ip"))
                && (Integer) Files.getAttribute(Path.of("/proc/self"), "unix:uid") == 0, "needs root, unshare and ip (a network namespace)");
        Child probe = child(List.of("/usr/bin/unshare", "--net", "true"), "random", "1", "0");
        assumeTrue(probe.exit() == 0, "unshare --net is not permitted here: " + probe.output());
        // Both error modes: with error handling off, UCX also uses its posix/sysv transports between the two.
        for (String mode : List.of("peer", "none")) {
            Child c = child(List.of("/usr/bin/unshare", "--net", "sh", "-c", "ip link set lo up && exec \"$0\" \"$@\""),
                    Map.of("KVFERRY_UCX_ERR_MODE", mode), "mutants", "3", "250");
            assertEquals(0, c.exit(), "error mode " + mode + ": " + c.output());
            assertTrue(c.output().contains("ALIVE"), c.output());
            String counts = c.line("COUNTS ");
            assertNotNull(counts, c.output());
            assertFalse(counts.contains("connected=0"), "some damaged addresses pass the check and reach libucp: " + counts);
            assertFalse(counts.contains("refused=0"), "and some do not: " + counts);
        }
    }

    @Test
    void anotherUcxReleaseIsDeclinedWithoutNamingEitherVersion() throws Exception {
        KVFerrySettings settings = KVFerrySettings.fromEnvironment();
        UcxTransportProvider provider = new UcxTransportProvider();
        try (Arena arena = Arena.ofShared()) {
            RegisteredMemory dst = HostileOfferMain.memory(arena, 1), src = HostileOfferMain.memory(arena, 2);
            List<String> why = new ArrayList<>();
            DestinationTransport d = provider.openDestination(dst, 0, settings, null, why::add);
            assertNotNull(d, why.toString());
            SourceTransport s = provider.openSource(src, 0, settings);
            LinkOffer real = d.offer("p");
            try {
                UcxOffer o = UcxOffer.decode(real.blob());
                byte[] older = new UcxOffer(1, 12, o.workerAddress(), o.entries()).encode();
                TransportUnavailableException e = assertThrows(TransportUnavailableException.class,
                        () -> s.connect(older, dst.describe(), PeerLink.named("p")));
                assertTrue(e.getMessage().contains("another UCX release"), e.getMessage());
                assertFalse(e.getMessage().contains("1.12") || e.getMessage().contains(UcxRuntime.version()), e.getMessage());
                // A malformed address is refused with a message naming no library internals either.
                byte[] bad = new UcxOffer(o.ucxMajor(), o.ucxMinor(), new byte[] {(byte) 0x25, 1, 2, 3}, o.entries()).encode();
                IOException x = assertThrows(IOException.class, () -> s.connect(bad, dst.describe(), PeerLink.named("p")));
                assertFalse(x.getMessage().contains(UcxRuntime.version()), x.getMessage());
            } finally {
                real.close();
                s.close();
                d.close();
            }
        }
    }
}
