package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Requests whose headers lie about their body, sent on raw sockets to the router ({@link HttpFuzzTest}'s stack): each is
 * answered with a 4xx (or, for a transfer coding the server does not know, HTTP's 501), or, when the body never comes, its
 * connection is closed once the request read deadline (10 s) passes; never a 500, never a hang. A normal request still gets
 * its normal answer after them, and nothing is left held.
 */
class HttpHeaderLiesTest {
    static final String BODY = "{\"prompt\":\"Once upon a time\",\"max_tokens\":4,\"temperature\":0}";
    static final String HEAD = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n";

    @BeforeAll
    static void start() throws Exception {
        HttpFuzzTest.start();
    }

    @AfterAll
    static void stop() {
        HttpFuzzTest.stop();
    }

    /** What comes back for {@code request} on a fresh connection until the server closes it (30 s at most: "<<TIMEOUT>>" then). */
    static String exchange(byte[] request) throws IOException {
        try (Socket s = new Socket("127.0.0.1", HttpFuzzTest.router.port())) {
            s.setSoTimeout(30_000);
            OutputStream o = s.getOutputStream();
            o.write(request);
            o.flush();
            ByteArrayOutputStream got = new ByteArrayOutputStream();
            InputStream in = s.getInputStream();
            byte[] buf = new byte[8192];
            int n;
            try {
                while ((n = in.read(buf)) > 0) got.write(buf, 0, n);
            } catch (SocketTimeoutException e) {
                return got.toString(StandardCharsets.UTF_8) + "<<TIMEOUT>>";
            } catch (IOException reset) {
                // a server that closes with bytes of ours unread resets the connection: what it answered first stands
            }
            return got.toString(StandardCharsets.UTF_8);
        }
    }

    static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.US_ASCII);
    }

    static String chunked(String body) {
        return Integer.toHexString(body.length()) + "\r\n" + body + "\r\n0\r\n\r\n";
    }

    static int status(String answer) {
        assertTrue(answer.startsWith("HTTP/1.1 "), answer);
        return Integer.parseInt(answer.substring(9, 12));
    }

    /** The JSON error object of an answer of ours (not one the JDK's server makes before any route runs). */
    static JsonNode error(String answer) throws Exception {
        return HttpFuzzTest.JSON.readTree(answer.substring(answer.indexOf("\r\n\r\n") + 4)).path("error");
    }

    /** Framing (and a request URI) the JDK's server refuses before a route runs: its own 400 (or 501), and the connection closed. */
    @Test
    @Timeout(60)
    void headersThatContradictThemselvesAreRefused() throws Exception {
        String[][] cases = {
                {"Content-Length: abc\r\n", "400"},
                {"Content-Length: -5\r\n", "400"},
                {"Content-Length: 5\r\nContent-Length: " + BODY.length() + "\r\n", "400"},
                {"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "400"},
                {"Transfer-Encoding: gzip\r\n", "501"}, // RFC 9112 6.1: a transfer coding the server does not know
        };
        for (String[] c : cases) {
            String got = exchange(bytes(HEAD + c[0] + "\r\n" + BODY));
            assertEquals(Integer.parseInt(c[1]), status(got), c[0] + " -> " + got);
        }
        // A request URI that is no URI (a bad percent escape), on a route that reads its query and one that does not.
        for (String line : List.of("POST /v1/completions?x=%ZZ HTTP/1.1\r\n", "DELETE /workers?url=%ZZ HTTP/1.1\r\n")) {
            String got = exchange(bytes(line + "Host: x\r\nConnection: close\r\nAuthorization: Bearer " + HttpFuzzTest.TOKEN
                    + "\r\nContent-Length: " + BODY.length() + "\r\n\r\n" + BODY));
            assertEquals(400, status(got), line + " -> " + got);
        }
        HttpFuzzTest.assertIdle("contradicting headers");
    }

    /** A Content-Length shorter than the body: the body read is cut there, a 400 naming the JSON's fault. */
    @Test
    @Timeout(60)
    void aContentLengthShorterThanTheBodyIsA400() throws Exception {
        String got = exchange(bytes(HEAD + "Content-Length: 10\r\n\r\n" + BODY));
        assertEquals(400, status(got), got);
        assertTrue(error(got).path("message").asText().startsWith("malformed JSON: "), got);
    }

    /** A well-formed chunked body is read as any other; one whose chunked framing is broken is a 400, not a 500. */
    @Test
    @Timeout(60)
    void aChunkedBodyIsReadAndBrokenChunksAreA400() throws Exception {
        String ok = exchange(bytes(HEAD + "Transfer-Encoding: chunked\r\n\r\n" + chunked(BODY)));
        assertEquals(200, status(ok), ok);
        assertEquals(HttpFuzzTest.normalText, error(ok).isMissingNode() ? HttpFuzzTest.JSON.readTree(ok.substring(ok.indexOf("\r\n\r\n") + 4))
                .path("choices").get(0).path("text").asText() : null, ok);
        for (String broken : List.of("zz\r\n" + BODY + "\r\n0\r\n\r\n", "5\r\n" + BODY + "\r\n0\r\n\r\n", "-1\r\n" + BODY + "\r\n0\r\n\r\n")) {
            String got = exchange(bytes(HEAD + "Transfer-Encoding: chunked\r\n\r\n" + broken));
            assertEquals(400, status(got), broken + " -> " + got);
            JsonNode e = error(got);
            assertTrue(e.path("message").asText().startsWith("malformed chunked request body: invalid chunk"), broken + " -> " + got);
            assertEquals("invalid_request_error", e.path("type").asText(), got);
        }
        // Chunks past the body limit: the limit's 400, as a body of that Content-Length gets.
        ByteArrayOutputStream big = new ByteArrayOutputStream();
        big.write(bytes(HEAD + "Transfer-Encoding: chunked\r\n\r\n"));
        for (int i = 0; i < 20; i++) big.write(bytes("10000\r\n" + "a".repeat(0x10000) + "\r\n"));
        big.write(bytes("0\r\n\r\n"));
        String got = exchange(big.toByteArray());
        assertEquals(400, status(got), got);
        assertEquals("request body over " + Http.MAX_BODY_BYTES + " bytes", error(got).path("message").asText(), got);
        HttpFuzzTest.assertIdle("chunked bodies");
    }

    /**
     * A broken chunked body's 400 closes the connection by itself (the client asked to keep it open): the request sent
     * after it on that connection is never read, as its framing is lost. Asked for in the answer (Connection: close).
     */
    @Test
    @Timeout(60)
    void aBrokenChunkedBodyClosesItsConnection() throws Exception {
        String keepAlive = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
        String next = keepAlive + "Content-Length: " + BODY.length() + "\r\n\r\n" + BODY;
        String got = exchange(bytes(keepAlive + "Transfer-Encoding: chunked\r\n\r\nzz\r\n" + BODY + "\r\n0\r\n\r\n" + next));
        assertEquals(400, status(got), got);
        assertTrue(got.toLowerCase(Locale.ROOT).contains("\r\nconnection: close\r\n"), got);
        assertEquals(1, got.split("HTTP/1.1 ", -1).length - 1, "one answer, then the connection closed: " + got);
        HttpFuzzTest.assertIdle("a broken chunked body");
    }

    /**
     * A body that never comes (a Content-Length past what is sent, a huge one, chunks that stop): the connection is closed
     * once the request read deadline passes, and a normal request sent meanwhile is served.
     */
    @Test
    @Timeout(90)
    void aBodyThatNeverComesHasItsConnectionClosed() throws Exception {
        List<CompletableFuture<String>> stalled = new ArrayList<>();
        for (String head : List.of("Content-Length: 500\r\n\r\n" + BODY, "Content-Length: 99999999999\r\n\r\n" + BODY,
                "Transfer-Encoding: chunked\r\n\r\n40\r\n" + BODY)) {
            stalled.add(CompletableFuture.supplyAsync(() -> {
                try {
                    return exchange(bytes(HEAD + head));
                } catch (IOException e) {
                    return "<<" + e + ">>";
                }
            }, Executors.newVirtualThreadPerTaskExecutor()));
        }
        JsonNode normal = RouterCalls.ok(HttpFuzzTest.router.port(), "/v1/completions", HttpFuzzTest.NORMAL);
        assertEquals(HttpFuzzTest.normalText, normal.path("choices").get(0).path("text").asText());
        for (CompletableFuture<String> s : stalled) {
            String got = s.get(60, TimeUnit.SECONDS);
            assertFalse(got.endsWith("<<TIMEOUT>>"), "still open after 30 s: " + got);
            assertFalse(got.startsWith("HTTP/1.1 5"), got);
        }
        HttpFuzzTest.assertIdle("stalled bodies");
    }
}
