package io.kvferry.cli;

import com.fasterxml.jackson.databind.JsonNode;
import io.kvferry.ops.StatusClient;
import io.kvferry.ops.StatusJson;
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

    @Option(names = "--timeout-ms", defaultValue = "${env:KVFERRY_STATUS_TIMEOUT_MS:-5000}",
            description = "How long to wait for the answer (env KVFERRY_STATUS_TIMEOUT_MS). Default: ${DEFAULT-VALUE}.")
    long timeoutMs;

    @Override
    public Integer call() throws Exception {
        if (timeoutMs < 1) {
            System.err.println("kvferry status: --timeout-ms must be >= 1, got " + timeoutMs);
            return 2;
        }
        JsonNode doc;
        try {
            doc = StatusClient.fetch(bootstrap, Duration.ofMillis(timeoutMs));
        } catch (StatusClient.StatusException e) {
            System.err.println("kvferry status: " + e.getMessage());
            return 1;
        }
        if (json) System.out.println(StatusJson.MAPPER.writerWithDefaultPrettyPrinter().writeValueAsString(doc));
        else System.out.print(StatusClient.render(doc));
        return 0;
    }
}
