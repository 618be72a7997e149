package io.kvferry.cli;

import io.kvferry.ops.Ops;
import io.kvferry.ops.RegistryOps;
import io.kvferry.registry.BootstrapRegistryServer;
import io.kvferry.registry.RegistryOptions;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

import java.net.InetAddress;
import java.net.UnknownHostException;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;

/** Runs a bootstrap registry until killed. */
@Command(name = "bootstrap", mixinStandardHelpOptions = true,
        description = "Run the bootstrap registry of a prefill instance (SGLang-compatible routes: PUT/GET /route, "
                + "/register_dp_rank, /query_dp_ranks, /health; kvferry's /status page, /status.json and /metrics).")
public final class BootstrapCommand implements Callable<Integer> {
    @Option(names = "--host", defaultValue = "127.0.0.1", description = "Bind address. Default: ${DEFAULT-VALUE}.")
    String host;

    @Option(names = "--port", defaultValue = "8998", description = "Port (0 = any free port). Default: ${DEFAULT-VALUE}.")
    int port;

    /** The bearer token required on the write routes; without one they answer 401. */
    @Mixin
    AuthTokenOptions auth = new AuthTokenOptions();

    @Option(names = "--no-auth", description = "Accept writes without a token, for SGLang releases that predate bootstrap "
            + "auth and send no Authorization header. Anyone who reaches the port can then register ranks; logged as a warning.")
    boolean noAuth;

    @Option(names = "--request-timeout-ms",
            description = "A request still unfinished this many ms after its first byte has its connection closed. "
                    + "Default: env KVFERRY_REGISTRY_REQUEST_TIMEOUT_MS, else 10000.")
    Long requestTimeoutMsFlag;

    @Option(names = "--max-connections",
            description = "Requests under way at once; one more is closed unanswered. "
                    + "Default: env KVFERRY_REGISTRY_MAX_CONNECTIONS, else 1024.")
    Integer maxConnectionsFlag;

    @Override
    public Integer call() throws Exception {
        String authToken;
        try {
            authToken = auth.token();
        } catch (RuntimeException e) {
            System.err.println("kvferry bootstrap: " + e.getMessage());
            return 2;
        }
        if (noAuth && authToken != null) {
            System.err.println("kvferry bootstrap: --no-auth and a token (--auth-token-file or KVFERRY_AUTH_TOKEN) exclude each other: drop one");
            return 2;
        }
        RegistryOptions options = noAuth ? RegistryOptions.withoutAuth() : RegistryOptions.defaults(authToken);
        // Each limit from its flag, else its environment variable (unset or empty: the default); a bad one names its source.
        EnvDefault timeout = EnvDefault.of("--request-timeout-ms", requestTimeoutMsFlag, "KVFERRY_REGISTRY_REQUEST_TIMEOUT_MS");
        EnvDefault connections = EnvDefault.of("--max-connections", maxConnectionsFlag, "KVFERRY_REGISTRY_MAX_CONNECTIONS");
        try {
            long ms = timeout.get(10_000, Long.MIN_VALUE, Long.MAX_VALUE);
            try {
                options = options.withRequestTimeout(Duration.ofMillis(ms));
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException(timeout.source() + ": " + e.getMessage(), e);
            }
            int max = (int) connections.get(1024, Integer.MIN_VALUE, Integer.MAX_VALUE);
            try {
                options = options.withMaxConnections(max);
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException(connections.source() + ": " + e.getMessage(), e);
            }
        } catch (IllegalArgumentException e) {
            System.err.println("kvferry bootstrap: " + e.getMessage());
            return 2;
        }
        if (port < 0 || port > 65_535) {
            // Named here: the server's own check says only "port -1 is outside [0, 65535]".
            System.err.println("kvferry bootstrap: --port " + port + " is outside [0, 65535] (0 = any free port)");
            return 2;
        }
        try {
            // Bound next, where an unresolvable name said only "cannot bind the bootstrap registry to …: Unresolved address".
            InetAddress.getByName(host);
        } catch (UnknownHostException e) {
            System.err.println("kvferry bootstrap: --host " + host + ": no such host (cannot resolve it)");
            return 2;
        }
        BootstrapRegistryServer server = BootstrapRegistryServer.start(host, port, options);
        // The cluster page and the registry's metrics on its own port: /status, /status.json, /metrics.
        PrometheusMeterRegistry metrics = Ops.newRegistry();
        RegistryOps.mount(server, metrics, List.of());
        CountDownLatch stop = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            server.close();
            stop.countDown();
        }));
        System.out.println("kvferry bootstrap listening on " + server.host() + ":" + server.port()
                + " (status page: http://" + server.host() + ":" + server.port() + "/status)");
        System.out.flush();
        stop.await();
        return 0;
    }
}
