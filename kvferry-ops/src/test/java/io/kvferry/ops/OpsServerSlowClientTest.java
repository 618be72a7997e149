package io.kvferry.ops;

import io.kvferry.registry.RegistryOptions;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketException;
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

/**
 * A process's own status/metrics endpoint ({@link OpsServer}: {@code kvferry prefill|decode --status-port},
 * the bench) against slow and stalled clients: like the bootstrap registry, a request still unfinished
 * after the request timeout has its connection closed, and one over the cap is refused while those under
 * way are spared. Short timeouts and small caps keep it fast; the defaults are the registry's.
 */
class OpsServerSlowClientTest {
    /** What "at once" means here: generous for a loaded CI machine, far below any hang. */
    private static final Duration PROMPT = Duration.ofSeconds(2);

    private final List<Socket> sockets = new ArrayList<>();
    private final HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).connectTimeout(PROMPT).build();
    private OpsServer server;

    @AfterEach
    void cleanUp() throws IOException {
        for (Socket s : sockets) s.close();
        http.shutdownNow();
        if (server != null) server.close();
    }

    @Test
    void theLimitsAreTheRegistrys() {
        assertEquals(RegistryOptions.DEFAULT_REQUEST_TIMEOUT, OpsServer.REQUEST_TIMEOUT);
        assertEquals(Duration.ofSeconds(10), OpsServer.REQUEST_TIMEOUT);
        assertTrue(OpsServer.MAX_REQUESTS >= 100 && OpsServer.MAX_REQUESTS <= 1000, "a cap of a few hundred: " + OpsServer.MAX_REQUESTS);
    }

    @Test
    void halfSentRequestsAreClosedAtTheRequestTimeout() throws Exception {
        Duration timeout = Duration.ofMillis(400);
        server = OpsServer.start("127.0.0.1", 0, Ops.newRegistry(), new ProcessStatus("prefill"), timeout, OpsServer.MAX_REQUESTS);
        List<Socket> slow = new ArrayList<>();
        long[] opened = new long[32];
        for (int i = 0; i < opened.length; i++) {
            opened[i] = System.nanoTime(); // before its first byte, so before the server's clock for it starts
            slow.add(halfSent());
        }
        Duration bound = timeout.plus(PROMPT);
        for (int i = 0; i < opened.length; i++) {
            long ms = closedByServerWithinMs(slow.get(i), bound, opened[i]);
            assertTrue(ms >= 0, "a half-sent request was still open " + bound.toMillis() + " ms after it started");
            assertTrue(ms >= timeout.toMillis() / 2, "a half-sent request was closed after " + ms + " ms, before the timeout");
        }
        awaitRequestsUnderWay(0, "the half-sent requests were closed");
        assertEquals(200, get("/metrics").statusCode());
    }

    @Test
    void requestsOverTheCapAreRefusedAndThoseUnderWayAreSpared() throws Exception {
        int cap = 4;
        server = OpsServer.start("127.0.0.1", 0, Ops.newRegistry(), new ProcessStatus("prefill"), Duration.ofSeconds(30), cap);
        Socket legit = halfSent();
        for (int i = 1; i < cap; i++) halfSent();
        awaitRequestsUnderWay(cap, "the cap filled");

        for (int i = 0; i < 8; i++) { // the 30 s timeout is not what closes these
            long ms = closedByServerWithinMs(halfSent(), PROMPT, System.nanoTime());
            assertTrue(ms >= 0, "request #" + (cap + i + 1) + " over the cap of " + cap + " was not refused");
        }
        assertEquals(cap, server.requestsUnderWay());

        // One of those under way finishes its request and is answered.
        OutputStream out = legit.getOutputStream();
        out.write("rics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
        out.flush();
        legit.setSoTimeout((int) PROMPT.toMillis());
        String reply = new String(legit.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(reply.startsWith("HTTP/1.1 200"), reply);

        // Once the stalled clients go, requests are served again.
        for (Socket s : sockets) s.close();
        awaitRequestsUnderWay(0, "the stalled clients left");
        assertEquals(200, get("/status.json").statusCode());
    }

    @Test
    void closeEndsRequestsUnderWay() throws Exception {
        server = OpsServer.start("127.0.0.1", 0, Ops.newRegistry(), new ProcessStatus("prefill"), Duration.ofSeconds(30), 16);
        List<Socket> slow = new ArrayList<>();
        for (int i = 0; i < 8; i++) slow.add(halfSent());
        awaitRequestsUnderWay(8, "half-sent requests taken up");
        server.close();
        awaitRequestsUnderWay(0, "close()");
        for (Socket s : slow) assertTrue(closedByServerWithinMs(s, PROMPT, System.nanoTime()) >= 0, "close() left a connection open");
    }

    // ------------------------------------------------------------------ helpers

    private HttpResponse<String> get(String path) throws Exception {
        return http.send(HttpRequest.newBuilder(URI.create(server.baseUrl() + path)).timeout(PROMPT).GET().build(),
                HttpResponse.BodyHandlers.ofString());
    }

    /** A connection that sent {@code GET /met} and nothing more. */
    private Socket halfSent() throws IOException {
        Socket s = new Socket();
        sockets.add(s);
        s.connect(new InetSocketAddress("127.0.0.1", server.port()), (int) PROMPT.toMillis());
        s.getOutputStream().write("GET /met".getBytes(StandardCharsets.US_ASCII));
        s.getOutputStream().flush();
        return s;
    }

    /**
     * Milliseconds from {@code sinceNanos} until the server closed {@code s} (end of stream or reset), or
     * -1 if it was still open after {@code bound}.
     */
    private static long closedByServerWithinMs(Socket s, Duration bound, long sinceNanos) throws IOException {
        long deadline = sinceNanos + bound.toNanos();
        InputStream in = s.getInputStream();
        byte[] sink = new byte[1024];
        while (true) {
            long left = (deadline - System.nanoTime()) / 1_000_000;
            if (left <= 0) return -1;
            s.setSoTimeout((int) left);
            try {
                if (in.read(sink) < 0) break;
            } catch (SocketTimeoutException e) {
                return -1;
            } catch (SocketException e) {
                break; // reset: closed as well
            }
        }
        return (System.nanoTime() - sinceNanos) / 1_000_000;
    }

    private void awaitRequestsUnderWay(int expected, String after) throws InterruptedException {
        long deadline = System.nanoTime() + PROMPT.toNanos();
        while (server.requestsUnderWay() != expected && System.nanoTime() < deadline) Thread.sleep(10);
        assertEquals(expected, server.requestsUnderWay(), "requests under way after " + after);
    }
}
