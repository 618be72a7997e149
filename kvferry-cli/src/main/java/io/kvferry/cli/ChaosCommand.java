package io.kvferry.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.RoleOptions;
import io.kvferry.testkit.RoleRunner;
import io.kvferry.chaos.ChaosRunner;
import io.kvferry.chaos.net.LinkImpairment;
import io.kvferry.chaos.net.Netns;
import io.kvferry.chaos.net.NetnsLink;
import io.kvferry.testkit.MemoryBudget;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

import java.util.Locale;
import java.util.concurrent.Callable;

/** The fault harness: real processes, one injected fault, and a pass/fail verdict. */
@Command(name = "chaos", mixinStandardHelpOptions = true,
        description = {"Start a registry, a prefill and a decode as separate processes, drive the bench workload, inject "
                + "one fault and report: requests, succeeded, failed, hung, corrupted, leaked (rooms, pages, threads, sockets, "
                + "native memory not returned), detect_ms.",
                "Passes (exit 0) when hung == 0, corrupted == 0 and leaked == 0, and for restart-* and partition when requests "
                + "succeeded again after the fault (partition: and both sides detected the blackholed link); corrupt when the "
                + "--checksum mode kept its promise (full: every damaged room failed with kind integrity; off: the damage shows as "
                + "corrupted > 0; sampled: each damaged room was caught or shows); hostile-peer when every attack was refused, "
                + "every legitimate request succeeded and the prefill's memory and threads stayed bounded. A fault struck after every "
                + "request had concluded tested nothing: the run fails (untested)."})
public final class ChaosCommand implements Callable<Integer> {
    @Option(names = "--scenario", required = true,
            description = "kill-prefill, kill-decode, restart-prefill, restart-decode, bad-frames, abort-storm, slow-decode, "
                    + "failure-injection, partition, corrupt or hostile-peer.")
    String scenario;

    @Option(names = "--netns",
            description = "Run the registry and prefill in one network namespace and the decode in another, joined by a link "
                    + "impaired as --netem says (root only); partition then takes the link down (ip link set DEV down).")
    boolean netns;

    @Option(names = "--netem", defaultValue = LinkImpairment.DEFAULT_SPEC,
            // No ${DEFAULT-VALUE}: picocli formats the description, and the default's own '%' breaks that.
            description = "With --netns: what the link does to packets, each direction, in tc netem's words: delay TIME, "
                    + "loss PERCENT%%, rate RATE, or none. Default: 'delay 0.5ms loss 0.1%%' (1 ms round trip, 0.1 %% loss).")
    String netem;

    @Option(names = "--netns-link", defaultValue = "auto",
            description = "With --netns: veth (a veth pair with tc netem; the kernel needs sch_netem), tun (a TUN device per "
                    + "namespace, the harness plays the wire: for kernels without netem) or auto (veth where netem works, else "
                    + "tun). Default: ${DEFAULT-VALUE}.")
    String netnsLink;

    @Option(names = "--duration", defaultValue = "0",
            description = "Soak: repeat the load/fault cycle (fresh processes each time) until this much time passed and "
                    + "report the sums, e.g. 60s, 5m, 90 (seconds). Default: one cycle.")
    String duration;

    @Option(names = "--fault-after-ms", defaultValue = "200",
            description = "Inject the fault this long after the first requests concluded (mid-transfer). Default: ${DEFAULT-VALUE}.")
    long faultAfterMs;

    @Option(names = "--json", description = "Print the verdict as one JSON object on the last line.")
    boolean json;

    @Mixin
    WorkloadOptions workload;

    @Spec
    CommandSpec spec;

    @Override
    public Integer call() throws Exception {
        if (!ChaosRunner.SCENARIOS.contains(scenario)) {
            System.err.println("kvferry chaos: unknown scenario '" + scenario + "'; this build runs " + ChaosRunner.SCENARIOS);
            return 2;
        }
        for (String flag : new String[]{"--netem", "--netns-link"}) {
            // They shape the namespaces' link: without --netns there is none, and the flag was accepted and ignored.
            if (!netns && spec.commandLine().getParseResult().hasMatchedOption(flag)) {
                System.err.println("kvferry chaos: " + flag + " shapes the --netns link; without --netns it does nothing: add --netns or drop it");
                return 2;
            }
        }
        if (faultAfterMs < 0) {
            System.err.println("kvferry chaos: --fault-after-ms " + faultAfterMs + " is negative; give the delay in ms (0 = at once)");
            return 2;
        }
        BenchConfig config;
        try {
            config = workload.toConfig(true);
        } catch (IllegalArgumentException e) {
            System.err.println("kvferry chaos: " + e.getMessage());
            return 2;
        }
        // Requests whose peer died before it sent metadata fail by the bootstrap timeout: keep it short here.
        config = config.withFaultTimeouts(config.bootstrapTimeoutMillis() > 0 ? config.bootstrapTimeoutMillis() : 2000,
                config.deadlineMillis() > 0 ? config.deadlineMillis() : 120_000);
        if (config.transport().equals("inproc")) {
            // The roles are separate processes: inproc links would fall back to tcp, and the verdict would name a transport never run.
            System.err.println("kvferry chaos: --transport inproc moves memory inside one JVM; chaos runs prefill and decode as separate "
                    + "processes: use tcp, shm, ucx or auto");
            return 2;
        }
        try {
            // The knobs as the roles will read them, before any process starts: roles that exited on a bad one
            // (--set KVFERRY_CONNECT_TIMEOUT_MS=abc) left chaos waiting for them.
            RoleRunner.checkSettings(config, RoleOptions.NONE);
        } catch (IllegalArgumentException e) {
            System.err.println("kvferry chaos: " + e.getMessage());
            return 2;
        }
        if (config.transport().equals("fake")) {
            // fake moves no KV: every room's bytes differ on the decode, yet scenarios judged by the prefill passed.
            System.err.println("kvferry chaos: --transport fake moves no KV, so there is nothing to break: use tcp, shm, ucx or auto");
            return 2;
        }
        if (faultAfterMs >= config.deadlineMillis()) {
            // The drivers stop at their deadline: a later fault strikes a finished run (and a huge one never woke up).
            System.err.println("kvferry chaos: --fault-after-ms " + faultAfterMs + " is not before the drivers' deadline of "
                    + config.deadlineMillis() + " ms: the run would be over before the fault");
            return 2;
        }
        long durationMs;
        try {
            durationMs = parseDuration(duration);
        } catch (IllegalArgumentException e) {
            System.err.println("kvferry chaos: " + e.getMessage());
            return 2;
        }
        ChaosRunner runner = new ChaosRunner(config, System.err, faultAfterMs).withDuration(durationMs);
        ChaosRunner.Result r;
        try {
            // Both roles' pools on this machine, before any process starts (issue 16: every bench mode checks).
            MemoryBudget.requireBothRoles(config, MemoryBudget.availableBytes());
            if (netns) {
                LinkImpairment impairment = LinkImpairment.parse(netem);
                NetnsLink.Kind kind = NetnsLink.Kind.parse(netnsLink);
                String why = Netns.unavailableReason();
                if (why != null) {
                    System.err.println("kvferry chaos: --netns: " + why);
                    return 2;
                }
                runner.withNetns(impairment, kind);
            }
            r = runner.run(scenario);
        } catch (IllegalArgumentException e) {
            System.err.println("kvferry chaos: " + e.getMessage());
            return 2;
        }
        System.out.printf("scenario=%s requests=%d succeeded=%d failed=%d hung=%d corrupted=%d leaked=%d leaks=%s detect_ms=%s%s%s%s -> %s%n",
                r.scenario(), r.requests(), r.succeeded(), r.failed(), r.hung(), r.corrupted(), r.leaked(), r.leaks(),
                r.detectMs(), r.recovered() == null ? "" : " recovered=" + r.recovered(),
                r.detected() == null ? "" : " detected=" + r.detected(), r.cycles() > 1 ? " cycles=" + r.cycles() : "",
                r.passed() ? "PASS" : "FAIL");
        System.out.printf("  checksum=%s integrity_failures=%d%s%n", r.checksum(), r.integrityFailures(),
                r.inFlightAtFault() == null ? "" : " in_flight_at_fault=" + r.inFlightAtFault());
        if (r.untested() != null) System.out.println("  untested: " + r.untested());
        if (r.corruption() != null) System.out.println("  corruption: " + r.corruption());
        if (r.link() != null) System.out.println("  link: " + r.link());
        if (r.hostile() != null) {
            System.out.printf("  prefill rss_mb=%s threads=%s%n", r.hostile().rssMb(), r.hostile().threads());
            for (ChaosRunner.Hostile.Attack a : r.hostile().attacks()) {
                System.out.printf("  %s %s: %s%n", a.ok() ? "ok  " : "FAIL", a.name(), a.outcome());
            }
        }
        for (String f : r.firstFailures()) System.out.println("  failure: " + f);
        if (json) System.out.println(new ObjectMapper().writeValueAsString(r));
        return r.passed() ? 0 : 1;
    }

    /** "90", "90s", "1500ms", "5m", "1h" → milliseconds; "0" = one cycle. */
    static long parseDuration(String d) {
        String v = d.trim().toLowerCase(Locale.ROOT);
        long unit = 1000;
        if (v.endsWith("ms")) {
            unit = 1;
            v = v.substring(0, v.length() - 2);
        } else if (v.endsWith("s")) {
            v = v.substring(0, v.length() - 1);
        } else if (v.endsWith("m")) {
            unit = 60_000;
            v = v.substring(0, v.length() - 1);
        } else if (v.endsWith("h")) {
            unit = 3_600_000;
            v = v.substring(0, v.length() - 1);
        }
        try {
            long n = Long.parseLong(v.trim());
            if (n < 0) throw new NumberFormatException();
            return Math.multiplyExact(n, unit);
        } catch (NumberFormatException | ArithmeticException e) {
            throw new IllegalArgumentException("--duration must be a non-negative time like 60s, 5m or 90, got '" + d + "'");
        }
    }
}
