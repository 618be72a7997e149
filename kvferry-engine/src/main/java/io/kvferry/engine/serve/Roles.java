package io.kvferry.engine.serve;

import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvferry.KVFerry;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.api.Redacted;
import io.kvferry.engine.http.DecodeServer;
import io.kvferry.engine.http.Drain;
import io.kvferry.engine.http.PrefillServer;
import io.kvferry.engine.http.Router;
import io.kvferry.engine.http.StructuredOutputMeters;
import io.kvferry.engine.http.Tenants;
import io.kvferry.engine.model.Model;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.model.ModelVariant;
import io.kvferry.engine.serving.DecodeEngine;
import io.kvferry.engine.serving.EngineSpec;
import io.kvferry.engine.serving.PrefillEngine;
import io.kvferry.engine.serving.TransferSpec;
import io.kvferry.ops.ClusterStatus;
import io.kvferry.ops.Ops;
import io.kvferry.ops.OpsHandlers;
import io.kvferry.ops.ProcessStatus;
import io.kvferry.ops.RegistryOps;
import io.kvferry.ops.StatusJson;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;

import java.io.IOException;
import java.net.InetAddress;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;

/**
 * Starts the serving roles ({@code kvferry serve}): a prefill instance (its bootstrap registry, engine
 * and HTTP server), a decode instance (engine and HTTP server), the router, or all three in one
 * process. Each returned role closes everything it started, in reverse order; {@link Role#drain} before that lets the
 * requests it admitted end first (serve's shutdown: {@code --drain-timeout-s}).
 */
public final class Roles {
    private Roles() {
    }

    /** A started role: its HTTP port, and close(). */
    public interface Role extends AutoCloseable {
        int port();

        /** The port its bootstrap registry listens on (a prefill's; the one bound when 0 was asked), or -1: it has none. */
        default int bootstrapPort() {
            return -1;
        }

        /**
         * Graceful shutdown, before {@link #close}: the role takes no new requests (503 {@code draining}; its /health
         * answers 503 {@code "status": "draining"}) and waits up to {@code timeout} for those it admitted to end (a
         * decode's stream, a prefill's forward and KV transfer, a router's whole request). Without a router in the same
         * process the engines' requests are waited for; with one (no --role) the router's first, then the engines'.
         *
         * @return the requests still running at the timeout (0: all ended), which {@link #close} then cuts
         */
        default int drain(Duration timeout) throws InterruptedException {
            return 0;
        }

        /** Requests admitted and not ended yet (the router's, in a process that has one). */
        default int running() {
            return 0;
        }

        @Override
        void close();
    }

    /**
     * What a role needs; ports 0 = any free port. {@code variant}: the model's layer kinds (every prefill
     * and decode of a cluster must run the same; a mismatch is refused at kvferry's handshake).
     * {@code advertiseHost}: the address a prefill's peers reach it at, which its registry publishes for its
     * kvferry ranks and its /health gives the router as the bootstrap address (null: {@code host}; a
     * prefill bound to a wildcard such as 0.0.0.0 needs one). {@code prefillCache}: a prefill keeps finished prompts'
     * full pages for later requests that start with them ({@code --prefill-cache}; off by itself for the variant with
     * window layers, {@code swa}).
     */
    public record Options(ModelFiles.Loaded model, ModelVariant variant, int tp, int pp, int pageSize, int pages, int maxRequests,
                          int chunkTokens, String transport, String host, int port, int bootstrapPort, String authToken,
                          String advertiseHost, boolean prefillCache) {
        public Options(ModelFiles.Loaded model, ModelVariant variant, int tp, int pp, int pageSize, int pages, int maxRequests,
                       int chunkTokens, String transport, String host, int port, int bootstrapPort, String authToken) {
            this(model, variant, tp, pp, pageSize, pages, maxRequests, chunkTokens, transport, host, port, bootstrapPort, authToken, null);
        }

        public Options(ModelFiles.Loaded model, ModelVariant variant, int tp, int pp, int pageSize, int pages, int maxRequests,
                       int chunkTokens, String transport, String host, int port, int bootstrapPort, String authToken,
                       String advertiseHost) {
            this(model, variant, tp, pp, pageSize, pages, maxRequests, chunkTokens, transport, host, port, bootstrapPort, authToken,
                    advertiseHost, true);
        }

        public EngineSpec spec() {
            return new EngineSpec(Model.of(model.weights(), variant), tp, pp, pageSize, pages, maxRequests, chunkTokens);
        }

        public Options withParallelism(int tp, int pp) {
            return new Options(model, variant, tp, pp, pageSize, pages, maxRequests, chunkTokens, transport, host, port, bootstrapPort,
                    authToken, advertiseHost, prefillCache);
        }

        public Options withPorts(int port, int bootstrapPort) {
            return new Options(model, variant, tp, pp, pageSize, pages, maxRequests, chunkTokens, transport, host, port, bootstrapPort,
                    authToken, advertiseHost, prefillCache);
        }

        public Options withAdvertiseHost(String host) {
            return new Options(model, variant, tp, pp, pageSize, pages, maxRequests, chunkTokens, transport, this.host, port,
                    bootstrapPort, authToken, host, prefillCache);
        }

        public Options withPrefillCache(boolean on) {
            return new Options(model, variant, tp, pp, pageSize, pages, maxRequests, chunkTokens, transport, host, port, bootstrapPort,
                    authToken, advertiseHost, on);
        }

        /** The address peers reach this role at: {@code advertiseHost}, else {@code host}. */
        public String publishedHost() {
            return advertiseHost != null ? advertiseHost : host;
        }

        /** Hides the cluster token, so the options can be logged or put in a message. */
        @Override
        public String toString() {
            return Redacted.toString(this, Set.of("authToken"));
        }
    }

    private static final class Stack implements Role {
        final List<AutoCloseable> parts = new ArrayList<>();
        /** Its servers' drains, in the order they drain: a router's before its engines'. */
        final List<Drain> drains = new ArrayList<>();
        int port;
        int bootstrapPort = -1;

        @Override
        public int drain(Duration timeout) throws InterruptedException {
            long deadline = System.nanoTime() + timeout.toNanos();
            int cut = 0;
            for (Drain d : drains) {
                d.begin();
                int left = d.await(Duration.ofNanos(Math.max(0, deadline - System.nanoTime())));
                // Counted once: the engines of a router in this process run the router's requests, not others.
                if (cut == 0) cut = left;
            }
            return cut;
        }

        @Override
        public int running() {
            return drains.isEmpty() ? 0 : drains.getFirst().running();
        }

        @Override
        public int port() {
            return port;
        }

        @Override
        public int bootstrapPort() {
            return bootstrapPort;
        }

        @Override
        public void close() {
            for (int i = parts.size() - 1; i >= 0; i--) {
                try {
                    parts.get(i).close();
                } catch (Exception ignored) {
                    // keep closing the rest
                }
            }
        }
    }

    public static Role prefill(Options o) throws IOException {
        Stack s = new Stack();
        try {
            if (isWildcard(o.publishedHost())) throw new IllegalArgumentException(wildcardRefusal(o.host()));
            KVBootstrapServer registry = KVFerry.startBootstrapServer(o.host(), o.bootstrapPort(), o.authToken());
            s.parts.add(registry);
            s.bootstrapPort = registry.port();
            // What the router hands each decode as bootstrap_addr: the published host, never a wildcard bind address.
            String addr = hostPort(o.publishedHost(), registry.port());
            // Its own ranks register through the address the registry is bound to (loopback for a wildcard).
            String local = hostPort(isWildcard(o.host()) ? loopback(o.host()) : o.host(), registry.port());
            // One registry per process: the engine's ranks record into it; /metrics and /status on the engine's port,
            // the cluster page on the registry's (its ranks live here, so it shows them without a fetch).
            PrometheusMeterRegistry metrics = Ops.newRegistry();
            ProcessStatus status = new ProcessStatus("engine-prefill").engine(() -> engineStatus(metrics, "prefill"));
            ClusterStatus cluster = RegistryOps.mountIfKvferry(registry, metrics, false);
            if (cluster != null) cluster.local(status);
            PrefillEngine engine = new PrefillEngine(o.spec(), new TransferSpec(o.transport(), local, o.authToken(), o.host())
                    .withMeters(metrics).withAdvertiseHost(o.advertiseHost()), o.prefillCache());
            s.parts.add(engine);
            engine.kvManagers().forEach(status::add);
            PrefillServer server = new PrefillServer(engine, addr, o.host(), o.port(), o.authToken(), o.model().tokenizer());
            server.meters(metrics);
            s.parts.add(server);
            s.drains.add(server.drain());
            server.drain().register(metrics);
            OpsHandlers.routes(metrics, status).forEach(server::route);
            s.port = server.port();
            return s;
        } catch (IOException | RuntimeException | Error e) { // an Error too: its servers' threads would keep the JVM alive
            s.close();
            throw e;
        }
    }

    /**
     * The engine's part of its status document, from its scheduler's meters in the process's registry: KV pages
     * {@code used}, {@code cached} (its prefix cache) and {@code free}, prompt tokens served from the prefix cache, and
     * the prefill's prompt tokens (cached or computed) and requests that waited for another's pages of a shared prefix;
     * whether it drains ({@code draining}) and, once it does, the requests its drain met ({@code drain}: {@code completed},
     * {@code cut}); its structured-output compiler's figures ({@code structured_outputs}, {@link StructuredOutputMeters#status}).
     */
    static ObjectNode engineStatus(MeterRegistry metrics, String role) {
        ObjectNode e = StatusJson.MAPPER.createObjectNode();
        ObjectNode pages = e.putObject("kv_pages");
        for (String state : List.of("used", "cached", "free")) {
            Gauge g = metrics.find("kvferry_engine_kv_pages").tags("role", role, "state", state).gauge();
            pages.put(state, g == null ? 0 : (long) g.value());
        }
        Counter cached = metrics.find("kvferry_engine_cached_tokens").tag("role", role).counter();
        e.put("cached_tokens", cached == null ? 0 : (long) cached.count());
        Counter prompt = metrics.find("kvferry_engine_prompt_tokens").tag("role", role).counter();
        if (prompt != null) e.put("prompt_tokens", (long) prompt.count());
        Counter deferrals = metrics.find("kvferry_engine_prefix_deferrals").tag("role", role).counter();
        if (deferrals != null) e.put("prefix_deferrals", (long) deferrals.count());
        Gauge draining = metrics.find(Drain.DRAINING).tag("role", role).gauge();
        if (draining != null) {
            boolean on = draining.value() > 0;
            e.put("draining", on);
            if (on) { // the requests running when it began: ended since, or cut at --drain-timeout-s
                ObjectNode d = e.putObject("drain");
                for (String end : List.of(Drain.COMPLETED, Drain.CUT)) {
                    FunctionCounter c = metrics.find(Drain.REQUESTS).tags("role", role, "end", end).functionCounter();
                    d.put(end, c == null ? 0 : (long) c.count());
                }
            }
        }
        ObjectNode outputs = StructuredOutputMeters.status(metrics, role);
        if (outputs != null) e.set("structured_outputs", outputs);
        return e;
    }

    public static Role decode(Options o) throws IOException {
        Stack s = new Stack();
        try {
            PrometheusMeterRegistry metrics = Ops.newRegistry();
            ProcessStatus status = new ProcessStatus("engine-decode").engine(() -> engineStatus(metrics, "decode"));
            DecodeEngine engine = new DecodeEngine(o.spec(), new TransferSpec(o.transport(), null, o.authToken(), o.host())
                    .withMeters(metrics));
            s.parts.add(engine);
            engine.kvManagers().forEach(status::add);
            DecodeServer server = new DecodeServer(engine, o.host(), o.port(), o.authToken(), o.model().tokenizer());
            server.meters(metrics);
            s.parts.add(server);
            s.drains.add(server.drain());
            server.drain().register(metrics);
            OpsHandlers.routes(metrics, status).forEach(server::route);
            s.port = server.port();
            return s;
        } catch (IOException | RuntimeException | Error e) { // an Error too: its servers' threads would keep the JVM alive
            s.close();
            throw e;
        }
    }

    /** The router with no API key of its own: any client that reaches its port is served. */
    public static Role router(Options o, List<String> prefillUrls, List<String> decodeUrls) throws IOException {
        return router(o, prefillUrls, decodeUrls, null);
    }

    /**
     * The router: the engines' /generate and /abort take the cluster token ({@code o.authToken()}); its own
     * serving routes take {@code apiKey} when one is given. Its meters are served on its port's /metrics.
     */
    public static Role router(Options o, List<String> prefillUrls, List<String> decodeUrls, String apiKey) throws IOException {
        return router(o, prefillUrls, decodeUrls, apiKey, Router.Admission.UNLIMITED);
    }

    /** As above, admitting at most {@code admission.maxConcurrent()} requests at once (429 beyond, after the queue timeout). */
    public static Role router(Options o, List<String> prefillUrls, List<String> decodeUrls, String apiKey, Router.Admission admission)
            throws IOException {
        return router(o, prefillUrls, decodeUrls, apiKey, admission, null);
    }

    /** As above, with {@code tenants} ({@code --tenants-file}: a key, limit and cache salt per tenant; null: none) instead of one API key. */
    public static Role router(Options o, List<String> prefillUrls, List<String> decodeUrls, String apiKey, Router.Admission admission,
                              Tenants tenants) throws IOException {
        Stack s = new Stack();
        PrometheusMeterRegistry metrics = Ops.newRegistry();
        Router r = new Router(prefillUrls, decodeUrls, o.model().tokenizer(), o.model().weights().config.seqLen(), modelName(o.model()),
                o.host(), o.port(), new Router.Access(o.authToken(), apiKey, tenants), admission, metrics);
        s.parts.add(r);
        s.drains.add(r.drain());
        r.drain().register(metrics);
        r.route("/metrics", OpsHandlers.metrics(metrics));
        s.port = r.port();
        return s;
    }

    /**
     * Refuses a prefill/decode pair of a variant with per-request state whose PP sizes differ: kvferry
     * pairs state components by PP stage and refuses such a pair at HELLO, so every request would fail;
     * better not to start.
     */
    public static void requireStatePairs(ModelVariant variant, int prefillPp, int decodePp) {
        if (variant.hasState() && prefillPp != decodePp) {
            throw new IllegalArgumentException("the " + variant.label() + " variant's state pairs by PP stage: the prefill's PP ("
                    + prefillPp + ") must equal the decode's (" + decodePp + ")");
        }
    }

    /** Router + one prefill + one decode in this process, talking HTTP and kvferry over loopback. */
    public static Role all(Options router, Options prefill, Options decode) throws IOException {
        return all(router, prefill, decode, null);
    }

    /** As {@link #all(Options, Options, Options)}, the router taking {@code apiKey} from its clients (null: none). */
    public static Role all(Options router, Options prefill, Options decode, String apiKey) throws IOException {
        return all(router, prefill, decode, apiKey, Router.Admission.UNLIMITED);
    }

    /** As above, the router admitting at most {@code admission.maxConcurrent()} requests at once. */
    public static Role all(Options router, Options prefill, Options decode, String apiKey, Router.Admission admission) throws IOException {
        return all(router, prefill, decode, apiKey, admission, null);
    }

    /** As above, the router's clients sending their tenant's key ({@code tenants}; null: none) instead of one API key. */
    public static Role all(Options router, Options prefill, Options decode, String apiKey, Router.Admission admission, Tenants tenants)
            throws IOException {
        requireStatePairs(prefill.variant(), prefill.pp(), decode.pp());
        // One process: its decode and router reach a prefill bound to every address over loopback.
        if (prefill.advertiseHost() == null && isWildcard(prefill.host())) prefill = prefill.withAdvertiseHost(loopback(prefill.host()));
        String decodeHost = isWildcard(decode.host()) ? loopback(decode.host()) : decode.publishedHost();
        Stack s = new Stack();
        try {
            Role p = prefill(prefill);
            s.parts.add(p);
            Role d = decode(decode);
            s.parts.add(d);
            Role r = router(router, List.of("http://" + hostPort(prefill.publishedHost(), p.port())),
                    List.of("http://" + hostPort(decodeHost, d.port())), apiKey, admission, tenants);
            s.parts.add(r);
            // The router's requests first (they are the engines' only ones), then the engines'.
            for (Role part : List.of(r, p, d)) s.drains.addAll(((Stack) part).drains);
            s.port = r.port();
            return s;
        } catch (IOException | RuntimeException | Error e) { // an Error too: its servers' threads would keep the JVM alive
            s.close();
            throw e;
        }
    }

    /** Whether {@code host} is an IP literal meaning every local address (0.0.0.0, ::, [::]); a host name is not (no lookup). */
    public static boolean isWildcard(String host) {
        String h = host.startsWith("[") && host.endsWith("]") ? host.substring(1, host.length() - 1) : host;
        try {
            return InetAddress.ofLiteral(h).isAnyLocalAddress();
        } catch (IllegalArgumentException notALiteral) {
            return false;
        }
    }

    /** Why a prefill bound to the wildcard {@code host} without an advertised address is refused. */
    public static String wildcardRefusal(String host) {
        return "--host " + host + " binds every address, and a decode on another host cannot connect to it: give --advertise-host, "
                + "the prefill's address as the decodes and the router reach it (its registry publishes it for the kvferry ranks, "
                + "and its /health gives it to the router as the bootstrap address), or bind that address with --host";
    }

    /** {@code host:port}, an IPv6 literal in brackets ({@code [fd00::1]:8998}), as URLs and kvferry's registry addresses write it. */
    public static String hostPort(String host, int port) {
        return (host.indexOf(':') >= 0 && !host.startsWith("[") ? "[" + host + "]" : host) + ":" + port;
    }

    /** The loopback address of a wildcard's family: where this host's own processes reach a role bound to it. */
    public static String loopback(String wildcard) {
        return wildcard.indexOf(':') >= 0 ? "::1" : "127.0.0.1";
    }

    public static String modelName(ModelFiles.Loaded m) {
        return m.real() ? Path.of(m.weights().source).getFileName().toString().replaceFirst("\\.bin$", "")
                : "random-stories260K-shape";
    }
}
