package io.kvferry.cli;

import io.kvferry.KVFerry;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.registry.RegistryOptions;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;

/** Runs a bootstrap registry until killed. */
@Command(name = "bootstrap", mixinStandardHelpOptions = true,
        description = "Run the bootstrap registry of a prefill instance (SGLang-compatible routes: PUT/GET /route, "
                + "/register_dp_rank, /query_dp_ranks, /health).")
public final class BootstrapCommand implements Callable<Integer> {
    @Option(names = "--host", defaultValue = "127.0.0.1", description = "Bind address. Default: ${DEFAULT-VALUE}.")
    String host;

    @Option(names = "--port", defaultValue = "8998", description = "Port (0 = any free port). Default: ${DEFAULT-VALUE}.")
    int port;

    @Option(names = "--auth-token", defaultValue = "${env:KVFERRY_AUTH_TOKEN}",
            description = "Bearer token required on the write routes (env KVFERRY_AUTH_TOKEN). Without one they answer 401.")
    String authToken;

    @Option(names = "--no-auth", description = "Accept writes without a token, for SGLang releases that predate bootstrap "
            + "auth and send no Authorization header. Anyone who reaches the port can then register ranks; logged as a warning.")
    boolean noAuth;

    @Override
    public Integer call() throws Exception {
        if (noAuth && authToken != null && !authToken.isBlank()) {
            System.err.println("kvferry bootstrap: --no-auth and a token (--auth-token or KVFERRY_AUTH_TOKEN) exclude each other: drop one");
            return 2;
        }
        KVBootstrapServer server = noAuth
                ? KVFerry.startBootstrapServer(host, port, RegistryOptions.withoutAuth())
                : KVFerry.startBootstrapServer(host, port, authToken);
        CountDownLatch stop = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            server.close();
            stop.countDown();
        }));
        System.out.println("kvferry bootstrap listening on " + server.host() + ":" + server.port());
        System.out.flush();
        stop.await();
        return 0;
    }
}
