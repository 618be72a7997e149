package io.kvferry.engine.http;

import io.kvferry.api.FailureKind;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.model.Tokenizer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The PD router (SGLang's mini load balancer): picks the least-loaded healthy prefill and decode,
 * assigns a random {@code bootstrap_room}, sends the request to both at once and returns the
 * decode's tokens as text. OpenAI-shaped {@code POST /v1/completions} (streamed or not), {@code GET
 * /v1/models}, SGLang-shaped {@code POST /generate}, {@code GET /health}. A failed transfer is an
 * HTTP 500 with kvferry's {@code KVTransferError(...)} text; a client that goes away aborts the room
 * on both engines. Backends are health-checked every second; a dead one gets no new requests.
 */
public final class Router implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(Router.class);
    static final Duration HEALTH_EVERY = Duration.ofSeconds(1);

    /** One prefill or decode server the router sends to; {@code bootstrap} is a prefill's registry. */
    static final class Backend {
        final URI url;
        final boolean prefill;
        final AtomicInteger inFlight = new AtomicInteger();
        volatile boolean healthy = true;
        volatile String bootstrap;

        Backend(String url, boolean prefill, String bootstrap) {
            this.url = URI.create(url.endsWith("/") ? url.substring(0, url.length() - 1) : url);
            this.prefill = prefill;
            this.bootstrap = bootstrap;
        }

        @Override
        public String toString() {
            return (prefill ? "prefill " : "decode ") + url;
        }
    }

    /** An answer for the client that is not a stream: status, OpenAI error type, message. */
    static final class Failure extends Exception {
        final int status;
        final String type;
        /** The transfer failure's kind label, when the backend said. */
        final String kind;

        Failure(int status, String type, String message) {
            this(status, type, null, message);
        }

        Failure(int status, String type, String kind, String message) {
            super(message);
            this.status = status;
            this.type = type;
            this.kind = kind;
        }
    }

    /** The stream of one request, as the handler formats it. */
    interface Output {
        /** A piece of text (may be empty while a multi-byte character is incomplete) for one token. */
        void onToken(int token, String text) throws IOException;
    }

    /** A finished request. */
    record Outcome(long room, int promptTokens, int[] tokens, String text, String finishReason, double ttftMs,
                   double e2eMs, JsonNode prefill, JsonNode decodeTimings) {
    }

    private final List<Backend> prefills = new ArrayList<>(), decodes = new ArrayList<>();
    private final Tokenizer tokenizer;
    private final String modelName;
    private final HttpClient client;
    private final HttpServer server;
    private final ScheduledExecutorService health;

    /**
     * @param prefills each "http://host:port"; its bootstrap registry is learnt from its /health
     * @param decodes  each "http://host:port"
     */
    public Router(List<String> prefills, List<String> decodes, Tokenizer tokenizer, String modelName, String host, int port)
            throws IOException {
        if (prefills.isEmpty() || decodes.isEmpty()) throw new IllegalArgumentException("the router needs at least one prefill and one decode");
        for (String p : prefills) this.prefills.add(new Backend(p, true, null));
        for (String d : decodes) this.decodes.add(new Backend(d, false, null));
        this.tokenizer = tokenizer;
        this.modelName = modelName;
        client = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(3)).executor(Executors.newVirtualThreadPerTaskExecutor()).build();
        for (Backend b : this.prefills) checkHealth(b);
        for (Backend b : this.decodes) checkHealth(b);
        health = Executors.newSingleThreadScheduledExecutor(r -> Thread.ofPlatform().daemon().name("kvferry-router-health").unstarted(r));
        health.scheduleWithFixedDelay(() -> {
            for (Backend b : this.prefills) checkHealth(b);
            for (Backend b : this.decodes) checkHealth(b);
        }, HEALTH_EVERY.toMillis(), HEALTH_EVERY.toMillis(), TimeUnit.MILLISECONDS);
        server = Http.server(host, port);
        server.createContext("/v1/completions", ex -> Http.handle(ex, this::completions));
        server.createContext("/v1/models", ex -> Http.handle(ex, this::models));
        server.createContext("/generate", ex -> Http.handle(ex, this::generate));
        server.createContext("/health", ex -> Http.handle(ex, this::healthRoute));
        server.start();
    }

    public int port() {
        return server.getAddress().getPort();
    }

    private void checkHealth(Backend b) {
        try {
            HttpResponse<String> r = client.send(HttpRequest.newBuilder(b.url.resolve("/health")).timeout(Duration.ofSeconds(2)).GET().build(),
                    HttpResponse.BodyHandlers.ofString());
            boolean ok = r.statusCode() == 200;
            if (ok && b.prefill) b.bootstrap = Http.JSON.readTree(r.body()).path("bootstrap").asText(null);
            if (ok != b.healthy) log.warn("{} is {}", b, ok ? "healthy again" : "unhealthy: HTTP " + r.statusCode());
            b.healthy = ok;
        } catch (IOException e) {
            if (b.healthy) log.warn("{} is unreachable: {}", b, e.toString());
            b.healthy = false;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static Backend pick(List<Backend> all, String role) throws Failure {
        Backend best = null;
        for (Backend b : all) {
            if (b.healthy && (!b.prefill || b.bootstrap != null) && (best == null || b.inFlight.get() < best.inFlight.get())) best = b;
        }
        if (best == null) throw new Failure(503, "service_unavailable", "no healthy " + role + " instance (" + all + ")");
        return best;
    }

    /** Runs one request through a prefill and a decode. */
    Outcome run(String prompt, int maxTokens, Sampling sampling, Output out) throws Failure, IOException, InterruptedException {
        long start = System.nanoTime();
        int[] ids = tokenizer.encode(prompt, true, false);
        Backend p = pick(prefills, "prefill"), d = pick(decodes, "decode");
        long room = ThreadLocalRandom.current().nextLong() & Long.MAX_VALUE;
        Sampling s = sampling.seed() == Long.MIN_VALUE ? new Sampling(sampling.temperature(), sampling.topP(), room) : sampling;
        ObjectNode body = Http.JSON.createObjectNode();
        body.put("bootstrap_room", room);
        ArrayNode arr = body.putArray("input_ids");
        for (int t : ids) arr.add(t);
        body.set("sampling_params", SamplingParams.json(s));
        ObjectNode decodeBody = body.deepCopy();
        decodeBody.put("bootstrap_addr", p.bootstrap);
        decodeBody.put("max_new_tokens", maxTokens);
        p.inFlight.incrementAndGet();
        d.inFlight.incrementAndGet();
        CompletableFuture<HttpResponse<String>> prefillCall = client.sendAsync(post(p, "/generate", body), HttpResponse.BodyHandlers.ofString());
        prefillCall.whenComplete((r, e) -> {
            p.inFlight.decrementAndGet();
            if (e != null) p.healthy = false; // unreachable: no new requests until its health check passes again
            if (e != null || r.statusCode() != 200) abort(d, room); // the decode would otherwise wait for KV that never comes
        });
        try {
            HttpResponse<InputStream> dr;
            try {
                dr = client.send(post(d, "/generate", decodeBody), HttpResponse.BodyHandlers.ofInputStream());
            } catch (IOException e) {
                d.healthy = false;
                abort(p, room);
                throw new Failure(502, "bad_gateway", d + " failed: " + e);
            }
            if (dr.statusCode() != 200) {
                ErrorBody err;
                try (InputStream in = dr.body()) {
                    err = ErrorBody.parse(new String(in.readAllBytes(), StandardCharsets.UTF_8));
                }
                abort(p, room);
                ErrorBody prefillErr = prefillError(prefillCall);
                // A transfer the prefill failed shows up on the decode as an abort (or not as a transfer failure at all):
                // the prefill's reason is the real one.
                if (prefillErr != null && (err.kind() == null || FailureKind.ABORTED.label().equals(err.kind()))) err = prefillErr;
                throw new Failure(dr.statusCode() == 400 ? 400 : 500, dr.statusCode() == 400 ? "invalid_request_error" : "kv_transfer_error",
                        err.kind(), err.message());
            }
            Tokenizer.TextStream text = new Tokenizer.TextStream(tokenizer, ids[ids.length - 1]); // a leading space after the prompt stays
            StringBuilder all = new StringBuilder();
            List<Integer> tokens = new ArrayList<>();
            double ttft = -1;
            try (BufferedReader in = new BufferedReader(new InputStreamReader(dr.body(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                    if (!line.startsWith("data: ")) continue;
                    JsonNode ev = Http.JSON.readTree(line.substring(6));
                    if (ev.has("token")) {
                        int tok = ev.get("token").intValue();
                        if (ttft < 0) ttft = (System.nanoTime() - start) / 1e6;
                        tokens.add(tok);
                        String piece = text.push(tok);
                        all.append(piece);
                        try {
                            out.onToken(tok, piece);
                        } catch (IOException clientGone) {
                            abort(d, room);
                            abort(p, room);
                            throw clientGone;
                        }
                    } else if (ev.has("error")) {
                        JsonNode e = ev.path("error");
                        throw new Failure(500, e.path("type").asText("internal_error"), e.hasNonNull("kind") ? e.get("kind").asText() : null,
                                e.path("message").asText());
                    } else if (ev.has("finish_reason")) {
                        JsonNode pre = null;
                        try {
                            HttpResponse<String> pr = prefillCall.get(5, TimeUnit.SECONDS);
                            if (pr.statusCode() == 200) pre = Http.JSON.readTree(pr.body());
                        } catch (Exception e) {
                            // timings are a bonus; the tokens are what the client asked for
                        }
                        int[] toks = tokens.stream().mapToInt(Integer::intValue).toArray();
                        return new Outcome(room, ids.length, toks, all.toString(), ev.get("finish_reason").asText(), ttft,
                                (System.nanoTime() - start) / 1e6, pre, ev.get("timings"));
                    }
                }
            }
            throw new Failure(502, "bad_gateway", d + " ended the stream of room " + room + " without finishing it");
        } finally {
            d.inFlight.decrementAndGet();
        }
    }

    private static ErrorBody prefillError(CompletableFuture<HttpResponse<String>> call) {
        try {
            HttpResponse<String> r = call.get(3, TimeUnit.SECONDS);
            return r.statusCode() == 200 ? null : ErrorBody.parse(r.body());
        } catch (ExecutionException e) {
            return new ErrorBody(FailureKind.PREFILL_UNREACHABLE.label(), "prefill unreachable: " + e.getCause());
        } catch (Exception e) {
            return null;
        }
    }

    /** What a backend's error body says: its message and, for a transfer failure, its kind label. */
    private record ErrorBody(String kind, String message) {
        static ErrorBody parse(String body) {
            try {
                JsonNode e = Http.JSON.readTree(body).path("error");
                return new ErrorBody(e.hasNonNull("kind") ? e.get("kind").asText() : null, e.path("message").asText(body));
            } catch (IOException ex) {
                return new ErrorBody(null, body);
            }
        }
    }

    private HttpRequest post(Backend b, String path, JsonNode body) throws IOException {
        return HttpRequest.newBuilder(b.url.resolve(path)).header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofByteArray(Http.JSON.writeValueAsBytes(body))).build();
    }

    private void abort(Backend b, long room) {
        try {
            client.sendAsync(post(b, "/abort", Http.JSON.createObjectNode().put("bootstrap_room", room)), HttpResponse.BodyHandlers.discarding());
        } catch (IOException ignored) {
            // best effort: the room's own timeouts end it otherwise
        }
    }

    // ------------------------------------------------------------------ routes

    private void completions(HttpExchange ex) throws Exception {
        if (!Http.method(ex, "POST")) return;
        JsonNode req = Http.readJson(ex);
        JsonNode promptNode = req.get("prompt");
        String prompt;
        if (promptNode != null && promptNode.isArray() && promptNode.size() == 1 && promptNode.get(0).isTextual()) prompt = promptNode.get(0).textValue();
        else prompt = Http.textField(req, "prompt");
        int max = Http.intField(req, "max_tokens", 16, 1, Integer.MAX_VALUE);
        Sampling s = sampling(req);
        boolean stream = req.path("stream").asBoolean(false);
        String id = "cmpl-" + Long.toHexString(ThreadLocalRandom.current().nextLong());
        long created = System.currentTimeMillis() / 1000;
        OutputStream[] events = new OutputStream[1];
        try {
            Outcome o = run(prompt, max, s, (tok, text) -> {
                if (!stream) return;
                if (events[0] == null) events[0] = Http.startEvents(ex);
                Http.event(events[0], Http.JSON.writeValueAsString(chunk(id, created, text, null)));
            });
            ObjectNode fin = chunk(id, created, stream ? "" : o.text(), o.finishReason());
            ObjectNode usage = fin.putObject("usage");
            usage.put("prompt_tokens", o.promptTokens());
            usage.put("completion_tokens", o.tokens().length);
            usage.put("total_tokens", o.promptTokens() + o.tokens().length);
            fin.set("kvferry", extension(o));
            if (stream) {
                if (events[0] == null) events[0] = Http.startEvents(ex);
                Http.event(events[0], Http.JSON.writeValueAsString(fin));
                Http.event(events[0], "[DONE]");
                events[0].close();
            } else {
                fin.put("object", "text_completion");
                Http.sendJson(ex, 200, fin);
            }
        } catch (Failure f) {
            if (events[0] == null) {
                Http.sendError(ex, f.status, f.type, f.kind, f.getMessage());
            } else {
                Http.event(events[0], Http.JSON.writeValueAsString(Http.errorEvent(f.type, f.kind, f.getMessage())));
                events[0].close();
            }
        }
    }

    private ObjectNode chunk(String id, long created, String text, String finish) {
        ObjectNode c = Http.JSON.createObjectNode();
        c.put("id", id);
        c.put("object", "text_completion");
        c.put("created", created);
        c.put("model", modelName);
        ObjectNode choice = c.putArray("choices").addObject();
        choice.put("index", 0);
        choice.put("text", text);
        choice.putNull("logprobs");
        if (finish == null) choice.putNull("finish_reason");
        else choice.put("finish_reason", finish);
        return c;
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

    private static Sampling sampling(JsonNode req) {
        float temperature = Http.floatField(req, "temperature", 1.0f); // OpenAI's default
        float topP = Http.floatField(req, "top_p", 1.0f);
        long seed = req.has("seed") && !req.get("seed").isNull() ? Http.longField(req, "seed") : Long.MIN_VALUE;
        try {
            return new Sampling(temperature, topP, seed);
        } catch (IllegalArgumentException e) {
            throw new Http.BadRequest(e.getMessage());
        }
    }

    /** SGLang's /generate: {"text", "sampling_params": {"max_new_tokens", "temperature", "top_p", "seed"}, "stream"}. */
    private void generate(HttpExchange ex) throws Exception {
        if (!Http.method(ex, "POST")) return;
        JsonNode req = Http.readJson(ex);
        String prompt = Http.textField(req, "text");
        JsonNode sp = req.path("sampling_params");
        if (!sp.isMissingNode() && !sp.isObject()) throw new Http.BadRequest("sampling_params must be an object, got " + sp);
        int max = Http.intField(sp, "max_new_tokens", 128, 1, Integer.MAX_VALUE);
        Sampling s;
        try {
            s = new Sampling(Http.floatField(sp, "temperature", 1.0f), Http.floatField(sp, "top_p", 1.0f),
                    sp.has("seed") ? Http.longField(sp, "seed") : Long.MIN_VALUE);
        } catch (IllegalArgumentException e) {
            throw new Http.BadRequest(e.getMessage());
        }
        boolean stream = req.path("stream").asBoolean(false);
        OutputStream[] events = new OutputStream[1];
        StringBuilder sofar = new StringBuilder();
        try {
            Outcome o = run(prompt, max, s, (tok, text) -> {
                sofar.append(text);
                if (!stream) return;
                if (events[0] == null) events[0] = Http.startEvents(ex);
                ObjectNode e = Http.JSON.createObjectNode();
                e.put("text", sofar.toString()); // SGLang streams the text so far
                Http.event(events[0], Http.JSON.writeValueAsString(e));
            });
            ObjectNode out = Http.JSON.createObjectNode();
            out.put("text", o.text());
            ArrayNode ids = out.putArray("output_ids");
            for (int t : o.tokens()) ids.add(t);
            ObjectNode meta = out.putObject("meta_info");
            meta.put("id", Long.toString(o.room()));
            meta.put("prompt_tokens", o.promptTokens());
            meta.put("completion_tokens", o.tokens().length);
            meta.putObject("finish_reason").put("type", o.finishReason());
            meta.put("e2e_latency", o.e2eMs() / 1000);
            if (stream) {
                if (events[0] == null) events[0] = Http.startEvents(ex);
                Http.event(events[0], Http.JSON.writeValueAsString(out));
                Http.event(events[0], "[DONE]");
                events[0].close();
            } else {
                Http.sendJson(ex, 200, out);
            }
        } catch (Failure f) {
            if (events[0] == null) Http.sendError(ex, f.status, f.type, f.kind, f.getMessage());
            else {
                Http.event(events[0], Http.JSON.writeValueAsString(Http.errorEvent(f.type, f.kind, f.getMessage())));
                events[0].close();
            }
        }
    }

    private void models(HttpExchange ex) throws Exception {
        if (!Http.method(ex, "GET")) return;
        ObjectNode out = Http.JSON.createObjectNode();
        out.put("object", "list");
        ObjectNode m = out.putArray("data").addObject();
        m.put("id", modelName);
        m.put("object", "model");
        m.put("owned_by", "kvferry");
        Http.sendJson(ex, 200, out);
    }

    private void healthRoute(HttpExchange ex) throws Exception {
        if (!Http.method(ex, "GET")) return;
        ObjectNode out = Http.JSON.createObjectNode();
        long p = prefills.stream().filter(b -> b.healthy).count(), d = decodes.stream().filter(b -> b.healthy).count();
        out.put("status", p > 0 && d > 0 ? "ok" : "degraded");
        out.put("healthy_prefills", p);
        out.put("healthy_decodes", d);
        Http.sendJson(ex, p > 0 && d > 0 ? 200 : 503, out);
    }

    @Override
    public void close() {
        server.stop(0);
        health.shutdownNow();
        client.close();
    }
}
