package io.kvferry.tools;

import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.ModelShape;
import io.kvferry.testkit.RankPool;
import io.kvferry.testkit.RoleRunner;
import io.kvferry.testkit.Workload;

import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVPoll;
import io.kvferry.api.KVReceiver;
import io.kvferry.api.KVSender;
import io.kvferry.api.KVTransferException;
import io.kvferry.registry.BootstrapRegistryServer;
import io.kvferry.registry.RegistryOptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * A peer process killed with SIGKILL: every affected room on the survivor must fail with a clear
 * reason within 3 s (SGLang needs ~10 s for a dead prefill and has no fast path for a dead decode).
 */
class PeerDeathTest {
    static final String TOKEN = "death-token";

    static Workload workload() {
        return new Workload(8, 256, 16, 64, 8, 0, 5L);
    }

    static BenchConfig config() {
        return new BenchConfig(ModelShape.preset("tiny"), workload(), "tcp", 1, TOKEN);
    }

    static KVPoll awaitTerminal(Supplier<KVPoll> p, long timeoutMillis) {
        long deadline = System.nanoTime() + timeoutMillis * 1_000_000L;
        KVPoll st;
        while ((st = p.get()) != KVPoll.Success && st != KVPoll.Failed) {
            if (System.nanoTime() > deadline) return st;
            park();
        }
        return st;
    }

    /**
     * A poll's pause. The waits spun (Thread.onSpinWait) before: on a 2-core machine the spinning test thread took a core
     * from what it waited for (a prefill JVM starting, the survivor's reader seeing the killed peer's connection close),
     * whose 3 s bound then met the machine's load rather than the product's path.
     */
    static void park() {
        try {
            Thread.sleep(1);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError("interrupted while waiting", e);
        }
    }

    static String reason(Runnable failureException) {
        try {
            failureException.run();
        } catch (KVTransferException e) {
            return e.getMessage();
        }
        fail("no failure raised");
        return null;
    }

    @Test
    @Timeout(240)
    void killingThePrefillFailsEveryDecodeRoomWithinThreeSeconds() throws Exception {
        BenchConfig c = config();
        try (BootstrapRegistryServer registry = BootstrapRegistryServer.start("127.0.0.1", 0, RegistryOptions.defaults(TOKEN));
             RankPool pool = new RankPool(c.shape(), 16, 1, 0, c.workload().poolPages(), 16, 1)) {
            String addr = "127.0.0.1:" + registry.port();
            Process prefill = RoleRunner.spawn("prefill", c, addr);
            // The rooms are made once the prefill process registered: its JVM's start-up (tens of seconds on a loaded
            // 2-core machine) must not count against the decode's 15 s topology lookup, which is not what this tests.
            awaitRegistered(registry, prefill);
            try (KVManager decode = RoleRunner.manager(c, DisaggregationMode.DECODE, 0, addr, pool)) {
                List<KVReceiver> rooms = new ArrayList<>();
                for (Workload.Request r : c.workload().generate()) {
                    KVReceiver recv = decode.createReceiver(addr, r.room());
                    recv.init(0);
                    rooms.add(recv);
                }
                // Handshakes done (the prefill is registered and connected); no metadata sent: all rooms in flight.
                for (KVReceiver r : rooms) assertEquals(KVPoll.WaitingForInput, awaitPast(r::poll, KVPoll.Bootstrapping, 30_000));
                long t0 = System.nanoTime();
                prefill.destroyForcibly();
                for (KVReceiver r : rooms) assertEquals(KVPoll.Failed, awaitTerminal(r::poll, 3000));
                long detectMs = (System.nanoTime() - t0) / 1_000_000L;
                assertTrue(detectMs < 3000, "decode saw the prefill's death after " + detectMs + " ms");
                String why = reason(rooms.getFirst()::failureException);
                assertTrue(why.contains("Lost connection with prefill instance (bootstrap_addr: " + addr + ")"), why);
            } finally {
                prefill.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            }
        }
    }

    @Test
    @Timeout(240)
    void killingTheDecodeFailsEveryPrefillRoomWithinThreeSeconds() throws Exception {
        BenchConfig c = config();
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, TOKEN);
             RankPool pool = new RankPool(c.shape(), 16, 1, 0, c.workload().poolPages(), 16, 1)) {
            String addr = "127.0.0.1:" + registry.port();
            try (KVManager prefill = RoleRunner.manager(c, DisaggregationMode.PREFILL, 0, addr, pool)) {
                prefill.registerToBootstrap();
                List<KVSender> rooms = new ArrayList<>();
                for (Workload.Request r : c.workload().generate()) rooms.add(prefill.createSender(addr, r.room()));
                Process decode = RoleRunner.spawn("decode", c, addr);
                try {
                    // The decode process sends its metadata; this prefill never sends KV, so every room waits.
                    // Bounded by the process's start-up, not by a kvferry timeout (the senders wait 300 s for their decode).
                    for (KVSender s : rooms) assertEquals(KVPoll.WaitingForInput, awaitPast(s::poll, KVPoll.Bootstrapping, 150_000));
                    long t0 = System.nanoTime();
                    decode.destroyForcibly();
                    for (KVSender s : rooms) assertEquals(KVPoll.Failed, awaitTerminal(s::poll, 3000));
                    long detectMs = (System.nanoTime() - t0) / 1_000_000L;
                    assertTrue(detectMs < 3000, "prefill saw the decode's death after " + detectMs + " ms");
                    String why = reason(rooms.getFirst()::failureException);
                    assertTrue(why.contains("Decode instance could be dead"), why);
                    assertEquals(0, prefill.stats().peerConnections());
                } finally {
                    decode.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
                }
            }
        }
    }

    /** Waits (up to 150 s, the start-up of a JVM on a loaded machine) until the prefill process has registered its rank. */
    static void awaitRegistered(BootstrapRegistryServer registry, Process prefill) {
        long deadline = System.nanoTime() + 150_000_000_000L;
        while (registry.registeredRanks() < 1) {
            if (!prefill.isAlive()) fail("the prefill process exited with " + prefill.exitValue() + " before it registered");
            if (System.nanoTime() > deadline) fail("the prefill process did not register within 150 s");
            park();
        }
    }

    static KVPoll awaitPast(Supplier<KVPoll> p, KVPoll past, long timeoutMillis) {
        long deadline = System.nanoTime() + timeoutMillis * 1_000_000L;
        KVPoll st;
        while ((st = p.get()) == past) {
            if (System.nanoTime() > deadline) return st;
            park();
        }
        return st;
    }
}
