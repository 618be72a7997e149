package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.ops.OpsHandlers;

import java.io.IOException;
import java.util.ArrayDeque;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.IntSupplier;

/**
 * The router's own status: {@code GET /status.json}, its view of the serving stack as one document ({@code "kind": "router"}),
 * and {@code GET /status}, the page that shows it live ({@code router.html} and {@code router.js} of kvferry-ops, with the
 * process pages' {@code common.js} and {@code status.css}); {@code kvferry status --router} renders the same document in a terminal.
 *
 * <p>The document: its backends (url, role, in rotation or not and for how long out of it, requests in flight, the last health check's result and age, a
 * prefill's bootstrap registry), requests in the router and waiting for a slot, requests answered since start by status and
 * status class, tokens in and out, rates over the last minute, TTFT and end-to-end p50/p99 over the last minute
 * ({@link RecentLatencies}), the tenants' load, limits, rate buckets and refusals (names only, never keys), the admission figures
 * (the {@code --max-backends} cap among them), its structured-output compiler's outcomes, waiting specs and mean compile time
 * ({@link StructuredOutputMeters#status}), and once a drain began the requests it met, completed or cut ({@link Drain}). It is open as
 * {@code /health} and {@code /metrics} are, and names the tenants as {@code /metrics} does.
 *
 * <p>It never holds up a request: everything it reads is an immutable snapshot (the backend {@link Pool}, a backend's last
 * check, the rates) or an atomic counter; it takes no lock a request takes. The rates are sampled once a second on the
 * health thread ({@link #sample}), which alone owns the samples and publishes each result whole.
 */
final class RouterStatus {
    /** The window of the latency percentiles and the rates. */
    static final int WINDOW_SECONDS = 60;
    static final String JSON_ROUTE = "/status.json";

    private final Backends backends;
    private final RouterMeters meters;
    private final IntSupplier waiting;
    private final Tenants tenants;
    private final Router.Admission admission;
    private final String model;
    private final long startedMillis = System.currentTimeMillis();
    private final byte[] page = OpsHandlers.page("router.html");
    private final byte[] script = OpsHandlers.page("router.js");
    private final byte[] common = OpsHandlers.page("common.js");
    private final byte[] style = OpsHandlers.page("status.css");

    /** The totals at one moment (the health thread's samples). */
    private record Totals(long atNanos, long requests, long serverErrors, long promptTokens, long generatedTokens) {
    }

    /** The rates over the last {@code seconds} (0: no two samples yet). */
    record Rates(double seconds, double requestsPerSecond, double serverErrorsPerSecond, double promptTokensPerSecond,
                 double generatedTokensPerSecond) {
    }

    /** The samples of the last window, oldest first: the health thread's only. */
    private final ArrayDeque<Totals> samples = new ArrayDeque<>();
    private volatile Rates rates = new Rates(0, 0, 0, 0, 0);

    /** The router's graceful shutdown: whether it drains (new requests refused, those running end), and the requests it met. */
    private final Drain drain;
    /** The router's structured-output compiler. */
    private final OutputConstraint.Compiler outputs;

    /** @param waiting requests waiting for an admission slot now; {@code drain} the router's, {@code outputs} its compiler */
    RouterStatus(Backends backends, RouterMeters meters, IntSupplier waiting, Tenants tenants, Router.Admission admission, String model,
                 Drain drain, OutputConstraint.Compiler outputs) {
        this.drain = drain;
        this.outputs = outputs;
        this.backends = backends;
        this.meters = meters;
        this.waiting = waiting;
        this.tenants = tenants;
        this.admission = admission;
        this.model = model;
        sample();
    }

    /** Takes the totals now and publishes the rates since the oldest sample of the window. On the health thread, once a second. */
    void sample() {
        long requests = 0, serverErrors = 0;
        for (Map.Entry<Integer, Long> e : meters.answeredByStatus().entrySet()) {
            requests += e.getValue();
            if (e.getKey() >= 500 && e.getKey() != RouterMeters.CLIENT_CLOSED) serverErrors += e.getValue();
        }
        Totals now = new Totals(System.nanoTime(), requests, serverErrors, meters.promptTokensTotal(), meters.generatedTokensTotal());
        samples.addLast(now);
        while (samples.size() > 2 && now.atNanos - samples.peekFirst().atNanos > TimeUnit.SECONDS.toNanos(WINDOW_SECONDS)) {
            samples.removeFirst();
        }
        Totals first = samples.peekFirst();
        double s = (now.atNanos - first.atNanos) / 1e9;
        rates = s <= 0 ? new Rates(0, 0, 0, 0, 0) : new Rates(s, (now.requests - first.requests) / s, (now.serverErrors - first.serverErrors) / s,
                (now.promptTokens - first.promptTokens) / s, (now.generatedTokens - first.generatedTokens) / s);
    }

    /** The document now. */
    ObjectNode document() {
        ObjectNode doc = Http.JSON.createObjectNode();
        long now = System.currentTimeMillis();
        doc.put("kind", "router");
        doc.put("pid", ProcessHandle.current().pid());
        doc.put("model", model);
        doc.put("now_ms", now);
        doc.put("uptime_ms", now - startedMillis);

        ObjectNode config = doc.putObject("config");
        config.put("max_concurrent_requests", admission.maxConcurrent());
        config.put("queue_timeout_ms", admission.queueTimeout().toMillis());
        config.put("tenants", tenants != null);
        config.put("max_backends", admission.maxBackends());
        config.put("replace_after_ms", Backends.REPLACE_AFTER.toMillis());

        Pool pool = backends.pool();
        ArrayNode list = doc.putArray("backends");
        long healthyPrefills = 0, healthyDecodes = 0;
        for (Backend b : pool.all()) {
            ObjectNode o = list.addObject();
            o.put("url", b.url.toString());
            o.put("role", b.prefill ? "prefill" : "decode");
            boolean serves = b.serves();
            if (serves && b.prefill) healthyPrefills++;
            if (serves && !b.prefill) healthyDecodes++;
            o.put("healthy", serves);
            o.put("origin", b.origin()); // command_line (--prefill/--decode: never replaced at --max-backends) or added
            o.put("in_flight", b.inFlight.get());
            // How long it has been out (null: in rotation): at Backends.REPLACE_AFTER a full router's add may replace it.
            Long out = backends.outOfRotationMillis(b);
            if (out == null) o.putNull("out_of_rotation_ms");
            else o.put("out_of_rotation_ms", out.longValue());
            if (b.prefill) o.put("bootstrap", b.bootstrap);
            Backend.Check c = b.lastCheck;
            o.put("last_check", c == null ? null : c.result());
            if (c == null) o.putNull("last_check_age_ms");
            else o.put("last_check_age_ms", Math.max(now - c.atMillis(), 0));
        }
        boolean draining = drain.draining();
        doc.put("status", draining ? "draining" : healthyPrefills == 0 || healthyDecodes == 0 ? "unavailable"
                : healthyPrefills == pool.prefills().size() && healthyDecodes == pool.decodes().size() ? "ok" : "degraded");
        if (draining) { // the requests running when it began: ended since, or cut at --drain-timeout-s
            ObjectNode d = doc.putObject("drain");
            d.put("completed", (long) drain.count(false));
            d.put("cut", (long) drain.count(true));
        }

        ObjectNode requests = doc.putObject("requests");
        int waitingNow = waiting.getAsInt();
        requests.put("running", meters.running());
        requests.put("waiting", waitingNow);
        Map<Integer, Long> answered = meters.answeredByStatus();
        ObjectNode byStatus = Http.JSON.createObjectNode(), byClass = Http.JSON.createObjectNode();
        long total = 0;
        for (String c : new String[]{"2xx", "4xx", "5xx"}) byClass.put(c, 0L);
        for (Map.Entry<Integer, Long> e : answered.entrySet()) {
            total += e.getValue();
            byStatus.put(Integer.toString(e.getKey()), e.getValue());
            String c = e.getKey() / 100 + "xx";
            byClass.put(c, byClass.path(c).asLong() + e.getValue());
        }
        requests.put("total", total);
        requests.set("by_status", byStatus);
        requests.set("by_class", byClass);

        ObjectNode tokens = doc.putObject("tokens");
        tokens.put("prompt", meters.promptTokensTotal());
        tokens.put("generated", meters.generatedTokensTotal());

        Rates r = rates;
        ObjectNode rate = doc.putObject("rates");
        rate.put("window_s", round(r.seconds()));
        rate.put("requests_per_s", round(r.requestsPerSecond()));
        rate.put("server_errors_per_s", round(r.serverErrorsPerSecond()));
        rate.put("prompt_tokens_per_s", round(r.promptTokensPerSecond()));
        rate.put("generated_tokens_per_s", round(r.generatedTokensPerSecond()));

        ObjectNode latency = doc.putObject("latency");
        latency.put("window_s", WINDOW_SECONDS);
        latency.set("ttft_ms", summary(meters.recentTtft.summary(WINDOW_SECONDS)));
        latency.set("e2e_ms", summary(meters.recentE2e.summary(WINDOW_SECONDS)));

        doc.set("structured_outputs", StructuredOutputMeters.status(outputs));

        if (tenants != null) {
            ArrayNode ts = doc.putArray("tenants");
            for (Tenants.Tenant t : tenants.list()) { // names, limits and counts: never a key (a tenant keeps only its digest)
                ObjectNode o = ts.addObject();
                o.put("name", t.name());
                o.put("running", meters.tenantRunning(t.name()));
                o.put("waiting", tenants.waiting(t.name()));
                o.put("max_concurrent_requests", t.maxConcurrent());
                // Its per-minute limits (0: none), what its buckets hold now (null without that limit), and the requests
                // each turned away (RouterMeters.RATE_LIMITED's counts).
                RateBucket rb = t.requests, tb = t.tokens;
                o.put("requests_per_minute", t.requestsPerMinute());
                o.put("tokens_per_minute", t.tokensPerMinute());
                if (rb == null) o.putNull("remaining_requests");
                else o.put("remaining_requests", rb.remaining());
                if (tb == null) o.putNull("remaining_tokens");
                else o.put("remaining_tokens", tb.remaining());
                o.put("rate_limited_requests", meters.rateLimitedCount(t.name(), RouterMeters.LIMIT_REQUESTS));
                o.put("rate_limited_tokens", meters.rateLimitedCount(t.name(), RouterMeters.LIMIT_TOKENS));
            }
        }
        return doc;
    }

    private static ObjectNode summary(RecentLatencies.Summary s) {
        ObjectNode o = Http.JSON.createObjectNode();
        o.put("count", s.count());
        o.put("p50", round(s.p50Ms()));
        o.put("p99", round(s.p99Ms()));
        o.put("max", round(s.maxMs()));
        return o;
    }

    private static double round(double v) {
        return Math.round(v * 1000) / 1000.0;
    }

    /** {@code GET /status.json}. */
    void json(HttpExchange ex) throws IOException {
        if (!Http.method(ex, "GET")) return;
        ex.getResponseHeaders().set("Cache-Control", "no-store");
        Http.sendJson(ex, 200, document());
    }

    /** {@code GET /status}: the page. */
    void page(HttpExchange ex) throws IOException {
        send(ex, "text/html; charset=utf-8", page);
    }

    /** {@code GET /status.js}: the page's script. */
    void script(HttpExchange ex) throws IOException {
        send(ex, "text/javascript; charset=utf-8", script);
    }

    /** {@code GET /common.js}: the helpers the page shares with the process pages (loaded before its script). */
    void common(HttpExchange ex) throws IOException {
        send(ex, "text/javascript; charset=utf-8", common);
    }

    /** {@code GET /status.css}: the process pages' style. */
    void style(HttpExchange ex) throws IOException {
        send(ex, "text/css; charset=utf-8", style);
    }

    private static void send(HttpExchange ex, String type, byte[] body) throws IOException {
        if (!Http.method(ex, "GET")) return;
        Http.send(ex, 200, type, body);
    }
}
