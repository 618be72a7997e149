package io.kvferry.registry;

import com.fasterxml.jackson.databind.JsonNode;
import com.sun.net.httpserver.HttpServer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Function;
import java.util.function.ToIntFunction;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

class BootstrapClientTest {
    static final String TOKEN = "client-test-token";
    static final RetryPolicy FAST = RetryPolicy.fast();

    BootstrapRegistryServer server;
    BootstrapClient client;
    final List<AutoCloseable> extra = new ArrayList<>();

    @BeforeEach
    void start() {
        server = BootstrapRegistryServer.start("127.0.0.1", 0, RegistryOptions.defaults(TOKEN));
        client = new BootstrapClient("127.0.0.1:" + server.port(), TOKEN, FAST);
    }

    @AfterEach
    void stop() throws Exception {
        client.close();
        server.close();
        for (AutoCloseable c : extra) c.close();
    }

    static PrefillRankRegistration reg(int tpSize, int tpRank, int ppSize, int ppRank, int port) {
        return new PrefillRankRegistration(tpSize, tpRank, 1, 0, 1, 0, ppSize, ppRank, 1, 0,
                "127.0.0.1", port, 16, "bf16", "follow_bootstrap_room", false, 30000);
    }

    @Test
    void fullRoundTrip() {
        assertTrue(client.health());
        for (int tp = 0; tp < 2; tp++) client.registerRank(reg(2, tp, 1, 0, 9000 + tp));
        PrefillServerInfo info = client.fetchTopology();
        assertEquals(PrefillServerInfo.of(2, 1, 1, 1, 16, "bf16", true, false, 30000), info);
        assertEquals(2, info.totalRanks());
        assertEquals(new RankEndpoint("127.0.0.1", 9001), client.fetchRankEndpoint(0, 0, 1, 0));
        client.registerDpRank(42L, 0);
        client.registerDpRank(Long.MAX_VALUE, 0);
        assertEquals(Map.of(42L, 0, Long.MAX_VALUE, 0), client.queryDpRanks(List.of(42L, 43L, Long.MAX_VALUE)));
        assertEquals(Map.of(), client.queryDpRanks(List.of()));
    }

    /** kvferry's batch form: the rooms a prefill rank took meanwhile in one POST, each then answered by a query. */
    @Test
    void manyRoomsRegisterInOnePost() {
        List<Long> rooms = new ArrayList<>();
        for (long r = 0; r < BootstrapClient.MAX_ROOMS_PER_REGISTRATION; r++) rooms.add(1_000_000_000_000L + r * 7919);
        assertEquals(Map.of(), client.registerDpRanks(rooms, 0));
        Map<Long, Integer> known = client.queryDpRanks(rooms);
        assertEquals(rooms.size(), known.size());
        assertTrue(known.values().stream().allMatch(dp -> dp == 0));
        List<Long> tooMany = new ArrayList<>(rooms);
        tooMany.add(1L);
        assertThrows(IllegalArgumentException.class, () -> client.registerDpRanks(tooMany, 0));
    }

    /**
     * SGLang's registry reads "bootstrap_room" and fails (500) on kvferry's batch form: the batch is
     * not retried, the first room alone succeeds, so the client registers room by room from then on.
     */
    @Test
    void aRegistryWithoutTheBatchFormGetsTheRoomsOneByOne() throws Exception {
        List<String> bodies = new ArrayList<>();
        HttpServer sglangLike = dpStub(bodies, body -> body.contains("\"bootstrap_room\"") ? 200 : 500,
                body -> body.contains("\"bootstrap_room\"") ? "OK" : "500 Internal Server Error: KeyError");
        try (BootstrapClient c = new BootstrapClient("127.0.0.1:" + sglangLike.getAddress().getPort(), TOKEN, RetryPolicy.defaults())) {
            assertEquals(Map.of(), c.registerDpRanks(List.of(11L, 12L, 13L), 1));
            synchronized (bodies) {
                assertEquals(1, bodies.stream().filter(b -> b.contains("bootstrap_rooms")).count(), "the batch is tried once: " + bodies);
                assertEquals(List.of(11L, 12L, 13L), singles(bodies), "every room registered in SGLang's form, in order");
            }
            assertEquals(Map.of(), c.registerDpRanks(List.of(14L, 15L), 1));
            synchronized (bodies) {
                assertEquals(1, bodies.stream().filter(b -> b.contains("bootstrap_rooms")).count(), "no batch tried again");
                assertEquals(List.of(11L, 12L, 13L, 14L, 15L), singles(bodies));
            }
        }
    }

    /**
     * A refusal of a good registry (it names "bootstrap_rooms", or the first room alone is refused as
     * well) fails every room of the batch, and later batches stay batches.
     */
    @Test
    void aRefusedBatchFailsItsRoomsAndKeepsTheBatchForm() throws Exception {
        List<String> bodies = new ArrayList<>();
        AtomicInteger n = new AtomicInteger();
        // 1: a refusal naming the field; 2: one that does not, 3: the probe of its first room, refused too; then OK.
        int[] statuses = {400, 400, 400};
        String[] answers = {"Field 'bootstrap_rooms[1]' must be >= 0, got -2", "dp_rank 1 is outside [0, dp_size=1)",
                "dp_rank 1 is outside [0, dp_size=1)"};
        int[] at = new int[1];
        HttpServer strict = dpStub(bodies, body -> {
            at[0] = n.getAndIncrement();
            return at[0] < statuses.length ? statuses[at[0]] : 200;
        }, body -> at[0] < answers.length ? answers[at[0]] : "OK");
        try (BootstrapClient c = new BootstrapClient("127.0.0.1:" + strict.getAddress().getPort(), TOKEN, FAST)) {
            Map<Long, RuntimeException> failed = c.registerDpRanks(List.of(1L, 2L), 1);
            assertEquals(Set.of(1L, 2L), failed.keySet());
            assertEquals(400, ((RegistryException) failed.get(2L)).statusCode());
            assertTrue(failed.get(1L).getMessage().contains("bootstrap_rooms[1]"), failed.get(1L).getMessage());
            failed = c.registerDpRanks(List.of(3L, 4L), 1);
            assertEquals(Set.of(3L, 4L), failed.keySet());
            assertTrue(failed.get(4L).getMessage().contains("dp_size=1"), failed.get(4L).getMessage());
            assertEquals(Map.of(), c.registerDpRanks(List.of(5L, 6L), 0));
            synchronized (bodies) {
                assertEquals(3, bodies.stream().filter(b -> b.contains("bootstrap_rooms")).count(), bodies.toString());
                assertEquals(List.of(3L), singles(bodies), "one probe, of the batch's first room");
            }
        }
    }

    /** A registry stub for /register_dp_rank answering each body with a status and a text, recording the bodies. */
    private HttpServer dpStub(List<String> bodies, ToIntFunction<String> status,
                            Function<String, String> answer) throws IOException {
        HttpServer s = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        s.createContext("/register_dp_rank", ex -> {
            String body = new String(ex.getRequestBody().readAllBytes(), StandardCharsets.UTF_8);
            synchronized (bodies) {
                bodies.add(body);
            }
            int code = status.applyAsInt(body);
            byte[] text = answer.apply(body).getBytes(StandardCharsets.UTF_8);
            ex.sendResponseHeaders(code, text.length);
            try (OutputStream out = ex.getResponseBody()) {
                out.write(text);
            }
        });
        s.start();
        extra.add(() -> s.stop(0));
        return s;
    }

    private static List<Long> singles(List<String> bodies) {
        List<Long> out = new ArrayList<>();
        for (String b : bodies) {
            if (b.contains("bootstrap_rooms")) continue;
            JsonNode n = parseJson(b);
            out.add(n.get("bootstrap_room").longValue());
            assertEquals(1, n.get("dp_rank").intValue());
        }
        return out;
    }

    private static JsonNode parseJson(String body) {
        try {
            return Json.MAPPER.readTree(body);
        } catch (IOException e) {
            throw new AssertionError("not JSON: " + body, e);
        }
    }

    @Test
    void topologyNotReadyIsADistinctException() {
        client.registerRank(reg(2, 0, 1, 0, 9000));
        RegistryNotReadyException e = assertThrows(RegistryNotReadyException.class, client::fetchTopology);
        assertEquals(503, e.statusCode());
        assertTrue(e.getMessage().contains("(1 workers registered)"), e.getMessage());
        assertTrue(e.getMessage().contains("after 5 attempts"), e.getMessage());
        assertThrows(RegistryNotReadyException.class, () -> client.fetchRankEndpoint(0, 0, 0, 0));
    }

    @Test
    void unknownRankIsA404RegistryException() {
        client.registerRank(reg(1, 0, 1, 0, 9000));
        RegistryException e = assertThrows(RegistryException.class, () -> client.fetchRankEndpoint(0, 0, 5, 0));
        assertFalse(e instanceof RegistryNotReadyException);
        assertEquals(404, e.statusCode());
        assertTrue(e.getMessage().contains("Bootstrap info not found"), e.getMessage());
    }

    @Test
    void refusedRegistrationsFailAtOnce() {
        try (BootstrapClient noToken = new BootstrapClient("127.0.0.1:" + server.port(), null, RetryPolicy.defaults());
             BootstrapClient wrong = new BootstrapClient("127.0.0.1:" + server.port(), "nope", RetryPolicy.defaults())) {
            RegistryException e = assertThrows(RegistryException.class, () -> noToken.registerRank(reg(1, 0, 1, 0, 9000)));
            assertEquals(401, e.statusCode());
            assertEquals("Unauthorized", e.responseBody());
            assertTrue(e.getMessage().contains("401") && e.getMessage().contains("not retried"), e.getMessage());
            assertEquals(401, assertThrows(RegistryException.class, () -> wrong.registerDpRank(1, 0)).statusCode());
            RegistryException bad = assertThrows(RegistryException.class, () -> client.registerRank(reg(1, 3, 1, 0, 9000)));
            assertEquals(400, bad.statusCode());
            assertTrue(bad.getMessage().contains("attn_tp_rank") && bad.getMessage().contains("(not retried)"), bad.getMessage());
            // Each refusal is thrown from its first answer ("not retried"); the attempts themselves are counted against a
            // stub in retriesServerErrorsButNotClientErrors. This once asserted the three calls took under 0.9 s (the default
            // policy's first wait is 1 s), a timing that a loaded CI machine's first HttpClient exchanges can exceed.
        }
        assertEquals(503, assertThrows(RegistryException.class, client::fetchTopology).statusCode());
    }

    @Test
    void registrationRetriesUntilALateServerComesUp() throws Exception {
        // The port is held (bound, never listening) until the server starts there: meanwhile every attempt is refused and
        // nothing else can be given it. Freed by a closed ServerSocket(0) instead, it could be taken by another bind(0) (or
        // be a retry's own ephemeral port) before the server's bind. Released just before that bind, in this thread: only
        // another process's bind landing on this one port in those microseconds could take it.
        Socket hold = heldPort();
        int port = hold.getLocalPort();
        // Attempts for at least 10 s (waits jittered into [25, 50] ms after the first few): the server's start, a thread
        // away, may take seconds on a loaded machine. 40 attempts gave it about one second.
        RetryPolicy patient = new RetryPolicy(400, Duration.ofMillis(20), Duration.ofMillis(50), Duration.ofSeconds(1));
        try (BootstrapClient late = new BootstrapClient("127.0.0.1:" + port, TOKEN, patient)) {
            CompletableFuture<Void> reg = CompletableFuture.runAsync(() -> late.registerRank(reg(1, 0, 1, 0, 9000)));
            Thread.sleep(200); // time for some refused attempts; not a condition: fewer only test less
            assertFalse(reg.isDone(), "registration cannot have succeeded before the server exists");
            hold.close();
            BootstrapRegistryServer s = BootstrapRegistryServer.start("127.0.0.1", port, RegistryOptions.defaults(TOKEN));
            extra.add(s);
            reg.get();
            assertEquals(new RankEndpoint("127.0.0.1", 9000), late.fetchRankEndpoint(0, 0, 0, 0));
        }
    }

    @Test
    void givesUpOnAnUnreachableRegistryWithAClearError() throws Exception {
        int port = heldPort().getLocalPort();
        RetryPolicy three = new RetryPolicy(3, Duration.ofMillis(5), Duration.ofMillis(10), Duration.ofSeconds(1));
        try (BootstrapClient c = new BootstrapClient("127.0.0.1:" + port, TOKEN, three)) {
            RegistryException e = assertThrows(RegistryException.class, () -> c.registerRank(reg(1, 0, 1, 0, 9000)));
            assertEquals(RegistryException.NO_RESPONSE, e.statusCode());
            assertNull(e.responseBody());
            assertTrue(e.getMessage().contains("PUT /route") && e.getMessage().contains("127.0.0.1:" + port)
                    && e.getMessage().contains("after 3 attempts") && e.getMessage().contains("ConnectException"), e.getMessage());
            assertInstanceOf(IOException.class, e.getCause());
        }
    }

    @Test
    void healthIsFalseAgainstAClosedPort() throws Exception {
        try (BootstrapClient c = new BootstrapClient("127.0.0.1:" + heldPort().getLocalPort(), null, FAST)) {
            assertFalse(c.health());
        }
        assertTrue(client.health());
        server.close();
        assertFalse(client.health());
    }

    /** A stub that answers scripted statuses, to see what the client retries. */
    private HttpServer stub(Deque<int[]> script, AtomicInteger hits, String body) throws IOException {
        HttpServer s = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 16);
        s.createContext("/", ex -> {
            hits.incrementAndGet();
            int[] next = script.size() > 1 ? script.poll() : script.peek();
            byte[] out = (next[0] == 200 ? body : "status " + next[0]).getBytes(StandardCharsets.UTF_8);
            ex.sendResponseHeaders(next[0], out.length);
            try (OutputStream o = ex.getResponseBody()) {
                o.write(out);
            }
        });
        s.start();
        extra.add(() -> s.stop(0));
        return s;
    }

    @Test
    void retriesServerErrorsButNotClientErrors() throws Exception {
        AtomicInteger hits = new AtomicInteger();
        Deque<int[]> script = new ArrayDeque<>(List.of(new int[]{503}, new int[]{500}, new int[]{200}));
        HttpServer s = stub(script, hits, "OK");
        try (BootstrapClient c = new BootstrapClient("127.0.0.1:" + s.getAddress().getPort(), TOKEN, FAST)) {
            c.registerRank(reg(1, 0, 1, 0, 9000));
            assertEquals(3, hits.get());

            hits.set(0);
            script.clear();
            script.add(new int[]{400});
            assertEquals(400, assertThrows(RegistryException.class, () -> c.registerDpRank(1, 0)).statusCode());
            assertEquals(1, hits.get());

            hits.set(0);
            script.clear();
            script.add(new int[]{401});
            assertEquals(401, assertThrows(RegistryException.class, () -> c.registerRank(reg(1, 0, 1, 0, 9000))).statusCode());
            assertEquals(1, hits.get());

            hits.set(0);
            script.clear();
            script.add(new int[]{502});
            RegistryException e = assertThrows(RegistryException.class, () -> c.registerRank(reg(1, 0, 1, 0, 9000)));
            assertEquals(FAST.attempts(), hits.get());
            assertEquals(502, e.statusCode());
            assertTrue(e.getMessage().contains("HTTP 502: status 502"), e.getMessage());
        }
    }

    @Test
    void unexpectedReplyBodiesAreRegistryExceptions() throws Exception {
        AtomicInteger hits = new AtomicInteger();
        HttpServer s = stub(new ArrayDeque<>(List.<int[]>of(new int[]{200})), hits, "{\"surprise\":true}");
        try (BootstrapClient c = new BootstrapClient("127.0.0.1:" + s.getAddress().getPort(), TOKEN, FAST)) {
            assertTrue(assertThrows(RegistryException.class, c::fetchTopology).getMessage().contains("unexpected body"));
            assertThrows(RegistryException.class, () -> c.fetchRankEndpoint(0, 0, 0, 0));
            assertThrows(RegistryException.class, () -> c.queryDpRanks(List.of(1L)));
        }
    }

    @Test
    void registrationJsonUsesSglangFieldNames() throws Exception {
        JsonNode n = Json.MAPPER.readTree(Json.MAPPER.writeValueAsString(reg(4, 1, 1, 0, 53017)));
        Set<String> names = new TreeSet<>();
        n.fieldNames().forEachRemaining(names::add);
        assertEquals(new TreeSet<>(List.of("attn_tp_size", "attn_tp_rank", "attn_cp_size", "attn_cp_rank",
                "attn_dp_size", "attn_dp_rank", "pp_size", "pp_rank", "system_dp_size", "system_dp_rank", "rank_ip",
                "rank_port", "page_size", "kv_cache_dtype", "load_balance_method", "enable_dsa_cache_layer_split",
                "prefill_http_port")), names);
        PrefillRankRegistration noLb = new PrefillRankRegistration(1, 0, 1, 0, 1, 0, 1, 0, 1, 0, "h", 1, 1, "auto",
                null, false, null);
        String json = Json.MAPPER.writeValueAsString(noLb);
        assertFalse(json.contains("load_balance_method") || json.contains("prefill_http_port"), json);
        assertTrue(noLb.followBootstrapRoom());
        assertEquals(noLb, Json.MAPPER.readValue(json, PrefillRankRegistration.class));
    }

    @Test
    void addressForms() {
        assertEquals("http://127.0.0.1:8998", BootstrapClient.baseUri("127.0.0.1:8998").toString());
        assertEquals("http://[::1]:8998", BootstrapClient.baseUri("[::1]:8998").toString());
        assertEquals("http://[::1]:8998", BootstrapClient.baseUri("::1:8998").toString());
        assertEquals("http://[fe80::1]:1", BootstrapClient.baseUri("http://[fe80::1]:1/").toString());
        assertEquals("http://prefill-0.svc:8998", BootstrapClient.baseUri(" prefill-0.svc:8998 ").toString());
        for (String bad : List.of("host", "host:", ":8998", "host:0", "host:70000", "host:x", "[::1]", "[::1]8998", "a b:1")) {
            assertThrows(IllegalArgumentException.class, () -> BootstrapClient.baseUri(bad), bad);
        }
        assertThrows(IllegalArgumentException.class, () -> new BootstrapClient("h:1", "tok\r\nX: y"));
    }

    @Test
    void worksOverIpv6Loopback() {
        BootstrapRegistryServer v6;
        try {
            v6 = BootstrapRegistryServer.start("::1", 0, RegistryOptions.defaults(TOKEN));
        } catch (RuntimeException e) {
            assumeTrue(false, "no IPv6 loopback here: " + e.getMessage());
            return;
        }
        extra.add(v6);
        try (BootstrapClient c = new BootstrapClient("[::1]:" + v6.port(), TOKEN, FAST)) {
            assertTrue(c.health());
            c.registerRank(reg(1, 0, 1, 0, 9000));
            assertEquals(1, c.fetchTopology().attnTpSize());
        }
    }

    /**
     * A loopback port bound and never listening, held until the test ends: a connect there is refused, and no server (nor a
     * client's ephemeral port) can be given it meanwhile. A ServerSocket(0) closed at once freed its port for the next
     * bind(0), this test's own or another process's, and then the "unreachable" registry could answer.
     */
    private Socket heldPort() throws IOException {
        Socket hold = new Socket();
        extra.add(hold);
        hold.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
        return hold;
    }
}
