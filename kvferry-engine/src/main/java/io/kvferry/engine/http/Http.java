package io.kvferry.engine.http;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.StreamReadFeature;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.cfg.JsonNodeFeature;
import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import io.kvferry.engine.serving.EngineSpec;
import io.kvferry.http.BearerToken;
import io.kvferry.metrics.LogSafe;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.Reader;
import java.io.UncheckedIOException;
import java.net.BindException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharsetDecoder;
import java.nio.charset.CoderResult;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.function.LongConsumer;
import java.util.function.Supplier;

/**
 * The HTTP plumbing the engine's servers share. The JDK's HttpServer, as kvferry's registry uses:
 * no extra dependency, and what these servers need is small (JSON bodies, SSE streams). Handlers run
 * on virtual threads, so a streamed response waiting for tokens holds no platform thread.
 */
final class Http {
    private static final Logger log = LoggerFactory.getLogger(Http.class);

    /**
     * Strict on what it parses, as the bootstrap registry's mapper: a key twice or content after the
     * object is refused, not read as one of the values the sender may not have meant.
     */
    static final ObjectMapper JSON = JsonMapper.builder()
            .enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION)
            .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
            .build();
    /**
     * Request bodies ({@link #readJson}): as {@link #JSON}, with every decimal kept as its client wrote it (a BigDecimal,
     * trailing zeros too), never rounded to a double: a structured output's schema sent as a JSON object carries bounds
     * such as {@code 1.00000000000000001} that a double would move. Fields read as numbers ({@code temperature}) take
     * their double or float from it as before.
     */
    static final ObjectMapper REQUEST_JSON = JsonMapper.builder()
            .enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION)
            .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
            .enable(DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS)
            .disable(JsonNodeFeature.STRIP_TRAILING_BIGDECIMAL_ZEROES)
            .build();
    /** Largest request body read by the router (a prompt of the model's whole context is far smaller). */
    static final int MAX_BODY_BYTES = 1 << 20;
    /**
     * Most bytes of an over-long body read and thrown away so its client sees the 400 (a server that
     * closes with unread bytes makes the client's TCP stack see a reset instead); past it the
     * connection is closed.
     */
    static final long MAX_DRAIN_BYTES = 64L << 20;
    /** A request (line, headers, body) still unread this long after its first byte has its connection closed. */
    static final Duration REQUEST_READ_TIMEOUT = Duration.ofSeconds(10);
    /** Exchanges under way at once (token streams included); one more has its connection closed. */
    static final int MAX_EXCHANGES = 4096;

    /**
     * Largest body an engine reads for a model with this context: the router's /generate body for the
     * longest prompt it forwards (fewer than {@code contextTokens} ids of at most 10 digits and a comma
     * each, plus the room, sampling parameters and bootstrap address) always fits, so no valid request
     * is refused by the engine for its size.
     */
    static int engineBodyLimit(int contextTokens) {
        return (int) Math.min(Integer.MAX_VALUE - 8, Math.max(MAX_BODY_BYTES, contextTokens * 11L + (64 << 10)));
    }

    private Http() {
    }

    /** Connections the kernel queues for the server's accept (capped by net.core.somaxconn). */
    static final int ACCEPT_BACKLOG = 1024;

    static HttpServer server(String host, int port) throws IOException {
        return server(host, port, REQUEST_READ_TIMEOUT, MAX_EXCHANGES);
    }

    /**
     * A server whose exchanges run on an {@link ExchangeGate} (a virtual thread each, a deadline on
     * reading the request, a cap on exchanges under way) and whose unknown paths get a JSON 404.
     * Close it with {@link #stop(HttpServer)}.
     *
     * @throws UncheckedIOException naming host:port when it cannot bind there (the port is taken, the address is not this host's)
     */
    static HttpServer server(String host, int port, Duration requestReadTimeout, int maxExchanges) throws IOException {
        HttpServer s;
        try {
            // A router opens one connection per request in flight: a burst of hundreds must not overflow the
            // accept queue (its dropped SYNs come back as connect timeouts); uvicorn's default is 2048.
            s = HttpServer.create(new InetSocketAddress(host, port), ACCEPT_BACKLOG);
        } catch (BindException e) {
            throw new UncheckedIOException("cannot bind the HTTP server to " + host + ":" + port + ": " + e.getMessage(), e);
        }
        s.setExecutor(new ExchangeGate("kvferry-http-" + s.getAddress().getPort(), maxExchanges, requestReadTimeout));
        // The JDK matches contexts by path prefix, so "/" catches every path no route claims.
        s.createContext("/", ex -> handle(ex, e -> notFound(e)));
        return s;
    }

    /**
     * How long a drained server's close waits for the exchanges under way to end ({@link #stop(HttpServer, Drain)}): the
     * 503 draining answers of requests that arrived as it closed, and the requests a drain timeout cut.
     */
    static final int DRAINED_STOP_GRACE_SECONDS = 1;

    /** Stops a server from {@link #server} and its gate at once: the exchanges under way are cut. */
    static void stop(HttpServer s) {
        stop(s, null);
    }

    /**
     * Stops a server from {@link #server} and its gate. Once {@code drain} has begun (a graceful shutdown), its listener
     * closes first (new connections are refused), then the exchanges under way get up to {@link #DRAINED_STOP_GRACE_SECONDS}
     * to end (the JDK's stop returns as soon as none is left), so a request that reached it as it closed gets its 503
     * draining answer instead of a reset; only then are its connections closed. Not draining: at once, as before.
     */
    static void stop(HttpServer s, Drain drain) {
        stop(s, drain, DRAINED_STOP_GRACE_SECONDS);
    }

    /** {@link #stop(HttpServer, Drain)} with a grace of its own (tests give one no loaded machine can run out of). */
    static void stop(HttpServer s, Drain drain, int drainedGraceSeconds) {
        s.stop(drain != null && drain.draining() ? drainedGraceSeconds : 0);
        if (s.getExecutor() instanceof ExchangeGate g) g.close();
    }

    private static void notFound(HttpExchange ex) throws IOException {
        sendError(ex, 404, "invalid_request_error", ex.getRequestMethod() + " " + ex.getRequestURI().getPath()
                + " is not a route of this server");
    }

    interface Handler {
        void handle(HttpExchange ex) throws Exception;
    }

    /**
     * Runs a route's handler: a bad request ({@link BadRequest}) is a 400 naming it, an {@link Unavailable} a 503 with
     * {@code Retry-After}, anything else a 500 {@code internal_error} with its message: an {@link IllegalArgumentException}
     * too, which was a 400 until a bug's reached clients so, unlogged (the router's and the engines' generation routes log
     * the 500 at ERROR: {@link Router}, {@link EngineRequests#identified}); a check of the client's input throws
     * {@link BadRequest}. The
     * exchange is closed. The path must equal the route's exactly (the JDK matches by prefix, which would
     * let {@code /v1/completionsXYZ} run a completion): anything else is a 404. A route that ends in
     * {@code /} ({@code /v1/models/}) is the parent of its paths: it takes those longer than it, and its handler reads the rest.
     */
    static void handle(HttpExchange ex, Handler h) {
        try (ex) {
            try {
                // A request without a body is read once its headers are: its response may take as long as it needs.
                if (!hasBody(ex)) ExchangeGate.requestRead();
                String path = ex.getRequestURI().getPath(), route = ex.getHttpContext().getPath();
                boolean child = route.endsWith("/") && path.startsWith(route) && path.length() > route.length();
                if (!path.equals(route) && !child && !"/".equals(route)) {
                    notFound(ex);
                    return;
                }
                // Whom the structured-output compiler's turns are shared between: the caller's address (the router names the
                // tenant where it has tenants).
                ScopedValue.where(StructuredOutputs.CLIENT, StructuredOutputs.caller(ex)).call(() -> {
                    h.handle(ex);
                    return null;
                });
            } catch (BadRequest e) {
                sendError(ex, 400, "invalid_request_error", null, e.param, e.getMessage());
            } catch (Unavailable e) {
                ex.getResponseHeaders().set("Retry-After", Long.toString(e.retryAfterSeconds));
                sendError(ex, 503, "service_unavailable", null, e.param, e.getMessage());
            } catch (Exception e) { // a bug, an IllegalArgumentException too: a client's fault is a BadRequest
                sendError(ex, 500, "internal_error", String.valueOf(e.getMessage()));
            } catch (StackOverflowError e) { // a bug too (a nesting no check bounded): answered, not a dropped connection
                log.error("{} {}: a StackOverflowError, answered 500", LogSafe.text(ex.getRequestMethod()), LogSafe.text(ex.getRequestURI().getPath()));
                sendError(ex, 500, "internal_error", "the request overflowed the server's stack (a nesting no check bounded)");
            }
        } catch (IOException ignored) {
            // the client went away
        }
    }

    /**
     * Whether the request carries the cluster token, which an engine's routes that act (/generate, /abort)
     * require: anyone who reaches an engine's port could otherwise abort any room or point a decode at any
     * registry. Answers 401 and returns false when it does not; a server with no token ({@code auth} null)
     * takes every request. Read-only routes (/health, /metrics, /status) stay open.
     */
    static boolean authorized(HttpExchange ex, BearerToken auth) throws IOException {
        return bearerChecked(ex, auth, "authentication_error", "needs the cluster token (Authorization: Bearer TOKEN, the token of "
                + "--auth-token-file / KVFERRY_AUTH_TOKEN)");
    }

    /**
     * Whether the request carries {@code auth}'s bearer credential ({@code auth} null: no check); else a 401
     * naming its scheme (RFC 9110), of error type {@code type}, saying the route {@code needs} what, after
     * the body is drained (the answer is then read, not reset). The connection stays open: a 401 sent with
     * {@code Connection: close} after a drained body made the JDK's HttpClient wait for ever.
     */
    static boolean bearerChecked(HttpExchange ex, BearerToken auth, String type, String needs) throws IOException {
        if (auth == null || auth.accepts(ex.getRequestHeaders().getFirst("Authorization"))) return true;
        refuseBearer(ex, type, needs);
        return false;
    }

    /** The 401 of {@link #bearerChecked}: the body drained, {@code WWW-Authenticate}, the message naming the method, path and what it needs. */
    static void refuseBearer(HttpExchange ex, String type, String needs) throws IOException {
        discardBody(ex);
        ex.getResponseHeaders().set("WWW-Authenticate", "Bearer realm=\"kvferry\"");
        sendError(ex, 401, type, ex.getRequestMethod() + " " + ex.getRequestURI().getPath() + " " + needs);
    }

    /**
     * The routes every engine server has besides /generate: {@code POST /abort} ({"bootstrap_room"}: the
     * router's abort of a request whose client went away) and {@code GET /health} (the engine's status).
     */
    static void engineRoutes(HttpServer s, BearerToken auth, EngineRequests requests, LongConsumer abort, Supplier<ObjectNode> health) {
        s.createContext("/abort", ex -> handle(ex, requests.identified(e -> {
            if (!method(e, "POST") || !authorized(e, auth)) return;
            long room = roomField(readJson(e));
            requests.aborted(room, "abort"); // named by the request in flight on it here (its /generate's id), else the abort's
            abort.accept(room);
            sendJson(e, 200, JSON.createObjectNode().put("aborted", true));
        })));
        s.createContext("/health", ex -> handle(ex, e -> {
            if (!method(e, "GET")) return;
            ObjectNode body = health.get();
            sendJson(e, "ok".equals(body.path("status").asText()) ? 200 : 503, body); // a router stops sending to a 503
        }));
    }

    /**
     * The /health body of an engine: status ("ok", or "failed" with the scheduler's error), role, variant,
     * parallelism and requests in flight.
     */
    static ObjectNode engineHealth(String role, EngineSpec spec, int inFlight, String failure) {
        ObjectNode out = JSON.createObjectNode();
        out.put("status", failure == null ? "ok" : "failed");
        if (failure != null) out.put("error", failure);
        out.put("role", role);
        out.put("model_variant", spec.model().variant.label());
        out.put("tp", spec.tp());
        out.put("pp", spec.pp());
        out.put("in_flight", inFlight);
        return out;
    }

    /** A client error: 400 with the message, and the request field at fault ({@code param} of the error body) when one is. */
    static final class BadRequest extends RuntimeException {
        /** The field at fault as OpenAI names it ({@code max_tokens}, {@code messages[1].role}), or null. */
        final String param;

        BadRequest(String message) {
            this(null, message);
        }

        BadRequest(String param, String message) {
            super(message);
            this.param = param;
        }
    }

    /**
     * Not the client's fault: the server cannot serve the request now (e.g. its structured-output compiler is busy); a 503
     * {@code service_unavailable} with {@code Retry-After}, naming the request field it concerns.
     */
    static final class Unavailable extends RuntimeException {
        /** The field whose work could not be done, or null. */
        final String param;
        final long retryAfterSeconds;

        Unavailable(String param, String message, long retryAfterSeconds) {
            super(message);
            this.param = param;
            this.retryAfterSeconds = retryAfterSeconds;
        }
    }

    private static boolean hasBody(HttpExchange ex) {
        String length = ex.getRequestHeaders().getFirst("Content-Length");
        return ex.getRequestHeaders().containsKey("Transfer-Encoding") || length != null && !"0".equals(length.trim());
    }

    /**
     * Reads what is left of a request body and drops it (up to {@link #MAX_DRAIN_BYTES}, then the connection
     * closes after the answer): closing with unread bytes makes the client see a reset, not the answer.
     */
    static void discardBody(HttpExchange ex) throws IOException {
        InputStream in = ex.getRequestBody();
        byte[] sink = new byte[64 << 10];
        long drained = 0;
        int n;
        while (drained < MAX_DRAIN_BYTES && (n = in.read(sink)) > 0) drained += n;
        if (drained >= MAX_DRAIN_BYTES) ex.getResponseHeaders().set("Connection", "close"); // too much to read: answer, then close
        ExchangeGate.requestRead();
    }

    static JsonNode readJson(HttpExchange ex) throws IOException {
        return readJson(ex, MAX_BODY_BYTES);
    }

    /**
     * Reads a JSON object body of at most {@code maxBytes}; a longer one is a 400 naming the limit, and so is a body whose
     * chunked framing is broken (a chunk size that is no hex number, a chunk longer than its size said): the client's fault,
     * once answered as a 500 with the JDK's "invalid chunk length". The connection closes after that 400, its framing lost.
     */
    static JsonNode readJson(HttpExchange ex, int maxBytes) throws IOException {
        InputStream in = ex.getRequestBody();
        byte[] body;
        try {
            body = in.readNBytes(maxBytes + 1);
        } catch (IOException e) {
            // The JDK's chunked reader's faults of framing ("invalid chunk length", "… header", "… end"); any other: the client went away.
            if (e.getMessage() == null || !e.getMessage().startsWith("invalid chunk")) throw e;
            ex.getResponseHeaders().set("Connection", "close");
            throw new BadRequest("malformed chunked request body: " + e.getMessage());
        }
        if (body.length > maxBytes) {
            discardBody(ex);
            throw new BadRequest("request body over " + maxBytes + " bytes");
        }
        ExchangeGate.requestRead();
        if (body.length == 0) throw new BadRequest("empty request body; expected a JSON object");
        return parseObject(body);
    }

    /**
     * A request body's JSON object: strict UTF-8 ({@link #requireUtf8}), a byte order mark at its start skipped, parsed
     * as it is decoded (a reader's small buffers: no copy of the body as text, which took three times its bytes).
     */
    static JsonNode parseObject(byte[] body) throws IOException {
        requireUtf8(body);
        int bom = body.length >= 3 && (body[0] & 0xFF) == 0xEF && (body[1] & 0xFF) == 0xBB && (body[2] & 0xFF) == 0xBF ? 3 : 0;
        // A reader, not the bytes: Jackson would take bytes with NULs where JSON's ASCII is as UTF-16 or UTF-32.
        try (Reader text = new InputStreamReader(new ByteArrayInputStream(body, bom, body.length - bom), StandardCharsets.UTF_8)) {
            JsonNode n = REQUEST_JSON.readTree(text);
            if (n == null || !n.isObject()) throw new BadRequest("the request body must be a JSON object");
            return n;
        } catch (JsonProcessingException e) {
            throw new BadRequest("malformed JSON: " + e.getOriginalMessage());
        } catch (NumberFormatException e) { // a decimal no BigDecimal holds (an exponent past an int's: 1e9999999999999), Jackson's
            throw new BadRequest("malformed JSON: " + e.getMessage());
        }
    }

    /**
     * Checks that a request body is strict UTF-8 (JSON's encoding, RFC 8259), decoding it into a small buffer over and over
     * (no copy of the body). The JSON parser alone took some malformed bytes silently: an overlong {@code C0 AF} as
     * {@code /}, a surrogate's {@code ED A0 80} as half a pair, {@code F4 90 80 80} (past U+10FFFF) as two; a prompt or stop
     * string would then hold text the client never sent. A 400 names the first malformed byte's offset instead.
     */
    static void requireUtf8(byte[] body) {
        CharsetDecoder decoder = StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                .onUnmappableCharacter(CodingErrorAction.REPORT);
        ByteBuffer in = ByteBuffer.wrap(body);
        CharBuffer scratch = CharBuffer.allocate(1024);
        CoderResult r;
        do {
            scratch.clear();
            r = decoder.decode(in, scratch, true);
        } while (r.isOverflow());
        if (r.isUnderflow()) {
            scratch.clear();
            r = decoder.flush(scratch);
        }
        if (r.isError()) {
            int at = in.position();
            StringBuilder bytes = new StringBuilder();
            for (int i = at; i < Math.min(body.length, at + r.length()); i++) bytes.append(String.format(" %02X", body[i] & 0xFF));
            throw new BadRequest("the request body is not valid UTF-8: malformed bytes" + bytes + " at byte " + at);
        }
    }

    static void sendJson(HttpExchange ex, int status, Object body) throws IOException {
        send(ex, status, "application/json; charset=utf-8", JSON.writeValueAsBytes(body));
    }

    /**
     * Answers with {@code body}; to a HEAD request, the same status and headers without it. The JDK's server logs a
     * warning for every HEAD answered with a length, so an open route probed with HEAD would fill the log.
     */
    static void send(HttpExchange ex, int status, String contentType, byte[] body) throws IOException {
        ex.getResponseHeaders().set("Content-Type", contentType);
        if (ex.getRequestMethod().equals("HEAD")) {
            ex.sendResponseHeaders(status, -1);
            ex.close();
            return;
        }
        ex.sendResponseHeaders(status, body.length);
        try (OutputStream o = ex.getResponseBody()) {
            o.write(body);
        }
    }

    /** OpenAI's error shape: {"error": {"message", "type", "param", "code"}}. */
    static void sendError(HttpExchange ex, int status, String type, String message) throws IOException {
        sendError(ex, status, type, null, message);
    }

    /** An OpenAI-shaped error body; {@code kind} (a transfer failure's {@link io.kvferry.api.FailureKind} label) only when known. */
    static void sendError(HttpExchange ex, int status, String type, String kind, String message) throws IOException {
        sendError(ex, status, type, kind, null, message);
    }

    /** An OpenAI-shaped error body naming the request field at fault ({@code param}, null for none). */
    static void sendError(HttpExchange ex, int status, String type, String kind, String param, String message) throws IOException {
        sendJson(ex, status, errorEvent(type, kind, param, message));
    }

    /** An OpenAI-shaped error body with OpenAI's string {@code code} (e.g. {@code model_not_found}). */
    static void sendCodedError(HttpExchange ex, int status, String type, String param, String code, String message) throws IOException {
        ObjectNode o = errorEvent(type, null, param, message);
        ((ObjectNode) o.get("error")).put("code", code);
        sendJson(ex, status, o);
    }

    /** The error event of an SSE stream, shaped like the error body. */
    static ObjectNode errorEvent(String type, String kind, String message) {
        return errorEvent(type, kind, null, message);
    }

    /**
     * OpenAI's error object: {@code message}, {@code type}, {@code param} (the field at fault or null) and {@code code}
     * (a string or null, as OpenAI's clients read it: the official Java client fails on a number there, and the
     * status is the HTTP status already), plus kvferry's {@code kind} of a transfer failure when known.
     */
    static ObjectNode errorEvent(String type, String kind, String param, String message) {
        ObjectNode o = JSON.createObjectNode();
        ObjectNode e = o.putObject("error").put("message", message).put("type", type);
        if (kind != null) e.put("kind", kind);
        if (param != null) e.put("param", param);
        else e.putNull("param");
        e.putNull("code");
        return o;
    }

    /**
     * Whether the request's method is {@code expected}; else answers 405 naming it. A GET route takes HEAD too (HTTP's
     * rule: the GET's status and headers, no body, {@link #send}).
     */
    static boolean method(HttpExchange ex, String expected) throws IOException {
        String m = ex.getRequestMethod();
        if (m.equals(expected) || m.equals("HEAD") && expected.equals("GET")) return true;
        ex.getResponseHeaders().set("Allow", expected.equals("GET") ? "GET, HEAD" : expected);
        sendError(ex, 405, "invalid_request_error", ex.getRequestMethod() + " " + ex.getRequestURI().getPath() + " is not allowed; use " + expected);
        return false;
    }

    /** An SSE comment (clients skip it): a stream's sign of life while its request waits for its first token. */
    static final String KEEP_ALIVE = ": keep-alive\n\n";

    /** Starts a server-sent-event stream (status 200, chunked). */
    static OutputStream startEvents(HttpExchange ex) throws IOException {
        ex.getResponseHeaders().set("Content-Type", "text/event-stream; charset=utf-8");
        ex.getResponseHeaders().set("Cache-Control", "no-cache");
        ex.sendResponseHeaders(200, 0);
        return ex.getResponseBody();
    }

    /** Writes one {@code data:} event and flushes it: an IOException means the client is gone. */
    static void event(OutputStream out, String data) throws IOException {
        out.write(("data: " + data + "\n\n").getBytes(StandardCharsets.UTF_8));
        out.flush();
    }

    /** Writes already formatted events and flushes once. */
    static void write(OutputStream out, CharSequence events) throws IOException {
        out.write(events.toString().getBytes(StandardCharsets.UTF_8));
        out.flush();
    }

    static int intField(JsonNode n, String name, int dflt, int min, int max) {
        JsonNode v = n.get(name);
        if (v == null || v.isNull()) return dflt;
        if (!v.canConvertToInt() || !v.isIntegralNumber()) throw new BadRequest(name, name + " must be an integer, got " + v);
        int i = v.intValue();
        if (i < min || i > max) throw new BadRequest(name, name + " must be in [" + min + ", " + max + "], got " + i);
        return i;
    }

    static float floatField(JsonNode n, String name, float dflt) {
        JsonNode v = n.get(name);
        if (v == null || v.isNull()) return dflt;
        if (!v.isNumber()) throw new BadRequest(name, name + " must be a number, got " + v);
        return v.floatValue();
    }

    /**
     * A JSON number as its client wrote it, as near as the parsed tree keeps it: an integer's digits, a fraction's shortest
     * decimal form ({@code 1e39}, {@code 1e-50}, {@code 0.5}), never the 32-bit float it rounds to ({@code Infinity},
     * {@code 0.0}) that a refusal naming it would otherwise show.
     */
    static String numberText(JsonNode v) {
        if (!v.isFloatingPointNumber()) return v.asText();
        return Double.toString(v.doubleValue()).replace(".0E", "E").replace('E', 'e'); // the shortest that reads back the same
    }

    static boolean booleanField(JsonNode n, String name, boolean dflt) {
        JsonNode v = n.get(name);
        if (v == null || v.isNull()) return dflt;
        if (!v.isBoolean()) throw new BadRequest(name, name + " must be true or false, got " + v);
        return v.booleanValue();
    }

    static long longField(JsonNode n, String name) {
        JsonNode v = n.get(name);
        if (v == null || !v.isIntegralNumber() || !v.canConvertToLong()) throw new BadRequest(name, name + " must be an integer, got " + v);
        return v.longValue();
    }

    /**
     * A request's {@code bootstrap_room}: a non-negative 64-bit integer, as the router draws them and as the
     * registry takes them (it refuses a negative one on /register_dp_rank).
     */
    static long roomField(JsonNode n) {
        long room = longField(n, "bootstrap_room");
        if (room < 0) throw new BadRequest("bootstrap_room", "bootstrap_room must be >= 0, got " + room);
        return room;
    }

    static String textField(JsonNode n, String name) {
        JsonNode v = n.get(name);
        if (v == null || !v.isTextual()) throw new BadRequest(name, name + " must be a string, got " + v);
        return v.textValue();
    }

    static int[] intArray(JsonNode n, String name) {
        JsonNode v = n.get(name);
        if (v == null || !v.isArray()) throw new BadRequest(name + " must be an array of token ids, got " + v);
        int[] out = new int[v.size()];
        for (int i = 0; i < out.length; i++) {
            JsonNode e = v.get(i);
            if (!e.isIntegralNumber() || !e.canConvertToInt()) throw new BadRequest(name + "[" + i + "] must be an integer, got " + e);
            out[i] = e.intValue();
        }
        return out;
    }
}
