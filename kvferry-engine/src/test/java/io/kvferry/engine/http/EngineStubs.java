package io.kvferry.engine.http;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;

import java.io.IOException;
import java.nio.charset.StandardCharsets;

/**
 * What the router tests' scripted engines (a JDK HttpServer per engine, its routes answering as a test says) share: an
 * exchange's whole answer, and a stub's URL as the router is given it.
 */
final class EngineStubs {
    private EngineStubs() {
    }

    /**
     * Answers {@code status} with {@code body}, after reading what is left of the request's body (a stub that closes with
     * unread bytes makes the router's client see a reset, not the answer), unless the route closed it already (Jackson's
     * {@code readTree} of the body stream does); a 204 or 304, which carry no body, without it.
     */
    static void answer(HttpExchange ex, int status, String body) throws IOException {
        try {
            ex.getRequestBody().readAllBytes();
        } catch (IOException closed) {
            // read and closed by the route (JSON.readTree(ex.getRequestBody())): nothing is left
        }
        boolean bodiless = status == 204 || status == 304;
        byte[] b = body.getBytes(StandardCharsets.UTF_8);
        ex.sendResponseHeaders(status, bodiless ? -1 : b.length);
        if (!bodiless) ex.getResponseBody().write(b);
        ex.close();
    }

    /** The stub's base URL, {@code http://127.0.0.1:PORT}. */
    static String url(HttpServer s) {
        return "http://127.0.0.1:" + s.getAddress().getPort();
    }
}
