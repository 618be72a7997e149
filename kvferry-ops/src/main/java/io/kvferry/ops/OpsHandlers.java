package io.kvferry.ops;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import com.sun.net.httpserver.HttpServer;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.function.Supplier;

/**
 * The operating routes of a kvferry process, as JDK {@link HttpHandler}s so they can be served on a
 * port of their own ({@link OpsServer}), on the bootstrap registry's port (its {@code mount}), or on an
 * engine's HTTP server: {@code /metrics} (Prometheus text), {@code /status} (the page: plain HTML and
 * JavaScript, no build step), {@code /common.js} (the helpers it shares with the router's page), {@code /status.js},
 * {@code /status.css} and {@code /status.json}. The router's status page ({@code router.html}, {@code router.js}, this
 * {@code common.js} and {@code status.css}) is here too; the router serves it ({@link #page}).
 */
public final class OpsHandlers {
    private static final Logger log = LoggerFactory.getLogger(OpsHandlers.class);
    private static final String WEB = "/io/kvferry/ops/web/";
    private static final Map<String, String> ASSETS = Map.of(
            "/status", "status.html", "/common.js", "common.js", "/status.js", "status.js", "/status.css", "status.css");

    private OpsHandlers() {}

    /** Every route: path → handler. */
    public static Map<String, HttpHandler> routes(PrometheusMeterRegistry registry, Supplier<? extends JsonNode> status) {
        return Map.of("/metrics", metrics(registry), "/status", asset("status.html"), "/common.js", asset("common.js"),
                "/status.js", asset("status.js"), "/status.css", asset("status.css"), "/status.json", json(status));
    }

    /** Adds every route to an HTTP server (e.g. an engine's). */
    public static void install(HttpServer server, PrometheusMeterRegistry registry, Supplier<? extends JsonNode> status) {
        routes(registry, status).forEach(server::createContext);
    }

    /** {@code GET /metrics}: the registry's scrape in the Prometheus text format (0.0.4). */
    public static HttpHandler metrics(PrometheusMeterRegistry registry) {
        return ex -> {
            if (!readOnly(ex)) return;
            send(ex, 200, "text/plain; version=0.0.4; charset=utf-8", registry.scrape().getBytes(StandardCharsets.UTF_8));
        };
    }

    /**
     * {@code GET /status.json}: the document the supplier builds now. A supplier that fails answers
     * 500 with its reason as JSON (and is logged), rather than a connection closed with no response.
     */
    public static HttpHandler json(Supplier<? extends JsonNode> status) {
        return ex -> {
            if (!readOnly(ex)) return;
            ex.getResponseHeaders().set("Cache-Control", "no-store");
            byte[] body;
            try {
                body = StatusJson.MAPPER.writeValueAsBytes(status.get());
            } catch (RuntimeException | IOException e) {
                log.warn("{}: building the status document failed", ex.getRequestURI().getRawPath(), e);
                ObjectNode error = StatusJson.MAPPER.createObjectNode();
                error.put("error", "building the status document failed: " + e);
                send(ex, 500, "application/json; charset=utf-8", StatusJson.MAPPER.writeValueAsBytes(error));
                return;
            }
            send(ex, 200, "application/json; charset=utf-8", body);
        };
    }

    /** A page file from this module's resources. */
    public static HttpHandler asset(String name) {
        byte[] body = load(name);
        String type = name.endsWith(".html") ? "text/html; charset=utf-8"
                : name.endsWith(".js") ? "text/javascript; charset=utf-8" : "text/css; charset=utf-8";
        return ex -> {
            if (!readOnly(ex)) return;
            send(ex, 200, type, body);
        };
    }

    /** The page's files by route (for tests). */
    static Map<String, String> assets() {
        return ASSETS;
    }

    /**
     * A page file of this module's ({@code common.js}, {@code status.css}, the router's {@code router.html} and {@code router.js}), for a server
     * that answers its routes itself (the router's /status, whose wrong methods are answered as its other routes').
     */
    public static byte[] page(String name) {
        return load(name);
    }

    static byte[] load(String name) {
        try (InputStream in = OpsHandlers.class.getResourceAsStream(WEB + name)) {
            if (in == null) throw new IllegalStateException("status page resource " + WEB + name + " is missing from the build");
            return in.readAllBytes();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** GET and HEAD only, and only the exact path (the JDK server matches prefixes); else 405 / 404 is sent. */
    private static boolean readOnly(HttpExchange ex) throws IOException {
        String m = ex.getRequestMethod();
        if (!m.equals("GET") && !m.equals("HEAD")) {
            ex.getResponseHeaders().set("Allow", "GET, HEAD");
            send(ex, 405, "text/plain; charset=utf-8", "Method not allowed".getBytes(StandardCharsets.UTF_8));
            return false;
        }
        String path = ex.getRequestURI().getRawPath();
        String ctx = ex.getHttpContext().getPath();
        if (!path.equals(ctx) && !ctx.equals("/")) {
            send(ex, 404, "text/plain; charset=utf-8", "Not found".getBytes(StandardCharsets.UTF_8));
            return false;
        }
        return true;
    }

    static void send(HttpExchange ex, int status, String type, byte[] body) throws IOException {
        try {
            ex.getResponseHeaders().set("Content-Type", type);
            if (ex.getRequestMethod().equals("HEAD")) {
                ex.sendResponseHeaders(status, -1);
                return;
            }
            ex.sendResponseHeaders(status, body.length);
            try (OutputStream out = ex.getResponseBody()) {
                out.write(body);
            }
        } finally {
            ex.close();
        }
    }
}
