package io.kvferry.api;

import io.kvferry.transport.TransportProvider;
import io.kvferry.transport.Transports;
import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The configuration context: defaults ← KVFERRY_* environment ← -Dkvferry.* properties ← explicit values. */
class KVFerrySettingsTest {
    private static KVFerrySettings env(Map<String, String> env) {
        return KVFerrySettings.fromEnvironment(env, Map.of());
    }

    @Test
    void layersResolveInOrder() {
        Knob k = Knobs.WAITING_TIMEOUT_MS;
        assertEquals("300000", KVFerrySettings.defaults().get(k));
        assertFalse(KVFerrySettings.defaults().isSet(k));
        KVFerrySettings e = env(Map.of("KVFERRY_WAITING_TIMEOUT_MS", "1000", "PATH", "/bin"));
        assertEquals("1000", e.get(k));
        assertTrue(e.isSet(k));
        KVFerrySettings p = KVFerrySettings.fromEnvironment(Map.of("KVFERRY_WAITING_TIMEOUT_MS", "1000"),
                Map.of("kvferry.waitingTimeoutMs", "2000"));
        assertEquals("2000", p.get(k), "a property wins over the environment");
        assertEquals("3000", p.with(k, "3000").get(k), "an explicit value wins over both");
        assertEquals("2000", p.with(k, "3000").with(k, null).get(k), "clearing the explicit value falls back");
        assertEquals("300000", env(Map.of("KVFERRY_WAITING_TIMEOUT_MS", "  ")).get(k), "a blank variable counts as unset");
    }

    @Test
    void managerConfigTakesUnsetKnobsFromTheContextAndExplicitValuesFromTheBuilder() {
        KVFerrySettings s = env(Map.of("KVFERRY_BOOTSTRAP_TIMEOUT_MS", "1234", "KVFERRY_HEARTBEAT_MAX_FAILURE", "9",
                "KVFERRY_TRANSFER_WORKERS", "2", "KVFERRY_TEST_DISAGG_FAILURE_PROB", "0.25"));
        KVManagerConfig c = KVManagerConfig.builder().settings(s).build();
        assertEquals(Duration.ofMillis(1234), c.bootstrapTimeout());
        assertEquals(9, c.heartbeatMisses());
        assertEquals(2, c.transferWorkers());
        assertEquals(0.25, c.failureInjectionProbability());
        assertEquals(Duration.ofSeconds(300), c.waitingTimeout(), "unset knobs keep their defaults");
        KVManagerConfig explicit = KVManagerConfig.builder().settings(s).bootstrapTimeout(Duration.ofSeconds(7)).transferWorkers(3).build();
        assertEquals(Duration.ofSeconds(7), explicit.bootstrapTimeout());
        assertEquals(3, explicit.transferWorkers());
        assertEquals(s, explicit.settings(), "the context travels with the config, for the transports");
        assertEquals(c, c.toBuilder().build(), "toBuilder round-trips");
    }

    @Test
    void badValuesAreRefusedNamingTheKnob() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> KVManagerConfig.builder().settings(env(Map.of("KVFERRY_TCP_STRIPES", "many"))).build());
        assertTrue(e.getMessage().contains("KVFERRY_TCP_STRIPES / kvferry.tcpStripes") && e.getMessage().contains("'many'"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class,
                () -> KVManagerConfig.builder().settings(env(Map.of("KVFERRY_TCP_STRIPES", "65"))).build());
        assertTrue(e.getMessage().contains("[1, 64]"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class,
                () -> KVManagerConfig.builder().settings(env(Map.of("KVFERRY_TEST_DISAGG_FAILURE_PROB", "2"))).build());
        assertTrue(e.getMessage().contains("probability"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> new Knob("other.key", "KVFERRY_X", "", "", ""));
    }

    /**
     * Explicit timeouts are held to their knobs' bounds. A connectTimeout of 0 (no timeout, to a socket) was
     * taken: a prefill with it cut every decode's connection before its HELLO, and the decode saw only
     * "connection closed"; a bootstrap or waiting timeout of 0 or less failed every room.
     */
    @Test
    void explicitTimeoutsBelowTheirKnobsBoundsAreRefusedNamingThem() {
        for (Duration bad : new Duration[]{Duration.ZERO, Duration.ofSeconds(-5), Duration.ofNanos(999_999)}) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> KVManagerConfig.builder().connectTimeout(bad).build());
            assertEquals("connectTimeout must be at least 1 ms, got " + bad, e.getMessage());
            e = assertThrows(IllegalArgumentException.class, () -> KVManagerConfig.builder().bootstrapTimeout(bad).build());
            assertTrue(e.getMessage().startsWith("bootstrapTimeout must be at least 1 ms"), e.getMessage());
            e = assertThrows(IllegalArgumentException.class, () -> KVManagerConfig.builder().waitingTimeout(bad).build());
            assertTrue(e.getMessage().startsWith("waitingTimeout must be at least 1 ms"), e.getMessage());
        }
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> KVManagerConfig.builder().prefillInfoTimeout(Duration.ofMillis(-1)).build());
        assertTrue(e.getMessage().startsWith("prefillInfoTimeout must be >= 0"), e.getMessage());
        // The knobs' own bounds: prefillInfoTimeout may be 0 (give up at the first failed lookup).
        assertEquals(Duration.ZERO, KVManagerConfig.builder().prefillInfoTimeout(Duration.ZERO).build().prefillInfoTimeout());
        assertEquals(Duration.ofMillis(1), KVManagerConfig.builder().connectTimeout(Duration.ofMillis(1)).build().connectTimeout());
        // Transfer workers as their knob: an explicit count had no upper bound (each may be a thread per decode link).
        e = assertThrows(IllegalArgumentException.class, () -> KVManagerConfig.builder().transferWorkers(1025).build());
        assertEquals("transferWorkers must be in [1, 1024], got 1025", e.getMessage());
        assertEquals(1024, KVManagerConfig.builder().transferWorkers(1024).build().transferWorkers());
    }

    @Test
    void everyCoreKnobIsDocumented() throws Exception {
        Path doc = Path.of("..", "docs", "CONFIGURATION.md");
        String text = Files.readString(doc);
        List<Knob> all = new ArrayList<>(Knobs.ALL);
        for (TransportProvider p : Transports.all()) all.addAll(p.knobs());
        assertTrue(all.size() > Knobs.ALL.size(), "the shm transport declares its knobs");
        for (Knob k : all) {
            assertTrue(text.contains("`" + k.env() + "`") && text.contains("`" + k.key() + "`"), k.env() + " is missing from " + doc);
        }
    }
}
