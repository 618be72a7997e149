package io.kvferry.registry;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.provider.MethodSource;

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
import java.net.http.HttpTimeoutException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.IntSupplier;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

/**
 * Slow and stalled clients (slowloris) against a real registry on 127.0.0.1: they must neither delay the
 * routes SGLang depends on nor stay open past the request timeout, and the connection cap must refuse the
 * excess without touching requests already under way. The bounds are liveness bounds, not benchmarks.
 */
class RegistrySlowClientTest {
    static final String TOKEN = "s3cret-token";
    /**
     * What "answers promptly" means here: generous for a loaded CI machine, far below any hang (a server blocked by slow
     * clients answers only when their 30 s or 60 s request timeout ends them). It was 2 s: a loaded 2-core machine with
     * 300 slow connections open, or a garbage collection, can take that long over a prompt answer.
     */
    static final Duration PROMPT = Duration.ofSeconds(10);
    /** How long a wait for the server's own threads (a count of requests under way) may take: no claim, a budget. */
    static final Duration WAIT = Duration.ofSeconds(30);

    /** What a slow client sends before it goes quiet (or, for DRIP_BODY, keeps trickling). */
    enum Slow {
        /** Connects and sends nothing: holds a socket, never a request slot. */
        SILENT(""),
        REQUEST_LINE("GET /hea"),
        HEADERS("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a"),
        BODY(bodyHead(400) + "{\"attn_tp_size\":"),
        /** A byte of body every 100 ms: always progressing, never done, so only a whole-request deadline ends it. */
        DRIP_BODY(bodyHead(100_000));

        final String prefix;

        Slow(String prefix) {
            this.prefix = prefix;
        }

        private static String bodyHead(int contentLength) {
            return "PUT /route HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + TOKEN
                    + "\r\nContent-Type: application/json\r\nContent-Length: " + contentLength + "\r\n\r\n";
        }
    }

    private final List<Socket> sockets = new CopyOnWriteArrayList<>();
    private final List<Thread> drippers = new ArrayList<>();
    private BootstrapRegistryServer server;
    private HttpClient http;

    @AfterEach
    void cleanUp() {
        drippers.forEach(Thread::interrupt);
        for (Socket s : sockets) {
            try {
                s.close();
            } catch (IOException ignored) {
                // closing is all we want
            }
        }
        if (http != null) http.shutdownNow();
        if (server != null) server.close();
    }

    static Stream<Arguments> slowKindsTimesCounts() {
        return Arrays.stream(Slow.values()).flatMap(k -> Stream.of(Arguments.of(k, 16), Arguments.of(k, 300)));
    }

    @ParameterizedTest(name = "{1} x {0}")
    @MethodSource("slowKindsTimesCounts")
    void slowClientsDelayNeitherHealthNorLookupsNorRegistration(Slow kind, int count) throws Exception {
        // A request timeout far beyond the test: only a server whose workers slow clients cannot block passes.
        start(RegistryOptions.defaults(TOKEN).withRequestTimeout(Duration.ofSeconds(60)));
        for (int i = 0; i < count; i++) openSlow(kind);
        // Every slow request taken up (a silent connection is never one): a sleep of 300 ms stood for this.
        awaitRequestsUnderWay(kind == Slow.SILENT ? 0 : count, "the slow requests taken up");
        String what = " while " + count + " " + kind + " connections are open";

        assertEquals(200, promptly("GET", "/health", null, what).statusCode());
        assertEquals(503, promptly("GET", topology(), null, what).statusCode());
        assertEquals(200, promptly("PUT", "/route", RawHttp.json(RawHttp.registration(1, 0, 1, 0, 7000)), what).statusCode());
        assertEquals(200, promptly("GET", topology(), null, what).statusCode());
        assertEquals(200, promptly("GET", "/route?prefill_dp_rank=0&prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0",
                null, what).statusCode());
        for (Socket s : sockets) assertTrue(!s.isClosed(), "the slow connections were still open during the checks");
    }

    @ParameterizedTest
    @EnumSource(value = Slow.class, names = "SILENT", mode = EnumSource.Mode.EXCLUDE)
    void slowClientsAreClosedAfterTheRequestTimeout(Slow kind) throws Exception {
        Duration timeout = Duration.ofMillis(500);
        start(RegistryOptions.defaults(TOKEN).withRequestTimeout(timeout));
        List<Socket> slow = new ArrayList<>();
        long[] opened = new long[16];
        for (int i = 0; i < opened.length; i++) {
            opened[i] = System.nanoTime(); // before its first byte, so before the server's clock for it starts
            slow.add(openSlow(kind));
        }
        Duration bound = timeout.plusSeconds(20); // a bound for "not hung": the server's sweep may run late on a loaded machine
        for (int i = 0; i < opened.length; i++) {
            long ms = closedByServerWithinMs(slow.get(i), bound, opened[i]);
            assertTrue(ms >= 0, kind + " connection still open " + bound.toMillis() + " ms after it started its request");
            assertTrue(ms >= timeout.toMillis() / 2, kind + " connection closed after " + ms + " ms, before the timeout");
        }
        awaitRequestsUnderWay(0, "slow requests closed");
        assertEquals(200, promptly("GET", "/health", null, " after the slow connections were closed").statusCode());
    }

    @Test
    void connectionCapRefusesExcessRequestsAndSparesTheOnesUnderWay() throws Exception {
        int cap = 8;
        start(RegistryOptions.defaults(TOKEN).withMaxConnections(cap).withRequestTimeout(Duration.ofSeconds(30)));
        // A legitimate registration under way: headers and half its body sent.
        String body = RawHttp.json(RawHttp.registration(1, 0, 1, 0, 7100));
        Socket legit = open();
        OutputStream legitOut = legit.getOutputStream();
        legitOut.write(("PUT /route HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + TOKEN
                + "\r\nContent-Type: application/json\r\nContent-Length: " + body.length() + "\r\nConnection: close\r\n\r\n"
                + body.substring(0, body.length() / 2)).getBytes(StandardCharsets.UTF_8));
        legitOut.flush();
        awaitRequestsUnderWay(1, "the legitimate registration under way");
        for (int i = 1; i < cap; i++) openSlow(Slow.REQUEST_LINE);
        awaitRequestsUnderWay(cap, "the cap filled");

        // Beyond the cap: closed at once (the 30 s request timeout is not what closes them).
        for (int i = 0; i < 20; i++) {
            Socket excess = openSlow(Slow.REQUEST_LINE);
            long ms = closedByServerWithinMs(excess, PROMPT, System.nanoTime());
            assertTrue(ms >= 0, "connection #" + (cap + i + 1) + " beyond the cap of " + cap + " was not refused");
        }
        assertEquals(cap, server.requestsUnderWay());

        // The registration under way is untouched: it completes and is answered.
        legitOut.write(body.substring(body.length() / 2).getBytes(StandardCharsets.UTF_8));
        legitOut.flush();
        legit.setSoTimeout((int) PROMPT.toMillis());
        String reply = new String(legit.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(reply.startsWith("HTTP/1.1 200"), reply);

        // Once the slow clients go, new requests are served again.
        for (Socket s : sockets) s.close();
        awaitRequestsUnderWay(0, "slow clients gone");
        assertEquals(200, promptly("GET", topology(), null, " after the cap was reached").statusCode());
    }

    @Test
    void closeEndsRequestsUnderWay() throws Exception {
        start(RegistryOptions.defaults(TOKEN).withRequestTimeout(Duration.ofSeconds(60)));
        List<Socket> slow = new ArrayList<>();
        for (int i = 0; i < 16; i++) slow.add(openSlow(i % 2 == 0 ? Slow.HEADERS : Slow.BODY));
        awaitRequestsUnderWay(16, "slow requests taken up");
        server.close();
        awaitRequestsUnderWay(0, "close()");
        for (Socket s : slow) assertTrue(closedByServerWithinMs(s, PROMPT, System.nanoTime()) >= 0, "close() left a slow connection open");
    }

    @Test
    void optionsValidateTheLimitsAndDefaultThem() {
        RegistryOptions d = RegistryOptions.defaults(TOKEN);
        assertEquals(Duration.ofSeconds(10), d.requestTimeout());
        assertEquals(1024, d.maxConnections());
        assertEquals(d, new RegistryOptions(TOKEN, RegistryOptions.DEFAULT_ROOM_ENTRY_TTL, false,
                RegistryOptions.DEFAULT_REQUEST_TIMEOUT, RegistryOptions.DEFAULT_MAX_CONNECTIONS));
        assertThrows(IllegalArgumentException.class, () -> d.withRequestTimeout(Duration.ZERO));
        assertThrows(IllegalArgumentException.class, () -> d.withRequestTimeout(Duration.ofMillis(-5)));
        assertThrows(NullPointerException.class, () -> d.withRequestTimeout(null));
        assertThrows(IllegalArgumentException.class, () -> d.withMaxConnections(0));
        assertEquals(Duration.ofSeconds(3), RegistryOptions.withoutAuth().withRequestTimeout(Duration.ofSeconds(3)).requestTimeout());
        assertTrue(d.withMaxConnections(7).toString().contains("maxConnections=7"));
        RegistryOptions platform = d.withMaxConnections(7).withPlatformRequestThreads();
        assertTrue(platform.platformRequestThreads() && !d.platformRequestThreads());
        assertEquals(7, platform.maxConnections());
        assertEquals(platform, platform.withRequestTimeout(d.requestTimeout()));
    }

    // ------------------------------------------------------------------ helpers

    private void start(RegistryOptions options) {
        server = BootstrapRegistryServer.start("127.0.0.1", 0, options);
        http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).connectTimeout(PROMPT).build();
    }

    private static String topology() {
        return "/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1";
    }

    /** Sends one request and fails, naming the circumstances, unless it is answered within {@link #PROMPT}. */
    private HttpResponse<String> promptly(String method, String path, String body, String circumstances) throws Exception {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + server.port() + path)).timeout(PROMPT)
                .method(method, body == null ? HttpRequest.BodyPublishers.noBody() : HttpRequest.BodyPublishers.ofString(body));
        if (!method.equals("GET")) b.header("Authorization", "Bearer " + TOKEN);
        long t0 = System.nanoTime();
        try {
            return http.send(b.build(), HttpResponse.BodyHandlers.ofString());
        } catch (HttpTimeoutException e) {
            return fail(method + " " + path + " was not answered within " + PROMPT.toMillis() + " ms" + circumstances);
        } catch (IOException e) {
            return fail(method + " " + path + " failed after " + (System.nanoTime() - t0) / 1_000_000 + " ms" + circumstances + ": " + e);
        }
    }

    private Socket open() throws IOException {
        Socket s = new Socket();
        sockets.add(s);
        s.connect(new InetSocketAddress("127.0.0.1", server.port()), (int) PROMPT.toMillis());
        return s;
    }

    private Socket openSlow(Slow kind) throws IOException {
        Socket s = open();
        OutputStream out = s.getOutputStream();
        if (!kind.prefix.isEmpty()) {
            out.write(kind.prefix.getBytes(StandardCharsets.UTF_8));
            out.flush();
        }
        if (kind == Slow.DRIP_BODY) {
            drippers.add(Thread.ofVirtual().name("drip").start(() -> {
                try {
                    while (!Thread.currentThread().isInterrupted()) {
                        out.write('x');
                        out.flush();
                        Thread.sleep(100);
                    }
                } catch (IOException | InterruptedException e) {
                    // the server closed it, or the test is over
                }
            }));
        }
        return s;
    }

    /**
     * Milliseconds from {@code sinceNanos} until the server closed {@code s} (end of stream or reset),
     * or -1 if it was still open after {@code bound}. Whatever the server sends before closing is skipped.
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
        awaitCount(server::requestsUnderWay, expected, "requests under way after " + after);
    }

    private static void awaitCount(IntSupplier count, int expected, String what) throws InterruptedException {
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (count.getAsInt() != expected && System.nanoTime() < deadline) Thread.sleep(10);
        assertEquals(expected, count.getAsInt(), what);
    }
}
