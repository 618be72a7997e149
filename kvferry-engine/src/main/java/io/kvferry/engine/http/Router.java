package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import com.sun.net.httpserver.HttpServer;
import io.kvferry.engine.model.TokenLogprobs;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.http.BearerToken;
import io.kvferry.metrics.LogSafe;
import io.micrometer.core.instrument.MeterRegistry;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.io.OutputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.Semaphore;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.ToDoubleFunction;

/**
 * The PD router (SGLang's mini load balancer): picks the least-loaded healthy prefill and decode,
 * assigns a random {@code bootstrap_room}, sends the request to both at once and returns the
 * decode's tokens as text. OpenAI-shaped {@code POST /v1/completions} and {@code POST /v1/chat/completions}
 * (one path, {@link OpenAiShape}; streamed or not, with {@code stop} and log probabilities ({@link LogprobsShape}), the
 * prompt's too with a completion's {@code echo} or {@code /generate}'s {@code logprob_start_len}, which the prefill
 * computes; {@code max_tokens} 0 runs on the prefill alone; a chat's prompt is {@link ChatPrompt}'s),
 * {@code GET /v1/models}, SGLang-shaped {@code POST /generate}, vLLM's {@code POST /tokenize} and {@code POST /detokenize},
 * {@code GET /health}; a prompt may be text or token ids ({@link Prompt}), tokenized once; the serving
 * routes take the router's API key when it has one ({@link Access}), and every request is counted ({@link RouterMeters}).
 * A prompt that cannot fit the context is refused here; a backend's 4xx reaches the client as that
 * 4xx; a failed transfer is an HTTP 500 with kvferry's {@code KVTransferError(...)} text; a client
 * that goes away aborts the room on both engines. Backends are health-checked every second; one
 * that refuses a connection, answers its check with an error or fails {@link Probing#failuresToMarkDown}
 * checks in a row (slow or cut off: it may only be busy) gets no new requests until a check passes.
 */
public final class Router implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(Router.class);
    /**
     * One INFO line per request answered on a serving route (off unless this logger is at INFO: {@code serve
     * --log-requests}): route, status, room, tokens, TTFT and latency, and the failure's kind, so a request
     * can be followed by its room into the engines' {@code room failed: room=…} lines.
     */
    static final Logger REQUEST_LOG = LoggerFactory.getLogger("io.kvferry.router.requests");

    /**
     * How many requests the router serves at once (0: no limit) and how long one over the limit waits for a
     * slot before it is answered 429 with {@code Retry-After} (0: at once). A burst beyond what the engines'
     * pages and slots hold is turned away at the door instead of queueing in them without bound.
     */
    public record Admission(int maxConcurrent, Duration queueTimeout) {
        public static final Admission UNLIMITED = new Admission(0, Duration.ZERO);

        public Admission {
            if (maxConcurrent < 0) throw new IllegalArgumentException("max concurrent requests must be >= 0 (0 = no limit), got " + maxConcurrent);
            if (queueTimeout == null || queueTimeout.isNegative()) {
                throw new IllegalArgumentException("the queue timeout must be >= 0, got " + queueTimeout);
            }
        }
    }

    /**
     * What the request log says of one request and the status it is counted with; filled in by the exchange's own
     * thread as the request goes. Bound to that thread for the request ({@link #RECORD}), not kept in the
     * exchange's attributes: the JDK's server keeps those per route, shared by every request on it, so one
     * request's failure status was counted (and its record logged) for the next ones.
     */
    static final class RequestRecord {
        long room = -1;
        int promptTokens = -1;
        int completionTokens = -1;
        double ttftMs = -1;
        String failureKind;
        /** The status to count when the answer's does not say it (a stream failed after its 200, a client gone); null: the answer's. */
        Integer countedStatus;
    }

    /** The request the running handler serves (bound by {@link #serving} around each exchange). */
    private static final ScopedValue<RequestRecord> RECORD = ScopedValue.newInstance();

    private final Tokenizer tokenizer;
    /** The model's context in tokens: a prompt must leave room in it for one output token. */
    private final int contextTokens;
    private final String modelName;
    /** When this router started, in Unix seconds: its model's {@code created} on {@code /v1/models}, as OpenAI's clients require one. */
    private final long started = System.currentTimeMillis() / 1000;
    private final HttpServer server;
    /** The backends, their health thread and the client that calls them. */
    private final Backends backends;
    private final Workers workers;
    /** The PD call of each request (admission, prefill and decode). */
    private final PdCall pd;
    /** The prompts tokenized and checked against the context. */
    private final PromptResolver resolver;
    /** The cluster token: sent with every call to an engine, and what {@code /workers} changes need; null for none. */
    private final BearerToken clusterToken;
    /** The API key clients must send to the routes that serve, or null: any client that reaches the port is served. */
    private final BearerToken clientAuth;
    private final RouterMeters meters;

    /**
     * Who may call what. {@code backendToken}: the cluster token sent to the engines, whose /generate and /abort
     * require it (null: none). {@code apiKey}: the key clients send to the router's serving routes
     * ({@code /v1/completions}, {@code /v1/chat/completions}, {@code /v1/models}, {@code /generate}, {@code /tokenize},
     * {@code /detokenize}) as {@code Authorization: Bearer KEY}, as
     * OpenAI clients do (null: the router serves anyone, as SGLang's does by default); {@code /health} and
     * {@code /metrics} stay open. The two must differ: a client holding the key would otherwise hold the
     * engines' and the registry's token too.
     */
    public record Access(String backendToken, String apiKey) {
        public static final Access NONE = new Access(null, null);

        public Access {
            BearerToken key = BearerToken.of(apiKey), token = BearerToken.of(backendToken);
            if (key != null && token != null && token.accepts(key.header())) {
                throw new IllegalArgumentException("the router's API key must differ from the cluster token: every client would hold "
                        + "the token that lets a caller abort any room on the engines and register with the bootstrap registry");
            }
        }

        @Override
        public String toString() {
            return "Access[backendToken=" + (BearerToken.of(backendToken) == null ? "none" : "***") + ", apiKey="
                    + (BearerToken.of(apiKey) == null ? "none" : "***") + "]";
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
        Semaphore slots = admission.maxConcurrent() == 0 ? null : new Semaphore(admission.maxConcurrent(), true);
        this.clusterToken = BearerToken.of(access.backendToken());
        this.clientAuth = BearerToken.of(access.apiKey());
        if (prefills.isEmpty() || decodes.isEmpty()) throw new IllegalArgumentException("the router needs at least one prefill and one decode");
        Pool first = new Pool(List.of(), List.of());
        for (String p : prefills) first = first.with(new Backend(p, true, null));
        for (String d : decodes) first = first.with(new Backend(d, false, null));
        this.meters = new RouterMeters(metrics);
        if (slots != null) meters.admission(slots);
        first.all().forEach(meters::backend);
        this.tokenizer = tokenizer;
        if (contextTokens < 2) throw new IllegalArgumentException("the context must hold at least 2 tokens, got " + contextTokens);
        this.contextTokens = contextTokens;
        this.modelName = modelName;
        backends = new Backends(first, probing, clusterToken, meters);
        pd = new PdCall(backends, probing.streamIdle(), tokenizer, contextTokens, meters, admission, slots);
        resolver = new PromptResolver(tokenizer, contextTokens);
        workers = new Workers(backends, clusterToken);
        server = Http.server(host, port);
        serving(OpenAiShape.COMPLETION.route, this::completions);
        serving(OpenAiShape.CHAT.route, this::chatCompletions);
        serving("/v1/models", this::models);
        serving(MODEL_ROUTE, MODEL_ROUTE + "{model}", this::model);
        serving("/generate", this::generate);
        serving("/tokenize", this::tokenize);
        serving("/detokenize", this::detokenize);
        server.createContext("/health", ex -> Http.handle(ex, this::healthRoute));
        server.createContext(WORKERS_ROUTE, ex -> Http.handle(ex, workers::workersRoute));
        server.start();
    }

    /**
     * A route that serves clients: it takes the API key (if the router has one) and is counted by its
     * outcome: the answer's status, or, for a stream that failed after its 200, the failure's, or
     * {@link RouterMeters#CLIENT_CLOSED} when the client went away first.
     */
    private void serving(String route, Http.Handler handler) {
        serving(route, route, handler);
    }

    /** As {@link #serving(String, Http.Handler)}, counted and logged as {@code label} (a parent route's: one label for its paths). */
    private void serving(String path, String route, Http.Handler handler) {
        server.createContext(path, ex -> {
            meters.started();
            long arrived = System.nanoTime();
            RequestRecord record = new RequestRecord();
            try {
                ScopedValue.where(RECORD, record).run(() -> Http.handle(ex, e -> {
                    if (!Http.bearerChecked(e, clientAuth, "authentication_error",
                            "needs the router's API key (Authorization: Bearer KEY; the key of --api-key-file / KVFERRY_API_KEY)")) {
                        return;
                    }
                    try {
                        handler.handle(e);
                    } catch (IOException clientGone) { // a failure of the router's own reads and writes: the client's connection
                        if (record.countedStatus == null) record.countedStatus = RouterMeters.CLIENT_CLOSED;
                        throw clientGone;
                    }
                }));
            } finally {
                int status = record.countedStatus != null ? record.countedStatus
                        : ex.getResponseCode() > 0 ? ex.getResponseCode() : RouterMeters.CLIENT_CLOSED;
                if (REQUEST_LOG.isInfoEnabled()) {
                    REQUEST_LOG.info("request route={} status={} room={} prompt_tokens={} completion_tokens={} ttft_ms={} e2e_ms={} kind={}",
                            route, status, record.room < 0 ? "-" : Long.toString(record.room), record.promptTokens, record.completionTokens,
                            String.format("%.1f", record.ttftMs), String.format("%.1f", (System.nanoTime() - arrived) / 1e6),
                            record.failureKind == null ? "-" : LogSafe.value(record.failureKind));
                }
                meters.finished(route, status); // after its log line: a request counted is a request logged
            }
        });
    }

    public int port() {
        return server.getAddress().getPort();
    }

    /** Requests waiting for an admission slot now. */
    int waitingForAdmission() {
        return pd.waitingForAdmission();
    }

    /** Adds a route of the operator's (e.g. {@code /metrics}); it takes no API key, as {@code /health} does not. */
    public void route(String path, HttpHandler handler) {
        server.createContext(path, handler);
    }

    // ------------------------------------------------------------------ routes

    private void completions(HttpExchange ex) throws Exception {
        if (!Http.method(ex, "POST")) return;
        JsonNode req = Http.readJson(ex);
        Prompt.Parsed parsed = RequestParams.prompts(req);
        RequestParams.refuseUnsupported(req, OpenAiShape.COMPLETION);
        int n = RequestParams.n(req, parsed.prompts().size());
        int bestOf = RequestParams.bestOf(req, n, parsed.prompts().size());
        // OpenAI's legacy logprobs: the number of top log probabilities a token (its own always comes too); absent or null: none.
        int logprobs = Http.intField(req, "logprobs", -1, 0, LogprobsShape.MAX_TOP);
        // echo: the text starts with the prompt, and with logprobs the prompt's tokens' come first (lm-evaluation-harness's
        // loglikelihood); max_tokens 0 then asks for the prompt alone.
        boolean echo = Http.booleanField(req, "echo", false);
        int maxTokens = Http.intField(req, "max_tokens", 16, 0, Integer.MAX_VALUE);
        if (maxTokens == 0 && !echo) {
            throw new Http.BadRequest("max_tokens", "max_tokens 0 (the prompt alone, no completion) needs echo: true; without it send at least 1");
        }
        List<Prompt> prompts = resolver.resolve(parsed, "prompt");
        // best_of > n: every sample's decode reports its tokens' log probabilities, which choose the n shown (BestOf); the
        // answer shows them only where the request asked.
        int sampleLogprobs = bestOf > n ? Math.max(logprobs, 0) : logprobs;
        Ask ask = RequestParams.ask(req, prompts.getFirst(), maxTokens, sampleLogprobs, echo && logprobs >= 0 ? 0 : -1, tokenizer.vocabSize());
        answer(ex, req, OpenAiShape.COMPLETION, choices(ask, prompts, bestOf), echo, bestOf > n ? new BestOf(n, bestOf, logprobs >= 0) : null);
    }

    /**
     * The choices' asks, index = prompt index * n + sample index ({@code n}: the samples of each prompt, best_of's when it
     * asks for more). Sample {@code j} of a request with a {@code seed} gets seed + j (wrapping): sample 0 is the single
     * request's, and a seeded request gives the same samples again; without one each choice's room is its seed. The
     * prompts are resolved ({@link PromptResolver#resolve(Prompt.Parsed, String)}: tokenized, checked) before.
     */
    static List<Ask> choices(Ask ask, List<Prompt> prompts, int n) {
        List<Ask> asks = new ArrayList<>();
        for (Prompt prompt : prompts) {
            for (int j = 0; j < n; j++) asks.add(ask.sample(prompt, j));
        }
        return asks;
    }

    /**
     * {@code best_of} above {@code n}: {@code bestOf} samples of each prompt run (each a PD request of its own, seeded as
     * {@link #choices} says), and the answer shows the {@code n} with the highest cumulative log probability of their sampled
     * tokens, highest first (vLLM's rule; ties in sample order), their log probabilities only when {@code logprobs} was asked.
     */
    record BestOf(int n, int bestOf, boolean showLogprobs) {
        /** The choices shown, in the answer's order: each prompt's best n of its bestOf samples ({@code all} in run order). */
        <C> List<C> chosen(List<C> all, ToDoubleFunction<C> cumulativeLogprob) {
            List<C> out = new ArrayList<>();
            for (int from = 0; from < all.size(); from += bestOf) {
                List<C> samples = new ArrayList<>(all.subList(from, from + bestOf));
                samples.sort(Comparator.comparingDouble(cumulativeLogprob).reversed()); // stable: ties keep sample order
                out.addAll(samples.subList(0, n));
            }
            return out;
        }
    }

    /** The sum of the log probabilities of an outcome's sampled tokens (best_of's measure; 0 without tokens). */
    static double cumulativeLogprob(Outcome o) {
        double sum = 0;
        for (TokenLogprobs lp : o.logprobs()) sum += lp.logprob();
        return sum;
    }

    /**
     * OpenAI's chat: the messages' contents as the prompt ({@link ChatPrompt}: the model has no chat template), then
     * the completion's path. {@code max_completion_tokens} or the older {@code max_tokens} (not both at different
     * values); without either the answer may run to the end of the context, as OpenAI's does.
     */
    private void chatCompletions(HttpExchange ex) throws Exception {
        if (!Http.method(ex, "POST")) return;
        JsonNode req = Http.readJson(ex);
        Prompt prompt = Prompt.text(ChatPrompt.of(req.get("messages")));
        RequestParams.refuseUnsupported(req, OpenAiShape.CHAT);
        int maxTokens = Http.intField(req, "max_completion_tokens", Integer.MAX_VALUE, 1, Integer.MAX_VALUE);
        int older = Http.intField(req, "max_tokens", maxTokens, 1, Integer.MAX_VALUE);
        if (req.hasNonNull("max_completion_tokens") && req.hasNonNull("max_tokens") && older != maxTokens) {
            throw new Http.BadRequest("max_tokens", "max_tokens (" + older + ") and max_completion_tokens (" + maxTokens
                    + ") differ; send max_completion_tokens alone");
        }
        prompt = resolver.resolve(prompt, "messages");
        answer(ex, req, OpenAiShape.CHAT, choices(RequestParams.ask(req, prompt, older, RequestParams.chatLogprobs(req), -1, tokenizer.vocabSize()), List.of(prompt), RequestParams.n(req, 1)), false, null);
    }

    /**
     * Runs an OpenAI route's request and answers it in the route's {@link OpenAiShape}: one answer, or a stream of
     * chunks (a chat's first names the role), its last with the finish reason, the held-back text and kvferry's
     * extension, then, with {@code stream_options.include_usage}, OpenAI's usage chunk (no choices), then [DONE].
     * Without it the last chunk carries the usage (kvferry's, kept for clients that read it there).
     *
     * <p>{@code asks}: one per choice, in OpenAI's order (index = prompt index * n + sample index). Several run at once,
     * each a request of its own through {@link PdCall#run} (its room, its prefill and decode, its admission slot); the answer
     * lists them by index, its usage their sum, its {@code kvferry} extension theirs ({@code choices}); a stream's chunks
     * come interleaved, each naming its choice, the usage only in the {@code include_usage} chunk ({@link Answer}).
     */
    private void answer(HttpExchange ex, JsonNode req, OpenAiShape shape, List<Ask> asks, boolean echo, BestOf bestOf) throws Exception {
        boolean stream = Http.booleanField(req, "stream", false);
        Answer a = new Answer(ex, shape, stream, RequestParams.includeUsage(req) && stream, echo, asks.size());
        List<Choice> choices = new ArrayList<>();
        for (int i = 0; i < asks.size(); i++) choices.add(new Choice(a, i, asks.get(i)));
        RequestRecord record = RECORD.get();
        if (choices.size() == 1) {
            choices.getFirst().run(record);
        } else {
            // Each choice is a request of its own (its room, its prefill and decode, its admission slot), all at once.
            List<Thread> threads = new ArrayList<>();
            for (Choice c : choices) threads.add(Thread.ofVirtual().name("choice-" + c.index).start(() -> c.run(new RequestRecord())));
            try {
                for (Thread t : threads) t.join();
            } catch (InterruptedException e) {
                for (Thread t : threads) t.interrupt();
                throw e;
            }
            merge(record, choices.stream().map(c -> c.record).toList());
        }
        Failure early;
        synchronized (a) {
            early = a.early;
        }
        if (early != null) { // no byte sent yet (or no stream): the request's answer is that choice's failure
            fail(ex, null, early);
            return;
        }
        Exception thrown;
        synchronized (a) {
            thrown = a.thrown;
        }
        if (thrown != null) throw thrown; // the client left (every room aborted), or a 400
        ObjectNode usage = usage(choices); // best_of's samples not shown count too, as OpenAI bills them
        if (!stream) {
            ObjectNode whole = shape.head(a.id, a.created, modelName, false);
            ArrayNode all = whole.putArray("choices");
            List<Choice> shown = bestOf == null ? choices : bestOf.chosen(choices, c -> cumulativeLogprob(c.outcome));
            for (int i = 0; i < shown.size(); i++) all.add(shown.get(i).whole(i, bestOf == null || bestOf.showLogprobs()));
            whole.set("usage", usage);
            whole.set("kvferry", shown.size() == 1 ? extension(shown.getFirst().outcome) : extensions(shown));
            Http.sendJson(ex, 200, whole);
            return;
        }
        synchronized (a) {
            OutputStream events = a.events();
            boolean anyDone = choices.stream().anyMatch(c -> c.outcome != null);
            if (a.usageChunk && anyDone) {
                ObjectNode last = shape.head(a.id, a.created, modelName, true);
                last.putArray("choices");
                last.set("usage", usage);
                Http.event(events, Http.JSON.writeValueAsString(last));
            }
            Http.event(events, "[DONE]");
            events.close();
        }
        if (a.streamFailure != null) {
            record.countedStatus = a.streamFailure.status;
            record.failureKind = a.streamFailure.kind != null ? a.streamFailure.kind : a.streamFailure.type;
        }
    }

    /** The request log's record of a request of several choices: the first choice's room, the tokens of all, the earliest first token. */
    private static void merge(RequestRecord record, List<RequestRecord> choices) {
        record.room = choices.getFirst().room;
        int prompt = 0, completion = 0;
        for (RequestRecord c : choices) {
            prompt += Math.max(c.promptTokens, 0);
            completion += Math.max(c.completionTokens, 0);
            if (c.ttftMs >= 0 && (record.ttftMs < 0 || c.ttftMs < record.ttftMs)) record.ttftMs = c.ttftMs;
        }
        record.promptTokens = prompt;
        record.completionTokens = completion;
    }

    /**
     * OpenAI's usage of a request: its finished choices' tokens, summed (each choice's prompt counts once per choice), with
     * {@code prompt_tokens_details.cached_tokens}: the prompt tokens the prefill took from its prefix cache.
     */
    private static ObjectNode usage(List<Choice> choices) {
        int prompt = 0, completion = 0, cached = 0;
        for (Choice c : choices) {
            if (c.outcome == null) continue;
            prompt += c.outcome.promptTokens();
            completion += c.outcome.tokens().length;
            cached += c.outcome.cachedTokens();
        }
        ObjectNode usage = Http.JSON.createObjectNode();
        usage.put("prompt_tokens", prompt);
        usage.put("completion_tokens", completion);
        usage.put("total_tokens", prompt + completion);
        usage.putObject("prompt_tokens_details").put("cached_tokens", cached);
        return usage;
    }

    /** kvferry's extension of an answer of several choices: each choice's, in index order. */
    private static ObjectNode extensions(List<Choice> choices) {
        ObjectNode k = Http.JSON.createObjectNode();
        ArrayNode each = k.putArray("choices");
        for (Choice c : choices) each.add(c.outcome == null ? Http.JSON.nullNode() : extension(c.outcome));
        return k;
    }

    /**
     * One OpenAI answer under way: what its choices share. A stream is one response whose chunks the choices write in
     * turn (under this object's lock), each naming its choice's {@code index}. A choice that fails before the stream
     * began fails the request (its status is the answer's; the other choices are cancelled: their rooms aborted on
     * both engines at their next token or keep-alive); one that fails after has its error event, naming its index, and
     * the others go on; one [DONE] ends the stream.
     */
    private final class Answer {
        final HttpExchange ex;
        final OpenAiShape shape;
        final boolean stream;
        final boolean usageChunk;
        final boolean echo;
        final int count;
        final String id;
        final long created = System.currentTimeMillis() / 1000;
        private OutputStream events;
        /** The failure that is the request's answer (the first before any byte was sent). */
        private Failure early;
        /** The first failure of a choice after the stream began (the request is counted with its status). */
        private Failure streamFailure;
        /** The first choice's end that is neither an outcome nor a failure: the client left, a 400 (thrown on). */
        private Exception thrown;
        /** Set when a choice failed before the stream began or the client left: the other choices stop. */
        private volatile boolean cancelled;

        Answer(HttpExchange ex, OpenAiShape shape, boolean stream, boolean usageChunk, boolean echo, int count) {
            this.ex = ex;
            this.shape = shape;
            this.stream = stream;
            this.usageChunk = usageChunk;
            this.echo = echo;
            this.count = count;
            this.id = shape.idPrefix + Long.toHexString(ThreadLocalRandom.current().nextLong());
        }

        /** An IOException (the choice's rooms are then aborted, as for a client gone) once the request is cancelled. */
        void check() throws IOException {
            if (cancelled) throw new IOException("cancelled: another choice of the request failed, or its client left");
        }

        void cancel() {
            cancelled = true;
        }

        /** A choice ended by {@code e} (not a failure of its request): the others stop, and the first such is the request's end. */
        synchronized void ended(Exception e) {
            if (thrown == null && early == null) thrown = e;
            cancel();
        }

        /** The stream, begun if it was not (a chat's first chunks name the role, one per choice). */
        synchronized OutputStream events() throws IOException {
            if (events == null) {
                check();
                events = Http.startEvents(ex);
                if (shape == OpenAiShape.CHAT) {
                    for (int i = 0; i < count; i++) {
                        Http.event(events, Http.JSON.writeValueAsString(indexed(shape.answer(id, created, modelName, "", null, true, true), i)));
                    }
                }
            }
            return events;
        }

        synchronized void send(ObjectNode chunk) throws IOException {
            Http.event(events(), Http.JSON.writeValueAsString(chunk));
        }

        synchronized void keepAlive() throws IOException {
            Http.write(events(), Http.KEEP_ALIVE);
        }

        /** A choice failed: the request's answer if nothing was sent yet, else its error event (naming its index when there are several). */
        synchronized void failed(int index, Failure f) throws IOException {
            Failure named = count == 1 ? f : new Failure(f.status, f.type, f.kind, "choice " + index + ": " + f.getMessage());
            if (events == null) {
                if (early == null) early = named;
                cancel();
                return;
            }
            if (streamFailure == null) streamFailure = named;
            ObjectNode ev = Http.errorEvent(named.type, named.kind, named.getMessage());
            if (count > 1) ((ObjectNode) ev.get("error")).put("index", index);
            Http.event(events, Http.JSON.writeValueAsString(ev));
        }
    }

    /** A chunk or answer whose one choice is the {@code index}th of the request. */
    private static ObjectNode indexed(ObjectNode answer, int index) {
        ((ObjectNode) answer.get("choices").get(0)).put("index", index);
        return answer;
    }

    /**
     * One choice of an OpenAI answer: one request through a prefill and a decode ({@link PdCall#run}), its stream's chunks
     * naming its index. {@code echo} (completions): its text starts with its prompt as sent, and the log
     * probabilities, when asked, cover the prompt's tokens (the first one's null, OpenAI's legacy shape) then the
     * completion's, {@code text_offset} over the echoed text. A stream sends the prompt's part as the choice's first
     * chunk, before its first token's (with max_tokens 0, before its last chunk).
     */
    private final class Choice implements Output {
        final Answer a;
        final int index;
        final Ask ask;
        /** Where the completion's text begins in the choice's text. */
        final int shift;
        /** Characters of the text, and tokens' log probabilities, already sent in chunks. */
        int streamedChars;
        int streamedLogprobs;
        boolean promptSent;
        RequestRecord record;
        Outcome outcome;

        Choice(Answer a, int index, Ask ask) {
            this.a = a;
            this.index = index;
            this.ask = ask;
            this.shift = a.echo ? ask.prompt().text().length() : 0;
            this.promptSent = !a.echo || !a.stream;
        }

        void run(RequestRecord record) {
            this.record = record;
            try {
                outcome = pd.run(ask, record, this);
                finish();
            } catch (Failure f) {
                try {
                    a.failed(index, f);
                } catch (IOException gone) {
                    a.ended(gone);
                }
            } catch (Exception e) {
                if (e instanceof InterruptedException) Thread.currentThread().interrupt();
                a.ended(e);
            }
        }

        private ObjectNode chunk(String text, String finish, JsonNode lp) {
            return indexed(a.shape.answer(a.id, a.created, modelName, text, finish, true, false, lp), index);
        }

        @Override
        public void onPrompt(List<TokenLogprobs> input) throws IOException {
            if (promptSent) return;
            JsonNode lp = input == null ? null : promptLogprobs(ask.prompt(), input);
            a.send(chunk(ask.prompt().text(), null, lp));
            promptSent = true;
        }

        @Override
        public void onToken(int tok, String text, TokenLogprobs logprobs, int offset) throws IOException {
            a.check();
            if (!a.stream) return;
            streamedChars += text.length();
            // A chunk carries the log probabilities of its token.
            JsonNode lp = logprobs == null ? null : a.shape.logprobs(tokenizer, List.of(logprobs), new int[]{shift + offset}, 0, 1);
            if (logprobs != null) streamedLogprobs++;
            a.send(chunk(text, null, lp));
        }

        @Override
        public void onKeepAlive() throws IOException {
            a.check();
            if (a.stream) a.keepAlive();
        }

        /**
         * A stream's last chunk of the choice: what was held back (a possible stop string's start, an incomplete
         * character), the log probabilities of the tokens no chunk had (the one that completed a stop string), the
         * finish reason, kvferry's extension and, for a request of one choice without {@code include_usage}, the usage.
         */
        private void finish() throws IOException {
            if (!a.stream) return;
            Outcome o = outcome;
            JsonNode lp = o.logprobs() == null || streamedLogprobs == o.tokens().length ? null
                    : a.shape.logprobs(tokenizer, o.logprobs(), shifted(o.textOffsets(), shift), streamedLogprobs, o.tokens().length);
            ObjectNode fin = chunk(o.text().substring(streamedChars), o.finishReason(), lp);
            if (!a.usageChunk && a.count == 1) fin.set("usage", usage(List.of(this)));
            fin.set("kvferry", extension(o));
            a.send(fin);
        }

        /**
         * The choice of a whole (not streamed) answer, as the answer's {@code at}th; {@code logprobs} false leaves out the
         * log probabilities the request did not ask for (best_of's, which chose it).
         */
        JsonNode whole(int at, boolean logprobs) {
            Outcome o = outcome;
            ObjectNode lp = o.logprobs() == null || !logprobs ? null
                    : a.shape.logprobs(tokenizer, o.logprobs(), shifted(o.textOffsets(), shift), 0, o.tokens().length);
            if (o.inputLogprobs() != null) lp = LogprobsShape.append(promptLogprobs(ask.prompt(), o.inputLogprobs()), lp);
            String text = a.echo ? ask.prompt().text() + o.text() : o.text();
            ObjectNode one = a.shape.answer(a.id, a.created, modelName, text, o.finishReason(), false, false, lp);
            return indexed(one, at).get("choices").get(0);
        }
    }

    /**
     * The legacy completions {@code logprobs} of the prompt's tokens (from its first, as echo asks): each token's
     * {@code text_offset} is where its decoded text begins in the prompt's text (the tokenizer gives a text prompt back; a
     * token-id prompt's text is its decoding).
     */
    private ObjectNode promptLogprobs(Prompt prompt, List<TokenLogprobs> input) {
        int[] ids = prompt.ids();
        int[] offsets = new int[ids.length];
        Tokenizer.TextStream text = tokenizer.textStream(-1); // as Tokenizer.decode: no token before the first
        int at = 0;
        for (int i = 0; i < ids.length; i++) {
            offsets[i] = Math.min(at, prompt.text().length());
            at += text.push(ids[i]).length();
        }
        return LogprobsShape.completionPrompt(tokenizer, input, ids, offsets);
    }

    private static int[] shifted(int[] offsets, int by) {
        int[] out = offsets.clone();
        for (int i = 0; i < out.length; i++) out[i] += by;
        return out;
    }

    /**
     * Answers a failed request: an error response, or, once a stream has begun ({@code events} non-null), the
     * error as an event and then [DONE], as vLLM and SGLang end a failed stream (clients read to it).
     */
    private static void fail(HttpExchange ex, OutputStream events, Failure f) throws IOException {
        RequestRecord r = RECORD.get();
        r.countedStatus = f.status;
        r.failureKind = f.kind != null ? f.kind : f.type;
        if (f.status == 429) ex.getResponseHeaders().set("Retry-After", "1");
        if (events == null) {
            Http.sendError(ex, f.status, f.type, f.kind, f.getMessage());
            return;
        }
        Http.event(events, Http.JSON.writeValueAsString(Http.errorEvent(f.type, f.kind, f.getMessage())));
        Http.event(events, "[DONE]");
        events.close();
    }

    /** kvferry's extension of the final answer: the token ids, the room, and where the time went. */
    private static ObjectNode extension(Outcome o) {
        ObjectNode k = Http.JSON.createObjectNode();
        k.put("bootstrap_room", o.room());
        ArrayNode ids = k.putArray("token_ids");
        for (int t : o.tokens()) ids.add(t);
        k.put("ttft_ms", o.ttftMs());
        k.put("e2e_ms", o.e2eMs());
        if (o.prefill() != null) {
            k.put("prefill_compute_ms", o.prefill().path("compute_ms").asDouble());
            k.put("transfer_ms", o.prefill().path("send_ms").asDouble()); // last chunk sent -> every rank's KV landed
            k.put("kv_pages", o.prefill().path("kv_pages").asInt()); // pages sent after the decode's prefix (0: a zero-page last chunk)
        }
        if (o.decodeTimings() != null) {
            k.put("kv_wait_ms", o.decodeTimings().path("transfer_ms").asDouble()); // decode: metadata sent -> KV landed
            k.put("first_decode_ms", o.decodeTimings().path("first_decode_ms").asDouble());
            k.put("bytes", o.decodeTimings().path("bytes").asLong());
        }
        return k;
    }

    /**
     * SGLang's /generate: {"text" or "input_ids" (exactly one; a list of texts or of id lists: a batch, {@link #generateBatch};
     * given ids are sent as they are, no BOS added), "sampling_params": {"max_new_tokens", "temperature", "top_p", "top_k",
     * "seed", "stop", and the rules' ({@link RequestParams#rules}): "frequency_penalty", …}, "stream", "return_logprob", "top_logprobs_num", "return_text_in_logprobs"}.
     */
    private void generate(HttpExchange ex) throws Exception {
        if (!Http.method(ex, "POST")) return;
        JsonNode req = Http.readJson(ex);
        Prompt.Parsed parsed = RequestParams.generatePrompts(req);
        String field = parsed.prompts().getFirst().given() ? "input_ids" : "text";
        List<Prompt> prompts = resolver.resolve(parsed, field);
        Prompt prompt = prompts.getFirst();
        JsonNode sp = req.path("sampling_params");
        // SGLang's sampling_params is Optional: null means its defaults, as leaving it out does.
        if (!sp.isMissingNode() && !sp.isNull() && !sp.isObject()) throw new Http.BadRequest("sampling_params must be an object, got " + sp);
        RequestParams.refuseUnsupportedSampling(sp);
        int topLogprobs = RequestParams.generateLogprobs(req);
        int logprobStart = RequestParams.logprobStart(req, topLogprobs);
        boolean withText = Http.booleanField(req, "return_text_in_logprobs", false);
        // max_new_tokens 0 (SGLang's too): the prompt alone, for its input token logprobs; the prefill only.
        int maxNew = Http.intField(sp, "max_new_tokens", 128, 0, Integer.MAX_VALUE);
        Ask ask = new Ask(prompt, maxNew, Http.floatField(sp, "temperature", 1.0f),
                Http.floatField(sp, "top_p", 1.0f), RequestParams.topK(sp), RequestParams.seed(sp), StopSequences.parse(sp.get("stop"), "sampling_params.stop"), topLogprobs, logprobStart,
                RequestParams.rules(sp, "min_new_tokens", "sampling_params", maxNew, tokenizer.vocabSize()));
        boolean stream = Http.booleanField(req, "stream", false);
        if (parsed.batch()) {
            if (stream) throw new Http.BadRequest("stream", "a batch (" + (field.equals("text") ? "text a list" : "input_ids a list of lists")
                    + ") is answered whole: stream must be false");
            generateBatch(ex, choices(ask, prompts, 1), withText, field);
            return;
        }
        OutputStream[] events = new OutputStream[1];
        StringBuilder sofar = new StringBuilder();
        List<TokenLogprobs> logprobsSoFar = new ArrayList<>();
        List<List<TokenLogprobs>> input = new ArrayList<>(1); // the prompt's, once known
        int[][] ids = new int[1][]; // the prompt's tokens, once input token logprobs need them
        try {
            Outcome o = pd.run(ask, RECORD.get(), new Output() {
                @Override
                public void onPrompt(List<TokenLogprobs> inputLogprobs) {
                    if (inputLogprobs != null) input.add(inputLogprobs);
                }

                @Override
                public void onToken(int tok, String text, TokenLogprobs logprobs, int offset) throws IOException {
                    sofar.append(text);
                    if (!stream) return;
                    if (events[0] == null) events[0] = Http.startEvents(ex);
                    ObjectNode e = Http.JSON.createObjectNode();
                    e.put("text", sofar.toString()); // SGLang streams the text so far
                    if (logprobs != null) { // and, asked, the log probabilities so far (SGLang's meta_info, not incremental)
                        logprobsSoFar.add(logprobs);
                        ObjectNode meta = e.putObject("meta_info");
                        if (!input.isEmpty()) inputLogprobsMeta(meta, input.getFirst(), ask, ids, withText);
                        logprobsMeta(meta, logprobsSoFar, logprobsSoFar.size(), topLogprobs, withText);
                    }
                    Http.event(events[0], Http.JSON.writeValueAsString(e));
                }

                @Override
                public void onKeepAlive() throws IOException {
                    if (!stream) return;
                    if (events[0] == null) events[0] = Http.startEvents(ex);
                    Http.write(events[0], Http.KEEP_ALIVE);
                }
            });
            ObjectNode out = generated(o, ask, ids, withText);
            if (stream) {
                if (events[0] == null) events[0] = Http.startEvents(ex);
                Http.event(events[0], Http.JSON.writeValueAsString(out));
                Http.event(events[0], "[DONE]");
                events[0].close();
            } else {
                Http.sendJson(ex, 200, out);
            }
        } catch (Failure f) {
            fail(ex, events[0], f);
        }
    }

    /** SGLang's answer of one finished request. */
    private ObjectNode generated(Outcome o, Ask ask, int[][] ids, boolean withText) {
        ObjectNode out = Http.JSON.createObjectNode();
        out.put("text", o.text());
        ArrayNode outputIds = out.putArray("output_ids");
        for (int t : o.tokens()) outputIds.add(t);
        ObjectNode meta = out.putObject("meta_info");
        meta.put("id", Long.toString(o.room()));
        meta.put("prompt_tokens", o.promptTokens());
        meta.put("completion_tokens", o.tokens().length);
        meta.put("cached_tokens", o.cachedTokens()); // SGLang's: the prompt tokens the prefill took from its prefix cache
        meta.putObject("finish_reason").put("type", o.finishReason());
        meta.put("e2e_latency", o.e2eMs() / 1000);
        if (o.inputLogprobs() != null) inputLogprobsMeta(meta, o.inputLogprobs(), ask, ids, withText);
        if (o.logprobs() != null) logprobsMeta(meta, o.logprobs(), o.tokens().length, ask.topLogprobs(), withText);
        return out;
    }

    /**
     * SGLang's batch {@code /generate}: each prompt a request of its own through {@link PdCall#run}, all at once, answered as a
     * list in the prompts' order. The first to fail fails the request (its message names {@code field[i]}: {@code text}
     * or {@code input_ids}), the others' rooms aborted at their next token or keep-alive.
     */
    private void generateBatch(HttpExchange ex, List<Ask> asks, boolean withText, String field) throws Exception {
        int count = asks.size();
        Outcome[] outcomes = new Outcome[count];
        List<RequestRecord> records = new ArrayList<>();
        AtomicReference<Failure> failure = new AtomicReference<>();
        AtomicReference<Exception> thrown = new AtomicReference<>();
        AtomicBoolean cancelled = new AtomicBoolean();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            int index = i;
            RequestRecord record = new RequestRecord();
            records.add(record);
            Output out = new Output() {
                @Override
                public void onToken(int token, String text, TokenLogprobs logprobs, int offset) throws IOException {
                    onKeepAlive();
                }

                @Override
                public void onKeepAlive() throws IOException {
                    if (cancelled.get()) throw new IOException("cancelled: another text of the batch failed");
                }
            };
            threads.add(Thread.ofVirtual().name("batch-" + i).start(() -> {
                try {
                    outcomes[index] = pd.run(asks.get(index), record, out);
                } catch (Failure f) {
                    failure.compareAndSet(null, new Failure(f.status, f.type, f.kind, field + "[" + index + "]: " + f.getMessage()));
                    cancelled.set(true);
                } catch (Exception e) {
                    thrown.compareAndSet(null, e);
                    cancelled.set(true);
                }
            }));
        }
        try {
            for (Thread t : threads) t.join();
        } catch (InterruptedException e) {
            for (Thread t : threads) t.interrupt();
            throw e;
        }
        merge(RECORD.get(), records);
        if (failure.get() != null) {
            fail(ex, null, failure.get());
            return;
        }
        if (thrown.get() != null) throw thrown.get();
        ArrayNode all = Http.JSON.createArrayNode();
        for (int i = 0; i < count; i++) all.add(generated(outcomes[i], asks.get(i), new int[1][], withText));
        Http.sendJson(ex, 200, all);
    }

    /** SGLang's meta_info input token log probabilities: input_token_logprobs, and input_top_logprobs when top ones are asked. */
    private void inputLogprobsMeta(ObjectNode meta, List<TokenLogprobs> input, Ask ask, int[][] ids, boolean withText) {
        if (ids[0] == null) ids[0] = ask.prompt().ids();
        meta.set("input_token_logprobs", LogprobsShape.sglangInputTokens(tokenizer, input, ids[0], ask.logprobStart(), withText));
        if (ask.topLogprobs() > 0) meta.set("input_top_logprobs", LogprobsShape.sglangInputTop(tokenizer, input, withText));
    }

    /** SGLang's meta_info log probabilities of the first {@code to} tokens: output_token_logprobs, and output_top_logprobs when asked. */
    private void logprobsMeta(ObjectNode meta, List<TokenLogprobs> lps, int to, int top, boolean withText) {
        meta.set("output_token_logprobs", LogprobsShape.sglangTokens(tokenizer, lps, to, withText));
        if (top > 0) meta.set("output_top_logprobs", LogprobsShape.sglangTop(tokenizer, lps, to, withText));
    }

    /**
     * vLLM's {@code POST /tokenize}: {@code {"prompt": "..."}} or a chat's {@code {"messages": [...]}} (the prompt the chat
     * route makes of them, {@link ChatPrompt}) → {@code {"count", "max_model_len", "tokens", "token_strs"}}: the ids the
     * route would send ({@code add_special_tokens}, default true: BOS first), the context's length, and with
     * {@code return_token_strs} each token's text ({@link Tokenizer#tokenText}; else null). A prompt longer than the
     * context is not refused (as vLLM's: the count says whether it fits).
     */
    private void tokenize(HttpExchange ex) throws Exception {
        if (!Http.method(ex, "POST")) return;
        JsonNode req = Http.readJson(ex);
        boolean hasPrompt = req.hasNonNull("prompt"), hasMessages = req.hasNonNull("messages");
        if (hasPrompt == hasMessages) {
            throw new Http.BadRequest("prompt", hasPrompt ? "send one of prompt and messages, not both"
                    : "prompt (a string) or messages (a chat's) is required");
        }
        String text = hasPrompt ? PromptResolver.refuseLoneSurrogate(Http.textField(req, "prompt"), "prompt") : ChatPrompt.of(req.get("messages"));
        boolean special = Http.booleanField(req, "add_special_tokens", true);
        boolean strs = Http.booleanField(req, "return_token_strs", false);
        int[] ids;
        try {
            ids = tokenizer.encode(text, special, false);
        } catch (IllegalArgumentException e) { // a vocab without the byte-fallback token a character needs
            throw new Http.BadRequest(hasPrompt ? "prompt" : "messages", e.getMessage());
        }
        ObjectNode out = Http.JSON.createObjectNode();
        out.put("count", ids.length);
        out.put("max_model_len", contextTokens);
        ArrayNode tokens = out.putArray("tokens");
        for (int t : ids) tokens.add(t);
        if (strs) {
            ArrayNode each = out.putArray("token_strs");
            for (int t : ids) each.add(tokenizer.tokenText(t));
        } else {
            out.putNull("token_strs");
        }
        Http.sendJson(ex, 200, out);
    }

    /**
     * vLLM's {@code POST /detokenize}: {@code {"tokens": [...]}} (each id in the vocab) → {@code {"prompt": "..."}}, the ids'
     * text as {@link Tokenizer#decode} gives it (what a token-id prompt's echo gives back).
     */
    private void detokenize(HttpExchange ex) throws Exception {
        if (!Http.method(ex, "POST")) return;
        JsonNode req = Http.readJson(ex);
        JsonNode tokens = req.get("tokens");
        if (tokens == null || !tokens.isArray()) throw new Http.BadRequest("tokens", "tokens must be a list of token ids, got " + tokens);
        int[] ids = new int[tokens.size()];
        for (int i = 0; i < ids.length; i++) {
            JsonNode t = tokens.get(i);
            if (!t.isIntegralNumber() || !t.canConvertToInt() || t.intValue() < 0 || t.intValue() >= tokenizer.vocabSize()) {
                throw new Http.BadRequest("tokens", "tokens[" + i + "] must be a token id in the model's vocab [0, " + tokenizer.vocabSize() + "), got " + t);
            }
            ids[i] = t.intValue();
        }
        ObjectNode out = Http.JSON.createObjectNode();
        out.put("prompt", tokenizer.decode(ids));
        Http.sendJson(ex, 200, out);
    }

    private void models(HttpExchange ex) throws Exception {
        if (!Http.method(ex, "GET")) return;
        ObjectNode out = Http.JSON.createObjectNode();
        out.put("object", "list");
        out.putArray("data").add(modelObject());
        Http.sendJson(ex, 200, out);
    }

    /** The parent route of OpenAI's model retrieval, {@code GET /v1/models/{model}}. */
    private static final String MODEL_ROUTE = "/v1/models/";
    static final String WORKERS_ROUTE = "/workers";

    /** {@code GET /v1/models/{model}}: the model this router serves, or a 404 naming the one it serves. */
    private void model(HttpExchange ex) throws Exception {
        if (!Http.method(ex, "GET")) return;
        String id = ex.getRequestURI().getPath().substring(MODEL_ROUTE.length());
        if (id.equals(modelName)) {
            Http.sendJson(ex, 200, modelObject());
        } else {
            Http.sendError(ex, 404, "invalid_request_error", null, "model", "the model '" + id + "' does not exist here; this router serves '"
                    + modelName + "'");
        }
    }

    /** OpenAI's model object: id, object, created (the router's start), owned_by. */
    private ObjectNode modelObject() {
        ObjectNode m = Http.JSON.createObjectNode();
        m.put("id", modelName);
        m.put("object", "model");
        m.put("created", started);
        m.put("owned_by", "kvferry");
        return m;
    }

    private void healthRoute(HttpExchange ex) throws Exception {
        if (!Http.method(ex, "GET")) return;
        ObjectNode out = Http.JSON.createObjectNode();
        Pool now = backends.pool();
        long p = now.prefills().stream().filter(Backend::serves).count(), d = now.decodes().stream().filter(Backend::serves).count();
        // Degraded: a role has fewer healthy backends than it has, requests still served; unavailable: none of a role.
        boolean all = p == now.prefills().size() && d == now.decodes().size();
        out.put("status", p == 0 || d == 0 ? "unavailable" : all ? "ok" : "degraded");
        out.put("healthy_prefills", p);
        out.put("healthy_decodes", d);
        Http.sendJson(ex, p > 0 && d > 0 ? 200 : 503, out);
    }

    @Override
    public void close() {
        Http.stop(server);
        backends.close();
    }
}
