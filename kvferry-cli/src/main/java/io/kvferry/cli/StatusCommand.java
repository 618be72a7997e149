package io.kvferry.cli;

import com.fasterxml.jackson.databind.JsonNode;
import io.kvferry.ops.StatusClient;
import picocli.CommandLine.ArgGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.net.URI;
import java.net.URISyntaxException;
import java.time.Duration;
import java.util.concurrent.Callable;

/** {@code kvferry status}: the registry's status page, or a router's ({@code --router}), in the terminal. */
@Command(name = "status", mixinStandardHelpOptions = true,
        description = {"Show a kvferry cluster as its bootstrap registry sees it: topology, registered prefill ranks, their "
                + "processes, decode peers, rooms in flight by state with their age, recent failures with kind and reason, and for "
                + "engine roles their KV pages (used, cached by the prefix cache, free) and the prompt tokens their prefix caches served.",
                "With --router, a serving router as it sees its stack: its backends (in rotation or not, requests in flight, last health "
                        + "check), requests running and waiting, requests by status, tokens, the last minute's rates and TTFT / end-to-end "
                        + "p50 and p99, its tenants' load and its admission settings.",
                "Reads http://HOST:PORT/status.json (the same document the registry's or the router's /status page shows)."})
public final class StatusCommand implements Callable<Integer> {
    /** Where the status is: a registry (or a role process's status endpoint), or a router. */
    static final class Target {
        @Option(names = "--bootstrap", required = true, paramLabel = "HOST:PORT",
                description = "The bootstrap registry (or a role process's status endpoint; a router's port is recognised too).")
        String bootstrap;

        @Option(names = "--router", required = true, paramLabel = "HOST:PORT",
                description = "A router (kvferry serve --role router): its HTTP port.")
        String router;
    }

    @ArgGroup(exclusive = true, multiplicity = "1")
    Target target;

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
        String flag = target.router != null ? "--router" : "--bootstrap", addr = target.router != null ? target.router : target.bootstrap;
        try {
            requireHostPort(flag, addr);
        } catch (IllegalArgumentException e) {
            System.err.println("kvferry status: " + e.getMessage());
            return 2;
        }
        JsonNode doc;
        try {
            doc = StatusClient.fetch(addr, Duration.ofMillis(timeoutMs));
        } catch (StatusClient.StatusException e) {
            System.err.println("kvferry status: " + e.getMessage());
            return 1;
        }
        if (target.router != null && !doc.path("kind").asText().equals("router")) {
            System.err.println("kvferry status: " + addr + " answered a " + doc.path("kind").asText() + " status document, not a router's: "
                    + "give --router a router's HTTP port (kvferry serve --role router), or use --bootstrap for a registry or a role process");
            return 1;
        }
        if (json) System.out.println(StatusClient.json(doc));
        else System.out.print(StatusClient.render(doc));
        return 0;
    }

    /**
     * The registry's (or router's) address: HOST:PORT ({@code [v6]:PORT}), optionally as {@code http://HOST:PORT/}. Without this
     * check a missing port was port 80, and an empty or bracketless IPv6 address was "unsupported URI" (exit 1).
     *
     * @throws IllegalArgumentException naming {@code flag} (--bootstrap or --router) and what is wrong
     */
    static void requireHostPort(String flag, String addr) {
        String hostPort = addr.strip();
        if (hostPort.startsWith("http://")) hostPort = hostPort.substring("http://".length());
        hostPort = hostPort.replaceAll("/+$", "");
        String expected = flag + " '" + addr + "' is not HOST:PORT (e.g. 127.0.0.1:8998; IPv6 in brackets: [::1]:8998)";
        URI uri;
        try {
            uri = new URI("http://" + hostPort);
        } catch (URISyntaxException e) {
            throw new IllegalArgumentException(expected);
        }
        if (uri.getHost() == null || uri.getRawPath() == null || !uri.getRawPath().isEmpty() || uri.getRawQuery() != null
                || uri.getRawFragment() != null || uri.getRawUserInfo() != null) {
            throw new IllegalArgumentException(expected);
        }
        if (uri.getPort() == -1) throw new IllegalArgumentException(expected + ": it has no port");
        if (uri.getPort() < 1 || uri.getPort() > 65_535) {
            throw new IllegalArgumentException(flag + " '" + addr + "': port " + uri.getPort() + " is outside [1, 65535]");
        }
    }
}
