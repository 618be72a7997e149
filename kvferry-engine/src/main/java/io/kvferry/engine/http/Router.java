package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import com.sun.net.httpserver.HttpServer;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.http.BearerToken;
import io.kvferry.metrics.LogSafe;
import io.kvferry.metrics.WarnLimiter;
import io.micrometer.core.instrument.MeterRegistry;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.slf4j.event.Level;

import java.io.IOException;
import java.io.OutputStream;
import java.net.URI;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Collections;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The PD router (SGLang's mini load balancer): picks the least-loaded healthy prefill and decode,
 * assigns a random {@code bootstrap_room}, sends the request to both at once and returns the
 * decode's tokens as text. OpenAI-shaped {@code POST /v1/completions} and {@code POST /v1/chat/completions}
 * (one path, {@link OpenAiShape}; streamed or not, with {@code stop} and log probabilities ({@link LogprobsShape}), the
 * prompt's too with a completion's {@code echo} or {@code /generate}'s {@code logprob_start_len}, which the prefill
 * computes; {@code max_tokens} 0 runs on the prefill alone; a chat's prompt is {@link ChatPrompt}'s),
 * {@code GET /v1/models}, SGLang-shaped {@code POST /generate}, vLLM's {@code POST /tokenize} and {@code POST /detokenize},
 * {@code GET /health}, its status page {@code GET /status} and document {@code GET /status.json} ({@link RouterStatus}); a prompt may be text or token ids ({@link Prompt}), tokenized once; the serving
 * routes take the router's API key when it has one ({@link Access}), and every request is counted ({@link RouterMeters}).
 * A prompt that cannot fit the context is refused here; a backend's 4xx reaches the client as that
 * 4xx; a failed transfer is an HTTP 500 with kvferry's {@code KVTransferError(...)} text; a client
 * that goes away aborts the room on both engines. Backends are health-checked every second; one
 * that refuses a connection, answers its check with an error or fails {@link Probing#failuresToMarkDown}
 * checks in a row (slow or cut off: it may only be busy) gets no new requests until a check passes.
 *
 * <p>This class is the HTTP front: the routes' wiring, the API key (or the tenants' keys, {@link Tenants}), the meters and
 * request log around each exchange ({@link #serving}), the lifecycle. Its parts, each a package-private class of this package:
 * {@link Backends} (the backend {@link Pool}, replaced only on its health thread, the health checks, the client that
 * calls the engines, aborts) and {@link Workers} ({@code /workers}); {@link RouterStatus} ({@code /status}, {@code /status.json}); {@link PdCall} (one request through a prefill and a
 * decode, once admitted: an {@link Ask} in, an {@link Outcome} or a {@link Failure} out, streamed to an {@link Output});
 * {@link PromptResolver} (prompts tokenized and checked); {@link OpenAiRoutes} (completions, chat, models) with
 * {@link Answer}, {@link Choice} and {@link BestOf} (several choices, best_of, streaming, keep-alives, a client gone);
 * {@link GenerateRoute} ({@code /generate}); {@link TokenizeRoutes} ({@code /tokenize}, {@code /detokenize}).
 */
public final class Router implements AutoCloseable {
    /**
     * One INFO line per request answered on a serving route (off unless this logger is at INFO: {@code serve
     * --log-requests}): route, status, room, tokens, TTFT and latency, the failure's kind and the request's id
     * ({@code request_id=}, {@link RequestId}; {@code -} on a route without one), so a request can be followed by its id
     * into the engines' {@code io.kvferry.engine.requests} lines ({@link EngineRequests}) and by its room into their
     * {@code room failed: room=…} lines.
     */
    static final Logger REQUEST_LOG = LoggerFactory.getLogger("io.kvferry.router.requests");
    /** The router's own log (PdCall's too): a request's failure, an unexpected exception's 500 ({@link #unexpected}). */
    private static final Logger log = LoggerFactory.getLogger(Router.class);
    /** Its unexpected exceptions' 500s ({@link #unexpected}): one ERROR line with its stack trace a second at most. */
    private final WarnLimiter unexpectedErrors = new WarnLimiter(System::nanoTime, "unexpected exceptions' 500s", Level.ERROR);

    /**
     * How many requests the router serves at once (0: no limit) and how long one over the limit waits for a
     * slot before it is answered 429 with {@code Retry-After} (0: at once). A burst beyond what the engines'
     * pages and slots hold is turned away at the door instead of queueing in them without bound.
     */
    public record Admission(int maxConcurrent, Duration queueTimeout, int maxBackends) {
        public static final Admission UNLIMITED = new Admission(0, Duration.ZERO);
        /** {@code serve --max-backends}: the default, and its range (at least a prefill and a decode). */
        public static final int DEFAULT_MAX_BACKENDS = 256;
        public static final int MIN_BACKENDS = 2;
        public static final int MAX_BACKENDS = 4096;

        /**
         * @param maxBackends the most backends (prefills and decodes together) the router holds: its {@code --prefill} and
         *                    {@code --decode} URLs, then {@code POST /workers} refused beyond it, so its pool, health loop and
         *                    status document stay bounded
         */
        public Admission {
            if (maxConcurrent < 0) throw new IllegalArgumentException("max concurrent requests must be >= 0 (0 = no limit), got " + maxConcurrent);
            if (queueTimeout == null || queueTimeout.isNegative()) {
                throw new IllegalArgumentException("the queue timeout must be >= 0, got " + queueTimeout);
            }
            if (maxBackends < MIN_BACKENDS || maxBackends > MAX_BACKENDS) {
                throw new IllegalArgumentException("max backends must be in [" + MIN_BACKENDS + ", " + MAX_BACKENDS + "], got " + maxBackends);
            }
        }

        /** At most {@link #DEFAULT_MAX_BACKENDS} backends. */
        public Admission(int maxConcurrent, Duration queueTimeout) {
            this(maxConcurrent, queueTimeout, DEFAULT_MAX_BACKENDS);
        }
    }

    /**
     * What the request log says of one request and the status it is counted with; filled in by the exchange's own
     * thread as the request goes. Bound to that thread for the request ({@link #RECORD}), not kept in the
     * exchange's attributes: the JDK's server keeps those per route, shared by every request on it, so one
     * request's failure status was counted (and its record logged) for the next ones.
     */
    static final class RequestRecord {
        /**
         * The request's id ({@link RequestId}) on a generation route, null on another (or before it is read); a choice's or
         * batch entry's record holds the id its engines are sent ({@link #child(String)}).
         */
        String requestId;
        /** Whether the client gave {@link #requestId} ({@code X-Request-Id}) rather than the router making it. */
        boolean requestIdGiven;
        long room = -1;
        int promptTokens = -1;
        int completionTokens = -1;
        double ttftMs = -1;
        String failureKind;
        /** The status to count when the answer's does not say it (a stream failed after its 200, a client gone); null: the answer's. */
        Integer countedStatus;
        /** The client's tenant (its key's, {@link Tenants}); null on a router without tenants. */
        Tenants.Tenant tenant;
        /**
         * Whom the request is for, as the engines' compilers queue it ({@link StructuredOutputs#CLIENT_HEADER}: the tenant,
         * else the caller's address); null: none named. Kept here, not read from the scoped value where a call is made: a
         * choice's or batch entry's thread has no binding of its own.
         */
        String client;
        /** The tenant's count of requests running that this request is in ({@link RouterMeters#tenantStarted}), or null. */
        AtomicInteger tenantRunning;
        /** The tokens bucket this request's admission charged ({@link RateLimits#admit}), or null, and the completion budget in it. */
        RateBucket chargedTokens;
        long chargedBudget;
        /** The {@code tokens_per_minute} the charge was priced at: the refund's ({@link RateBucket#give(long, int)}). */
        int chargedLimit;
        /** The tokens the decode sent this request (or choice), whether it succeeded or not: what its budget's refund keeps. */
        int generated;

        /**
         * Whether a concurrency limit turned this request away already (one of its choices or batch entries), shared by
         * its {@link #child} records: {@link RouterMeters#ADMISSION_REFUSED} counts the request once, as its one 429.
         */
        private AtomicBoolean admissionRefused = new AtomicBoolean();

        /**
         * The record of one choice (or batch entry) of this request: its own room and tokens, the request's tenant, and
         * {@code requestId}: the id its engines are sent and its log lines name ({@code <id>-<choice index>}, a batch entry's own).
         */
        RequestRecord child(String requestId) {
            RequestRecord c = new RequestRecord();
            c.requestId = requestId;
            c.tenant = tenant;
            c.client = client;
            c.admissionRefused = admissionRefused;
            return c;
        }

        /** True the first time a concurrency limit turns this request (any of its choices or batch entries) away. */
        boolean firstAdmissionRefusal() {
            return admissionRefused.compareAndSet(false, true);
        }
    }

    /** The request the running handler serves (bound by {@link #serving} around each exchange). */
    static final ScopedValue<RequestRecord> RECORD = ScopedValue.newInstance();

    private final HttpServer server;
    /** The backends, their health thread and the client that calls them. */
    private final Backends backends;
    /** The PD call of each request (admission, prefill and decode). */
    private final PdCall pd;
    /** The API key clients must send to the routes that serve, or null: any client that reaches the port is served. */
    private final BearerToken clientAuth;
    /** The tenants whose keys clients send instead of one API key (and who get their limits and salts), or null. */
    private final Tenants tenants;
    private final RouterMeters meters;
    /**
     * The first backend URL given twice in one role ({@code --prefill}, {@code --decode}; compared as the router holds them, so
     * {@code http://h:1} and {@code http://h:1/} are one), as the refusal's message; null when each is given once. A URL given
     * twice would count twice against {@code --max-backends} for one server (as {@code POST /workers} answers 409 for a URL
     * held already). A URL that is not one is left to the router's own check, which names it.
     */
    public static String givenTwice(List<String> prefills, List<String> decodes) {
        for (boolean prefill : new boolean[]{true, false}) {
            Map<URI, String> seen = new HashMap<>();
            for (String url : prefill ? prefills : decodes) {
                URI u;
                try {
                    u = Backend.parse(url, prefill);
                } catch (IllegalArgumentException notAUrl) {
                    continue;
                }
                String before = seen.putIfAbsent(u, url);
                if (before != null) {
                    String flag = prefill ? "--prefill" : "--decode";
                    return flag + " " + u + " is given twice" + (before.equals(url) ? "" : " (as " + before + " and " + url + ")")
                            + ": give each " + (prefill ? "prefill" : "decode") + " once";
                }
            }
        }
        return null;
    }

    /** Its graceful shutdown: the serving routes' requests admitted, and whether it still admits ({@link Drain}). */
    private final Drain drain = new Drain("router");
    /** Compiles the requests' structured outputs (the router checks them before any engine work). */
    private final OutputConstraint.Compiler outputs;

    /**
     * Who may call what. {@code backendToken}: the cluster token sent to the engines, whose /generate and /abort
     * require it (null: none). {@code apiKey}: the key clients send to the router's serving routes
     * ({@code /v1/completions}, {@code /v1/chat/completions}, {@code /v1/models}, {@code /generate}, {@code /tokenize},
     * {@code /detokenize}) as {@code Authorization: Bearer KEY}, as
     * OpenAI clients do (null: the router serves anyone, as SGLang's does by default); {@code /health},
     * {@code /metrics}, {@code /status} and {@code /status.json} stay open. The two must differ: a client holding the key would otherwise hold the
     * engines' and the registry's token too. {@code tenants} ({@code --tenants-file}): instead of one API key, a key per
     * tenant, each with its own limit, prefix-cache salt and meters ({@link Tenants}); not with {@code apiKey}.
     */
    public record Access(String backendToken, String apiKey, Tenants tenants) {
        public static final Access NONE = new Access(null, null, null);

        public Access {
            BearerToken key = BearerToken.of(apiKey), token = BearerToken.of(backendToken);
            if (key != null && token != null && token.accepts(key.header())) {
                throw new IllegalArgumentException("the router's API key must differ from the cluster token: every client would hold "
                        + "the token that lets a caller abort any room on the engines and register with the bootstrap registry");
            }
            if (key != null && tenants != null) {
                throw new IllegalArgumentException("the router takes one API key (--api-key-file / KVFERRY_API_KEY) or tenants "
                        + "(--tenants-file), not both: with tenants each client sends its tenant's key");
            }
        }

        /** One API key for every client (null: none), no tenants. */
        public Access(String backendToken, String apiKey) {
            this(backendToken, apiKey, null);
        }

        @Override
        public String toString() {
            return "Access[backendToken=" + (BearerToken.of(backendToken) == null ? "none" : "***") + ", apiKey="
                    + (BearerToken.of(apiKey) == null ? "none" : "***") + ", tenants=" + (tenants == null ? "none" : tenants.list().size()) + "]";
        }
    }

    /**
     * @param prefills each "http://host:port"; its bootstrap registry is learnt from its /health
     * @param decodes  each "http://host:port"
     * @param contextTokens the model's context (seq_len): longer prompts are refused here, before any engine sees them
     */
    public Router(List<String> prefills, List<String> decodes, Tokenizer tokenizer, int contextTokens, String modelName, String host, int port)
            throws IOException {
        this(prefills, decodes, tokenizer, contextTokens, modelName, host, port, Probing.DEFAULT, Access.NONE, Admission.UNLIMITED, null);
    }

    /** @param backendToken the cluster token sent to the engines, whose /generate and /abort require it; null for none */
    public Router(List<String> prefills, List<String> decodes, Tokenizer tokenizer, int contextTokens, String modelName, String host, int port,
                  String backendToken) throws IOException {
        this(prefills, decodes, tokenizer, contextTokens, modelName, host, port, Probing.DEFAULT, new Access(backendToken, null),
                Admission.UNLIMITED, null);
    }

    /**
     * @param access  the engines' token and the clients' API key
     * @param metrics where the router's meters go ({@link RouterMeters}: requests by status, TTFT, latency, backends); null for none
     */
    public Router(List<String> prefills, List<String> decodes, Tokenizer tokenizer, int contextTokens, String modelName, String host, int port,
                  Access access, MeterRegistry metrics) throws IOException {
        this(prefills, decodes, tokenizer, contextTokens, modelName, host, port, Probing.DEFAULT, access, Admission.UNLIMITED, metrics);
    }

    /** As above, admitting at most {@code admission.maxConcurrent()} requests at once. */
    public Router(List<String> prefills, List<String> decodes, Tokenizer tokenizer, int contextTokens, String modelName, String host, int port,
                  Access access, Admission admission, MeterRegistry metrics) throws IOException {
        this(prefills, decodes, tokenizer, contextTokens, modelName, host, port, Probing.DEFAULT, access, admission, metrics);
    }

    /** As the public constructor, with other probe timings (tests). */
    Router(List<String> prefills, List<String> decodes, Tokenizer tokenizer, int contextTokens, String modelName, String host, int port,
           Probing probing) throws IOException {
        this(prefills, decodes, tokenizer, contextTokens, modelName, host, port, probing, Access.NONE, Admission.UNLIMITED, null);
    }

    private Router(List<String> prefills, List<String> decodes, Tokenizer tokenizer, int contextTokens, String modelName, String host,
                   int port, Probing probing, Access access, Admission admission, MeterRegistry metrics) throws IOException {
        long started = System.currentTimeMillis() / 1000; // the router's start: its model's created
        Semaphore slots = admission.maxConcurrent() == 0 ? null : new Semaphore(admission.maxConcurrent(), true);
        BearerToken clusterToken = BearerToken.of(access.backendToken()); // sent with every call to an engine; /workers changes need it
        this.clientAuth = BearerToken.of(access.apiKey());
        this.tenants = access.tenants();
        if (prefills.isEmpty() || decodes.isEmpty()) throw new IllegalArgumentException("the router needs at least one prefill and one decode");
        String twice = givenTwice(prefills, decodes);
        if (twice != null) throw new IllegalArgumentException(twice);
        if (prefills.size() + decodes.size() > admission.maxBackends()) {
            throw new IllegalArgumentException("the router is given " + (prefills.size() + decodes.size()) + " backends, more than its limit of "
                    + admission.maxBackends() + " (--max-backends)");
        }
        Pool first = new Pool(List.of(), List.of());
        for (String p : prefills) first = first.with(new Backend(p, true, null));
        for (String d : decodes) first = first.with(new Backend(d, false, null));
        this.meters = new RouterMeters(metrics, tenants != null);
        if (slots != null) meters.admission(slots);
        if (tenants != null) {
            tenants.list().forEach(t -> meters.tenant(t.name, tenants));
            tenants.listener(new Tenants.Listener() {
                @Override
                public void adding(List<Tenants.Tenant> added) {
                    added.forEach(t -> meters.tenant(t.name, tenants));
                }

                @Override
                public void removed(List<String> removed) {
                    removed.forEach(meters::forgetTenant);
                }
            });
        }
        first.all().forEach(meters::backend);
        if (contextTokens < 2) throw new IllegalArgumentException("the context must hold at least 2 tokens, got " + contextTokens);
        backends = new Backends(first, probing, clusterToken, meters);
        if (tenants != null) backends.every(tenants::reloadIfChanged, TENANTS_CHECK_MILLIS); // the file re-read when it changes
        pd = new PdCall(backends, probing.streamIdle(), tokenizer, contextTokens, meters, admission, slots);
        PromptResolver resolver = new PromptResolver(tokenizer, contextTokens);
        outputs = new OutputConstraint.Compiler(tokenizer);
        StructuredOutputMeters.bind(metrics, outputs, "router");
        OpenAiRoutes openAi = new OpenAiRoutes(pd, resolver, tokenizer, modelName, started, outputs);
        GenerateRoute generate = new GenerateRoute(pd, resolver, tokenizer, outputs);
        TokenizeRoutes tokenize = new TokenizeRoutes(tokenizer, contextTokens);
        Workers workers = new Workers(backends, clusterToken, admission.maxBackends());
        server = Http.server(host, port);
        serving(OpenAiShape.COMPLETION.route, true, openAi::completions);
        serving(OpenAiShape.CHAT.route, true, openAi::chatCompletions);
        serving("/v1/models", false, openAi::models);
        serving(MODEL_ROUTE, MODEL_ROUTE + "{model}", false, openAi::model);
        serving("/generate", true, generate::generate);
        serving("/tokenize", false, tokenize::tokenize);
        serving("/detokenize", false, tokenize::detokenize);
        server.createContext("/health", ex -> Http.handle(ex, this::healthRoute));
        server.createContext(WORKERS_ROUTE, ex -> Http.handle(ex, workers::workersRoute));
        // The router's status page and document: open, as /health and /metrics (it names the tenants as /metrics does).
        RouterStatus status = new RouterStatus(backends, meters, pd::waitingForAdmission, tenants, admission, modelName, drain, outputs);
        backends.every(status::sample, 1_000);
        server.createContext("/status", ex -> Http.handle(ex, status::page));
        server.createContext(RouterStatus.JSON_ROUTE, ex -> Http.handle(ex, status::json));
        server.createContext("/status.js", ex -> Http.handle(ex, status::script));
        server.createContext("/common.js", ex -> Http.handle(ex, status::common));
        server.createContext("/status.css", ex -> Http.handle(ex, status::style));
        server.start();
    }

    /**
     * A route that serves clients: it takes the API key (if the router has one) and is counted by its
     * outcome: the answer's status, or, for a stream that failed after its 200, the failure's, or
     * {@link RouterMeters#CLIENT_CLOSED} when the client went away first. {@code generation}: a route that generates
     * ({@code /v1/completions}, {@code /v1/chat/completions}, {@code /generate}), whose requests have an id
     * ({@link RequestId}: the client's {@code X-Request-Id} or a new one), which every answer carries and every log line names.
     */
    private void serving(String route, boolean generation, Http.Handler handler) {
        serving(route, route, generation, handler);
    }

    /** As {@link #serving(String, boolean, Http.Handler)}, counted and logged as {@code label} (a parent route's: one label for its paths). */
    private void serving(String path, String route, boolean generation, Http.Handler handler) {
        server.createContext(path, ex -> {
            meters.started();
            long arrived = System.nanoTime();
            RequestRecord record = new RequestRecord();
            try {
                // The request's id first (a malformed X-Request-Id is a 400 naming it), so every answer after carries it;
                // then draining (shutting down): a 503 whose code is draining, before anything else; else served to its end.
                Http.Handler admitting = drain.admitting(e -> {
                    if (tenants != null) {
                        record.tenant = tenants.identify(e.getRequestHeaders().getFirst("Authorization"));
                        if (record.tenant == null) {
                            Http.refuseBearer(e, "authentication_error", "needs a tenant's key (Authorization: Bearer KEY; the keys of --tenants-file)");
                            return;
                        }
                        record.tenantRunning = meters.tenantStarted(record.tenant.name);
                    } else if (!Http.bearerChecked(e, clientAuth, "authentication_error",
                            "needs the router's API key (Authorization: Bearer KEY; the key of --api-key-file / KVFERRY_API_KEY)")) {
                        return;
                    }
                    // Http.handle bound the caller's address
                    record.client = record.tenant != null ? StructuredOutputs.tenant(record.tenant.name)
                            : StructuredOutputs.CLIENT.orElse(OutputConstraint.Compiler.ANYONE);
                    try {
                        if (record.tenant == null) {
                            handler.handle(e);
                        } else { // the compiler's turns shared between the tenants, not the addresses
                            ScopedValue.where(StructuredOutputs.CLIENT, StructuredOutputs.tenant(record.tenant.name)).call(() -> {
                                handler.handle(e);
                                return null;
                            });
                        }
                    } catch (IOException clientGone) { // a failure of the router's own reads and writes: the client's connection
                        if (record.countedStatus == null) record.countedStatus = RouterMeters.CLIENT_CLOSED;
                        throw clientGone;
                    }
                });
                ScopedValue.where(RECORD, record).run(() -> Http.handle(ex, e -> {
                    if (generation) {
                        record.requestIdGiven = e.getRequestHeaders().containsKey(RequestId.HEADER);
                        record.requestId = RequestId.of(e);
                    }
                    try {
                        admitting.handle(e);
                    } catch (Http.BadRequest | Http.Unavailable | IOException answered) {
                        throw answered; // a 400 or 503 of the request's, or the client gone: Http.handle answers it
                    } catch (Exception bug) { // an IllegalArgumentException too: the client's faults are BadRequests
                        unexpected(unexpectedErrors, route, record.requestId, record.room, bug);
                        throw bug; // Http.handle answers it 500, with the X-Request-Id set when the id was read
                    }
                }));
            } finally {
                int status = record.countedStatus != null ? record.countedStatus
                        : ex.getResponseCode() > 0 ? ex.getResponseCode() : RouterMeters.CLIENT_CLOSED;
                String tenant = record.tenant == null ? null : record.tenant.name;
                if (REQUEST_LOG.isInfoEnabled()) {
                    REQUEST_LOG.info("request route={} status={} room={} prompt_tokens={} completion_tokens={} ttft_ms={} e2e_ms={} kind={} request_id={}{}",
                            route, status, record.room < 0 ? "-" : Long.toString(record.room), record.promptTokens, record.completionTokens,
                            String.format("%.1f", record.ttftMs), String.format("%.1f", (System.nanoTime() - arrived) / 1e6),
                            record.failureKind == null ? "-" : LogSafe.value(record.failureKind), record.requestId == null ? "-" : record.requestId,
                            tenants == null ? "" : " tenant=" + (tenant == null ? "-" : tenant));
                }
                if (record.tenantRunning != null) record.tenantRunning.decrementAndGet();
                RateLimits.settle(record); // the unused part of its tokens budget back to its tenant's bucket
                meters.finished(route, status, tenant); // after its log line: a request counted is a request logged
            }
        });
    }

    /**
     * A request answered 500 for an exception nothing expected (a bug): {@code request failed: request_id=… route=… room=…
     * status=500 kind=internal_error reason=…} at ERROR with its stack trace, so the 500 the client got (its X-Request-Id)
     * leads to it. Its text escaped ({@link LogSafe}); the trace, which would print the messages as they are, only when
     * every message of it is clean (else at DEBUG). At ERROR once a second at most ({@code errors}, the router's
     * {@link #unexpectedErrors}): a bug that every request meets would log a trace a request; the others at DEBUG, the next
     * ERROR line counting them.
     */
    static void unexpected(WarnLimiter errors, String route, String requestId, long roomId, Exception bug) {
        String id = requestId == null ? "-" : requestId, room = roomId < 0 ? "-" : Long.toString(roomId);
        String format = "request failed: request_id={} route={} room={} status=500 kind=internal_error reason={}";
        if (clean(bug)) {
            errors.log(log, format, id, route, room, LogSafe.text(bug.toString()), bug);
        } else {
            errors.log(log, format + " (its stack trace at DEBUG: its text holds control characters)", id, route, room, LogSafe.text(bug.toString()));
            log.debug("the stack trace of request {}'s 500", id, bug);
        }
    }

    /** The most throwables {@link #clean} reads in one trace; a trace of more is not clean. */
    static final int MOST_IN_TRACE = 64;

    /**
     * Whether every line the stack trace of {@code t} would print with a message in it is as {@link LogSafe#text} would
     * print it: {@code t}'s, each cause's and each suppressed exception's {@code toString} (as {@code printStackTrace}
     * prints them: a subclass's own message included), each once (a cycle ends there); a trace of more than
     * {@link #MOST_IN_TRACE} of them is not. Only the first 8 causes were read: a ninth's newline printed as it is.
     */
    static boolean clean(Throwable t) {
        Set<Throwable> seen = Collections.newSetFromMap(new IdentityHashMap<>());
        ArrayDeque<Throwable> todo = new ArrayDeque<>();
        todo.push(t);
        while (!todo.isEmpty()) {
            Throwable x = todo.pop();
            if (!seen.add(x)) continue;
            if (seen.size() > MOST_IN_TRACE) return false;
            String line = x.toString();
            if (!line.equals(LogSafe.text(line))) return false;
            if (x.getCause() != null) todo.push(x.getCause());
            for (Throwable suppressed : x.getSuppressed()) todo.push(suppressed);
        }
        return true;
    }

    /** Its graceful shutdown: {@link Drain#begin} refuses new requests (503 draining) and fails /health; those running go on. */
    public Drain drain() {
        return drain;
    }

    public int port() {
        return server.getAddress().getPort();
    }

    /** Its backends (tests). */
    Backends backends() {
        return backends;
    }

    /** Its structured-output compiler (tests). */
    OutputConstraint.Compiler outputs() {
        return outputs;
    }

    /** How often the router looks at the tenants file's modification time. */
    static final long TENANTS_CHECK_MILLIS = 1_000;

    /** The router's tenants (null: none). */
    Tenants tenants() {
        return tenants;
    }

    /** Requests waiting for an admission slot now. */
    int waitingForAdmission() {
        return pd.waitingForAdmission();
    }

    /** Adds a route of the operator's (e.g. {@code /metrics}); it takes no API key, as {@code /health} does not. */
    public void route(String path, HttpHandler handler) {
        server.createContext(path, handler);
    }

    /** The request log's record of a request of several choices: the first choice's room, the tokens of all, the earliest first token. */
    static void merge(RequestRecord record, List<RequestRecord> choices) {
        record.room = choices.getFirst().room;
        int prompt = 0, completion = 0, generated = 0;
        for (RequestRecord c : choices) {
            generated += c.generated;
            prompt += Math.max(c.promptTokens, 0);
            completion += Math.max(c.completionTokens, 0);
            if (c.ttftMs >= 0 && (record.ttftMs < 0 || c.ttftMs < record.ttftMs)) record.ttftMs = c.ttftMs;
        }
        record.promptTokens = prompt;
        record.completionTokens = completion;
        record.generated = generated;
    }

    /**
     * Answers a failed request: an error response, or, once a stream has begun ({@code events} non-null), the
     * error as an event and then [DONE], as vLLM and SGLang end a failed stream (clients read to it).
     */
    static void fail(HttpExchange ex, OutputStream events, Failure f) throws IOException {
        RequestRecord r = RECORD.get();
        r.countedStatus = f.status;
        r.failureKind = f.kind != null ? f.kind : f.type;
        // A 503 too (no instance of a role serves, each met was draining or gone): the client may try again in a moment.
        if (f.status == 429 || f.status == 503) ex.getResponseHeaders().set("Retry-After", Long.toString(f.retryAfterSeconds));
        if (events == null) {
            Http.sendError(ex, f.status, f.type, f.kind, f.param, f.getMessage());
            return;
        }
        Http.event(events, Http.JSON.writeValueAsString(Http.errorEvent(f.type, f.kind, f.param, f.getMessage())));
        Http.event(events, "[DONE]");
        events.close();
    }

    /** The parent route of OpenAI's model retrieval, {@code GET /v1/models/{model}}. */
    static final String MODEL_ROUTE = "/v1/models/";
    static final String WORKERS_ROUTE = "/workers";
    /**
     * The error {@code code} of a {@code POST /workers} refused because the router holds its {@code --max-backends}: a
     * registering engine ({@code WorkerRegistration}) reads it as "full now, a place may come" and keeps trying.
     */
    public static final String BACKENDS_FULL_CODE = "max_backends";

    private void healthRoute(HttpExchange ex) throws Exception {
        if (!Http.method(ex, "GET")) return;
        ObjectNode out = Http.JSON.createObjectNode();
        Pool now = backends.pool();
        long p = now.prefills().stream().filter(Backend::serves).count(), d = now.decodes().stream().filter(Backend::serves).count();
        // Degraded: a role has fewer healthy backends than it has, requests still served; unavailable: none of a role.
        boolean all = p == now.prefills().size() && d == now.decodes().size();
        out.put("status", drain.draining() ? "draining" : p == 0 || d == 0 ? "unavailable" : all ? "ok" : "degraded");
        out.put("healthy_prefills", p);
        out.put("healthy_decodes", d);
        Http.sendJson(ex, p > 0 && d > 0 && !drain.draining() ? 200 : 503, out); // draining: a load balancer stops sending
    }

    @Override
    public void close() {
        Http.stop(server, drain);
        backends.close();
    }
}
