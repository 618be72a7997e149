package io.kvferry.registry;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import com.sun.net.httpserver.HttpServer;
import io.kvferry.api.KVBootstrapServer;
import io.kvferry.http.BearerToken;
import io.kvferry.http.RequestGate;
import io.kvferry.metrics.WarnLimiter;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.LongSupplier;

/**
 * The bootstrap registry of one prefill instance, serving SGLang's {@code CommonKVBootstrapServer}
 * routes with the same field names, status codes and messages, so SGLang ranks and routers can use it
 * and kvferry clients can use an SGLang one:
 * <ul>
 *   <li>{@code PUT /route} (bearer auth): one prefill rank registers; 200 "OK".</li>
 *   <li>{@code GET /route?prefill_dp_rank&prefill_cp_rank&target_tp_rank&target_pp_rank}: all -1 gives
 *       the {@link PrefillServerInfo} topology, concrete ranks give a {@link RankEndpoint}; 503 until
 *       every rank has registered.</li>
 *   <li>{@code POST /register_dp_rank} (bearer auth) and {@code POST /query_dp_ranks}: the room to
 *       DP-group table used when requests do not follow {@code bootstrap_room % dp_size}; a
 *       registration names one room (SGLang's form) or, kvferry's extension, a list of them.</li>
 *   <li>{@code GET /health}: 200 "OK".</li>
 * </ul>
 * Unlike SGLang it validates what it stores: a bad registration is refused with a 400 naming the
 * problem rather than poisoning the table that every decode rank reads.
 *
 * <p>Slow or stalled clients cannot hold it: each request runs on a virtual thread of its own, a request
 * unfinished {@link RegistryOptions#requestTimeout()} after its first byte has its connection closed, and
 * at most {@link RegistryOptions#maxConnections()} requests are under way at once ({@link RequestGate}).
 */
public final class BootstrapRegistryServer implements KVBootstrapServer {
    private static final Logger log = LoggerFactory.getLogger(BootstrapRegistryServer.class);

    /** Registrations are a few hundred bytes; anything near this is not a registration. */
    static final int MAX_BODY_BYTES = 64 * 1024;
    /** Read past an oversized body up to this much so the client still sees the 413, not a reset. */
    private static final int MAX_DISCARD_BYTES = 1024 * 1024;

    private static final String TEXT = "text/plain; charset=utf-8";
    private static final String JSON = "application/json; charset=utf-8"; // as SGLang's aiohttp server says

    private final String host;
    private final HttpServer server;
    private final RequestGate gate;
    private final ScheduledThreadPoolExecutor sweeper;
    private final BearerToken token;
    private final boolean openWrites;
    private final RouteTable routes = new RouteTable();
    private final RoomDpTable rooms;
    private final AtomicBoolean closed = new AtomicBoolean();
    /** GET routes the embedding process added ({@link #mount}): the status page and metrics of kvferry-ops. */
    private final Map<String, HttpHandler> mounted = new ConcurrentHashMap<>();

    private BootstrapRegistryServer(String host, HttpServer server, RegistryOptions options, LongSupplier nanoClock) {
        this.host = host;
        this.server = server;
        this.token = BearerToken.of(options.authToken());
        this.openWrites = options.openWrites();
        this.rooms = new RoomDpTable(options.roomEntryTtl().toNanos(), nanoClock);
        this.unauthorizedWarn = new WarnLimiter(nanoClock, "refused writes");
        String prefix = "kvferry-registry-" + server.getAddress().getPort();
        // Not a fixed pool: the JDK server reads request line, headers and body on the executor's thread
        // with no deadline, so a few stalled clients held every worker (and, through a caller-runs queue,
        // the dispatcher). A virtual thread per request, a per-registry request deadline and a cap on
        // requests under way instead; RequestGate says why and how.
        this.gate = new RequestGate(prefix, options.maxConnections(), options.requestTimeout(),
                options.platformRequestThreads());
        this.sweeper = new ScheduledThreadPoolExecutor(1, threads(prefix + "-sweeper-"));
        sweeper.setRemoveOnCancelPolicy(true);
    }

    /**
     * Binds and starts a registry.
     *
     * @param port 0 picks an ephemeral port; {@link #port()} tells which
     * @throws UncheckedIOException when the address cannot be bound
     */
    public static BootstrapRegistryServer start(String host, int port, RegistryOptions options) {
        return start(host, port, options, System::nanoTime);
    }

    /** Lets tests drive room expiry without sleeping. */
    static BootstrapRegistryServer start(String host, int port, RegistryOptions options, LongSupplier nanoClock) {
        Objects.requireNonNull(host, "host");
        Objects.requireNonNull(options, "options");
        if (port < 0 || port > 65_535) throw new IllegalArgumentException("port " + port + " is outside [0, 65535]");
        HttpServer http;
        try {
            http = HttpServer.create(new InetSocketAddress(host, port), 64);
        } catch (IOException e) {
            throw new UncheckedIOException("cannot bind the bootstrap registry to " + host + ":" + port + ": " + e.getMessage(), e);
        }
        BootstrapRegistryServer s = new BootstrapRegistryServer(host, http, options, nanoClock);
        http.createContext("/", s::handle);
        http.setExecutor(s.gate);
        Duration ttl = options.roomEntryTtl();
        long period = Math.clamp(ttl.toMillis() / 2, 50L, 60_000L);
        s.sweeper.scheduleWithFixedDelay(s::sweep, period, period, TimeUnit.MILLISECONDS);
        long requestSweep = RequestGate.sweepPeriodMillis(options.requestTimeout());
        s.sweeper.scheduleWithFixedDelay(s.gate::sweep, requestSweep, requestSweep, TimeUnit.MILLISECONDS);
        http.start();
        if (s.openWrites) {
            log.warn("bootstrap registry on {}:{} runs WITHOUT auth (--no-auth): anyone who reaches it can register "
                    + "or replace prefill ranks", host, s.port());
        } else if (s.token == null) {
            log.warn("bootstrap registry on {}:{} has no auth token: every PUT /route and POST /register_dp_rank "
                    + "will be refused with 401", host, s.port());
        } else {
            log.info("bootstrap registry listening on {}:{} (request timeout {} ms, at most {} requests under way)",
                    host, s.port(), options.requestTimeout().toMillis(), options.maxConnections());
        }
        return s;
    }

    @Override
    public String host() {
        return host;
    }

    @Override
    public int port() {
        return server.getAddress().getPort();
    }

    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) return;
        server.stop(0); // closes every connection; its dispatcher hands out no more requests
        sweeper.shutdownNow();
        try {
            gate.close(Duration.ofSeconds(1));
            sweeper.awaitTermination(1, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        log.info("bootstrap registry on {}:{} closed ({} requests cut off by the request timeout, {} refused at the cap)",
                host, port(), gate.timedOutCount(), gate.refusedCount());
    }

    /**
     * Serves {@code GET path} (and HEAD) with {@code handler}, under the registry's request gate and
     * deadline: how kvferry-ops adds {@code /status}, {@code /status.json} and {@code /metrics} to the
     * registry's own port. The SGLang routes cannot be replaced; other methods answer 405.
     */
    public void mount(String path, HttpHandler handler) {
        Objects.requireNonNull(handler, "handler");
        if (path == null || !path.startsWith("/") || SGLANG_ROUTES.contains(path)) {
            throw new IllegalArgumentException("cannot mount '" + path + "': not a path, or one of the registry's own routes");
        }
        mounted.put(path, handler);
    }

    private static final Set<String> SGLANG_ROUTES = Set.of("/route", "/register_dp_rank", "/query_dp_ranks", "/health");

    /** Every registered prefill rank (the last registration of each slot), ordered by dp, cp, tp, pp. */
    public List<PrefillRankRegistration> registrations() {
        return routes.registrations();
    }

    /** The instance's topology (null before the first registration) and how many ranks registered. */
    public PrefillServerInfo topology() {
        return routes.state().topology();
    }

    /** How many of the topology's ranks registered. */
    public int registeredRanks() {
        return routes.state().registered();
    }

    /** Entries in the room table, expired or not; for tests of the sweeper. */
    int roomEntryCount() {
        return rooms.size();
    }

    /** Requests being read or answered right now; for the slow-client tests. */
    int requestsUnderWay() {
        return gate.underWay();
    }

    private void sweep() {
        try {
            int n = rooms.sweep();
            if (n > 0) log.debug("dropped {} expired room entries", n);
        } catch (RuntimeException e) {
            log.warn("room sweep failed", e);
        }
    }

    // ------------------------------------------------------------------ dispatch

    private record Response(int status, String contentType, byte[] body, String allow) {
        static Response text(int status, String text) {
            return new Response(status, TEXT, text.getBytes(StandardCharsets.UTF_8), null);
        }

        static Response json(byte[] body) {
            return new Response(200, JSON, body, null);
        }

        static Response notAllowed(String allow) {
            return new Response(405, TEXT, "Method not allowed".getBytes(StandardCharsets.UTF_8), allow);
        }
    }

    private void handle(HttpExchange ex) {
        HttpHandler extra = mounted.get(ex.getRequestURI().getRawPath());
        if (extra != null) {
            serveMounted(ex, extra);
            return;
        }
        try {
            Response r;
            try {
                r = route(ex);
            } catch (BadRequestException e) {
                log.debug("{} {} refused with {}: {}", ex.getRequestMethod(), ex.getRequestURI(), e.status(), e.getMessage());
                r = Response.text(e.status(), e.getMessage());
            } catch (RuntimeException | JsonProcessingException e) {
                log.error("{} {} failed", ex.getRequestMethod(), ex.getRequestURI(), e);
                r = Response.text(500, "Internal server error");
            }
            send(ex, r);
        } catch (IOException e) {
            log.debug("{} {}: client went away: {}", ex.getRequestMethod(), ex.getRequestURI(), e.toString());
        } finally {
            ex.close();
        }
    }

    private void serveMounted(HttpExchange ex, HttpHandler handler) {
        try {
            String method = ex.getRequestMethod();
            if (!method.equals("GET") && !method.equals("HEAD")) send(ex, Response.notAllowed("GET, HEAD"));
            else handler.handle(ex);
        } catch (IOException e) {
            log.debug("{} {}: client went away: {}", ex.getRequestMethod(), ex.getRequestURI(), e.toString());
        } catch (RuntimeException e) {
            log.error("{} {} failed", ex.getRequestMethod(), ex.getRequestURI(), e);
        } finally {
            ex.close();
        }
    }

    private Response route(HttpExchange ex) throws IOException, BadRequestException {
        String method = ex.getRequestMethod();
        boolean get = method.equals("GET") || method.equals("HEAD");
        return switch (ex.getRequestURI().getRawPath()) {
            case "/route" -> switch (method) {
                case "PUT" -> putRoute(ex);
                case "GET" -> getRoute(ex.getRequestURI().getRawQuery());
                default -> Response.notAllowed("GET, PUT"); // HEAD too, as SGLang answers it
            };
            case "/register_dp_rank" -> method.equals("POST") ? registerDpRank(ex) : Response.notAllowed("POST");
            case "/query_dp_ranks" -> method.equals("POST") ? queryDpRanks(ex) : Response.notAllowed("POST");
            case "/health" -> get ? Response.text(200, "OK") : Response.notAllowed("GET, HEAD");
            default -> Response.text(404, "Not found");
        };
    }

    private static void send(HttpExchange ex, Response r) throws IOException {
        ex.getResponseHeaders().set("Content-Type", r.contentType());
        if (r.allow() != null) ex.getResponseHeaders().set("Allow", r.allow());
        boolean head = ex.getRequestMethod().equals("HEAD");
        if (head || r.body().length == 0) {
            ex.sendResponseHeaders(r.status(), -1);
            return;
        }
        ex.sendResponseHeaders(r.status(), r.body().length);
        try (OutputStream out = ex.getResponseBody()) {
            out.write(r.body());
        }
    }

    // ------------------------------------------------------------------ routes

    private Response putRoute(HttpExchange ex) throws IOException, BadRequestException {
        requireAuth(ex);
        PrefillRankRegistration reg = Requests.registration(Requests.parseObject(readBody(ex)));
        boolean replaced = routes.register(reg);
        RouteTable.State st = routes.state();
        log.info("{} prefill rank dp={} cp={} tp={} pp={} at {}:{} ({}/{} registered)", replaced ? "re-registered" : "registered",
                reg.dpGroup(), reg.attnCpRank(), reg.attnTpRank(), reg.ppRank(), reg.rankIp(), reg.rankPort(),
                st.registered(), st.topology().totalRanks());
        return Response.text(200, "OK");
    }

    private Response getRoute(String rawQuery) throws JsonProcessingException {
        Map<String, String> q = query(rawQuery);
        Integer dp = intParam(q, "prefill_dp_rank");
        Integer cp = intParam(q, "prefill_cp_rank");
        Integer tp = intParam(q, "target_tp_rank");
        Integer pp = intParam(q, "target_pp_rank");
        if (dp == null || cp == null || tp == null || pp == null) {
            return Response.text(400, "Missing inputs for bootstrap server.");
        }
        RouteTable.State st = routes.state();
        if (!st.ready()) {
            return Response.text(503, "Prefill server not fully registered yet (" + st.registered() + " workers registered).");
        }
        if (dp == -1 && cp == -1 && tp == -1 && pp == -1) {
            return Response.json(Json.MAPPER.writeValueAsBytes(st.topology()));
        }
        RankEndpoint ep = routes.endpoint(dp, cp, tp, pp);
        if (ep == null) {
            return Response.text(404, "Bootstrap info not found for dp_rank=" + dp + " cp_rank=" + cp
                    + " tp_rank=" + tp + " pp_rank=" + pp);
        }
        return Response.json(Json.MAPPER.writeValueAsBytes(ep));
    }

    private Response registerDpRank(HttpExchange ex) throws IOException, BadRequestException {
        requireAuth(ex);
        Requests.DpRankRegistration r = Requests.dpRankRegistration(Requests.parseObject(readBody(ex)));
        PrefillServerInfo topo = routes.state().topology();
        if (topo != null && r.dpRank() >= topo.dpSize()) {
            throw new BadRequestException("dp_rank " + r.dpRank() + " is outside [0, dp_size=" + topo.dpSize() + ")");
        }
        for (long room : r.rooms()) rooms.put(room, r.dpRank());
        return Response.text(200, "OK");
    }

    private Response queryDpRanks(HttpExchange ex) throws IOException, BadRequestException {
        List<Long> wanted = Requests.rooms(Requests.parseObject(readBody(ex)));
        ObjectNode out = Json.MAPPER.createObjectNode();
        for (long room : wanted) {
            Integer dp = rooms.get(room);
            // String keys: that is what a Python dict serialises to, and what SGLang decoders parse.
            if (dp != null) out.put(Long.toString(room), dp.intValue());
        }
        return Response.json(Json.MAPPER.writeValueAsBytes(out));
    }

    // ------------------------------------------------------------------ helpers

    /** Fails closed: no configured token, no header, another scheme or another token are all 401. */
    private void requireAuth(HttpExchange ex) throws BadRequestException {
        if (openWrites) return;
        if (!authorized(ex.getRequestHeaders().getFirst("Authorization"))) {
            unauthorized(ex);
            throw new BadRequestException(401, "Unauthorized");
        }
    }

    /** Between two warnings about refused writes. */
    static final long UNAUTHORIZED_WARN_NANOS = WarnLimiter.EVERY_NANOS;
    private final WarnLimiter unauthorizedWarn;

    /**
     * A refused write: a warning at most once a second, naming how many more were refused since, the
     * others at debug. Anyone who reaches the registry may send writes without a token as fast as it
     * answers them, and a line each would flood the log.
     */
    private void unauthorized(HttpExchange ex) {
        unauthorizedWarn.log(log, "unauthorized {} {} from {}", ex.getRequestMethod(), ex.getRequestURI().getRawPath(), ex.getRemoteAddress());
    }

    /** Warnings logged so far about refused writes (tests). */
    long unauthorizedWarnings() {
        return unauthorizedWarn.warnings();
    }

    private boolean authorized(String header) {
        return token != null && token.accepts(header); // a constant-time comparison of equal-length digests
    }

    private static byte[] readBody(HttpExchange ex) throws IOException, BadRequestException {
        try (InputStream in = ex.getRequestBody()) {
            byte[] body = in.readNBytes(MAX_BODY_BYTES + 1);
            if (body.length > MAX_BODY_BYTES) {
                long discarded = 0;
                byte[] sink = new byte[8192];
                int n;
                while (discarded < MAX_DISCARD_BYTES && (n = in.read(sink)) > 0) discarded += n;
                throw new BadRequestException(413, "Request body too large (limit " + MAX_BODY_BYTES + " bytes)");
            }
            return body;
        }
    }

    private static Map<String, String> query(String raw) {
        Map<String, String> q = new HashMap<>();
        if (raw == null || raw.isEmpty()) return q;
        for (String pair : raw.split("&")) {
            int eq = pair.indexOf('=');
            String k = eq < 0 ? pair : pair.substring(0, eq);
            String v = eq < 0 ? "" : pair.substring(eq + 1);
            try {
                q.putIfAbsent(URLDecoder.decode(k, StandardCharsets.UTF_8), URLDecoder.decode(v, StandardCharsets.UTF_8));
            } catch (IllegalArgumentException e) {
                // A malformed %-escape makes that parameter absent, which answers 400 like any missing one.
            }
        }
        return q;
    }

    private static Integer intParam(Map<String, String> q, String name) {
        String v = q.get(name);
        if (v == null) return null;
        try {
            return Integer.parseInt(v.strip());
        } catch (NumberFormatException e) {
            return null;
        }
    }

    private static ThreadFactory threads(String prefix) {
        AtomicInteger n = new AtomicInteger();
        return r -> {
            Thread t = new Thread(r, prefix + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        };
    }
}
