package io.kvferry.cli;

import com.fasterxml.jackson.databind.JsonNode;
import io.kvferry.ops.StatusClient;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.time.Duration;
import java.util.concurrent.Callable;

/** {@code kvferry status}: the registry's status page, in the terminal. */
@Command(name = "status", mixinStandardHelpOptions = true,
        description = {"Show a kvferry cluster as its bootstrap registry sees it: topology, registered prefill ranks, their "
                + "processes, decode peers, rooms in flight by state with their age, recent failures with kind and reason.",
                "Reads http://HOST:PORT/status.json (the same document the registry's /status page shows)."})
public final class StatusCommand implements Callable<Integer> {
    @Option(names = "--bootstrap", required = true, paramLabel = "HOST:PORT",
            description = "The bootstrap registry (or a role process's status endpoint).")
    String bootstrap;

    @Option(names = "--json", description = "Print the status document as JSON instead of tables.")
    boolean json;

    @Option(names = "--timeout-ms",
            description = "How long to wait for the answer. Default: env KVFERRY_STATUS_TIMEOUT_MS, else 5000.")
    Long timeoutMsFlag;

    @Override
    public Integer call() throws Exception {
        long timeoutMs;
        try {
            timeoutMs = EnvDefault.of("--timeout-ms", timeoutMsFlag, "KVFERRY_STATUS_TIMEOUT_MS").get(5000, 1, EnvDefault.MAX_MILLIS);
        } catch (IllegalArgumentException e) {
            System.err.println("kvferry status: " + e.getMessage());
            return 2;
        }
        JsonNode doc;
        try {
            doc = StatusClient.fetch(bootstrap, Duration.ofMillis(timeoutMs));
        } catch (StatusClient.StatusException e) {
            System.err.println("kvferry status: " + e.getMessage());
            return 1;
        }
        if (json) System.out.println(StatusClient.json(doc));
        else System.out.print(StatusClient.render(doc));
        return 0;
    }
}
