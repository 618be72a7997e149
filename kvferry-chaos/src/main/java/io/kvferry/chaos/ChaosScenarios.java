package io.kvferry.chaos;

import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.ChecksumMode;
import io.kvferry.protocol.Fingerprint;
import io.kvferry.protocol.FrameCodec;
import io.kvferry.protocol.Handshake;
import io.kvferry.protocol.Hello;
import io.kvferry.protocol.MemoryDescriptor;
import io.kvferry.protocol.MessageType;
import io.kvferry.protocol.Wire;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.RankEndpoint;
import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.RoleOptions;
import io.kvferry.testkit.RoleReport;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;

/** The scenarios of this build, one class each. */
public final class ChaosScenarios {
    private ChaosScenarios() {}

    /** Every scenario, in the order {@code kvferry chaos --help} lists them. */
    public static final List<ChaosScenario> ALL = List.of(new KillPrefill(), new KillDecode(), new BadFrames(), new AbortStorm(),
            new SlowDecode(), new FailureInjection(), new RestartPrefill(), new RestartDecode(), new Partition(), new Corrupt(),
            new HostilePeerScenario());

    /** The scenario of that name, or null. */
    public static ChaosScenario byName(String name) {
        for (ChaosScenario s : ALL) if (s.name().equals(name)) return s;
        return null;
    }

    /** kill-prefill: SIGKILL the prefill mid-transfer; the decode must fail its rooms at once, nothing hangs. */
    static final class KillPrefill implements ChaosScenario {
        /** How long the decode retries the dead (still registered) prefill for a new request. */
        static final long KILLED_PREFILL_INFO_TIMEOUT_MS = 2000;

        public String name() {
            return "kill-prefill";
        }

        @Override
        public RoleOptions decodeOptions(Setup setup) {
            // The prefill never comes back: requests started after the kill fail after 2 s instead of 15 s.
            return new RoleOptions(List.of(), 0, 0, KILLED_PREFILL_INFO_TIMEOUT_MS);
        }

        public void strike(Strike s) {
            s.prefill().destroyForcibly();
        }

        @Override
        public boolean prefillSurvives() {
            return false;
        }

        @Override
        public boolean detectsOnDecode() {
            return true;
        }
    }

    /** kill-decode: SIGKILL the decode mid-transfer; the prefill must fail and release its rooms. */
    static final class KillDecode implements ChaosScenario {
        public String name() {
            return "kill-decode";
        }

        public void strike(Strike s) {
            s.decode().destroyForcibly();
        }

        @Override
        public boolean decodeSurvives() {
            return false;
        }

        @Override
        public boolean detectsOnPrefill() {
            return true;
        }
    }

    /**
     * bad-frames: hostile traffic at the prefill rank's control port — random bytes, a forged 2 GiB
     * length, a wrong magic, an unknown type and version, a HELLO with a wrong token. The run must
     * still succeed whole.
     */
    static final class BadFrames implements ChaosScenario {
        public String name() {
            return "bad-frames";
        }

        @Override
        public String netnsUnsupported() {
            return "the harness connects to the prefill's rank from the root namespace";
        }

        /**
         * The attacks must meet a live prefill: paced by a slow decode, the workload outlasts them
         * (unpaced, a fast machine could finish every request before the attacks connect).
         */
        @Override
        public BenchConfig.Faults faults() {
            return new BenchConfig.Faults(0, 100, 0);
        }

        @Override
        public boolean patientPrefill() {
            return true;
        }

        public void strike(Strike s) throws IOException {
            RankEndpoint ep;
            try (BootstrapClient client = new BootstrapClient(s.registry(), s.config().authToken())) {
                ep = client.fetchRankEndpoint(0, 0, 0, 0);
            }
            for (byte[] a : attacks(s.config())) {
                try (Socket sock = new Socket()) {
                    sock.connect(new InetSocketAddress(ep.rankIp(), ep.rankPort()), 2000);
                    sock.setSoTimeout(2000);
                    sock.getOutputStream().write(a);
                    sock.getOutputStream().flush();
                    try {
                        sock.getInputStream().read(new byte[256]); // the prefill answers or closes; either is fine
                    } catch (IOException ignored) {
                        // reset by the peer: also a rejection
                    }
                }
            }
        }

        static List<byte[]> attacks(BenchConfig config) {
            Random rnd = new Random(7);
            List<byte[]> attacks = new ArrayList<>();
            byte[] noise = new byte[4096];
            rnd.nextBytes(noise);
            attacks.add(noise);
            int magic = Wire.MAGIC, version = Wire.VERSION;
            attacks.add(header(magic, version, MessageType.TRANSFER_INFO.code(), 0, Integer.MAX_VALUE)); // claims ~2 GiB
            attacks.add(header(0x12345678, version, 1, 0, 16));                       // wrong magic
            attacks.add(header(magic, version, 99, 0, 0));                             // unknown type
            attacks.add(header(magic, version + 4, 1, 0, 0));                          // unknown version
            // A HELLO signed with the wrong token, answering a challenge it never read.
            attacks.add(FrameCodec.encode(new Hello("intruder", "intruder", Fingerprint.of("", "bf16", config.workload().pageSize(),
                    false, 0), "tcp", 0, 1, 0, 0, ChecksumMode.OFF,
                    new MemoryDescriptor(new long[0], new long[0], new int[0], new long[0], new long[0], List.of()), List.of(),
                    Handshake.nonce(), null, null).signed(Handshake.key("wrong-token"), Handshake.nonce())).array());
            return attacks;
        }

        private static byte[] header(int magic, int version, int type, int flags, int length) {
            return ByteBuffer.allocate(12).order(ByteOrder.LITTLE_ENDIAN).putInt(magic).put((byte) version).put((byte) type)
                    .putShort((short) flags).putInt(length).array();
        }
    }

    /** Faults injected all along by the drivers or the library; nothing is struck at a process. */
    abstract static class InjectedAllAlong implements ChaosScenario {
        @Override
        public boolean injectsAllAlong() {
            return true;
        }

        public void strike(Strike s) {
            // injected by the drivers / library from the first request on
        }
    }

    /** abort-storm: a quarter of the requests are aborted mid-transfer on the decode. */
    static final class AbortStorm extends InjectedAllAlong {
        public String name() {
            return "abort-storm";
        }

        @Override
        public BenchConfig.Faults faults() {
            return new BenchConfig.Faults(0.25, 0, 0);
        }
    }

    /** slow-decode: the decode takes 100 ms per request before it sends its metadata. */
    static final class SlowDecode extends InjectedAllAlong {
        public String name() {
            return "slow-decode";
        }

        @Override
        public BenchConfig.Faults faults() {
            return new BenchConfig.Faults(0, 100, 0);
        }

        @Override
        public boolean patientPrefill() {
            return true;
        }
    }

    /** failure-injection: the library's test hook fails 10 % of the requests once under way. */
    static final class FailureInjection extends InjectedAllAlong {
        public String name() {
            return "failure-injection";
        }

        @Override
        public BenchConfig.Faults faults() {
            return new BenchConfig.Faults(0, 0, 0.1);
        }
    }

    /** restart-prefill: kill the prefill and start a fresh one behind the same registry; requests must succeed again. */
    static final class RestartPrefill implements ChaosScenario {
        public String name() {
            return "restart-prefill";
        }

        public void strike(Strike s) throws Exception {
            s.restart(true);
        }

        @Override
        public void judge(Judgement j) {
            int ok = 0;
            for (RoleReport r : j.judged) ok += r.succeeded();
            // The surviving decode must beat its pre-fault count.
            j.recovered = ok > j.timeline.concludedBeforeFault;
        }
    }

    /** restart-decode: kill the decode and start a fresh one; the fresh pair must complete requests. */
    static final class RestartDecode implements ChaosScenario {
        public String name() {
            return "restart-decode";
        }

        @Override
        public boolean patientPrefill() {
            return true;
        }

        public void strike(Strike s) throws Exception {
            s.restart(false);
        }

        @Override
        public void judge(Judgement j) {
            int ok = 0;
            for (RoleReport r : j.judged) ok += r.succeeded();
            // A fresh decode's successes all came after the restart.
            j.recovered = ok > 0;
        }
    }

    /**
     * partition: blackhole every prefill link (through a fault proxy per rank) longer than the
     * heartbeat timeout, restore it and wait for a request to succeed through it again; then reset
     * every link (RST) and wait again. Both sides must fail the affected rooms while the link is
     * still blackholed (heartbeats), and recover without a restart.
     */
    static final class Partition implements ChaosScenario {
        /** Heartbeats of both roles, so a blackholed link is declared dead after 1 s. */
        static final long HEARTBEAT_MS = 200;
        static final int HEARTBEAT_MISSES = 5;
        /** How long the link stays blackholed (the heartbeat timeout plus a margin for both sides). */
        static final long BLACKHOLE_MS = HEARTBEAT_MS * HEARTBEAT_MISSES + 1500;
        /**
         * The proxied link's pace. The link must be the bottleneck: with a faster link the prefill can
         * be idle, every room waiting for metadata, when the blackhole strikes; then it has no room to
         * fail by heartbeat (its rooms fail later by bootstrap timeout) and detection cannot be judged.
         */
        static final long LINK_BYTES_PER_SECOND = 256L << 20;
        /** How long requests may take to succeed again once the link is restored or reset. */
        static final long RECOVERY_WAIT_MS = 30_000;

        public String name() {
            return "partition";
        }

        @Override
        public int minRequests(BenchConfig config) {
            // requests must remain to succeed after the blackhole and after the reset
            return ChaosRunner.FAULT_AFTER_REQUESTS + 6 * config.workload().concurrency();
        }

        @Override
        public RoleOptions prefillOptions(Setup setup) throws IOException {
            // In network namespaces the link itself goes down: no proxy.
            if (setup.network.isNetns()) return new RoleOptions(List.of(), HEARTBEAT_MS, HEARTBEAT_MISSES, 0);
            // Every prefill rank publishes a proxy's port; the proxy learns the rank's real port from its endpoint event.
            List<Integer> ports = new ArrayList<>();
            for (int i = 0; i < setup.config.rankCount(DisaggregationMode.PREFILL); i++) {
                ports.add(setup.proxy("rank" + i, LINK_BYTES_PER_SECOND, null).port());
            }
            return new RoleOptions(ports, HEARTBEAT_MS, HEARTBEAT_MISSES, 0);
        }

        @Override
        public RoleOptions decodeOptions(Setup setup) {
            return new RoleOptions(List.of(), HEARTBEAT_MS, HEARTBEAT_MISSES, 0);
        }

        public void strike(Strike s) throws InterruptedException, IOException {
            if (s.network().isNetns()) {
                linkDown(s);
                return;
            }
            Timeline t = s.timeline();
            for (FaultProxy x : s.proxies()) x.blackhole();
            s.log().println("[chaos] link blackholed for " + BLACKHOLE_MS + " ms");
            Thread.sleep(BLACKHOLE_MS);
            int okAtRestore = s.succeeded().get(), closed = 0;
            t.restoreAt = System.currentTimeMillis();
            for (FaultProxy x : s.proxies()) closed += x.restore();
            s.log().println("[chaos] link restored (" + closed + " blackholed connection(s) closed)");
            boolean healed = awaitSuccess(s, okAtRestore);
            boolean healedAfterReset = true;
            int n = s.config().workload().requests(), window = s.config().workload().concurrency();
            // Reset only while requests remain to be started after it, so recovery can be judged.
            if (healed && n - s.concluded().get() > 2 * window) {
                int okAtReset = s.succeeded().get(), reset = 0;
                t.resetAt = System.currentTimeMillis();
                for (FaultProxy x : s.proxies()) reset += x.reset();
                s.log().println("[chaos] link reset (" + reset + " connection(s))");
                healedAfterReset = awaitSuccess(s, okAtReset);
            }
            t.recovered = healed && healedAfterReset;
        }

        /**
         * --netns: {@code ip link set DEV down} on the decode's end for the blackhole time, then up; both
         * sides must have failed the affected rooms by heartbeat meanwhile and requests must succeed
         * again over the same link (no reset phase: there is no proxy to reset connections with).
         */
        private static void linkDown(Strike s) throws InterruptedException, IOException {
            Timeline t = s.timeline();
            s.network().link().down();
            s.log().println("[chaos] link down for " + BLACKHOLE_MS + " ms");
            int okAtRestore;
            try {
                Thread.sleep(BLACKHOLE_MS);
            } finally {
                okAtRestore = s.succeeded().get();
                t.restoreAt = System.currentTimeMillis();
                s.network().link().up();
            }
            s.log().println("[chaos] link up");
            t.recovered = awaitSuccess(s, okAtRestore);
        }

        /** Waits until the decode verified more than {@code before} requests; false if it ended or time ran out first. */
        private static boolean awaitSuccess(Strike s, int before) throws InterruptedException {
            long until = System.nanoTime() + RECOVERY_WAIT_MS * 1_000_000L;
            while (System.nanoTime() < until) {
                if (s.succeeded().get() > before) return true;
                if (!s.decode().isAlive()) return s.succeeded().get() > before;
                Thread.sleep(10);
            }
            return false;
        }

        @Override
        public boolean detectsOnPrefill() {
            return true;
        }

        @Override
        public boolean detectsOnDecode() {
            return true;
        }

        @Override
        public void judge(Judgement j) {
            Timeline t = j.timeline;
            j.recovered = Boolean.TRUE.equals(t.recovered);
            // Both sides must have failed the affected rooms while the link was still blackholed (heartbeats),
            // not only once the proxy closed it at the restore.
            long window = t.restoreAt - t.faultAt;
            Long p = j.detectMs.get("prefill"), d = j.detectMs.get("decode");
            j.detected = p != null && d != null && p < window && d < window;
            if (t.resetAt > 0) {
                j.detectMs.put("prefill_reset", ChaosRunner.firstFailureAfter(j.prefill, t.resetAt));
                j.detectMs.put("decode_reset", ChaosRunner.firstFailureAfter(j.decode, t.resetAt));
            }
        }
    }

    /**
     * corrupt: bytes change on their way from prefill to decode, and the checksum mode must do what
     * it promises. Over tcp a {@link FaultProxy} in front of every prefill rank (on the decode's side
     * of the link with {@code --netns}) follows the stream frame by frame and flips one byte in the
     * payload of one WRITE of each chosen room, never in a header or body. On the other data paths
     * (shm, ucx, which bypass any proxy) the prefill's test hook
     * ({@code KVManagerConfig.corruptionInjectionProbability}) flips one source byte after the page
     * digest was taken and restores it after the write; {@code auto} gets both. A room is chosen with
     * probability {@link #ROOM_PROBABILITY} (or {@code --corrupt-prob}).
     *
     * <ul>
     *   <li>{@code full}: no damaged room may succeed: corrupted == 0 and each damaged room failed
     *       with kind integrity (integrity_failures >= the rooms the proxy damaged, and > 0);</li>
     *   <li>{@code off}: the corruption must show: damaged rooms succeed with wrong bytes (corrupted > 0, and
     *       corrupted >= the rooms the proxy damaged: each one must be caught by the decode's byte check);</li>
     *   <li>{@code sampled}: about one WRITE (tcp) or page (digests) in eight, chosen per room, is
     *       verified, plus every aux row: a one-byte flip is caught only when it falls in the sample,
     *       so each damaged room must either fail with kind integrity or show as corrupted (a miss),
     *       and at least one must be either.</li>
     * </ul>
     */
    static final class Corrupt implements ChaosScenario {
        /** Chance a room is damaged when {@code --corrupt-prob} is not given. */
        static final double ROOM_PROBABILITY = 0.5;

        public String name() {
            return "corrupt";
        }

        /** The proxy or the hook damages rooms from the first request on; the strike only logs. */
        @Override
        public boolean injectsAllAlong() {
            return true;
        }

        @Override
        public int minRequests(BenchConfig config) {
            return 8;
        }

        /**
         * No peer dies: a room may fail only for its damage. With chaos's 2 s bootstrap timeout a decode slow to
         * start on a loaded machine failed undamaged rooms in Bootstrapping (seen with the suite and four builds beside it).
         */
        @Override
        public boolean patientPrefill() {
            return true;
        }

        static double probability(BenchConfig c) {
            return c.faults().corruptProbability() > 0 ? c.faults().corruptProbability() : ROOM_PROBABILITY;
        }

        /** Whether WRITEs cross a tcp stream a proxy can damage. */
        static boolean viaProxy(BenchConfig c) {
            return c.transport().equals("tcp") || c.transport().equals("auto");
        }

        /** Whether the prefill's hook damages one-sided copies. */
        static boolean viaHook(BenchConfig c) {
            return !c.transport().equals("tcp");
        }

        @Override
        public BenchConfig.Faults faults(BenchConfig c) {
            return viaHook(c) ? new BenchConfig.Faults(0, 0, 0, probability(c)) : BenchConfig.Faults.NONE;
        }

        @Override
        public RoleOptions prefillOptions(Setup setup) throws IOException {
            if (!viaProxy(setup.config)) return RoleOptions.NONE;
            WriteCorruption damage = new WriteCorruption(probability(setup.config), setup.config.workload().seed());
            setup.corruption = damage;
            List<Integer> ports = new ArrayList<>();
            for (int i = 0; i < setup.config.rankCount(DisaggregationMode.PREFILL); i++) {
                ports.add(setup.proxy("rank" + i, 0, damage).port());
            }
            RoleOptions o = new RoleOptions(ports, 0, 0, 0);
            return setup.network.isNetns() ? o.withAdvertiseHost(setup.network.decodeSideHost()) : o;
        }

        public void strike(Strike s) {
            s.log().println("[chaos] corrupting " + (viaProxy(s.config()) ? "tcp WRITE payloads in the fault proxy" : "")
                    + (viaProxy(s.config()) && viaHook(s.config()) ? " and " : "")
                    + (viaHook(s.config()) ? "one-sided copies by the prefill's hook" : "") + " (checksum "
                    + s.config().checksum().label() + ")");
        }

        @Override
        public void judge(Judgement j) {
            BenchConfig c = j.setup.config;
            boolean proxy = viaProxy(c), hook = viaHook(c);
            Integer injected = proxy && !hook ? Integer.valueOf(j.setup.corruption.rooms()) : null;
            String via = proxy && hook ? "proxy+hook" : proxy ? "proxy" : "hook";
            int caught = j.integrityFailures, shown = j.corrupted;
            boolean struck = injected != null ? injected > 0 : caught + shown > 0;
            String expect;
            boolean holds;
            switch (c.checksum()) {
                case FULL -> {
                    expect = "caught";
                    holds = struck && shown == 0 && caught > 0 && (injected == null || caught >= injected);
                }
                case OFF -> {
                    expect = "shown";
                    // Where the proxy counted its damage, every damaged room must show: a verifier that misses some passes none.
                    holds = shown > 0 && (injected == null || shown >= injected);
                }
                default -> {
                    expect = "sampled";
                    holds = struck && (injected == null || caught + shown >= injected);
                }
            }
            j.corruption = new ChaosRunner.Corruption(via, injected, expect, holds);
        }
    }
}
