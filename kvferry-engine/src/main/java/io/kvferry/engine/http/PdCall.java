package io.kvferry.engine.http;

import io.kvferry.api.FailureKind;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.model.TokenLogprobs;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.metrics.LogSafe;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Semaphore;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The PD call of one request: once the router admits it ({@link Router.Admission}: a 429 when no slot frees within the
 * queue timeout), the least-loaded healthy prefill and decode ({@link Backends#pick}), a random {@code bootstrap_room},
 * the prefill's {@code /generate} sent at once with the decode's, whose stream is read token by token into an
 * {@link Output} (the stop strings and rules applied, a decode silent too long taken as hung: {@link StalledStreams}),
 * then an {@link Outcome}; a failure is a {@link Failure} naming the backend, a client gone (an IOException from the
 * output) aborts the room on both engines. {@code max_tokens} 0 runs on the prefill alone ({@link #promptOnly}).
 *
 * <p>State: nothing of a request's outlives its call; the backends' state is {@link Backends}'s, the admission slots
 * are shared by every request (fair: those waiting are admitted in order).
 */
final class PdCall {
    private static final Logger log = LoggerFactory.getLogger(Router.class); // the router's log, as before the split
    private final Backends backends;
    /** The decode streams of requests in flight, cut when silent too long (swept by the health thread). */
    private final StalledStreams stalled;
    private final Tokenizer tokenizer;
    /** The model's context in tokens: a prompt must leave room in it for one output token. */
    private final int contextTokens;
    private final RouterMeters meters;
    private final Router.Admission admission;
    /** Requests the router may still admit; null without a limit. Fair: those waiting are admitted in order. */
    private final Semaphore slots;

    /** {@code slots}: the admission's (null without a limit); {@code streamIdle}: {@link Probing#streamIdle}. */
    PdCall(Backends backends, Duration streamIdle, Tokenizer tokenizer, int contextTokens, RouterMeters meters, Router.Admission admission,
           Semaphore slots) {
        this.backends = backends;
        this.tokenizer = tokenizer;
        this.contextTokens = contextTokens;
        this.meters = meters;
        this.admission = admission;
        this.slots = slots;
        stalled = new StalledStreams(streamIdle);
        backends.every(stalled::sweep, DecodeServer.KEEP_ALIVE_MILLIS);
    }

    /** Requests waiting for an admission slot now. */
    int waitingForAdmission() {
        return slots == null ? 0 : slots.getQueueLength();
    }


    /**
     * Charges a request's tenant's per-minute limits for its {@code asks} before any of them runs ({@link RateLimits#admit}):
     * a 429 {@link Failure} or a 400 when over; {@code budgetParam}: the route's max_tokens field, named by a 400.
     */
    void admitRates(List<Ask> asks, String budgetParam, HttpExchange ex) throws Failure {
        RateLimits.admit(Router.RECORD.get(), asks, contextTokens, budgetParam, ex, meters);
    }

    /** A write to the client; an IOException means the client went away. */
    private interface ClientWrite {
        void run() throws IOException;
    }

    /** The body of an engine's /generate (the decode's gets bootstrap_addr and max_new_tokens added). */
    static ObjectNode generateBody(long room, int[] ids, Sampling s) {
        ObjectNode body = Http.JSON.createObjectNode();
        body.put("bootstrap_room", room);
        ArrayNode arr = body.putArray("input_ids");
        for (int t : ids) arr.add(t);
        body.set("sampling_params", SamplingParams.json(s));
        return body;
    }

    /**
     * Runs one request through a prefill and a decode, once the router admits it ({@link Admission}: a 429 when
     * no slot frees within the queue timeout). Its TTFT and latency count from here, the wait included.
     */
    Outcome run(Ask ask, Router.RequestRecord record, Output out) throws Failure, IOException, InterruptedException {
        if (record.requestId == null) return admit(ask, record, out);
        // The aborts this thread sends name the request (Backends#abort): the engines' lines about them say whose room it was.
        try {
            return ScopedValue.where(RequestId.CURRENT, record.requestId).call(() -> admit(ask, record, out));
        } catch (Failure f) {
            // An engine's or the router's failure, not the client's: a line an operator follows by its id and room into the engines' lines.
            if (f.status >= 500) {
                log.warn("request failed: request_id={} room={} status={} kind={} reason={}", record.requestId, record.room < 0 ? "-" : Long.toString(record.room),
                        f.status, LogSafe.value(f.kind != null ? f.kind : f.type), LogSafe.text(f.getMessage()));
            }
            throw f;
        } catch (IOException | InterruptedException | RuntimeException e) {
            throw e;
        } catch (Exception e) { // admit throws no other
            throw new IllegalStateException(e);
        }
    }

    private Outcome admit(Ask ask, Router.RequestRecord record, Output out) throws Failure, IOException, InterruptedException {
        long arrived = System.nanoTime();
        Tenants.Tenant tenant = record.tenant;
        // The tenant's slot first, then the router's: a request waiting on its tenant's limit holds none of the router's.
        if (tenant != null && !Tenants.admit(tenant, admission.queueTimeout().toNanos())) {
            if (record.firstAdmissionRefusal()) meters.admissionRefused(tenant.name, RouterMeters.LIMIT_TENANT); // once per request
            throw new Failure(429, "rate_limit_error", "tenant " + tenant.name + " is serving its limit of " + tenant.maxConcurrent
                    + " requests at once (max_concurrent_requests in --tenants-file) and none ended within "
                    + admission.queueTimeout().toMillis() + " ms (--queue-timeout-ms); retry later");
        }
        try {
            if (slots == null) return admitted(ask, record, out, arrived);
            long left = admission.queueTimeout().toNanos() - (System.nanoTime() - arrived); // one wait in all, both limits
            if (!slots.tryAcquire(Math.max(left, 0), TimeUnit.NANOSECONDS)) {
                if (record.firstAdmissionRefusal()) meters.admissionRefused(tenant == null ? null : tenant.name, RouterMeters.LIMIT_ROUTER);
                throw new Failure(429, "rate_limit_error", "the router is serving its limit of " + admission.maxConcurrent()
                        + " requests at once (--max-concurrent-requests) and none ended within " + admission.queueTimeout().toMillis()
                        + " ms (--queue-timeout-ms); retry later");
            }
            try {
                return admitted(ask, record, out, arrived);
            } finally {
                slots.release();
            }
        } finally {
            if (tenant != null) Tenants.release(tenant);
        }
    }

    /** The most runs of one request: its first, and one more for each backend found gone (refusing connections) on the way. */
    static final int MOST_RUNS = 3;

    /**
     * {@link #once} and, when a backend refused its connection before anything of the request started anywhere (a
     * prefill or decode process gone since its last health check: it is out of rotation now), again on the others, with
     * a new room, while another instance of that role serves ({@link #MOST_RUNS} runs at most). Nothing reached the
     * client but keep-alive comments then, so the client sees one answer. Without it a request that met a dead backend
     * before its health check did failed (500 or 502) though the other instances served on. A backend that answered the
     * 503 of an engine draining for its shutdown ({@link Drain}) took nothing of the request either: the same, so a
     * rolling restart shows its clients no error.
     */
    private Outcome admitted(Ask ask, Router.RequestRecord record, Output out, long arrived) throws Failure, IOException, InterruptedException {
        for (int run = 1; ; run++) {
            try {
                return once(ask, record, out, arrived);
            } catch (Failure f) {
                // An engine's param is only ever a grammar past its bound (ErrorBody): the field the router sent the
                // request's constraint in (its /generate name, which the OpenAI routes rename), none for a request without one.
                if (f.param != null) f.param(constraintField(ask));
                if (!f.refusedConnection) throw f;
                if (run == MOST_RUNS || !othersServe(backends.pool())) { // the client's answer: say no other instance took it
                    throw new Failure(f.status, f.type, f.kind, f.getMessage() + " (run " + run + " of the request; no other instance "
                            + "took it: " + (run == MOST_RUNS ? MOST_RUNS + " runs at most" : "none of that role serves now") + ")");
                }
                log.warn("request_id={} room={}: {}; running the request again on another instance", record.requestId, record.room, f.getMessage());
            }
        }
    }

    /**
     * The field an engine's grammar-bound error names, as the router sent the request's constraint ({@code sampling_params.ebnf},
     * or {@code sampling_params.json_schema} for a recursive schema: the engines call both {@code sampling_params.ebnf}); null without one.
     */
    private static String constraintField(Ask ask) {
        OutputConstraint c = ask.rules().constraint();
        return c == null ? null : "sampling_params." + c.kind().param;
    }

    /** Whether a prefill and a decode still serve (the one that refused is out of rotation). */
    private static boolean othersServe(Pool pool) {
        return pool.prefills().stream().anyMatch(Backend::serves) && pool.decodes().stream().anyMatch(Backend::serves);
    }

    /** One request through a prefill and a decode, once admitted. */
    private Outcome once(Ask ask, Router.RequestRecord record, Output out, long start) throws Failure, IOException, InterruptedException {
        int[] ids = ask.prompt().ids(); // tokenized (or checked) once, when the request was read (resolve)
        record.promptTokens = ids.length;
        if (ask.logprobStart() >= ids.length) {
            throw new Http.BadRequest("logprob_start_len", "logprob_start_len (" + ask.logprobStart() + ") must be below the prompt's "
                    + ids.length + " tokens (or -1 for no input token logprobs)");
        }
        Pool now = backends.pool();
        Backend p = Backends.pick(now.prefills(), "prefill");
        long room = ThreadLocalRandom.current().nextLong() & Long.MAX_VALUE;
        record.room = room;
        ObjectNode body = generateBody(room, ids, ask.sampling(room));
        // Both engines' prefix caches; a tenant's request gets its tenant's salt (Tenants: another tenant's pages never match).
        String salt = record.tenant == null ? ask.cacheSalt() : record.tenant.salt(ask.cacheSalt());
        if (salt != null) body.put("cache_salt", salt);
        ObjectNode decodeBody = body.deepCopy();
        if (ask.logprobStart() >= 0) { // SGLang's names: the prefill computes the prompt's, for this request only
            body.put("return_logprob", true);
            body.put("logprob_start_len", ask.logprobStart());
            body.put("top_logprobs_num", Math.max(ask.topLogprobs(), 0));
        }
        if (ask.maxTokens() == 0) return promptOnly(ask, ids, p, room, body, record, out, start);
        Backend d = Backends.pick(now.decodes(), "decode");
        decodeBody.put("bootstrap_addr", p.bootstrap);
        decodeBody.put("max_new_tokens", ask.maxTokens());
        if (ask.topLogprobs() >= 0) { // SGLang's names; the decode computes them for this request only
            decodeBody.put("return_logprob", true);
            decodeBody.put("top_logprobs_num", ask.topLogprobs());
        }
        p.inFlight.incrementAndGet();
        d.inFlight.incrementAndGet();
        CompletableFuture<HttpResponse<String>> prefillCall = backends.sendAsync(backends.post(p, "/generate", body, null, record.client, record.requestId),
                HttpResponse.BodyHandlers.limiting(HttpResponse.BodyHandlers.ofString(), prefillAnswerLimit())); // a few hundred bytes, or the prompt's logprobs
        p.calls.add(prefillCall);
        // Set once the decode's first token came: its KV landed whole (the decode emits it only then), so the prefill is
        // needed no more, and a prefill that fails after that (killed before its answer reached the router) ends nothing.
        AtomicBoolean landed = new AtomicBoolean();
        prefillCall.whenComplete((r, e) -> {
            p.calls.remove(prefillCall);
            p.inFlight.decrementAndGet();
            if (e != null && Backends.isConnectionRefused(e)) Backends.markUnreachable(p, e);
            if (e == null) outIfDraining(p, r);
            // The decode would otherwise wait for KV that never comes.
            if ((e != null || r.statusCode() != 200) && !landed.get()) backends.abort(d, room, record.requestId); // not the request's thread
        });
        try {
            HttpResponse<InputStream> dr;
            try {
                // The status line comes within a keep-alive interval (DecodeServer): a decode silent for streamIdle hangs.
                dr = backends.send(backends.post(d, "/generate", decodeBody, stalled.limit(), record.client, record.requestId), HttpResponse.BodyHandlers.ofInputStream());
            } catch (IOException e) {
                if (e instanceof HttpTimeoutException && !Backends.isConnectTimeout(e)) throw hung(d, p, room);
                backends.abort(p, room);
                Failure f = new Failure(502, "bad_gateway", d + " failed: " + e);
                if (!Backends.isConnectionRefused(e)) throw f;
                Backends.markUnreachable(d, e);
                throw f.asRefusedConnection();
            }
            if (dr.statusCode() != 200) {
                ErrorBody err;
                try (InputStream in = stalled.watch(dr.body())) { // an error answer is small: the rest of one that is not goes unread
                    err = ErrorBody.parse(d, dr.statusCode(), new String(in.readNBytes(Http.MAX_BODY_BYTES), StandardCharsets.UTF_8));
                }
                if (err.draining()) { // it took nothing: out of rotation, and the request runs again elsewhere
                    takeOut(d, err);
                    backends.abort(p, room);
                    throw err.failure();
                }
                throw failedBeforeFirstToken(err, p, room, prefillCall);
            }
            Tokenizer.TextStream text = new Tokenizer.TextStream(tokenizer, ids[ids.length - 1]); // a leading space after the prompt stays
            StringBuilder all = new StringBuilder();
            int sent = 0; // characters of `all` handed to out; the rest may still turn out to start a stop string
            List<Integer> tokens = new ArrayList<>(), offsets = new ArrayList<>();
            List<TokenLogprobs> logprobs = ask.topLogprobs() >= 0 ? new ArrayList<>() : null;
            List<TokenLogprobs> input = null;
            double ttft = -1;
            StalledStreams.Watched stream = stalled.watch(dr.body());
            try (BufferedReader in = new BufferedReader(new InputStreamReader(stream, StandardCharsets.UTF_8))) {
                String line;
                while ((line = readDecodeLine(in, stream, d, p, room)) != null) {
                    if (!line.startsWith("data: ")) {
                        if (line.startsWith(":")) toClient(out::onKeepAlive, d, p, room);
                        continue;
                    }
                    JsonNode ev = decodeEvent(line.substring(6), d, p, room);
                    try {
                        if (ev == null || !ev.isObject()) throw new BadAnswer("an event that is no JSON object: " + shown(ev));
                        if (ev.has("token")) {
                            landed.set(true);
                            int tok = tokenId(ev.get("token"), tokenizer.vocabSize(), "token");
                            if (tokens.size() >= ask.maxTokens()) {
                                throw new BadAnswer("token " + tok + " after the " + ask.maxTokens() + " tokens the request asked for (max_new_tokens)");
                            }
                            if (tokens.isEmpty()) { // the prompt's part comes first: the prefill answers once its KV landed
                                if (ask.logprobStart() >= 0) input = awaitInputLogprobs(prefillCall, p, d, room, ids, ask.logprobStart(),
                                        Math.max(ask.topLogprobs(), 0));
                                List<TokenLogprobs> prompt = input;
                                toClient(() -> out.onPrompt(prompt), d, p, room);
                            }
                            if (ttft < 0) {
                                long sinceArrival = System.nanoTime() - start;
                                ttft = sinceArrival / 1e6;
                                record.ttftMs = ttft;
                                meters.firstToken(sinceArrival);
                            }
                            tokens.add(tok);
                            int before = all.length();
                            TokenLogprobs lp = null;
                            if (logprobs != null) {
                                lp = LogprobsShape.fromEvent(ev, tok, tokenizer.vocabSize(), ask.topLogprobs());
                                if (lp == null) {
                                    backends.abort(d, room);
                                    backends.abort(p, room);
                                    throw new Failure(502, "bad_gateway", d + " sent token " + tok + " of room " + room
                                            + " without the log probabilities the request asked for (a decode older than the router?)");
                                }
                                logprobs.add(lp);
                                offsets.add(before);
                            }
                            // A stop token id ends the answer without its text, as vLLM and SGLang leave it out (EOS and BOS have none).
                            all.append(ask.rules().isStopTokenId(tok) && ask.rules().ends(tok, tokens.size() - 1) ? "" : text.push(tok));
                            // No stop string ends the answer before min_tokens (vLLM's check): only a match ending in later text counts.
                            StopSequences.Match stop = tokens.size() < ask.rules().minTokens() ? null : ask.stop().match(all, before);
                            if (stop != null) {
                                // Done: the decode would go on to max_tokens; abort frees its pages now (as a disconnect does).
                                backends.abort(d, room);
                                backends.abort(p, room);
                                all.setLength(stop.at());
                                record.completionTokens = tokens.size();
                                return outcome(record, ids, tokens, all, Finish.string(stop.string()), ttft, start, prefillCall, p, null, logprobs, offsets, input);
                            }
                            int sendable = all.length() - ask.stop().heldBack(all);
                            String piece = sendable > sent ? all.substring(sent, sendable) : "";
                            sent = Math.max(sent, sendable);
                            TokenLogprobs tokLp = lp;
                            toClient(() -> out.onToken(tok, piece, tokLp, before), d, p, room);
                        } else if (ev.has("error")) {
                            JsonNode e = ev.path("error");
                            if (!e.isObject()) throw new BadAnswer("an error event whose error is no JSON object: " + shown(e));
                            for (String f : new String[]{"type", "kind", "message", "param"}) {
                                JsonNode v = e.get(f);
                                if (v != null && !v.isNull() && !v.isTextual()) throw new BadAnswer("an error event whose " + f + " " + shown(v) + " is no string");
                            }
                            // The client's error as a 400: a grammar past its run-time bound (its type, its field), or before the first
                            // token a refusal (what its error answer would have been); any other event, whatever it claims, a 500.
                            String type = e.path("type").asText("internal_error");
                            String param = ErrorBody.grammarParam(e);
                            boolean client = "invalid_request_error".equals(type) && (tokens.isEmpty() || param != null && ask.rules().constraint() != null);
                            ErrorBody err = new ErrorBody(client ? 400 : 500, client || !"invalid_request_error".equals(type) ? type : "internal_error",
                                    e.hasNonNull("kind") ? e.get("kind").asText() : null, e.path("message").asText(), false, client ? param : null);
                            // Before the first token (a stream begun on a keep-alive) it is what an error answer would have been.
                            if (tokens.isEmpty()) throw failedBeforeFirstToken(err, p, room, prefillCall);
                            throw abortedForItsPrefill(err, p, prefillCall).failure();
                        } else if (ev.has("finish_reason")) {
                            // An incomplete UTF-8 sequence at the end becomes U+FFFD, as Tokenizer.decode gives it.
                            int before = all.length();
                            all.append(text.finish());
                            JsonNode timings = finishEvent(ev, tokenizer.vocabSize());
                            Finish finish = decodeFinish(ev, tokens, ask);
                            StopSequences.Match stop = tokens.size() < ask.rules().minTokens() ? null : ask.stop().match(all, before);
                            if (stop != null) {
                                all.setLength(stop.at());
                                finish = Finish.string(stop.string());
                            }
                            record.completionTokens = tokens.size();
                            return outcome(record, ids, tokens, all, finish, ttft, start, prefillCall, p, timings, logprobs, offsets, input);
                        }
                        // An object event of none of those keys is skipped (an engine newer than the router may send more).
                    } catch (BadAnswer bad) {
                        backends.abort(d, room);
                        backends.abort(p, room);
                        throw malformed(d, "event", room, bad);
                    }
                }
            } finally {
                record.generated = tokens.size(); // ended or failed: the tokens its tenant's tokens_per_minute keeps charged (RateLimits)
            }
            if (stream.cut()) throw hung(d, p, room);
            throw new Failure(502, "bad_gateway", d + " ended the stream of room " + room + " without finishing it");
        } finally {
            d.inFlight.decrementAndGet();
        }
    }

    /**
     * The most a prefill's answer may hold: a few hundred bytes, and the prompt's input token log probabilities when
     * asked (a position's triple and its top ones', at most the context's positions).
     */
    private int prefillAnswerLimit() {
        return (int) Math.min(Integer.MAX_VALUE - 8, Math.max(Http.MAX_BODY_BYTES, contextTokens * (LogprobsShape.MAX_TOP + 1L) * 64 + (64 << 10)));
    }

    /**
     * A prompt-only request ({@code max_tokens} 0, for the prompt's input token log probabilities): the prefill alone, told
     * {@code prefill_only}, so no decode is called, no KV moves and the prefill waits for no decode.
     */
    private Outcome promptOnly(Ask ask, int[] ids, Backend p, long room, ObjectNode body, Router.RequestRecord record, Output out, long start)
            throws Failure, IOException, InterruptedException {
        body.put("prefill_only", true);
        p.inFlight.incrementAndGet();
        HttpResponse<String> r;
        CompletableFuture<HttpResponse<String>> call = backends.sendAsync(backends.post(p, "/generate", body, null, record.client, record.requestId),
                HttpResponse.BodyHandlers.limiting(HttpResponse.BodyHandlers.ofString(), prefillAnswerLimit()));
        p.calls.add(call); // failed, as a PD request's prefill call is, when the health checks find the prefill unreachable
        call.whenComplete((x, e) -> p.calls.remove(call));
        try {
            r = awaitPromptOnly(call, p, room, out);
        } finally {
            p.inFlight.decrementAndGet();
        }
        if (r.statusCode() != 200) {
            outIfDraining(p, r);
            throw ErrorBody.parse(p, r.statusCode(), r.body()).failure();
        }
        JsonNode pre;
        List<TokenLogprobs> input = null;
        try {
            pre = prefillAnswer(r.body(), ids.length);
            if (ask.logprobStart() >= 0) {
                input = inputLogprobs(pre, ids, ask.logprobStart(), tokenizer.vocabSize(), Math.max(ask.topLogprobs(), 0));
                if (input == null) throw missingInputLogprobs(p, room);
            }
        } catch (BadAnswer bad) {
            throw malformed(p, "answer", room, bad);
        }
        out.onPrompt(input);
        long took = System.nanoTime() - start;
        meters.succeeded(took, ids.length, 0, record.tenant);
        record.completionTokens = 0;
        return new Outcome(room, ids.length, new int[0], "", Finish.LENGTH, -1, took / 1e6, pre, null,
                ask.topLogprobs() >= 0 ? List.of() : null, ask.topLogprobs() >= 0 ? new int[0] : null, input);
    }

    /**
     * A prompt-only request's answer from its prefill. The prefill may wait for pages as long as it needs, so no fixed limit
     * bounds the call; a hung prefill is found by its health checks instead, which fail its calls under way ({@link
     * Backend#calls}): the request then fails with a 502 naming it, and the room is aborted there. Each keep-alive interval
     * of the wait is passed on to a streamed client, so one that left is noticed then (the room aborted too), not at the answer.
     */
    private HttpResponse<String> awaitPromptOnly(CompletableFuture<HttpResponse<String>> call, Backend p, long room, Output out)
            throws Failure, IOException, InterruptedException {
        while (true) {
            try {
                return call.get(DecodeServer.KEEP_ALIVE_MILLIS, TimeUnit.MILLISECONDS);
            } catch (CancellationException failedByHealthChecks) {
                throw takenAsHung(p, room);
            } catch (TimeoutException stillWaiting) {
                try {
                    out.onKeepAlive();
                } catch (IOException clientGone) {
                    call.cancel(true);
                    backends.abort(p, room);
                    throw clientGone;
                }
            } catch (ExecutionException e) {
                Throwable cause = e.getCause();
                if (cause instanceof CancellationException) throw takenAsHung(p, room); // the JDK client's own cancel
                Failure f = new Failure(502, "bad_gateway", p + " failed: " + cause);
                if (!Backends.isConnectionRefused(cause)) throw f;
                Backends.markUnreachable(p, cause);
                throw f.asRefusedConnection();
            } catch (InterruptedException e) {
                call.cancel(true);
                throw e;
            }
        }
    }

    /** A prompt-only request whose prefill the health checks took out (they failed its call): its room is aborted there. */
    private Failure takenAsHung(Backend p, long room) {
        backends.abort(p, room);
        return new Failure(502, "bad_gateway", p + " was taken out of rotation by its health checks while it held room " + room
                + " (a prompt-only request): taken as hung (" + p.unreachable + ")");
    }

    /** The prefill's answer with the input token log probabilities asked for, waited for at the first token. */
    private List<TokenLogprobs> awaitInputLogprobs(CompletableFuture<HttpResponse<String>> prefillCall, Backend p, Backend d, long room,
                                                   int[] ids, int start, int top) throws Failure, InterruptedException {
        List<TokenLogprobs> input = null;
        try {
            HttpResponse<String> r = prefillCall.get(stalled.limit().toMillis(), TimeUnit.MILLISECONDS);
            if (r.statusCode() == 200) input = inputLogprobs(prefillAnswer(r.body(), ids.length), ids, start, tokenizer.vocabSize(), top);
        } catch (ExecutionException | TimeoutException e) {
            // no answer: as a missing one
        } catch (BadAnswer bad) { // an answer, broken
            backends.abort(d, room);
            throw malformed(p, "answer", room, bad);
        }
        if (input != null) return input;
        backends.abort(d, room);
        throw missingInputLogprobs(p, room);
    }

    private static Failure missingInputLogprobs(Backend p, long room) {
        return new Failure(502, "bad_gateway", p + " answered room " + room
                + " without the input token log probabilities the request asked for (a prefill older than the router?)");
    }

    /**
     * The prefill's {@code meta_info.input_token_logprobs} (and {@code input_top_logprobs}) for positions [start, ids.length),
     * the first prompt token's null; null when the answer lacks them or they do not match the prompt; a {@link BadAnswer}
     * when a position's log probability is no finite number or its top ones are not triples of a finite number and a token
     * id of the model's {@code vocab}, at most {@code maxTop}.
     */
    static List<TokenLogprobs> inputLogprobs(JsonNode pre, int[] ids, int start, int vocab, int maxTop) throws BadAnswer {
        JsonNode lps = pre.path("meta_info").path("input_token_logprobs"), tops = pre.path("meta_info").path("input_top_logprobs");
        if (!lps.isArray() || lps.size() != ids.length - start) return null;
        List<TokenLogprobs> out = new ArrayList<>();
        for (int i = 0; i < lps.size(); i++) {
            JsonNode e = lps.get(i);
            if (e.path(1).intValue() != ids[start + i] || !e.path(1).isIntegralNumber()) return null;
            if (e.path(0).isNull()) {
                if (start + i != 0) return null; // only the first prompt token has none
                out.add(null);
                continue;
            }
            JsonNode top = tops.path(i);
            if (!top.isMissingNode() && !top.isArray() || top.size() > maxTop) {
                throw new BadAnswer("input_top_logprobs[" + i + "] " + shown(top) + " is not an array of at most " + maxTop + " triples");
            }
            int n = top.size();
            int[] topIds = new int[n];
            float[] topLps = new float[n];
            for (int k = 0; k < n; k++) {
                topIds[k] = tokenId(top.get(k).get(1), vocab, "the token id of input_top_logprobs", i, k);
                topLps[k] = finite(top.get(k).get(0), "the logprob of input_top_logprobs", i, k);
            }
            out.add(new TokenLogprobs(ids[start + i], finite(e.get(0), "the logprob of input_token_logprobs", i, -1), topIds, topLps));
        }
        return out;
    }

    /** A decode silent past the stream-idle limit: the room is aborted on both engines, and the client gets a 502 naming the decode. */
    private Failure hung(Backend d, Backend p, long room) {
        backends.abort(d, room);
        backends.abort(p, room);
        return new Failure(502, "bad_gateway", d + " sent nothing on room " + room + " for " + stalled.limit().toSeconds()
                + " s, not even a keep-alive: taken as hung (a stopped or unreachable process)");
    }

    /** Writes to the client; when it went away, the room is aborted on both engines and the IOException goes on. */
    private void toClient(ClientWrite write, Backend d, Backend p, long room) throws IOException {
        try {
            write.run();
        } catch (IOException clientGone) {
            backends.abort(d, room);
            backends.abort(p, room);
            throw clientGone;
        }
    }

    /**
     * A decode's failure before the request's first token (its error answer, or its error event on a stream
     * begun on a keep-alive): the prefill is told, and its own error wins where it is the real cause.
     */
    private Failure failedBeforeFirstToken(ErrorBody err, Backend p, long room, CompletableFuture<HttpResponse<String>> prefillCall) {
        backends.abort(p, room);
        ErrorBody prefillErr = prefillError(prefillCall, p);
        if (prefillErr != null && prefillErr.draining()) { // the prefill took nothing: run it elsewhere
            takeOut(p, prefillErr); // here too: the call's own callback may not have run yet
            return prefillErr.failure();
        }
        // A transfer the prefill failed or refused shows up on the decode as an abort (or not as a transfer
        // failure at all): the prefill's reason, and its status, are the real ones. Not when the decode refused
        // the request (a 4xx, e.g. too few pages): that is the client's answer, and the prefill's error is then
        // only the abort sent to it just now.
        // A decode's answer that is no engine's (ErrorBody#parse's bad_gateway) is its own fault, whatever the prefill says after the abort.
        if (prefillErr != null && !err.clientError() && !"bad_gateway".equals(err.type())
                && (err.kind() == null || FailureKind.ABORTED.label().equals(err.kind()))) {
            return refusedConnection(prefillCall) ? prefillErr.failure().asRefusedConnection() : prefillErr.failure();
        }
        return err.failure();
    }

    /**
     * A decode's error after its first token: an abort the router sent it because the prefill failed in the moment the
     * first token was on its way (the prefill's failure is the real reason, and the client gets its kind); else the
     * decode's own error.
     */
    private static ErrorBody abortedForItsPrefill(ErrorBody err, Backend p, CompletableFuture<HttpResponse<String>> prefillCall) {
        if (!FailureKind.ABORTED.label().equals(err.kind()) || !prefillCall.isDone()) return err;
        ErrorBody prefillErr = prefillError(prefillCall, p);
        return prefillErr != null && !prefillErr.draining() ? prefillErr : err;
    }

    /** Whether the prefill call failed because the prefill refused its connection (so nothing of it started there). */
    private static boolean refusedConnection(CompletableFuture<HttpResponse<String>> prefillCall) {
        if (!prefillCall.isCompletedExceptionally()) return false;
        try {
            prefillCall.join();
            return false;
        } catch (CompletionException | CancellationException e) {
            return Backends.isConnectionRefused(e);
        }
    }

    /**
     * The decode's next stream line. A read that fails (the decode died, its connection dropped mid-body) is
     * the decode's failure, a 502 naming it, not an IOException: that one would reach the client as a bare
     * end of its stream, with no error event and no [DONE] (an IOException here means the client went away).
     */
    private String readDecodeLine(BufferedReader in, StalledStreams.Watched stream, Backend d, Backend p, long room) throws Failure {
        // At most the longest event a decode sends (its last holds every token id): readLine would
        // collect a line that never ends for as long as the decode sent it.
        int most = Http.engineBodyLimit(contextTokens);
        StringBuilder line = new StringBuilder();
        try {
            int c;
            while ((c = in.read()) >= 0 && c != '\n') {
                if (line.length() >= most) {
                    backends.abort(d, room);
                    backends.abort(p, room);
                    throw new Failure(502, "bad_gateway", d + " sent an event line of more than " + most + " characters on room " + room);
                }
                line.append((char) c);
            }
            if (c < 0 && line.isEmpty()) return null;
        } catch (IOException e) {
            if (stream.cut()) throw hung(d, p, room);
            backends.abort(p, room);
            throw new Failure(502, "bad_gateway", d + " failed mid-stream on room " + room + ": " + e);
        }
        int end = line.length();
        if (end > 0 && line.charAt(end - 1) == '\r') line.setLength(end - 1);
        return line.toString();
    }

    /** One event of the decode's stream; one that is no JSON fails the request as {@link #readDecodeLine} does. */
    private JsonNode decodeEvent(String data, Backend d, Backend p, long room) throws Failure {
        try {
            return Http.JSON.readTree(data);
        } catch (IOException e) {
            backends.abort(d, room);
            backends.abort(p, room);
            throw new Failure(502, "bad_gateway", d + " sent a malformed event on room " + room + ": " + e.getMessage());
        }
    }

    /**
     * What is wrong with an engine's answer the router read (a decode's event, a prefill's answer: a wrong JSON type, a
     * missing field, a token id outside the model's vocabulary, a negative count): the request's 502 {@code bad_gateway}
     * naming the engine ({@link #malformed}), never the 400 or 500 its reading would otherwise have thrown. No stack trace:
     * it is an answer, not a bug.
     */
    static final class BadAnswer extends Exception {
        BadAnswer(String what) {
            super(what, null, false, false);
        }
    }

    /** The 502 of {@code b}'s broken {@code what} ("event", "answer") on {@code room}; its rooms are the caller's to abort. */
    private static Failure malformed(Backend b, String what, long room, BadAnswer bad) {
        return new Failure(502, "bad_gateway", b + " sent a malformed " + what + " on room " + room + ": " + bad.getMessage());
    }

    /** An engine's JSON value in a message: short (its first 40 characters), its control characters escaped ({@link LogSafe}). */
    static String shown(JsonNode n) {
        if (n == null || n.isMissingNode()) return "(none)";
        String s = n.toString();
        return LogSafe.text(s.length() > 40 ? s.substring(0, 40) + "..." : s);
    }

    /** An engine's token id: an integral JSON number in {@code [0, vocab)}. */
    static int tokenId(JsonNode n, int vocab, String field) throws BadAnswer {
        return tokenId(n, vocab, field, -1, -1);
    }

    /**
     * As {@link #tokenId(JsonNode, int, String)}, of {@code field[i][k]} (an index below 0: none): the name is made only for
     * the message of a bad one, nothing per token of a valid answer.
     */
    static int tokenId(JsonNode n, int vocab, String field, int i, int k) throws BadAnswer {
        if (n == null || !n.isIntegralNumber() || !n.canConvertToInt() || n.intValue() < 0 || n.intValue() >= vocab) {
            throw new BadAnswer(at(field, i, k) + " " + shown(n) + " is not a token id of the model's vocabulary of " + vocab);
        }
        return n.intValue();
    }

    /** An engine's log probability: a JSON number that is finite as a float (a client's JSON has no Infinity). */
    static float finite(JsonNode n, String field) throws BadAnswer {
        return finite(n, field, -1, -1);
    }

    /** As {@link #finite(JsonNode, String)}, of {@code field[i][k]}, named as {@link #tokenId(JsonNode, int, String, int, int)}. */
    static float finite(JsonNode n, String field, int i, int k) throws BadAnswer {
        float v = n != null && n.isNumber() ? n.floatValue() : Float.NaN;
        if (!Float.isFinite(v)) throw new BadAnswer(at(field, i, k) + " " + shown(n) + " is not a finite number");
        return v;
    }

    private static String at(String field, int i, int k) {
        return field + (i >= 0 ? "[" + i + "]" : "") + (k >= 0 ? "[" + k + "]" : "");
    }

    /** An engine's count or time: a JSON number, finite and not negative (integral where {@code integral}), when present. */
    private static void amount(JsonNode o, String field, boolean integral, long most) throws BadAnswer {
        JsonNode n = o.get(field);
        if (n == null) return;
        if (!n.isNumber() || integral && !n.isIntegralNumber() || !Double.isFinite(n.doubleValue()) || n.doubleValue() < 0 || n.doubleValue() > most) {
            throw new BadAnswer(field + " " + shown(n) + " is not " + (integral ? "a count" : "a time") + " in [0, " + most + "]");
        }
    }

    /**
     * A decode's finish event checked: {@code finish_reason} {@code stop} or {@code length}, {@code matched} (when present) a
     * token id, {@code timings} (when present) an object of counts and times. Returns its timings (null: none).
     */
    private static JsonNode finishEvent(JsonNode ev, int vocab) throws BadAnswer {
        JsonNode reason = ev.get("finish_reason");
        if (!reason.isTextual() || !"stop".equals(reason.textValue()) && !"length".equals(reason.textValue())) {
            throw new BadAnswer("finish_reason " + shown(reason) + " is neither \"stop\" nor \"length\"");
        }
        if (ev.has("matched")) tokenId(ev.get("matched"), vocab, "matched");
        JsonNode timings = ev.get("timings");
        if (timings == null || timings.isNull()) return null;
        if (!timings.isObject()) throw new BadAnswer("timings " + shown(timings) + " is no JSON object");
        amount(timings, "transfer_ms", false, Long.MAX_VALUE);
        amount(timings, "first_decode_ms", false, Long.MAX_VALUE);
        amount(timings, "bytes", true, Long.MAX_VALUE);
        return timings;
    }

    /**
     * A prefill's 200 answer: a JSON object whose {@code cached_tokens} (when present) is a count of at most the prompt's
     * {@code promptTokens}, whose {@code kv_pages} a count and whose times ({@code compute_ms}, {@code send_ms}) are times.
     */
    static JsonNode prefillAnswer(String body, int promptTokens) throws BadAnswer {
        JsonNode pre;
        try {
            pre = Http.JSON.readTree(body);
        } catch (JsonProcessingException e) {
            throw new BadAnswer("no JSON: " + LogSafe.text(String.valueOf(e.getOriginalMessage())));
        }
        if (pre == null || !pre.isObject()) throw new BadAnswer("an answer that is no JSON object: " + shown(pre));
        amount(pre, "cached_tokens", true, promptTokens);
        amount(pre, "kv_pages", true, Integer.MAX_VALUE);
        amount(pre, "compute_ms", false, Long.MAX_VALUE);
        amount(pre, "send_ms", false, Long.MAX_VALUE);
        JsonNode meta = pre.get("meta_info");
        if (meta != null && !meta.isObject()) throw new BadAnswer("meta_info " + shown(meta) + " is no JSON object");
        return pre;
    }

    /**
     * Why the decode ended the request, from its finish event: {@code length}, or {@code stop} at the token its
     * {@code matched} names (a decode that does not name it ended at its last token), the model's end (EOS / BOS, vLLM's
     * null {@code stop_reason}) unless the request ignores it, else one of its stop token ids.
     */
    private static Finish decodeFinish(JsonNode ev, List<Integer> tokens, Ask ask) {
        if (!"stop".equals(ev.get("finish_reason").asText())) return Finish.LENGTH;
        int matched = ev.path("matched").isIntegralNumber() ? ev.get("matched").intValue() : tokens.isEmpty() ? -1 : tokens.getLast();
        // Under a structured output EOS ends the answer whatever ignore_eos says (it comes only where it may, or where nothing else can).
        boolean modelEnd = (!ask.rules().ignoreEos() || ask.rules().constraint() != null && matched == Tokenizer.EOS) && Tokenizer.endsSequence(matched);
        return Finish.token(matched, modelEnd);
    }

    /** The finished request; its text is whole (a stream sends what it has not sent yet with the last event). */
    private Outcome outcome(Router.RequestRecord record, int[] ids, List<Integer> tokens, CharSequence text, Finish finish, double ttft,
                            long start, CompletableFuture<HttpResponse<String>> prefillCall, Backend p, JsonNode decodeTimings,
                            List<TokenLogprobs> logprobs, List<Integer> offsets, List<TokenLogprobs> input) throws Failure {
        long room = record.room;
        long took = System.nanoTime() - start;
        HttpResponse<String> pr = null;
        try {
            pr = prefillCall.get(5, TimeUnit.SECONDS);
        } catch (Exception e) {
            // timings are a bonus; the tokens are what the client asked for
        }
        JsonNode pre = null;
        if (pr != null && pr.statusCode() == 200) {
            try {
                pre = prefillAnswer(pr.body(), ids.length); // a 200 that is no answer is a broken prefill, not a missing one
            } catch (BadAnswer bad) {
                throw malformed(p, "answer", room, bad);
            }
        }
        meters.succeeded(took, ids.length, tokens.size(), record.tenant);
        int[] toks = tokens.stream().mapToInt(Integer::intValue).toArray();
        return new Outcome(room, ids.length, toks, text.toString(), finish, ttft, took / 1e6, pre, decodeTimings, logprobs,
                logprobs == null ? null : offsets.stream().mapToInt(Integer::intValue).toArray(), input);
    }

    private static ErrorBody prefillError(CompletableFuture<HttpResponse<String>> call, Backend p) {
        try {
            HttpResponse<String> r = call.get(3, TimeUnit.SECONDS);
            return r.statusCode() == 200 ? null : ErrorBody.parse(p, r.statusCode(), r.body());
        } catch (ExecutionException | CancellationException e) {
            if (e instanceof CancellationException || e.getCause() instanceof CancellationException) { // failed by checkHealth
                String why = p.unreachable;
                return why == null ? null : new ErrorBody(500, "kv_transfer_error", FailureKind.PREFILL_UNREACHABLE.label(),
                        p + " unreachable: " + why + "; its requests in flight were failed");
            }
            return new ErrorBody(500, "kv_transfer_error", FailureKind.PREFILL_UNREACHABLE.label(), p + " unreachable: " + e.getCause());
        } catch (Exception e) {
            return null;
        }
    }

    /**
     * A backend that answered {@code r}, a 503 of a draining engine ({@link Drain}), is out of rotation until a health
     * check passes (its /health says draining until it stops; a new process in its place passes).
     */
    private static void outIfDraining(Backend b, HttpResponse<String> r) {
        if (r.statusCode() == 503) {
            ErrorBody err = ErrorBody.parse(b, r.statusCode(), r.body());
            if (err.draining()) takeOut(b, err);
        }
    }

    private static void takeOut(Backend b, ErrorBody draining) {
        if (b.healthy) log.warn("{} is draining (shutting down): out of rotation ({})", b, LogSafe.text(draining.message()));
        b.healthy = false;
    }

    /**
     * A backend's error answer: its status, and what its body says (type, transfer failure kind, message, and
     * {@code draining}: the 503 of an engine shutting down, which took nothing of the request).
     */
    private record ErrorBody(int status, String type, String kind, String message, boolean draining, String param) {
        ErrorBody(int status, String type, String kind, String message) {
            this(status, type, kind, message, false, null);
        }

        /**
         * {@code from}'s answer of {@code status} (not 200) and {@code body}. A status that is no error (a 1xx, 204, 3xx, or
         * past 599) is no answer an engine gives: a 502 {@code bad_gateway} naming it ({@link #failure}; a 500 before).
         */
        static ErrorBody parse(Backend from, int status, String body) {
            if (status < 400 || status > 599) {
                return new ErrorBody(status, "bad_gateway", null, from + " answered HTTP " + status + ", no engine's answer: "
                        + LogSafe.text(body.length() > 80 ? body.substring(0, 80) + "..." : body));
            }
            try {
                JsonNode e = Http.JSON.readTree(body).path("error");
                return new ErrorBody(status, e.hasNonNull("type") ? e.get("type").asText() : null,
                        e.hasNonNull("kind") ? e.get("kind").asText() : null, e.path("message").asText(body),
                        status == 503 && Drain.CODE.equals(e.path("code").asText(null)), grammarParam(e));
            } catch (IOException ex) {
                return new ErrorBody(status, null, null, body);
            }
        }

        /**
         * An engine error's {@code param} where it is the one an engine names, a grammar past its run-time bound
         * ({@link OutputConstraint.Exceeded#PARAM}); else null: an engine's (or a peer's) other text is not the client's field.
         */
        static String grammarParam(JsonNode error) {
            return OutputConstraint.Exceeded.PARAM.equals(error.path("param").asText(null)) ? OutputConstraint.Exceeded.PARAM : null;
        }

        /**
         * What the client gets: a backend's client error (4xx: the request can never succeed, a retry is no use)
         * passes through with its status as an invalid_request_error; an engine's 503 service_unavailable (its structured
         * output's compiler busy) as a 503 with {@code Retry-After}; another server error is a 500 of the backend's type.
         */
        boolean clientError() {
            return status >= 400 && status < 500;
        }

        Failure failure() {
            // Nothing of the request started there: the router runs it again on another instance (PdCall#admitted).
            // Its message escaped (LogSafe): the router logs it when it runs the request again.
            if (draining) return new Failure(503, "service_unavailable", null, LogSafe.text(message)).asRefusedConnection();
            if (status < 400 || status > 599) return new Failure(502, "bad_gateway", message); // parse's: no engine's answer
            if (clientError()) return new Failure(status, "invalid_request_error", kind, message).param(param);
            // An engine's compiler of structured outputs was busy (Http.Unavailable): a 503 to try again, as the router's own.
            if (status == 503 && "service_unavailable".equals(type)) {
                return new Failure(503, type, kind, message).retryAfter(OutputConstraint.Busy.RETRY_AFTER_SECONDS);
            }
            String t = type != null ? type : kind != null ? "kv_transfer_error" : "internal_error";
            return new Failure(500, t, kind, message);
        }
    }
}
