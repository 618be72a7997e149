package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import com.sun.net.httpserver.HttpServer;
import io.kvferry.api.FailureKind;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.model.Sampling;
import io.micrometer.core.instrument.MeterRegistry;
import io.kvferry.engine.model.TokenLogprobs;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.engine.serving.DecodeEngine;
import io.kvferry.engine.serving.Generation;
import io.kvferry.http.BearerToken;

import java.io.IOException;
import java.io.OutputStream;
import java.net.URI;
import java.net.URISyntaxException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * A decode engine's HTTP face (SGLang's decode server): {@code POST /generate} streams the request's
 * tokens as server-sent events once its KV landed. The status line waits for the first token or for
 * {@link #KEEP_ALIVE_MILLIS}, whichever comes first, so a transfer that fails at once is an HTTP 500
 * carrying the {@code KVTransferError(...)} text; a request that waits longer (for pages, its prefill,
 * its KV) begins its stream and gets a {@code : keep-alive} comment every {@link #KEEP_ALIVE_MILLIS}
 * until its first token, and a later failure is an error event. The comments are how the router tells
 * a decode that is slow from one that hangs, and how this side learns that its client went away. A
 * client that goes away aborts the room.
 *
 * <p>A token's event is {@code {"token": id}}; a request with {@code return_logprob} (SGLang's name) adds the
 * token's {@code logprob} and its {@code top_logprobs_num} most likely tokens as {@code top_tokens} and
 * {@code top_logprobs} ({@link TokenLogprobs}). The last event is {@code {"finish_reason": "stop" or "length", "tokens",
 * "timings"}}, with {@code matched}, the token that ended it (a stop token id, EOS or BOS), when it is {@code stop}.
 * {@code cache_salt} (vLLM's, checked: {@link EngineInput#cacheSalt}): the request shares prefix cache pages only with
 * requests of the same salt.
 */
public final class DecodeServer implements AutoCloseable {
    /** A request's stream gets a comment after this long without an event (and its status line, if not sent yet). */
    static final long KEEP_ALIVE_MILLIS = 1000;

    private final DecodeEngine engine;
    private final HttpServer server;
    private final BearerToken auth;
    /** Compiles the requests' structured outputs against the model's vocabulary; null: none (a structured output is a 400). */
    private final OutputConstraint.Compiler outputs;
    /** Its graceful shutdown: /generate requests admitted, and whether it still admits ({@link Drain}). */
    private final Drain drain = new Drain("decode");
    /** Its requests' ids and the lines it logs about them ({@link EngineRequests}). */
    private final EngineRequests requests = new EngineRequests("decode");

    /** Without authentication: every client that reaches the port may call /generate and /abort (tests). */
    public DecodeServer(DecodeEngine engine, String host, int port) throws IOException {
        this(engine, host, port, null);
    }

    /** @param authToken the cluster token /generate and /abort require ({@link Http#authorized}); null for none */
    public DecodeServer(DecodeEngine engine, String host, int port, String authToken) throws IOException {
        this(engine, host, port, authToken, null);
    }

    /** @param tokenizer the model's, for structured outputs (null: a request with one is a 400) */
    public DecodeServer(DecodeEngine engine, String host, int port, String authToken, Tokenizer tokenizer) throws IOException {
        this.engine = engine;
        this.outputs = tokenizer == null ? null : new OutputConstraint.Compiler(tokenizer);
        this.auth = BearerToken.of(authToken);
        server = Http.server(host, port);
        // The compiler's client: the router's X-Kvferry-Client on a request with the cluster token, else the caller's address.
        // The request's id first (RequestId: a malformed X-Request-Id is a 400), so a drain's 503 carries and logs it too.
        server.createContext("/generate", ex -> Http.handle(ex, requests.identified(drain.admitting(StructuredOutputs.forwardedClient(auth, this::generate)))));
        Http.engineRoutes(server, auth, requests, engine::abort, () -> drain.health(Http.engineHealth("decode", engine.spec(), engine.inFlight(), engine.failure())));
        server.start();
    }

    /** Publishes its structured-output compiler's meters ({@link StructuredOutputMeters}) in {@code registry}, its process's. */
    public void meters(MeterRegistry registry) {
        StructuredOutputMeters.bind(registry, outputs, "decode");
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

    /**
     * What the scheduler thread hands the handler: a token, the end, or an error; {@code refused}: the client's error (a
     * refusal, or a grammar past its bound: {@code param} the field), a 400 or, its stream begun, an event of that type.
     */
    private record Event(int token, TokenLogprobs logprobs, Generation done, String error, FailureKind kind, boolean refused, String param) {
        Event(int token, TokenLogprobs logprobs, Generation done, String error, FailureKind kind, boolean refused) {
            this(token, logprobs, done, error, kind, refused, null);
        }

        Event(int token, Generation done, String error, FailureKind kind) {
            this(token, null, done, error, kind, false);
        }
    }

    private void generate(HttpExchange ex) throws Exception {
        if (!Http.method(ex, "POST") || !Http.authorized(ex, auth)) return;
        JsonNode req = Http.readJson(ex, Http.engineBodyLimit(engine.spec().model().config.seqLen()));
        long room = Http.roomField(req);
        String addr = Http.textField(req, "bootstrap_addr");
        String bad = whyNotBootstrapAddr(addr);
        // Refused here: kvferry would retry the registry for its whole bootstrap timeout, then call it unreachable.
        if (bad != null) throw new Http.BadRequest("bootstrap_addr '" + addr + "' " + bad);
        int[] ids = EngineInput.inputIds(req, engine.spec().model().config);
        int max = Http.intField(req, "max_new_tokens", 16, 1, Integer.MAX_VALUE);
        var sampling = SamplingParams.parse(req.get("sampling_params"), room, engine.spec().model().config.vocabSize(), outputs);
        if (sampling.rules().minTokens() > max) { // the router's rule: no end could come before the answer's last token
            throw new Http.BadRequest("sampling_params.min_new_tokens", "min_new_tokens (" + sampling.rules().minTokens()
                    + ") must be at most max_new_tokens (" + max + ")");
        }
        int topLogprobs = Http.booleanField(req, "return_logprob", false)
                ? Http.intField(req, "top_logprobs_num", 0, 0, TokenLogprobs.MAX_TOP) : -1;
        String salt = EngineInput.cacheSalt(req);
        BlockingQueue<Event> events = new LinkedBlockingQueue<>();
        boolean tracked = requests.started(room);
        try {
            decode(ex, room, addr, ids, max, sampling, topLogprobs, salt, events);
        } finally {
            if (tracked) requests.ended(room);
        }
    }

    /** The request's run once read: its events, streamed (the status line at its first token or keep-alive). */
    private void decode(HttpExchange ex, long room, String addr, int[] ids, int max, Sampling sampling, int topLogprobs,
                        String salt, BlockingQueue<Event> events) throws Exception {
        try {
            submit(room, addr, ids, max, sampling, topLogprobs, salt, events);
        } catch (IllegalArgumentException refused) { // admission: more pages than this decode has, no bootstrap address
            requests.answered(room, 400, null, refused.getMessage());
            Http.sendError(ex, 400, "invalid_request_error", refused.getMessage()); // the client's: answered here, not a bug's 500
            return;
        }
        stream(ex, room, events);
    }

    /** Hands the request to the engine, its sink putting its tokens, end or error on {@code events}. */
    private void submit(long room, String addr, int[] ids, int max, Sampling sampling, int topLogprobs, String salt,
                        BlockingQueue<Event> events) {
        engine.submit(new DecodeEngine.Request(room, addr, ids, max, sampling, new DecodeEngine.TokenSink() {
            @Override
            public void onToken(int token) {
                onToken(token, null);
            }

            @Override
            public void onToken(int token, TokenLogprobs logprobs) {
                events.add(new Event(token, logprobs, null, null, null, false));
            }

            @Override
            public void onDone(Generation g) {
                events.add(new Event(-1, g, null, null));
            }

            @Override
            public void onError(FailureKind kind, String message) {
                events.add(new Event(-1, null, message, kind));
            }

            @Override
            public void onRefused(String message) {
                events.add(new Event(-1, null, null, message, null, true));
            }

            @Override
            public void onClientError(String param, String message) {
                events.add(new Event(-1, null, null, message, null, true, param));
            }
        }, topLogprobs, salt));
    }

    /** Streams the request's {@code events} to the router until its end, its error or the router gone (the room aborted then). */
    private void stream(HttpExchange ex, long room, BlockingQueue<Event> events) throws Exception {
        OutputStream out = null;
        List<Event> batch = new ArrayList<>();
        try {
            while (true) {
                batch.clear();
                Event next = events.poll(KEEP_ALIVE_MILLIS, TimeUnit.MILLISECONDS);
                if (next == null) { // waiting (pages, the prefill, the KV): the request was taken; say this decode is alive
                    if (out == null) out = Http.startEvents(ex);
                    Http.write(out, Http.KEEP_ALIVE);
                    continue;
                }
                batch.add(next);
                events.drainTo(batch); // tokens that piled up while we wrote go out in one write: one flush per batch, not per token
                StringBuilder data = new StringBuilder();
                for (Event e : batch) {
                    if (e.error() != null) {
                        requests.answered(room, e.refused() ? 400 : 500, e.kind() == null ? null : e.kind().label(), e.error());
                        if (out == null && e.refused()) {
                            Http.sendError(ex, 400, "invalid_request_error", null, e.param(), e.error());
                        } else if (out == null) {
                            Http.sendError(ex, 500, errorType(e.kind()), e.kind() == null ? null : e.kind().label(), e.error());
                        } else { // the client's error mid-stream (a grammar past its bound) as its type: the router answers it as a 400
                            String type = e.refused() ? "invalid_request_error" : errorType(e.kind());
                            data.append("data: ").append(Http.JSON.writeValueAsString(Http.errorEvent(type, e.kind() == null ? null : e.kind().label(), e.param(), e.error()))).append("\n\n");
                            Http.write(out, data);
                        }
                        return;
                    }
                    if (out == null) out = Http.startEvents(ex);
                    if (e.done() != null) {
                        data.append("data: ").append(Http.JSON.writeValueAsString(doneEvent(e.done()))).append("\n\n");
                        Http.write(out, data);
                        out.close();
                        return;
                    }
                    if (e.logprobs() == null) data.append("data: {\"token\":").append(e.token()).append("}\n\n");
                    else data.append("data: ").append(Http.JSON.writeValueAsString(tokenEvent(e.token(), e.logprobs()))).append("\n\n");
                }
                Http.write(out, data);
            }
        } catch (IOException gone) {
            requests.aborted(room, "client_gone");
            engine.abort(room); // the client disconnected: free the room's pages (once safe) on this side
        }
    }

    /**
     * Why a registry address cannot be one, or null: kvferry's form, {@code host:port} or {@code [ipv6]:port},
     * optionally with {@code http://} before and {@code /} after, a port in [1, 65535] and a host a URI can hold.
     */
    static String whyNotBootstrapAddr(String address) {
        String a = address.strip();
        if (a.regionMatches(true, 0, "http://", 0, 7)) a = a.substring(7);
        while (a.endsWith("/")) a = a.substring(0, a.length() - 1);
        String host, port;
        if (a.startsWith("[")) {
            int close = a.indexOf(']');
            if (close < 0 || close + 1 >= a.length() || a.charAt(close + 1) != ':') return "is not [ipv6]:port";
            host = a.substring(1, close);
            port = a.substring(close + 2);
        } else {
            int colon = a.lastIndexOf(':');
            if (colon < 0) return "has no port (want host:port)";
            host = a.substring(0, colon);
            port = a.substring(colon + 1);
        }
        if (host.isEmpty()) return "has no host (want host:port)";
        int p;
        try {
            p = Integer.parseInt(port);
        } catch (NumberFormatException e) {
            return "has a bad port '" + port + "'";
        }
        if (p < 1 || p > 65_535) return "has port " + p + " outside [1, 65535]";
        try {
            if (new URI("http://" + (host.indexOf(':') >= 0 ? "[" + host + "]" : host) + ":" + p).getHost() == null) {
                return "has a host that is not a valid URI host";
            }
        } catch (URISyntaxException e) {
            return "is not a valid host:port (" + e.getMessage() + ")";
        }
        return null;
    }

    /** A failure with a transfer kind is a kv_transfer_error; anything else an internal_error. */
    static String errorType(FailureKind kind) {
        return kind != null ? "kv_transfer_error" : "internal_error";
    }

    /** A token's event with its log probabilities: {@code token}, {@code logprob}, {@code top_tokens}, {@code top_logprobs}. */
    static ObjectNode tokenEvent(int token, TokenLogprobs lp) {
        ObjectNode o = Http.JSON.createObjectNode();
        o.put("token", token);
        o.put("logprob", lp.logprob());
        var ids = o.putArray("top_tokens");
        for (int t : lp.topTokens()) ids.add(t);
        var lps = o.putArray("top_logprobs");
        for (float v : lp.topLogprobs()) lps.add(v);
        return o;
    }

    private static ObjectNode doneEvent(Generation g) {
        ObjectNode o = Http.JSON.createObjectNode();
        o.put("finish_reason", g.finishReason());
        if (g.matchedToken() >= 0) o.put("matched", g.matchedToken()); // SGLang's FINISH_MATCHED_TOKEN: the token that ended it
        var tokens = o.putArray("tokens");
        for (int t : g.tokens()) tokens.add(t);
        ObjectNode t = o.putObject("timings");
        t.put("transfer_ms", g.timings().transferMs());
        t.put("first_decode_ms", g.timings().firstDecodeMs());
        t.put("bytes", g.timings().bytes());
        return o;
    }

    @Override
    public void close() {
        Http.stop(server, drain);
    }
}
