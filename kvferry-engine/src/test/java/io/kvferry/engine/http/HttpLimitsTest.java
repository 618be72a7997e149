package io.kvferry.engine.http;

import com.sun.net.httpserver.HttpServer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/** The engine servers' slow-client limits (Http.server + ExchangeGate): a deadline on reading the request, a cap on exchanges. */
class HttpLimitsTest {
    static final Duration READ_TIMEOUT = Duration.ofMillis(500);
    static final HttpClient http = HttpClient.newHttpClient();
    HttpServer server;
    final List<Socket> sockets = new ArrayList<>();

    HttpServer start(int maxExchanges) throws IOException {
        server = Http.server("127.0.0.1", 0, READ_TIMEOUT, maxExchanges);
        server.createContext("/echo", ex -> Http.handle(ex, e -> Http.sendJson(e, 200, Http.readJson(e))));
        server.createContext("/slow", ex -> Http.handle(ex, e -> {
            Http.readJson(e);
            Thread.sleep(READ_TIMEOUT.toMillis() * 3); // a long answer (a token stream) is not cut: only reading the request is timed
            Http.sendJson(e, 200, Http.JSON.createObjectNode().put("slow", true));
        }));
        server.createContext("/deep", ex -> Http.handle(ex, e -> recurse(Http.readJson(e).path("n").asInt())));
        server.start();
        return server;
    }

    /** A bug's unbounded recursion: it overflows the stack for a large enough {@code n}. */
    static int recurse(int n) {
        return n <= 0 ? 0 : 1 + recurse(n - 1);
    }

    /**
     * A handler that overflows its stack (a nesting no check bounded: a grammar's groups and a schema's $refs did) is answered
     * 500, not a connection dropped with no answer at all; the server serves the next request.
     */
    @Test
    void aStackOverflowIsAnswered500NotADroppedConnection() throws Exception {
        start(64);
        HttpResponse<String> r = post("/deep", "{\"n\":100000000}");
        assertEquals(500, r.statusCode(), r.body());
        assertTrue(r.body().contains("overflowed the server's stack"), r.body());
        assertEquals(200, post("/echo", "{\"a\":1}").statusCode());
    }

    @AfterEach
    void stop() throws IOException {
        for (Socket s : sockets) s.close();
        if (server != null) Http.stop(server);
    }

    /** A client that sends part of a request and stalls. */
    Socket stalled() throws IOException {
        Socket s = new Socket("127.0.0.1", server.getAddress().getPort());
        sockets.add(s);
        OutputStream o = s.getOutputStream();
        o.write("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro".getBytes(StandardCharsets.US_ASCII));
        o.flush();
        return s;
    }

    /** True when the server closed the connection (EOF or reset) before the socket's read timeout. */
    static boolean closedByServer(Socket s, Duration within) throws IOException {
        s.setSoTimeout((int) within.toMillis());
        try (InputStream in = s.getInputStream()) {
            while (in.read() >= 0) {
                // an answer (there should be none) is read through to the close
            }
            return true;
        } catch (SocketTimeoutException e) {
            return false;
        } catch (IOException reset) {
            return true;
        }
    }

    HttpResponse<String> post(String path, String body) throws Exception {
        return http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + server.getAddress().getPort() + path))
                .POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
    }

    @Test
    @Timeout(60)
    void aRequestStillUnreadAfterTheTimeoutIsClosedButALongAnswerIsNot() throws Exception {
        start(16);
        Socket s = stalled();
        assertTrue(closedByServer(s, Duration.ofSeconds(20)), "a stalled request's connection was still open after 20 s");
        HttpResponse<String> slow = post("/slow", "{}");
        assertEquals(200, slow.statusCode(), slow.body());
        assertEquals(200, post("/echo", "{\"a\":1}").statusCode());
    }

    @Test
    @Timeout(60)
    void oneExchangeMoreThanTheCapIsClosedAndServiceResumes() throws Exception {
        start(2);
        stalled();
        stalled();
        ExchangeGate gate = (ExchangeGate) server.getExecutor();
        long until = System.nanoTime() + Duration.ofSeconds(20).toNanos();
        while (gate.underWay() < 2 && gate.timedOutCount() == 0 && System.nanoTime() < until) Thread.sleep(5);
        if (gate.timedOutCount() == 0) {
            // Both slots are held: a third request is refused by closing its connection.
            try {
                HttpResponse<String> r = post("/echo", "{}");
                if (gate.timedOutCount() == 0) fail("a request over the cap was served: " + r.statusCode());
            } catch (IOException expected) {
                assertTrue(gate.refusedCount() >= 1);
            }
        }
        // Once the stalled ones time out, the slots are free again.
        until = System.nanoTime() + Duration.ofSeconds(20).toNanos();
        while (gate.underWay() > 0 && System.nanoTime() < until) Thread.sleep(20);
        assertEquals(200, post("/echo", "{}").statusCode());
    }

    /**
     * A body with a key twice or something after its object is refused, naming it, as the bootstrap registry
     * refuses one: before, the last of two values (a second max_tokens) or the first of two objects was taken silently.
     */
    @Test
    @Timeout(30)
    void aBodyWithADuplicateKeyOrTrailingContentIsA400() throws Exception {
        start(16);
        String[][] cases = {
                {"{\"max_tokens\":1,\"max_tokens\":100000}", "Duplicate field 'max_tokens'"},
                {"{\"prompt\":\"a\"} {\"prompt\":\"b\"}", "Trailing token"},
                {"{\"prompt\":\"a\"}]", "Unexpected close marker"},
        };
        for (String[] c : cases) {
            HttpResponse<String> r = post("/echo", c[0]);
            assertEquals(400, r.statusCode(), c[0] + " -> " + r.body());
            String msg = Http.JSON.readTree(r.body()).path("error").path("message").asText();
            assertTrue(msg.startsWith("malformed JSON: ") && msg.contains(c[1]), c[0] + " -> " + msg);
        }
        assertEquals(200, post("/echo", "{\"prompt\":\"a\"}  \n").statusCode(), "trailing white space is no content");
    }
}
