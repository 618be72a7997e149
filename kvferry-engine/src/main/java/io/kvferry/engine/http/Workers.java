package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import io.kvferry.http.BearerToken;
import io.kvferry.metrics.LogSafe;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.net.URI;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * The router's {@code /workers} route: its backends ({@link Backends}) listed, added and removed while it serves. The
 * changes run on the health thread, the pool's owner ({@link Backends#addIfAbsent}, {@link Backends#remove}).
 */
final class Workers {
    private static final Logger log = LoggerFactory.getLogger(Router.class); // the router's log, as before the split

    private final Backends backends;
    /** The cluster token, which the changes need; null: the router refuses them. */
    private final BearerToken clusterToken;
    /** The most backends the pool holds ({@code --max-backends}): an add beyond it is refused. */
    private final int maxBackends;

    Workers(Backends backends, BearerToken clusterToken, int maxBackends) {
        this.backends = backends;
        this.clusterToken = clusterToken;
        this.maxBackends = maxBackends;
    }

    /**
     * {@code /workers}, the router's backends changed while it serves: {@code GET} lists them (open, as
     * {@code /metrics}, which names them too); {@code POST {"url", "worker_type": "prefill"|"decode"}} adds one
     * that passes a health check now; where the router holds {@code --max-backends} already, in the place of the backend
     * of its role added at run time out of rotation the longest if that is {@link Backends#REPLACE_AFTER} at least, else not
     * (403, code {@code max_backends}; one given on the command line is never replaced); {@code DELETE ?url=U[&worker_type=T]} takes one out of rotation (its requests in flight
     * end there). Changes need the cluster token: whoever may add a backend may send it every prompt, so a
     * router without a token refuses them.
     */
    void workersRoute(HttpExchange ex) throws Exception {
        String method = ex.getRequestMethod();
        if ("GET".equals(method) || "HEAD".equals(method)) { // HEAD: the GET's status and headers (Http.send)
            Http.sendJson(ex, 200, workersJson(backends.pool()));
            return;
        }
        if (!"POST".equals(method) && !"DELETE".equals(method)) {
            ex.getResponseHeaders().set("Allow", "GET, HEAD, POST, DELETE");
            Http.sendError(ex, 405, "invalid_request_error", method + " " + Router.WORKERS_ROUTE + " is not allowed; use GET, POST or DELETE");
            return;
        }
        if (clusterToken == null) {
            Http.discardBody(ex);
            Http.sendError(ex, 403, "permission_error", method + " " + Router.WORKERS_ROUTE + " needs the cluster token and this router has none "
                    + "(KVFERRY_AUTH_TOKEN or --auth-token-file): without one, anyone who reaches its port could add a backend of theirs "
                    + "and be sent every prompt");
            return;
        }
        if (!Http.authorized(ex, clusterToken)) return;
        if ("POST".equals(method)) addWorker(ex);
        else removeWorker(ex);
    }

    private void addWorker(HttpExchange ex) throws Exception {
        JsonNode body = Http.readJson(ex);
        if (!body.isObject()) throw new Http.BadRequest("the body must be a JSON object {\"url\", \"worker_type\"}, got " + body);
        String url = Http.textField(body, "url"), type = Http.textField(body, "worker_type");
        boolean prefill = switch (type) {
            case "prefill" -> true;
            case "decode" -> false;
            default -> throw new Http.BadRequest("worker_type", "worker_type must be \"prefill\" or \"decode\", got \"" + LogSafe.value(type) + "\"");
        };
        Backend b;
        try {
            b = new Backend(url, prefill, null, "url", false);
        } catch (IllegalArgumentException e) {
            throw new Http.BadRequest("url", e.getMessage());
        }
        // The usual answer to an engine re-asserting its entry (WorkerRegistration, every 5 s each): read from the pool's
        // snapshot, with no lock and not on the health thread, so 256 engines' ~51 a second cost the health loop nothing.
        Backend there = backends.pool().find(b.url, prefill);
        if (there != null) {
            Http.sendError(ex, 409, "invalid_request_error", null, "url", there + " is a backend of this router already");
            return;
        }
        Pool now = backends.pool();
        if (now.all().size() >= maxBackends && backends.replaceable(now, prefill) == null) { // before its health check: a full router calls nobody
            full(ex, b);
            return;
        }
        // Checked here, not on the health thread (a check may take the probe timeout): it joins only if it serves now.
        String refused = backends.firstCheck(b);
        if (refused != null) {
            Http.sendError(ex, 502, "bad_gateway", null, "url", b + " was not added: " + refused);
            return;
        }
        Backends.Added added;
        try {
            added = backends.addIfAbsent(b, maxBackends);
        } catch (Backends.Full f) { // another add took the last place meanwhile, or the one out of rotation came back
            full(ex, b);
            return;
        }
        if (added.clash() != null) {
            Http.sendError(ex, 409, "invalid_request_error", null, "url", added.clash() + " is a backend of this router already");
            return;
        }
        if (added.replaced() == null) log.info("{} added through {}", b, Router.WORKERS_ROUTE); // a replacement: Backends' WARN line
        Http.sendJson(ex, 200, workerJson(b));
    }

    /**
     * The 403 of an add to a router holding {@code --max-backends} already: not a 409 (a registering engine counts a 409 as
     * in) and not a 5xx (the router is not failing: only a backend leaving makes room); a registering engine
     * ({@code WorkerRegistration}) keeps trying on this code.
     */
    private void full(HttpExchange ex, Backend b) throws Exception {
        // The one of its role added at run time out the longest, if any: how long until an add replaces it (the caller's retries,
        // or the operator's); and the one given on the command line out the longest, which is kept (configuration).
        Backend longest = null, kept = null;
        long longestMs = -1, keptMs = -1;
        Pool now = backends.pool();
        for (Backend x : b.prefill ? now.prefills() : now.decodes()) {
            Long ms = backends.outOfRotationMillis(x);
            if (ms == null) continue;
            if (x.fromCommandLine && ms > keptMs) {
                kept = x;
                keptMs = ms;
            } else if (!x.fromCommandLine && ms > longestMs) {
                longest = x;
                longestMs = ms;
            }
        }
        String role = b.prefill ? "prefill" : "decode";
        Http.sendCodedError(ex, 403, "invalid_request_error", "url", Router.BACKENDS_FULL_CODE, b + " was not added: this router holds its limit of "
                + maxBackends + " backends (--max-backends) and none of its " + role + "s added at run time has been out of rotation for "
                + Backends.REPLACE_AFTER.toSeconds() + " s" + (longest == null ? "" : " (" + longest + " has been out for "
                + TimeUnit.MILLISECONDS.toSeconds(longestMs) + " s)")
                + (kept == null ? "" : "; " + kept + ", out of rotation for " + TimeUnit.MILLISECONDS.toSeconds(keptMs) + " s, was given at start (--"
                + role + ") and is kept: a backend of the router's command line is never replaced (remove it with DELETE " + Router.WORKERS_ROUTE
                + "?url=" + kept.url + "&worker_type=" + role + ")")
                + "; remove one first (DELETE " + Router.WORKERS_ROUTE + ") or start it with a higher limit");
    }

    private void removeWorker(HttpExchange ex) throws Exception {
        Http.discardBody(ex);
        String url = queryParam(ex, "url");
        if (url == null) throw new Http.BadRequest("url", "DELETE " + Router.WORKERS_ROUTE + " needs ?url=U, the backend's URL as GET " + Router.WORKERS_ROUTE + " lists it");
        URI u;
        try {
            u = Backend.parse(url, "url");
        } catch (IllegalArgumentException e) {
            throw new Http.BadRequest("url", e.getMessage());
        }
        String type = queryParam(ex, "worker_type");
        if (type != null && !type.equals("prefill") && !type.equals("decode")) {
            throw new Http.BadRequest("worker_type", "worker_type must be prefill or decode, got \"" + LogSafe.value(type) + "\"");
        }
        List<Backend> at = backends.remove(u, type);
        if (at.isEmpty()) {
            Http.sendError(ex, 404, "invalid_request_error", null, "url", u + " is not a backend of this router" + (type == null ? "" : " as a " + type));
            return;
        }
        if (at.size() > 1) {
            Http.sendError(ex, 400, "invalid_request_error", null, "worker_type", u + " is both a prefill and a decode of this router: "
                    + "say which with &worker_type=prefill or decode");
            return;
        }
        Backend removed = at.getFirst();
        log.info("{} removed through {}; {} of its requests still in flight end there", removed, Router.WORKERS_ROUTE, removed.inFlight.get());
        Http.sendJson(ex, 200, workerJson(removed));
    }

    /** The first value of query parameter {@code name}, decoded, or null. */
    private static String queryParam(HttpExchange ex, String name) {
        String q = ex.getRequestURI().getRawQuery();
        if (q == null) return null;
        for (String kv : q.split("&")) {
            int eq = kv.indexOf('=');
            String k = URLDecoder.decode(eq < 0 ? kv : kv.substring(0, eq), StandardCharsets.UTF_8);
            if (k.equals(name)) return eq < 0 ? "" : URLDecoder.decode(kv.substring(eq + 1), StandardCharsets.UTF_8);
        }
        return null;
    }

    private ObjectNode workersJson(Pool p) {
        ObjectNode out = Http.JSON.createObjectNode();
        ArrayNode prefills = out.putArray("prefills"), decodes = out.putArray("decodes");
        p.prefills().forEach(b -> prefills.add(workerJson(b)));
        p.decodes().forEach(b -> decodes.add(workerJson(b)));
        return out;
    }

    private ObjectNode workerJson(Backend b) {
        ObjectNode o = Http.JSON.createObjectNode();
        o.put("url", b.url.toString());
        o.put("worker_type", b.prefill ? "prefill" : "decode");
        o.put("healthy", b.serves());
        o.put("origin", b.origin()); // command_line: never replaced at --max-backends
        // As /status.json: how long out of rotation (null in rotation), what a full router's add compares with 30 s.
        Long out = backends.outOfRotationMillis(b);
        if (out == null) o.putNull("out_of_rotation_ms");
        else o.put("out_of_rotation_ms", out.longValue());
        o.put("in_flight", b.inFlight.get());
        if (b.prefill) o.put("bootstrap", b.bootstrap);
        return o;
    }
}
