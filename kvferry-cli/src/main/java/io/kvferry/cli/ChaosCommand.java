package io.kvferry.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.bench.BenchConfig;
import io.kvferry.bench.ChaosRunner;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

import java.util.concurrent.Callable;

/** The fault harness: real processes, one injected fault, and a pass/fail verdict. */
@Command(name = "chaos", mixinStandardHelpOptions = true,
        description = {"Start a registry, a prefill and a decode as separate processes, drive the bench workload, inject "
                + "one fault and report: requests, succeeded, failed, hung, corrupted, leaked, detect_ms.",
                "Passes (exit 0) when hung == 0, corrupted == 0 and leaked == 0."})
public final class ChaosCommand implements Callable<Integer> {
    @Option(names = "--scenario", required = true,
            description = "kill-prefill, kill-decode, restart-prefill, restart-decode, bad-frames, abort-storm, slow-decode "
                    + "or failure-injection.")
    String scenario;

    @Option(names = "--fault-after-ms", defaultValue = "200",
            description = "Inject the fault this long after the first requests concluded (mid-transfer). Default: ${DEFAULT-VALUE}.")
    long faultAfterMs;

    @Option(names = "--json", description = "Print the verdict as one JSON object on the last line.")
    boolean json;

    @Mixin
    WorkloadOptions workload;

    @Override
    public Integer call() throws Exception {
        if (!ChaosRunner.SCENARIOS.contains(scenario)) {
            System.err.println("kvferry chaos: unknown scenario '" + scenario + "'; this build runs " + ChaosRunner.SCENARIOS);
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
        ChaosRunner.Result r = new ChaosRunner(config, System.err, faultAfterMs).run(scenario);
        System.out.printf("scenario=%s requests=%d succeeded=%d failed=%d hung=%d corrupted=%d leaked=%d detect_ms=%s%s -> %s%n",
                r.scenario(), r.requests(), r.succeeded(), r.failed(), r.hung(), r.corrupted(), r.leaked(), r.detectMs(),
                r.recovered() == null ? "" : " recovered=" + r.recovered(), r.passed() ? "PASS" : "FAIL");
        for (String f : r.firstFailures()) System.out.println("  failure: " + f);
        if (json) System.out.println(new ObjectMapper().writeValueAsString(r));
        return r.passed() ? 0 : 1;
    }
}
