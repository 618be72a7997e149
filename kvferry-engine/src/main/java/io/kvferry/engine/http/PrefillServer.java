package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import com.sun.net.httpserver.HttpServer;
import io.kvferry.api.KVTransferException;
import io.kvferry.engine.serving.PrefillEngine;
import io.kvferry.http.BearerToken;

import java.io.IOException;
import java.util.concurrent.ExecutionException;

/**
 * A prefill engine's HTTP face, which the router calls (SGLang's prefill server): {@code POST
 * /generate} runs the request and answers once its KV reached the decode (or failed), {@code POST
 * /abort}, {@code GET /health}.
 */
public final class PrefillServer implements AutoCloseable {
    private final PrefillEngine engine;
    private final HttpServer server;
    private final String bootstrapAddr;
    private final BearerToken auth;

    /** Without authentication: every client that reaches the port may call /generate and /abort (tests). */
    public PrefillServer(PrefillEngine engine, String bootstrapAddr, String host, int port) throws IOException {
        this(engine, bootstrapAddr, host, port, null);
    }

    /** @param authToken the cluster token /generate and /abort require ({@link Http#authorized}); null for none */
    public PrefillServer(PrefillEngine engine, String bootstrapAddr, String host, int port, String authToken) throws IOException {
        this.engine = engine;
        this.bootstrapAddr = bootstrapAddr;
        this.auth = BearerToken.of(authToken);
        server = Http.server(host, port);
        server.createContext("/generate", ex -> Http.handle(ex, this::generate));
        Http.engineRoutes(server, auth, engine::abort, () -> Http.engineHealth("prefill", engine.spec(), engine.inFlight(), engine.failure())
                .put("bootstrap", bootstrapAddr));
        server.start();
    }

    /** Serves {@code path} with {@code handler} too (the process's /metrics and /status). */
    public void route(String path, HttpHandler handler) {
        server.createContext(path, handler);
    }

    public int port() {
        return server.getAddress().getPort();
    }

    private void generate(HttpExchange ex) throws Exception {
        if (!Http.method(ex, "POST") || !Http.authorized(ex, auth)) return;
        JsonNode req = Http.readJson(ex, Http.engineBodyLimit(engine.spec().model().config.seqLen()));
        long room = Http.roomField(req);
        int[] ids = Http.intArray(req, "input_ids");
        var sampling = SamplingParams.parse(req.get("sampling_params"), room);
        try {
            PrefillEngine.Result r = engine.submit(new PrefillEngine.Request(room, ids, sampling)).get();
            ObjectNode out = Http.JSON.createObjectNode();
            out.put("bootstrap_room", room);
            out.put("first_token", r.firstToken());
            out.put("compute_ms", r.computeMs());
            out.put("send_ms", r.sendMs());
            out.put("kv_pages", r.kvPages());
            Http.sendJson(ex, 200, out);
        } catch (ExecutionException e) {
            Throwable c = e.getCause();
            if (c instanceof KVTransferException t) Http.sendError(ex, 500, "kv_transfer_error", t.kind().label(), t.getMessage());
            else if (c instanceof IllegalArgumentException) Http.sendError(ex, 400, "invalid_request_error", c.getMessage()); // its room already in flight
            else Http.sendError(ex, 500, "internal_error", String.valueOf(c.getMessage()));
        }
    }

    @Override
    public void close() {
        Http.stop(server);
    }
}
