package io.kvferry.cli;

import io.kvferry.ops.Ops;
import io.kvferry.ops.RegistryOps;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.BootstrapRegistryServer;
import io.kvferry.registry.PrefillRankRegistration;
import io.kvferry.registry.RegistryOptions;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@code kvferry status} against a live registry, and {@code kvferry --set}. */
class StatusCommandTest {
    private record Run(int code, String out, String err) {}

    private static Run run(String... args) {
        ByteArrayOutputStream out = new ByteArrayOutputStream(), err = new ByteArrayOutputStream();
        PrintStream o = System.out, e = System.err;
        System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
        System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
        try {
            int code = Main.run(args);
            return new Run(code, out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8));
        } finally {
            System.setOut(o);
            System.setErr(e);
        }
    }

    @Test
    void statusShowsTheRegistrysClusterAsTablesOrJson() {
        try (BootstrapRegistryServer registry = BootstrapRegistryServer.start("127.0.0.1", 0, RegistryOptions.defaults("tok"))) {
            RegistryOps.mount(registry, Ops.newRegistry(), List.of());
            try (BootstrapClient c = new BootstrapClient("127.0.0.1:" + registry.port(), "tok")) {
                c.registerRank(new PrefillRankRegistration(1, 0, 1, 0, 1, 0, 1, 0, 1, 0, "10.1.2.3", 7000, 16, "bf16", null, false, null));
            }
            Run text = run("status", "--bootstrap", "127.0.0.1:" + registry.port());
            assertEquals(0, text.code(), text.err());
            assertTrue(text.out().contains("kvferry cluster at registry 127.0.0.1:" + registry.port()), text.out());
            assertTrue(text.out().contains("registered 1/1 (ready)"), text.out());
            assertTrue(text.out().contains("10.1.2.3:7000"), text.out());
            Run json = run("status", "--bootstrap", "127.0.0.1:" + registry.port(), "--json");
            assertEquals(0, json.code());
            assertTrue(json.out().contains("\"kind\" : \"cluster\""), json.out());
        }
        Run down = run("status", "--bootstrap", "127.0.0.1:1", "--timeout-ms", "2000");
        assertEquals(1, down.code());
        assertTrue(down.err().startsWith("kvferry status: cannot reach http://127.0.0.1:1/status.json"), down.err());
    }

    @Test
    void setTakesAKnobByEitherNameAndRefusesAnythingElse() {
        String key = "kvferry.connectTimeoutMs";
        try {
            assertEquals(2, run("--set", "KVFERRY_CONNECT_TIMEOUT_MS=1234", "status").code(), "status still needs --bootstrap");
            assertEquals("1234", System.getProperty(key));
            Main.withSettings(new String[]{"--set=kvferry.connectTimeoutMs=99"});
            assertEquals("99", System.getProperty(key));
            Run bad = run("--set", "KVFERRY_NO_SUCH=1", "status");
            assertEquals(2, bad.code());
            assertTrue(bad.err().contains("--set KVFERRY_NO_SUCH: no such knob; one of [KVFERRY_TRANSFER_WORKERS"), bad.err());
            assertEquals(2, run("--set", "novalue", "status").code());
        } finally {
            System.clearProperty(key);
        }
        assertNull(System.getProperty(key));
    }
}
