package io.kvferry.bench;

import com.fasterxml.jackson.annotation.JsonProperty;
import io.kvferry.KVFerry;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.RankEndpoint;

import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

/**
 * The fault harness behind {@code kvferry chaos}: a registry here, prefill and decode as separate
 * JVMs driving the bench workload, one injected fault, and a verdict. Passing means no request
 * hung, none reported Success with wrong bytes, and no room was left behind.
 */
public final class ChaosRunner {
    /** Scenarios this build runs. */
    public static final List<String> SCENARIOS = List.of("kill-prefill", "kill-decode", "bad-frames", "abort-storm",
            "slow-decode", "failure-injection", "restart-prefill", "restart-decode");

    /** The faults a scenario injects through the drivers or the library (none for the process-level ones). */
    public static BenchConfig.Faults faultsFor(String scenario) {
        return switch (scenario) {
            case "abort-storm" -> new BenchConfig.Faults(0.25, 0, 0);
            case "slow-decode" -> new BenchConfig.Faults(0, 100, 0);
            case "failure-injection" -> new BenchConfig.Faults(0, 0, 0.1);
            default -> BenchConfig.Faults.NONE;
        };
    }

    /** The verdict; {@code --json} prints it as the last line. */
    public record Result(String scenario, int requests, int succeeded, int failed, int hung, int corrupted, int leaked,
                         @JsonProperty("detect_ms") Map<String, Long> detectMs,
                         @JsonProperty("recovered") Boolean recovered,
                         @JsonProperty("first_failures") List<String> firstFailures) {
        /** Restart scenarios also require that requests succeeded through the restarted process. */
        public boolean passed() {
            return hung == 0 && corrupted == 0 && leaked == 0 && (recovered == null || recovered);
        }
    }

    /** Requests the decode must have concluded before the fault, so it lands on a working pair. */
    static final int FAULT_AFTER_REQUESTS = 2;

    private final BenchConfig config;
    private final PrintStream progress;
    private final long faultAfterMillis;

    /** @param faultAfterMillis extra delay before the fault, once the first requests concluded */
    public ChaosRunner(BenchConfig config, PrintStream progress, long faultAfterMillis) {
        this.config = config;
        this.progress = progress;
        this.faultAfterMillis = faultAfterMillis;
    }

    public Result run(String scenario) throws Exception {
        if (!SCENARIOS.contains(scenario)) {
            throw new IllegalArgumentException("unknown scenario '" + scenario + "'; this build runs " + SCENARIOS);
        }
        BenchConfig config = this.config.faults().equals(BenchConfig.Faults.NONE)
                ? this.config.withFaults(faultsFor(scenario)) : this.config;
        PrintStream quiet = progress != null ? progress : new PrintStream(OutputStream.nullOutputStream());
        try (KVBootstrapServer registry = KVFerry.startBootstrapServer("127.0.0.1", 0, config.authToken())) {
            String addr = "127.0.0.1:" + registry.port();
            Process prefill = RoleRunner.spawn("prefill", config, addr);
            Process decode = RoleRunner.spawn("decode", config, addr);
            ExecutorService exec = Executors.newFixedThreadPool(3);
            List<Process> started = new ArrayList<>(List.of(prefill, decode));
            try {
                Future<List<RoleReport>> pf = exec.submit(() -> RoleRunner.readReports(prefill, "prefill", quiet));
                java.util.concurrent.atomic.AtomicInteger concluded = new java.util.concurrent.atomic.AtomicInteger();
                Future<List<RoleReport>> df = exec.submit(() -> RoleRunner.readReports(decode, "decode", quiet, concluded));
                // Strike mid-transfer: once the pair has concluded a few requests (or after the given time at most).
                long strikeBy = System.nanoTime() + 60_000_000_000L;
                while (concluded.get() < FAULT_AFTER_REQUESTS && System.nanoTime() < strikeBy) Thread.sleep(5);
                Thread.sleep(faultAfterMillis);
                long faultAt = System.currentTimeMillis();
                int concludedBeforeFault = concluded.get();
                Process restarted = null;
                Future<List<RoleReport>> rf = null;
                switch (scenario) {
                    case "kill-prefill" -> prefill.destroyForcibly();
                    case "kill-decode" -> decode.destroyForcibly();
                    case "bad-frames" -> sendBadFrames(addr);
                    case "restart-prefill", "restart-decode" -> {
                        // Kill one side and start a fresh process behind the same registry; its peer keeps running.
                        boolean pre = scenario.equals("restart-prefill");
                        (pre ? prefill : decode).destroyForcibly().waitFor(10, TimeUnit.SECONDS);
                        restarted = RoleRunner.spawn(pre ? "prefill" : "decode", config, addr);
                        Process r = restarted;
                        rf = exec.submit(() -> RoleRunner.readReports(r, pre ? "prefill" : "decode", quiet));
                    }
                    default -> {
                        // abort-storm, slow-decode, failure-injection: injected by the drivers / library all along
                    }
                }
                long wait = Math.max(60_000, config.deadlineMillis() + 30_000);
                if (restarted != null) started.add(restarted);
                List<RoleReport> pre = pf.get(wait, TimeUnit.MILLISECONDS);
                List<RoleReport> dec = df.get(wait, TimeUnit.MILLISECONDS);
                if (rf != null) {
                    List<RoleReport> fresh = rf.get(wait, TimeUnit.MILLISECONDS);
                    if (scenario.equals("restart-prefill")) pre = fresh;
                    else dec = fresh;
                }
                return verdict(config, scenario, pre, dec, faultAt, concludedBeforeFault);
            } finally {
                exec.shutdownNow();
                for (Process p : started) p.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            }
        }
    }

    private Result verdict(BenchConfig config, String scenario, List<RoleReport> pre, List<RoleReport> dec, long faultAt,
                           int concludedBeforeFault) {
        int n = config.workload().requests();
        boolean decodeAlive = !scenario.equals("kill-decode");
        // After a decode restart the fresh decode repeats the stream: what the old one finished fails there
        // (the prefill already cleared those rooms); recovery means the fresh pair completed requests.
        List<RoleReport> judge = decodeAlive ? dec : pre;
        java.util.Set<Integer> failedIdx = new java.util.HashSet<>();
        int hung = 0, corrupted = 0, leaked = 0;
        List<String> failures = new ArrayList<>();
        for (RoleReport r : judge) {
            failedIdx.addAll(r.failedRequests());
            hung += r.hung();
            corrupted += r.corrupted();
        }
        for (List<RoleReport> side : List.of(pre, dec)) {
            for (RoleReport r : side) {
                leaked += r.leakedRooms();
                for (String f : r.firstFailures()) if (failures.size() < 5) failures.add(r.role() + ": " + f);
            }
        }
        // A side that was killed reports nothing: its requests are judged by the survivor.
        if (judge.isEmpty()) hung = n;
        // Detection time is what a peer's death measures; the other scenarios inject faults all along.
        Map<String, Long> detect = new LinkedHashMap<>();
        detect.put("prefill", scenario.equals("kill-decode") ? firstFailureAfter(pre, faultAt) : null);
        detect.put("decode", scenario.equals("kill-prefill") ? firstFailureAfter(dec, faultAt) : null);
        Boolean recovered = null;
        if (scenario.startsWith("restart-")) {
            int ok = 0;
            for (RoleReport r : judge) ok += r.succeeded();
            // A fresh decode's successes all came after the restart; the surviving decode must beat its pre-fault count.
            recovered = scenario.equals("restart-decode") ? ok > 0 : ok > concludedBeforeFault;
        }
        return new Result(scenario, n, n - failedIdx.size(), failedIdx.size(), hung, corrupted, leaked, detect, recovered,
                failures);
    }

    /** Milliseconds from the fault to the first failure a side saw, or null when it saw none (or was the victim). */
    private static Long firstFailureAfter(List<RoleReport> reports, long faultAt) {
        long first = 0;
        for (RoleReport r : reports) {
            if (r.firstFailureAtMillis() > 0 && (first == 0 || r.firstFailureAtMillis() < first)) first = r.firstFailureAtMillis();
        }
        return first == 0 ? null : Math.max(0, first - faultAt);
    }

    /**
     * Hostile traffic at the prefill rank's control port: random bytes, a forged 2 GiB length, a
     * wrong magic, an unknown type and a HELLO with a wrong token. The run must still succeed whole.
     */
    private void sendBadFrames(String addr) throws IOException {
        BenchConfig config = this.config;
        RankEndpoint ep;
        try (BootstrapClient client = new BootstrapClient(addr, config.authToken())) {
            ep = client.fetchRankEndpoint(0, 0, 0, 0);
        }
        Random rnd = new Random(7);
        List<byte[]> attacks = new ArrayList<>();
        byte[] noise = new byte[4096];
        rnd.nextBytes(noise);
        attacks.add(noise);
        attacks.add(header(0x5946564B, 1, 3, 0, Integer.MAX_VALUE)); // TRANSFER_INFO claiming ~2 GiB
        attacks.add(header(0x12345678, 1, 1, 0, 16));                // wrong magic
        attacks.add(header(0x5946564B, 1, 99, 0, 0));                 // unknown type
        attacks.add(header(0x5946564B, 7, 1, 0, 0));                  // unknown version
        attacks.add(io.kvferry.protocol.FrameCodec.encode(new io.kvferry.protocol.Hello("wrong-token", "intruder", "tcp", 0, 1,
                0, config.workload().pageSize(), "bf16", new io.kvferry.protocol.MemoryDescriptor(new long[0], new long[0],
                new int[0], new long[0], new long[0], List.of()))).array());
        for (byte[] a : attacks) {
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress(ep.rankIp(), ep.rankPort()), 2000);
                s.setSoTimeout(2000);
                s.getOutputStream().write(a);
                s.getOutputStream().flush();
                try {
                    s.getInputStream().read(new byte[256]); // the prefill answers or closes; either is fine
                } catch (IOException ignored) {
                    // reset by the peer: also a rejection
                }
            }
        }
    }

    private static byte[] header(int magic, int version, int type, int flags, int length) {
        return ByteBuffer.allocate(12).order(ByteOrder.LITTLE_ENDIAN).putInt(magic).put((byte) version).put((byte) type)
                .putShort((short) flags).putInt(length).array();
    }
}
