package io.kvferry.cli;

import io.kvferry.api.DisaggregationMode;
import io.kvferry.engine.serve.Roles;
import io.kvferry.registry.RegistryException;
import io.kvferry.testkit.BenchConfig;
import io.kvferry.testkit.RoleOptions;
import io.kvferry.testkit.RoleRunner;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

import java.io.IOException;
import java.net.InetAddress;
import java.net.UnknownHostException;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.Callable;
import java.util.stream.IntStream;

/** Shared body of {@code kvferry prefill} and {@code kvferry decode}. */
abstract class RoleCommand implements Callable<Integer> {
    @Mixin
    WorkloadOptions workload;

    @Option(names = "--bootstrap", required = true, description = "host:port of the prefill instance's bootstrap registry.")
    String bootstrap;

    @Option(names = "--rank", split = ",",
            description = "Attention-TP ranks this process serves (e.g. --rank 0 or --rank 0,1). Default: all ranks of --tp.")
    List<Integer> ranks;

    @Option(names = "--host", defaultValue = "127.0.0.1",
            description = "Address this rank binds its control endpoint to and publishes in the registry. Default: ${DEFAULT-VALUE}.")
    String host;

    @Option(names = "--status-port",
            description = "Port of this process's /metrics, /status and /status.json (0 = any free port, printed; -1 = none). "
                    + "Prefill ranks publish it in their registration. Default: env KVFERRY_STATUS_PORT, else 0.")
    Integer statusPortFlag;

    @Option(names = "--exit-on-stdin-eof", description = "Exit when standard input closes (the parent process died).")
    boolean exitOnStdinEof;

    @Option(names = "--advertise-port", split = ",", hidden = true,
            description = "prefill: port each rank publishes in the registry instead of its bound one, in launch order "
                    + "(kvferry chaos --scenario partition: a fault proxy's port).")
    List<Integer> advertisePorts;

    @Option(names = "--advertise-host", hidden = true,
            description = "prefill: host every rank publishes in the registry instead of --host "
                    + "(kvferry chaos --netns: a fault proxy on the decode's side of the link).")
    String advertiseHost;

    @Option(names = "--heartbeat-ms", defaultValue = "0", hidden = true,
            description = "Heartbeat interval of the control connections in ms (0 = library default).")
    long heartbeatMs;

    @Option(names = "--heartbeat-misses", defaultValue = "0", hidden = true,
            description = "Heartbeats missed before a control connection is declared dead (0 = library default).")
    int heartbeatMisses;

    @Option(names = "--prefill-info-timeout-ms", defaultValue = "0", hidden = true,
            description = "decode: how long a room retries a registered prefill that refuses connections (0 = library default).")
    long prefillInfoTimeoutMs;

    abstract DisaggregationMode mode();

    @Override
    public Integer call() throws Exception {
        BenchConfig config;
        try {
            config = workload.toConfig(false);
        } catch (IllegalArgumentException e) {
            System.err.println("kvferry " + mode().name().toLowerCase() + ": " + e.getMessage());
            return 2;
        }
        if (config.transport().equals("inproc")) {
            // The peer of a role process is another process: inproc links fell back to tcp, logged as a warning.
            System.err.println("kvferry " + mode().name().toLowerCase() + ": --transport inproc moves memory inside one JVM; the peer of a "
                    + "role process is another process: use tcp, shm, ucx or auto");
            return 2;
        }
        if (exitOnStdinEof) {
            Thread.ofPlatform().daemon().start(() -> {
                try {
                    while (System.in.read() >= 0) {
                        // drain
                    }
                } catch (IOException ignored) {
                    // treat as EOF
                }
                System.err.println("kvferry " + mode().name().toLowerCase() + ": parent went away, exiting");
                Runtime.getRuntime().halt(3);
            });
        }
        RoleOptions opts;
        try {
            opts = new RoleOptions(advertisePorts, heartbeatMs, heartbeatMisses, prefillInfoTimeoutMs, advertiseHost);
        } catch (IllegalArgumentException e) {
            System.err.println("kvferry " + mode().name().toLowerCase() + ": " + e.getMessage());
            return 2;
        }
        int tp = config.tp(mode());
        List<Integer> serve = ranks == null ? IntStream.range(0, tp).boxed().toList() : ranks;
        Set<Integer> seen = new HashSet<>();
        for (int r : serve) {
            if (r < 0 || r >= tp) {
                System.err.println("kvferry " + mode().name().toLowerCase() + ": --rank " + r + " is outside [0, " + tp + ")");
                return 2;
            }
            // A rank run twice in one process makes two managers for it: the second's rooms all fail.
            if (!seen.add(r)) {
                System.err.println("kvferry " + mode().name().toLowerCase() + ": --rank " + r + " is given twice (" + ranks + ")");
                return 2;
            }
        }
        try {
            // The manager binds it later, where an unresolvable name is a message-less UnresolvedAddressException.
            InetAddress.getByName(host);
        } catch (UnknownHostException e) {
            System.err.println("kvferry " + mode().name().toLowerCase() + ": --host " + host + ": no such host (cannot resolve it)");
            return 2;
        }
        if (mode() == DisaggregationMode.PREFILL && advertiseHost == null && Roles.isWildcard(host)) {
            // Refused here in one line rather than by the manager at registration, with a stack trace.
            System.err.println("kvferry prefill: --host " + host + " binds every address, and its ranks would publish it, which a decode "
                    + "on another host cannot connect to: give --advertise-host, the address the decodes reach this host at");
            return 2;
        }
        int statusPort;
        try {
            statusPort = (int) EnvDefault.of("--status-port", statusPortFlag, "KVFERRY_STATUS_PORT").get(0, -1, 65535);
        } catch (IllegalArgumentException e) {
            System.err.println("kvferry " + mode().name().toLowerCase() + ": " + e.getMessage());
            return 2;
        }
        try {
            return RoleRunner.runRole(mode(), config, bootstrap, serve, host, System.out, opts, statusPort) ? 0 : 1;
        } catch (RegistryException e) {
            // No registry at that address, or one that refuses this token: the user's --bootstrap (or token), one line.
            System.err.println("kvferry " + mode().name().toLowerCase() + ": --bootstrap " + bootstrap + ": no usable bootstrap registry there: "
                    + e.getMessage());
            return 2;
        }
    }
}
