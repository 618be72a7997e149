package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import com.sun.net.httpserver.HttpServer;
import com.fasterxml.jackson.databind.node.ArrayNode;
import io.kvferry.api.KVTransferException;
import io.kvferry.engine.model.OutputConstraint;
import io.micrometer.core.instrument.MeterRegistry;
import io.kvferry.engine.model.TokenLogprobs;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.engine.serving.PrefillEngine;
import io.kvferry.http.BearerToken;

import java.io.IOException;
import java.util.List;
import java.util.concurrent.ExecutionException;

/**
 * A prefill engine's HTTP face, which the router calls (SGLang's prefill server): {@code POST
 * /generate} runs the request and answers once its KV reached the decode (or failed), {@code POST
 * /abort}, {@code GET /health}.
 *
 * <p>Input token log probabilities, as SGLang's prefill gives them: {@code return_logprob} with {@code logprob_start_len}
 * (-1 or absent: none; else the first prompt position, below the prompt's length) and {@code top_logprobs_num} add
 * {@code meta_info.input_token_logprobs} ({@code [logprob, token_id, null]} a position, the first prompt token's
 * logprob null) and, with top ones asked, {@code input_top_logprobs} (a list of triples a position, null for the first
 * prompt token). {@code prefill_only} (kvferry's): the prompt alone, for those log probabilities; no decode takes the
 * room, nothing is sent and {@code first_token} is -1. {@code cached_tokens}: the prompt tokens taken from the
 * prefill's prefix cache, not computed. {@code /health} says whether that cache is on ({@code prefix_cache}: off by the
 * flag, or for a variant with window layers). {@code cache_salt} (vLLM's, checked: {@link EngineInput#cacheSalt}): the
 * request shares cached pages only with requests of the same salt.
 */
public final class PrefillServer implements AutoCloseable {
    private final PrefillEngine engine;
    private final HttpServer server;
    private final String bootstrapAddr;
    private final BearerToken auth;
    /** Compiles the requests' structured outputs against the model's vocabulary; null: none (a structured output is a 400). */
    private final OutputConstraint.Compiler outputs;
    /** Its graceful shutdown: /generate requests admitted, and whether it still admits ({@link Drain}). */
    private final Drain drain = new Drain("prefill");
    /** Its requests' ids and the lines it logs about them ({@link EngineRequests}). */
    private final EngineRequests requests = new EngineRequests("prefill");

    /** Without authentication: every client that reaches the port may call /generate and /abort (tests). */
    public PrefillServer(PrefillEngine engine, String bootstrapAddr, String host, int port) throws IOException {
        this(engine, bootstrapAddr, host, port, null);
    }

    /** @param authToken the cluster token /generate and /abort require ({@link Http#authorized}); null for none */
    public PrefillServer(PrefillEngine engine, String bootstrapAddr, String host, int port, String authToken) throws IOException {
        this(engine, bootstrapAddr, host, port, authToken, null);
    }

    /** @param tokenizer the model's, for structured outputs (null: a request with one is a 400) */
    public PrefillServer(PrefillEngine engine, String bootstrapAddr, String host, int port, String authToken, Tokenizer tokenizer) throws IOException {
        this.engine = engine;
        this.outputs = tokenizer == null ? null : new OutputConstraint.Compiler(tokenizer);
        this.bootstrapAddr = bootstrapAddr;
        this.auth = BearerToken.of(authToken);
        server = Http.server(host, port);
        // The compiler's client: the router's X-Kvferry-Client on a request with the cluster token, else the caller's address.
        // The request's id first (RequestId: a malformed X-Request-Id is a 400), so a drain's 503 carries and logs it too.
        server.createContext("/generate", ex -> Http.handle(ex, requests.identified(drain.admitting(StructuredOutputs.forwardedClient(auth, this::generate)))));
        Http.engineRoutes(server, auth, requests, engine::abort, () -> drain.health(Http.engineHealth("prefill", engine.spec(), engine.inFlight(), engine.failure())
                .put("bootstrap", bootstrapAddr).put("prefix_cache", engine.prefixCacheOn() ? "on" : "off")));
        server.start();
    }

    /** Publishes its structured-output compiler's meters ({@link StructuredOutputMeters}) in {@code registry}, its process's. */
    public void meters(MeterRegistry registry) {
        StructuredOutputMeters.bind(registry, outputs, "prefill");
    }

    /** Serves {@code path} with {@code handler} too (the process's /metrics and /status). */
    public void route(String path, HttpHandler handler) {
        server.createContext(path, handler);
    }

    /** Its graceful shutdown: {@link Drain#begin} refuses new /generate requests (503 draining) and fails /health. */
    public Drain drain() {
        return drain;
    }

    public int port() {
        return server.getAddress().getPort();
    }

    /** Its structured-output compiler (tests). */
    OutputConstraint.Compiler outputs() {
        return outputs;
    }

    private void generate(HttpExchange ex) throws Exception {
        if (!Http.method(ex, "POST") || !Http.authorized(ex, auth)) return;
        JsonNode req = Http.readJson(ex, Http.engineBodyLimit(engine.spec().model().config.seqLen()));
        long room = Http.roomField(req);
        int[] ids = EngineInput.inputIds(req, engine.spec().model().config);
        var sampling = SamplingParams.parse(req.get("sampling_params"), room, engine.spec().model().config.vocabSize(), outputs);
        boolean logprobs = Http.booleanField(req, "return_logprob", false);
        int start = logprobs ? Http.intField(req, "logprob_start_len", -1, -1, ids.length - 1) : -1;
        int top = logprobs ? Http.intField(req, "top_logprobs_num", 0, 0, TokenLogprobs.MAX_TOP) : 0;
        boolean prefillOnly = Http.booleanField(req, "prefill_only", false);
        String salt = EngineInput.cacheSalt(req);
        boolean tracked = requests.started(room);
        try {
            PrefillEngine.Result r;
            try {
                r = engine.submit(new PrefillEngine.Request(room, ids, sampling, start, top, prefillOnly, salt)).get();
            } catch (IllegalArgumentException refused) { // admission: a prompt of more pages than this prefill has
                requests.answered(room, 400, null, refused.getMessage());
                Http.sendError(ex, 400, "invalid_request_error", refused.getMessage()); // the client's: answered here, not a bug's 500
                return;
            }
            ObjectNode out = Http.JSON.createObjectNode();
            out.put("bootstrap_room", room);
            out.put("first_token", r.firstToken());
            out.put("compute_ms", r.computeMs());
            out.put("send_ms", r.sendMs());
            out.put("kv_pages", r.kvPages());
            out.put("cached_tokens", r.cachedTokens()); // prompt tokens from the prefill's prefix cache, not computed
            if (r.inputLogprobs() != null) inputLogprobs(out.putObject("meta_info"), r.inputLogprobs(), ids, start, top);
            Http.sendJson(ex, 200, out);
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            if (c instanceof KVTransferException t) {
                requests.answered(room, 500, t.kind().label(), t.getMessage()); // a transfer failed or timed out, or the room was aborted
                Http.sendError(ex, 500, "kv_transfer_error", t.kind().label(), t.getMessage());
            } else if (c instanceof IllegalArgumentException) { // its room already in flight
                requests.answered(room, 400, null, c.getMessage());
                Http.sendError(ex, 400, "invalid_request_error", c.getMessage());
            } else if (c instanceof OutputConstraint.Exceeded) {
                requests.answered(room, 400, null, c.getMessage());
                Http.sendError(ex, 400, "invalid_request_error", null, OutputConstraint.Exceeded.PARAM, c.getMessage());
            } else {
                requests.answered(room, 500, null, String.valueOf(c.getMessage()));
                Http.sendError(ex, 500, "internal_error", String.valueOf(c.getMessage()));
            }
        } finally {
            if (tracked) requests.ended(room);
        }
    }

    /** SGLang's {@code input_token_logprobs} (and {@code input_top_logprobs} when {@code top} > 0), without texts. */
    static void inputLogprobs(ObjectNode meta, List<TokenLogprobs> lps, int[] ids, int start, int top) {
        ArrayNode tokens = meta.putArray("input_token_logprobs");
        ArrayNode tops = top > 0 ? meta.putArray("input_top_logprobs") : null;
        for (int i = 0; i < lps.size(); i++) {
            TokenLogprobs lp = lps.get(i);
            ArrayNode t = tokens.addArray();
            if (lp == null) t.addNull();
            else t.add(lp.logprob());
            t.add(ids[start + i]);
            t.addNull();
            if (tops == null) continue;
            if (lp == null) {
                tops.addNull();
                continue;
            }
            ArrayNode at = tops.addArray();
            for (int k = 0; k < lp.topTokens().length; k++) at.addArray().add(lp.topLogprobs()[k]).add(lp.topTokens()[k]).addNull();
        }
    }

    @Override
    public void close() {
        Http.stop(server, drain);
    }
}
