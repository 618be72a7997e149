package io.kvferry.cli;

import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.http.Router;
import io.kvferry.engine.http.Tenants;
import io.kvferry.engine.serve.Roles;
import io.kvferry.engine.serve.WorkerRegistration;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

import java.net.InetAddress;
import java.net.URI;
import java.net.URISyntaxException;
import java.net.UnknownHostException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.CountDownLatch;
import java.util.stream.Collectors;

/** {@code kvferry serve}: the reference engine's deployment roles. */
@Command(name = "serve", mixinStandardHelpOptions = true,
        description = {"Serve a llama2.c model with prefill/decode disaggregation through kvferry (the reference engine).",
                "--role prefill: bootstrap registry + prefill engine + its HTTP server. --role decode: decode engine + HTTP server.",
                "--role router: OpenAI-shaped POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /v1/models/{model}, "
                + "SGLang-shaped POST /generate, vLLM-shaped POST /tokenize and POST /detokenize, GET /health, GET /metrics, "
                + "GET /status and GET /status.json (its status page: backends, requests, latencies), GET/POST/DELETE /workers (its backends), sending each request to a prefill and a decode. "
                + "No --role: all three in this process (docs/SERVING.md)."})
public final class ServeCommand implements Callable<Integer> {
    @Mixin
    EngineOptions engine = new EngineOptions();

    @Option(names = "--role", description = "prefill, decode or router. Default: all three in this process.")
    String role;

    @Option(names = "--port", description = "HTTP port (0 = any free). Default: router 8000, prefill 30000, decode 30001.")
    Integer port;

    @Option(names = "--bootstrap-port", defaultValue = "8998", description = "Prefill: its bootstrap registry's port. Default: ${DEFAULT-VALUE}.")
    int bootstrapPort;

    @Option(names = "--advertise-host", description = "Prefill: the address the decodes and the router reach it at, published by its "
            + "registry for its kvferry ranks and given to the router (/health) as the bootstrap address. Default: --host; needed "
            + "when --host is a wildcard (0.0.0.0, ::).")
    String advertiseHost;

    @Option(names = "--register-with", paramLabel = "URL", description = "Prefill/decode role: a router (e.g. http://10.0.0.9:8000) this "
            + "engine adds itself to through its /workers once it serves, and leaves when it stops; a router not up yet, answering "
            + "5xx or full (403 max_backends) is tried every --register-interval-s until it takes the engine (another 4xx ends the "
            + "tries); once in, it re-asserts its entry as often, so a router that restarted or dropped it takes it back. Needs the "
            + "cluster token (the router's too).")
    String registerWith;

    @Option(names = "--register-as", paramLabel = "URL", description = "With --register-with: this engine's URL as the router reaches it. "
            + "Default: http://ADDRESS:PORT with --advertise-host (a prefill's) or --host, and the bound port; needed when that is a "
            + "wildcard (0.0.0.0, ::).")
    String registerAs;

    @Option(names = "--register-interval-s", paramLabel = "SECONDS", description = "With --register-with: how often the engine tries "
            + "a router that has not taken it yet, and, once in, re-asserts its entry (POST /workers again, each wait within 20%% of it), so a router that restarted, or removed or "
            + "replaced it, takes it back; the usual answer, 409 (it has it), is silent. In [1, 300]. Default: 5.")
    Long registerIntervalS;

    @Option(names = "--tp", defaultValue = "1", description = "Prefill/decode role: tensor-parallel ranks (in process). Default: ${DEFAULT-VALUE}.")
    int tp;

    @Option(names = "--pp", defaultValue = "1", description = "Prefill/decode role: pipeline stages (in process). Default: ${DEFAULT-VALUE}.")
    int pp;

    @Option(names = "--prefill-tp", defaultValue = "1", description = "Embedded: the prefill's TP size. Default: ${DEFAULT-VALUE}.")
    int prefillTp;

    @Option(names = "--decode-tp", defaultValue = "1", description = "Embedded: the decode's TP size. Default: ${DEFAULT-VALUE}.")
    int decodeTp;

    @Option(names = "--prefill-pp", defaultValue = "1", description = "Embedded: the prefill's PP size. Default: ${DEFAULT-VALUE}.")
    int prefillPp;

    @Option(names = "--prefill", description = "Router: a prefill server URL (repeatable), e.g. http://10.0.0.1:30000.")
    List<String> prefills = List.of();

    @Option(names = "--decode", description = "Router: a decode server URL (repeatable), e.g. http://10.0.0.2:30001.")
    List<String> decodes = List.of();

    @Option(names = "--api-key-file", description = "Router (and serve without --role): read the API key clients must send "
            + "(Authorization: Bearer KEY) from this file's first line; else KVFERRY_API_KEY. Neither: the router serves any client.")
    Path apiKeyFile;

    @Option(names = "--tenants-file", paramLabel = "FILE", description = "Router (and serve without --role): tenants, each with its "
            + "own key clients send (Authorization: Bearer KEY), max_concurrent_requests, requests_per_minute and "
            + "tokens_per_minute (429 with Retry-After beyond them) and prefix-cache isolation (cache_salt isolated or shared), "
            + "as JSON {\"tenants\": [{\"name\", \"key\", \"max_concurrent_requests\", \"requests_per_minute\", "
            + "\"tokens_per_minute\", \"cache_salt\"}]}; "
            + "re-read when it changes. Not with --api-key-file / KVFERRY_API_KEY (docs/SERVING.md, Tenants).")
    Path tenantsFile;

    @Option(names = "--log-requests", description = "Router (and serve without --role): one log line per request answered "
            + "(route, status, room, tokens, TTFT, latency, failure kind, request id), on the logger io.kvferry.router.requests.")
    boolean logRequests;

    @Option(names = "--max-concurrent-requests", defaultValue = "0", description = "Router (and serve without --role): requests "
            + "served at once; one more waits up to --queue-timeout-ms for a slot, then gets 429 with Retry-After. Default: 0 (no limit).")
    int maxConcurrentRequests;

    @Option(names = "--queue-timeout-ms", defaultValue = "10000", description = "Router: how long a request over "
            + "--max-concurrent-requests waits for a slot (0: refused at once). Default: ${DEFAULT-VALUE}.")
    long queueTimeoutMs;

    @Option(names = "--max-backends", defaultValue = "256", description = "Router (and serve without --role): the most backends "
            + "(prefills and decodes together) it holds; POST /workers beyond it gets 403 (code max_backends; a "
            + "--register-with engine keeps trying, as for a router not up yet). Default: ${DEFAULT-VALUE}.")
    int maxBackends;

    @Option(names = "--drain-timeout-s", paramLabel = "SECONDS", defaultValue = "30", description = "Every role: at SIGTERM (or "
            + "SIGINT) it first drains: new requests get 503 (error code draining) and /health 503 (status draining), the requests "
            + "running go on to their end, for up to this long; then it stops, cutting what is left. 0: it stops at once. "
            + "Default: ${DEFAULT-VALUE} (docs/SERVING.md, Shutdown and draining).")
    long drainTimeoutS;

    @Option(names = "--api-key", hidden = true, description = "Refused: put the key in KVFERRY_API_KEY or a file.")
    String apiKeyOnTheCommandLine;

    @Spec
    CommandSpec spec;

    /**
     * What is wrong with {@code --register-with} / {@code --register-as} / {@code --register-interval-s}, or null: each URL
     * must be an http(s) URL with a host and a port, the other two need {@code --register-with}, the interval is in
     * [{@link WorkerRegistration#MIN_REASSERT_S}, {@link WorkerRegistration#MAX_REASSERT_S}], and without it the engine's own address must not be
     * a wildcard (the router could not reach it there).
     */
    String registrationProblem() {
        if (registerAs != null && registerWith == null) return "--register-as is used only with --register-with (the router to register with)";
        if (registerIntervalS != null && registerWith == null) {
            return "--register-interval-s is used only with --register-with (the router to register with)";
        }
        if (registerWith == null) return null;
        if (registerIntervalS != null && (registerIntervalS < WorkerRegistration.MIN_REASSERT_S || registerIntervalS > WorkerRegistration.MAX_REASSERT_S)) {
            return "--register-interval-s " + registerIntervalS + " is outside [" + WorkerRegistration.MIN_REASSERT_S + ", "
                    + WorkerRegistration.MAX_REASSERT_S + "] (seconds between re-assertions of the entry)";
        }
        for (String[] flag : new String[][]{{"--register-with", registerWith}, {"--register-as", registerAs}}) {
            if (flag[1] == null) continue;
            URI u;
            try {
                u = new URI(flag[1]);
            } catch (URISyntaxException e) {
                u = null;
            }
            if (u == null || !("http".equals(u.getScheme()) || "https".equals(u.getScheme())) || u.getHost() == null || u.getPort() < 1
                    || u.getPort() > 65_535) {
                return flag[0] + " '" + flag[1] + "' must be an http:// URL with a host and a port, e.g. http://10.0.0.9:8000";
            }
            if (Roles.isWildcard(u.getHost())) return flag[0] + " '" + flag[1] + "' names a wildcard address, which nothing can connect to";
        }
        String self = advertiseHost != null ? advertiseHost : engine.host;
        if (registerAs == null && Roles.isWildcard(self)) {
            return "--register-with: this engine binds " + self + " (every address), which is no URL the router can reach it at: give --register-as";
        }
        return null;
    }

    /** The longest drain: a request still running after an hour is cut anyway (an orchestrator would have long since). */
    static final long MAX_DRAIN_TIMEOUT_S = 3600;

    /** The longest a request waits for a router slot: a client waiting longer has given up long before. */
    static final long MAX_QUEUE_TIMEOUT_MS = 3_600_000;

    /** Flags that only some modes read, and those modes (null: no --role, the embedded cluster). */
    private static final Map<String, List<String>> ONLY_FOR = new LinkedHashMap<>();

    static {
        ONLY_FOR.put("--bootstrap-port", List.of("prefill", "embedded"));
        ONLY_FOR.put("--advertise-host", List.of("prefill"));
        ONLY_FOR.put("--prefill-cache", List.of("prefill", "embedded"));
        ONLY_FOR.put("--register-with", List.of("prefill", "decode"));
        ONLY_FOR.put("--register-as", List.of("prefill", "decode"));
        ONLY_FOR.put("--register-interval-s", List.of("prefill", "decode"));
        ONLY_FOR.put("--tp", List.of("prefill", "decode"));
        ONLY_FOR.put("--pp", List.of("prefill", "decode"));
        ONLY_FOR.put("--prefill-tp", List.of("embedded"));
        ONLY_FOR.put("--decode-tp", List.of("embedded"));
        ONLY_FOR.put("--prefill-pp", List.of("embedded"));
        ONLY_FOR.put("--prefill", List.of("router"));
        ONLY_FOR.put("--decode", List.of("router"));
        ONLY_FOR.put("--api-key-file", List.of("router", "embedded"));
        ONLY_FOR.put("--tenants-file", List.of("router", "embedded"));
        ONLY_FOR.put("--log-requests", List.of("router", "embedded"));
        ONLY_FOR.put("--max-concurrent-requests", List.of("router", "embedded"));
        ONLY_FOR.put("--queue-timeout-ms", List.of("router", "embedded"));
        ONLY_FOR.put("--max-backends", List.of("router", "embedded"));
        // The engines' own: a router reads the model (tokenizer, context) and its backends' URLs, none of these.
        for (String engineFlag : List.of("--transport", "--page-size", "--pages", "--max-requests", "--chunk-tokens", "--model-variant")) {
            ONLY_FOR.put(engineFlag, List.of("prefill", "decode", "embedded"));
        }
    }

    /** The address a bind to {@code host} takes (the first it resolves to), or null: an IP literal, or a name that does not resolve. */
    private static InetAddress resolveFirst(String host) {
        try {
            InetAddress.ofLiteral(host.startsWith("[") && host.endsWith("]") ? host.substring(1, host.length() - 1) : host);
            return null; // a literal says what it binds
        } catch (IllegalArgumentException aName) {
            try {
                return InetAddress.getByName(host);
            } catch (UnknownHostException e) {
                return null; // the bind fails and says so
            }
        }
    }

    /**
     * Why a role given a host name that resolves here to a loopback address (Debian's /etc/hosts maps the
     * machine's own name to 127.0.1.1) cannot be reached from other hosts, or null: it binds loopback,
     * while its peers resolve the name to the host's real address and are refused ("localhost" is meant).
     */
    static String loopbackNameWarning(String host, InetAddress bound) {
        if (bound == null || !bound.isLoopbackAddress() || host.equalsIgnoreCase("localhost")) return null;
        return "--host " + host + " resolves to " + bound.getHostAddress() + " on this host, a loopback address: the role listens where "
                + "no other host can connect (peers that resolve " + host + " to this host's real address are refused); give the address "
                + "other hosts reach it at";
    }

    /** The role's drain ({@code --drain-timeout-s}; 0: none), each step a line on stdout. */
    private void drain(Roles.Role r, String what) {
        if (drainTimeoutS == 0) return;
        System.out.println("kvferry serve: stopping: draining the " + what + " (new requests get 503 draining); waiting up to "
                + drainTimeoutS + " s for the " + r.running() + " request(s) running");
        System.out.flush();
        long started = System.nanoTime();
        int cut;
        try {
            cut = r.drain(Duration.ofSeconds(drainTimeoutS));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            cut = r.running();
        }
        long ms = (System.nanoTime() - started) / 1_000_000;
        System.out.println(cut == 0 ? "kvferry serve: drained in " + ms + " ms: every request ended; stopping"
                : "kvferry serve: drain timeout (" + drainTimeoutS + " s, --drain-timeout-s): cutting " + cut + " request(s) still running");
        System.out.flush();
    }

    @Override
    public Integer call() throws Exception {
        // A flag the chosen mode does not read was accepted and ignored (serve --tp 0 ran a tp1 prefill).
        String mode = role == null ? "embedded" : role;
        if (role == null || List.of("prefill", "decode", "router").contains(role)) {
            for (Map.Entry<String, List<String>> e : ONLY_FOR.entrySet()) {
                if (spec.commandLine().getParseResult().hasMatchedOption(e.getKey()) && !e.getValue().contains(mode)) {
                    System.err.println("kvferry serve: " + e.getKey() + " is not used " + (role == null ? "without --role" : "by --role " + role)
                            + "; it is for " + e.getValue().stream().map(m -> m.equals("embedded") ? "serve without --role" : "--role " + m)
                            .collect(Collectors.joining(" and ")));
                    return 2;
                }
            }
        }
        engine.check();
        if (role != null && "inproc".equals(engine.transport)) {
            // A role's peers are other processes: inproc links would fall back to tcp.
            System.err.println("kvferry serve: --transport inproc moves memory inside one JVM; it works only without --role");
            return 2;
        }
        // Named here: the server's own check says only "port out of range:70000".
        String badPort = port != null && (port < 0 || port > 65_535) ? "--port " + port
                : bootstrapPort < 0 || bootstrapPort > 65_535 ? "--bootstrap-port " + bootstrapPort : null;
        if (badPort != null) {
            System.err.println("kvferry serve: " + badPort + " is outside [0, 65535] (0 = any free port)");
            return 2;
        }
        if ("prefill".equals(role) && advertiseHost == null && Roles.isWildcard(engine.host)) {
            System.err.println("kvferry serve --role prefill: " + Roles.wildcardRefusal(engine.host));
            return 2;
        }
        if (advertiseHost != null && (advertiseHost.isBlank() || Roles.isWildcard(advertiseHost))) {
            System.err.println("kvferry serve: --advertise-host '" + advertiseHost + "' must be an address the decodes and the router "
                    + "can connect to (not empty, not a wildcard)");
            return 2;
        }
        String registration = registrationProblem();
        if (registration != null) {
            System.err.println("kvferry serve: " + registration);
            return 2;
        }
        if (maxConcurrentRequests < 0) {
            System.err.println("kvferry serve: --max-concurrent-requests " + maxConcurrentRequests + " is negative (0 = no limit)");
            return 2;
        }
        if (queueTimeoutMs < 0 || queueTimeoutMs > MAX_QUEUE_TIMEOUT_MS) {
            System.err.println("kvferry serve: --queue-timeout-ms " + queueTimeoutMs + " is outside [0, " + MAX_QUEUE_TIMEOUT_MS + "] (one hour)");
            return 2;
        }
        if (maxBackends < Router.Admission.MIN_BACKENDS || maxBackends > Router.Admission.MAX_BACKENDS) {
            System.err.println("kvferry serve: --max-backends " + maxBackends + " is outside [" + Router.Admission.MIN_BACKENDS + ", "
                    + Router.Admission.MAX_BACKENDS + "] (at least a prefill and a decode)");
            return 2;
        }
        if (drainTimeoutS < 0 || drainTimeoutS > MAX_DRAIN_TIMEOUT_S) {
            System.err.println("kvferry serve: --drain-timeout-s " + drainTimeoutS + " is outside [0, " + MAX_DRAIN_TIMEOUT_S
                    + "] (0 = stop at once)");
            return 2;
        }
        Router.Admission admission = new Router.Admission(maxConcurrentRequests, Duration.ofMillis(queueTimeoutMs), maxBackends);
        if (logRequests) {
            // Before the router's class makes its loggers: slf4j-simple reads a logger's level when it is made.
            System.setProperty("org.slf4j.simpleLogger.log.io.kvferry.router.requests", "info");
        }
        if (apiKeyOnTheCommandLine != null) {
            System.err.println("kvferry serve: --api-key would put the router's API key on the command line, where any local user reads it "
                    + "in /proc/PID/cmdline: set KVFERRY_API_KEY or pass --api-key-file instead");
            return 2;
        }
        // Read in the modes that run a router only: KVFERRY_API_KEY set for a whole cluster means nothing to an engine.
        String apiKey = role == null || role.equals("router") ? AuthTokenOptions.secret("--api-key-file", apiKeyFile, "KVFERRY_API_KEY",
                "the router's API key") : null;
        if (tenantsFile != null && apiKey != null) {
            System.err.println("kvferry serve: --tenants-file and " + (apiKeyFile != null ? "--api-key-file" : "KVFERRY_API_KEY")
                    + " are exclusive: with tenants each client sends its tenant's key (drop the single API key, or give it to a tenant)");
            return 2;
        }
        if (role != null) {
            String warning = loopbackNameWarning(engine.host, resolveFirst(engine.host));
            if (warning != null) System.err.println("kvferry serve: warning: " + warning);
        }
        ModelFiles.Loaded model = engine.load();
        String token = engine.token();
        if (role == null && token == null) token = EngineOptions.randomToken(); // one process: nobody else needs to know it
        try {
            new Router.Access(token, apiKey); // its rule (the key is not the cluster token), checked before anything starts
        } catch (IllegalArgumentException e) {
            System.err.println("kvferry serve: " + e.getMessage() + " (--api-key-file / KVFERRY_API_KEY)");
            return 2;
        }
        Tenants tenants = null;
        if (tenantsFile != null) {
            try {
                tenants = Tenants.open(tenantsFile, token); // every tenant and field checked before anything starts
            } catch (IllegalArgumentException e) {
                System.err.println("kvferry serve: " + e.getMessage());
                return 2;
            }
            String warning = Tenants.permissionWarning(tenantsFile);
            if (warning != null) System.err.println("kvferry serve: warning: " + warning);
        }
        Roles.Role started;
        String what;
        if (role == null) {
            engine.requireParallelism(model, "--prefill-tp", prefillTp, "--prefill-pp", prefillPp);
            engine.requireParallelism(model, "--decode-tp", decodeTp, null, 1);
            started = Roles.all(engine.options(model, 1, 1, port != null ? port : 8000, 0, token),
                    engine.options(model, prefillTp, prefillPp, 0, bootstrapPort, token),
                    engine.options(model, decodeTp, 1, 0, 0, token), apiKey, admission, tenants);
            what = "router (with one prefill tp" + prefillTp + " pp" + prefillPp + " and one decode tp" + decodeTp + " over " + engine.transport + ")";
        } else {
            switch (role) {
                case "prefill", "decode" -> {
                    if (token == null) {
                        System.err.println("kvferry serve --role " + role + ": no cluster token: set KVFERRY_AUTH_TOKEN or "
                                + "--auth-token-file (the same on every prefill, decode and router)");
                        return 2;
                    }
                    engine.requireParallelism(model, "--tp", tp, "--pp", pp);
                    boolean pre = role.equals("prefill");
                    Roles.Options o = engine.options(model, tp, pp, port != null ? port : pre ? 30000 : 30001, bootstrapPort, token)
                            .withAdvertiseHost(advertiseHost);
                    started = pre ? Roles.prefill(o) : Roles.decode(o);
                    // The registry's bound port: with --bootstrap-port 0 the flag's value says nothing.
                    what = role + " tp" + tp + " pp" + pp + (pre ? " (bootstrap registry on " + Roles.hostPort(engine.host, started.bootstrapPort())
                            + (advertiseHost != null ? ", advertised as " + Roles.hostPort(advertiseHost, started.bootstrapPort()) : "") + ")" : "");
                }
                case "router" -> {
                    if (prefills.isEmpty() || decodes.isEmpty()) {
                        System.err.println("kvferry serve --role router: give at least one --prefill URL and one --decode URL");
                        return 2;
                    }
                    String twice = Router.givenTwice(prefills, decodes); // else counted twice against --max-backends
                    if (twice != null) {
                        System.err.println("kvferry serve --role router: " + twice);
                        return 2;
                    }
                    if (prefills.size() + decodes.size() > maxBackends) {
                        System.err.println("kvferry serve --role router: " + (prefills.size() + decodes.size()) + " --prefill and --decode URLs, "
                                + "more than --max-backends " + maxBackends);
                        return 2;
                    }
                    if (token == null) { // the engines' /generate and /abort take the cluster token
                        System.err.println("kvferry serve --role router: no cluster token: set KVFERRY_AUTH_TOKEN or "
                                + "--auth-token-file (the same on every prefill, decode and router)");
                        return 2;
                    }
                    started = Roles.router(engine.options(model, 1, 1, port != null ? port : 8000, 0, token), prefills, decodes, apiKey, admission, tenants);
                    what = "router over " + prefills.size() + " prefill(s) and " + decodes.size() + " decode(s)";
                }
                default -> {
                    System.err.println("kvferry serve: unknown --role '" + role + "'; use prefill, decode or router (or none for all three)");
                    return 2;
                }
            }
        }
        // Added to the router once it serves; out of it first at the stop, so the router sends nothing new while it closes.
        WorkerRegistration registered = registerWith == null ? null : new WorkerRegistration(URI.create(registerWith),
                registerAs != null ? registerAs : "http://" + Roles.hostPort(advertiseHost != null ? advertiseHost : engine.host, started.port()),
                role, token, registerIntervalS == null ? WorkerRegistration.DEFAULT_REASSERT_EVERY : Duration.ofSeconds(registerIntervalS));
        CountDownLatch stop = new CountDownLatch(1);
        Roles.Role r = started;
        // SIGTERM/SIGINT: out of the router (registered), drain, close. A second signal while this runs changes nothing (the
        // JVM runs its hooks once); SIGKILL stops it at once.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                if (registered != null) registered.close();
                drain(r, what);
            } finally {
                r.close();
                stop.countDown();
            }
        }));
        System.out.println("kvferry serve: model " + model.description() + ", variant " + engine.variant.label());
        if (registered != null) {
            System.out.println("kvferry serve: adding itself to the router at " + registerWith + " as " + registered.selfUrl()
                    + " (a line says when it is in; an error, if the router does not take it)");
        }
        if (role == null || role.equals("router")) {
            System.out.println("kvferry serve: " + (tenants != null ? "clients send their tenant's key (Authorization: Bearer KEY): "
                    + tenants.list().size() + " tenants from " + tenantsFile + ", re-read when it changes"
                    : apiKey != null ? "clients send the router's API key (Authorization: Bearer KEY)"
                    : "no API key: the router serves any client that reaches its port (see --api-key-file)"));
        }
        // Last, and the URL alone at its end: launchers (demo --processes, tests) read it from this line.
        System.out.println("kvferry serve: " + what + " listening on http://" + Roles.hostPort(engine.host, started.port()));
        System.out.flush();
        if (registered != null) {
            // After the URL's line (launchers read that one): the registration's INFO line is hidden without --verbose, and
            // its start line promised this one. A failure is the registration's ERROR line, shown anyway.
            registered.registered().thenRun(() -> {
                System.out.println("kvferry serve: in the router at " + registerWith + " as " + role + " " + registered.selfUrl());
                System.out.flush();
            });
        }
        stop.await();
        return 0;
    }
}
