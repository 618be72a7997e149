package io.kvferry.registry;

import com.fasterxml.jackson.databind.JsonNode;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.UncheckedIOException;
import java.net.ConnectException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicLong;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class BootstrapRegistryServerTest {
    static final String TOKEN = "s3cret-token";
    static final String AUTH = "Bearer " + TOKEN;

    BootstrapRegistryServer server;
    RawHttp http;

    @BeforeEach
    void start() {
        server = BootstrapRegistryServer.start("127.0.0.1", 0, RegistryOptions.defaults(TOKEN));
        http = new RawHttp(server.port());
    }

    @AfterEach
    void stop() {
        http.close();
        server.close();
    }

    private RawHttp.Reply register(Map<String, Object> reg) {
        return http.put(RawHttp.json(reg), AUTH);
    }

    private JsonNode json(RawHttp.Reply r) throws Exception {
        return Json.MAPPER.readTree(r.body());
    }

    @Test
    void healthIsOkAndOnlyForGet() {
        RawHttp.Reply r = http.get("/health");
        assertEquals(200, r.status());
        assertEquals("OK", r.body());
        assertEquals(200, http.send("HEAD", "/health", null, null).status());
        assertEquals(405, http.send("POST", "/health", "{}", null).status());
        assertEquals(404, http.get("/nope").status());
    }

    @Test
    void topologyIs503UntilTheLastRankOfTp2Pp2Registers() throws Exception {
        assertEquals("Prefill server not fully registered yet (0 workers registered).", http.topology().body());
        int n = 0;
        for (int tp = 0; tp < 2; tp++) {
            for (int pp = 0; pp < 2; pp++) {
                RawHttp.Reply t = http.topology();
                assertEquals(503, t.status());
                assertEquals("Prefill server not fully registered yet (" + n + " workers registered).", t.body());
                RawHttp.Reply put = register(RawHttp.registration(2, tp, 2, pp, 5000 + 10 * tp + pp));
                assertEquals(200, put.status(), put.body());
                assertEquals("OK", put.body());
                n++;
            }
        }
        RawHttp.Reply t = http.topology();
        assertEquals(200, t.status(), t.body());
        assertTrue(t.headers().firstValue("Content-Type").orElse("").startsWith("application/json"));
        JsonNode info = json(t);
        assertEquals(2, info.get("attn_tp_size").intValue());
        assertEquals(1, info.get("attn_cp_size").intValue());
        assertEquals(1, info.get("dp_size").intValue());
        assertEquals(2, info.get("pp_size").intValue());
        assertEquals(64, info.get("page_size").intValue());
        assertEquals("auto", info.get("kv_cache_dtype").textValue());
        assertTrue(info.get("follow_bootstrap_room").booleanValue());
        assertFalse(info.get("enable_dsa_cache_layer_split").booleanValue());
        assertEquals(30000, info.get("prefill_http_port").intValue());
        for (String f : List.of("target_tp_rank", "target_tp_ranks", "target_cp_ranks", "target_pp_ranks",
                "required_dst_info_num", "required_prefill_response_num")) {
            assertTrue(info.has(f) && info.get(f).isNull(), f + " must be present and null");
        }
        assertEquals(15, info.size());
    }

    @Test
    void concreteRanksResolveToTheirEndpoint() throws Exception {
        for (int tp = 0; tp < 2; tp++) register(RawHttp.registration(2, tp, 1, 0, 6000 + tp));
        RawHttp.Reply r = http.route(0, 0, 1, 0);
        assertEquals(200, r.status());
        JsonNode ep = json(r);
        assertEquals("10.0.0.5", ep.get("rank_ip").textValue());
        assertEquals(6001, ep.get("rank_port").intValue());
        assertEquals(2, ep.size());
    }

    @Test
    void concreteLookupBeforeReadyIs503() {
        register(RawHttp.registration(2, 0, 1, 0, 6000));
        assertEquals(503, http.route(0, 0, 0, 0).status());
    }

    @Test
    void unknownRankIs404() {
        register(RawHttp.registration(1, 0, 1, 0, 6000));
        RawHttp.Reply r = http.route(0, 0, 3, 0);
        assertEquals(404, r.status());
        assertEquals("Bootstrap info not found for dp_rank=0 cp_rank=0 tp_rank=3 pp_rank=0", r.body());
        assertEquals(404, http.route(-1, 0, 0, 0).status());
    }

    @ParameterizedTest
    @ValueSource(strings = {
            "/route",
            "/route?prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0",
            "/route?prefill_dp_rank=0&target_tp_rank=0&target_pp_rank=0",
            "/route?prefill_dp_rank=0&prefill_cp_rank=0&target_pp_rank=0",
            "/route?prefill_dp_rank=0&prefill_cp_rank=0&target_tp_rank=0",
            "/route?prefill_dp_rank=x&prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0",
            "/route?prefill_dp_rank=1.5&prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0",
            "/route?prefill_dp_rank=%41&prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0",
            "/route?prefill_dp_rank=&prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0"})
    void missingOrNonIntegerParamsAre400(String query) {
        RawHttp.Reply r = http.get(query);
        assertEquals(400, r.status());
        assertEquals("Missing inputs for bootstrap server.", r.body());
    }

    @Test
    void malformedPercentEscapeIs400NotACrash() throws Exception {
        try (Socket s = new Socket("127.0.0.1", server.port())) {
            s.setSoTimeout(5000);
            s.getOutputStream().write(("GET /route?prefill_dp_rank=%ZZ&prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0 HTTP/1.1\r\n"
                    + "Host: x\r\nConnection: close\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
            String reply = new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            // The JDK server refuses the URI itself, before any handler; a 400 either way.
            assertTrue(reply.startsWith("HTTP/1.1 400"), reply);
        }
        assertEquals(200, http.get("/health").status());
    }

    @ParameterizedTest
    @ValueSource(strings = {"POST", "DELETE", "PATCH", "HEAD"})
    void otherMethodsOnRouteAre405(String method) {
        RawHttp.Reply r = http.send(method, "/route", "{}", AUTH);
        assertEquals(405, r.status());
        if (!method.equals("HEAD")) assertEquals("Method not allowed", r.body());
        assertTrue(r.headers().firstValue("Allow").orElse("").contains("PUT"));
    }

    @Test
    void jsonAnswersSayTheirCharsetAsSglangDoes() throws Exception {
        assertEquals(200, register(RawHttp.registration(1, 0, 1, 0, 6000)).status());
        RawHttp.Reply t = http.topology();
        assertEquals(200, t.status());
        assertEquals("application/json; charset=utf-8", t.headers().firstValue("Content-Type").orElse(""));
    }

    @Test
    void noAuthOptOutAcceptsWritesWithoutAHeader() {
        try (BootstrapRegistryServer open = BootstrapRegistryServer.start("127.0.0.1", 0, RegistryOptions.withoutAuth());
             RawHttp h = new RawHttp(open.port())) {
            assertEquals(503, h.topology().status());
            assertEquals(200, h.put(RawHttp.json(RawHttp.registration(1, 0, 1, 0, 6000)), null).status());
            assertEquals(200, h.post("/register_dp_rank", "{\"bootstrap_room\":1,\"dp_rank\":0}", null).status());
            assertEquals(200, h.topology().status());
        }
    }

    @Test
    void noAuthAndATokenTogetherAreRefused() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> new RegistryOptions(TOKEN, RegistryOptions.DEFAULT_ROOM_ENTRY_TTL, true));
        assertTrue(e.getMessage().contains("--no-auth"), e.getMessage());
    }

    @Test
    void putWithoutTokenIs401AndStoresNothing() {
        RawHttp.Reply r = http.put(RawHttp.json(RawHttp.registration(1, 0, 1, 0, 6000)), null);
        assertEquals(401, r.status());
        assertEquals("Unauthorized", r.body());
        RawHttp.Reply t = http.topology();
        assertEquals(503, t.status());
        assertTrue(t.body().contains("(0 workers registered)"));
    }

    @ParameterizedTest
    @ValueSource(strings = {"Bearer wrong", "Bearer " + TOKEN + "x", "Basic " + TOKEN, "Bearer", "Bearer ", TOKEN, ""})
    void wrongCredentialsAre401(String authorization) {
        assertEquals(401, http.put(RawHttp.json(RawHttp.registration(1, 0, 1, 0, 6000)), authorization).status());
        assertEquals(401, http.post("/register_dp_rank", "{\"bootstrap_room\":1,\"dp_rank\":0}", authorization).status());
        assertEquals(503, http.topology().status());
    }

    @ParameterizedTest
    @ValueSource(strings = {"bearer ", "BEARER ", "Bearer  ", "bEaReR\t"})
    void schemeIsCaseInsensitive(String scheme) {
        assertEquals(200, http.put(RawHttp.json(RawHttp.registration(1, 0, 1, 0, 6000)), scheme + TOKEN).status());
        assertEquals(200, http.topology().status());
    }

    @ParameterizedTest
    @ValueSource(strings = {"", "   "})
    void serverWithoutTokenRefusesEveryWrite(String token) {
        try (BootstrapRegistryServer open = BootstrapRegistryServer.start("127.0.0.1", 0,
                RegistryOptions.defaults(token.isEmpty() ? null : token));
             RawHttp h = new RawHttp(open.port())) {
            String reg = RawHttp.json(RawHttp.registration(1, 0, 1, 0, 6000));
            assertEquals(401, h.put(reg, null).status());
            assertEquals(401, h.put(reg, "Bearer ").status());
            assertEquals(401, h.put(reg, "Bearer anything").status());
            assertEquals(401, h.post("/register_dp_rank", "{\"bootstrap_room\":1,\"dp_rank\":0}", "Bearer x").status());
            assertEquals(503, h.topology().status());
            assertEquals(200, h.get("/health").status());
        }
    }

    @Test
    void registerDpRankNeedsAuthAndStoresNothingWithout() {
        assertEquals(401, http.post("/register_dp_rank", "{\"bootstrap_room\":7,\"dp_rank\":1}", null).status());
        RawHttp.Reply q = http.post("/query_dp_ranks", "{\"bootstrap_rooms\":[7]}", null);
        assertEquals(200, q.status());
        assertEquals("{}", q.body());
    }

    @Test
    void queryDpRanksUsesStringKeysAndOmitsUnknownRooms() throws Exception {
        long big = Long.MAX_VALUE;
        assertEquals("OK", http.post("/register_dp_rank", "{\"bootstrap_room\":7,\"dp_rank\":1}", AUTH).body());
        assertEquals(200, http.post("/register_dp_rank", "{\"bootstrap_room\":" + big + ",\"dp_rank\":3}", AUTH).status());
        RawHttp.Reply q = http.post("/query_dp_ranks", "{\"bootstrap_rooms\":[7, 8, " + big + "]}", null);
        assertEquals(200, q.status());
        JsonNode m = json(q);
        assertEquals(2, m.size());
        assertEquals(1, m.get("7").intValue());
        assertEquals(3, m.get(Long.toString(big)).intValue());
        assertTrue(q.body().contains("\"7\":1"), q.body());
        // Registering the room again moves it.
        http.post("/register_dp_rank", "{\"bootstrap_room\":7,\"dp_rank\":0}", AUTH);
        assertEquals(0, json(http.post("/query_dp_ranks", "{\"bootstrap_rooms\":[7]}", null)).get("7").intValue());
    }

    @ParameterizedTest
    @ValueSource(strings = {"{}", "{\"bootstrap_rooms\":7}", "{\"bootstrap_rooms\":[\"7\"]}", "{\"bootstrap_rooms\":[-1]}",
            "{\"bootstrap_rooms\":[1.5]}", "{\"bootstrap_rooms\":[99999999999999999999]}", "[]", "nope"})
    void badQueryDpRanksBodiesAre400(String body) {
        RawHttp.Reply r = http.post("/query_dp_ranks", body, null);
        assertEquals(400, r.status(), r.body());
        assertFalse(r.body().isBlank());
    }

    @ParameterizedTest
    @ValueSource(strings = {"{\"dp_rank\":0}", "{\"bootstrap_room\":1}", "{\"bootstrap_room\":-5,\"dp_rank\":0}",
            "{\"bootstrap_room\":1,\"dp_rank\":-1}", "{\"bootstrap_room\":\"1\",\"dp_rank\":0}", "{",
            "{\"bootstrap_rooms\":[],\"dp_rank\":0}", "{\"bootstrap_rooms\":[1,-2],\"dp_rank\":0}",
            "{\"bootstrap_rooms\":7,\"dp_rank\":0}", "{\"bootstrap_rooms\":[1],\"bootstrap_room\":1,\"dp_rank\":0}",
            "{\"bootstrap_rooms\":[1,2]}"})
    void badRegisterDpRankBodiesAre400(String body) {
        RawHttp.Reply r = http.post("/register_dp_rank", body, AUTH);
        assertEquals(400, r.status(), body);
        assertFalse(r.body().isBlank());
    }

    /**
     * JSON bombs within the 64 KiB body limit, on the unauthenticated route and an authenticated one:
     * nesting 30,000 deep, a 60,000-digit integer, a float exponent out of any range, 20,000 keys. Each is a
     * 400 naming the problem (Jackson's stream limits: depth, number length), never a stack overflow
     * or a 500, and the registry serves on.
     */
    @ParameterizedTest
    @ValueSource(strings = {"deep-array", "deep-object", "long-integer", "huge-exponent", "many-keys"})
    void jsonBombsAre400AndTheRegistryServesOn(String bomb) {
        String body = switch (bomb) {
            case "deep-array" -> "{\"bootstrap_rooms\":" + "[".repeat(30_000) + "]".repeat(30_000) + "}";
            case "deep-object" -> "{\"a\":".repeat(9_000) + "1" + "}".repeat(9_000);
            case "long-integer" -> "{\"bootstrap_rooms\":[1" + "0".repeat(60_000) + "]}";
            case "huge-exponent" -> "{\"bootstrap_rooms\":[1e999999999]}";
            default -> {
                StringBuilder b = new StringBuilder("{\"bootstrap_rooms\":[1]");
                for (int i = 0; i < 20_000 && b.length() < 60_000; i++) b.append(",\"k").append(i).append("\":0");
                yield b.append('}').toString();
            }
        };
        assertTrue(body.length() <= BootstrapRegistryServer.MAX_BODY_BYTES, bomb + " is " + body.length() + " bytes");
        for (String path : new String[]{"/query_dp_ranks", "/register_dp_rank"}) {
            RawHttp.Reply r = http.post(path, body, AUTH);
            if (bomb.equals("many-keys") && path.equals("/query_dp_ranks")) {
                assertEquals(200, r.status(), r.body()); // unknown keys are ignored, as SGLang's newer fields are
            } else {
                assertEquals(400, r.status(), bomb + " on " + path + ": " + r.body());
                assertFalse(r.body().contains("\tat "), "no stack traces");
            }
        }
        assertEquals(200, http.get("/health").status());
    }

    /** kvferry's batch form stores every room, or none when one of them is bad. */
    @Test
    void aBatchRegistrationStoresEveryRoomOrNone() throws Exception {
        assertEquals("OK", http.post("/register_dp_rank", "{\"bootstrap_rooms\":[7,8,9],\"dp_rank\":2}", AUTH).body());
        JsonNode m = json(http.post("/query_dp_ranks", "{\"bootstrap_rooms\":[7,8,9,10]}", null));
        assertEquals(3, m.size());
        for (String room : List.of("7", "8", "9")) assertEquals(2, m.get(room).intValue());
        RawHttp.Reply bad = http.post("/register_dp_rank", "{\"bootstrap_rooms\":[10,11,\"x\"],\"dp_rank\":1}", AUTH);
        assertEquals(400, bad.status());
        assertTrue(bad.body().contains("bootstrap_rooms[2]"), bad.body());
        assertEquals("{}", http.post("/query_dp_ranks", "{\"bootstrap_rooms\":[10,11]}", null).body());
        assertEquals(401, http.post("/register_dp_rank", "{\"bootstrap_rooms\":[12],\"dp_rank\":1}", null).status());
        StringBuilder many = new StringBuilder("{\"dp_rank\":1,\"bootstrap_rooms\":[0");
        for (int i = 1; i <= BootstrapClient.MAX_ROOMS_PER_REGISTRATION; i++) many.append(',').append(i);
        RawHttp.Reply tooMany = http.post("/register_dp_rank", many.append("]}").toString(), AUTH);
        assertEquals(400, tooMany.status());
        assertTrue(tooMany.body().contains("at most " + BootstrapClient.MAX_ROOMS_PER_REGISTRATION), tooMany.body());
        assertEquals("{}", http.post("/query_dp_ranks", "{\"bootstrap_rooms\":[0]}", null).body());
    }

    @Test
    void registerDpRankBeyondKnownDpSizeIs400() {
        register(RawHttp.registration(1, 0, 1, 0, 6000));
        RawHttp.Reply r = http.post("/register_dp_rank", "{\"bootstrap_room\":1,\"dp_rank\":1}", AUTH);
        assertEquals(400, r.status());
        assertTrue(r.body().contains("dp_size=1"), r.body());
    }

    @Test
    void roomEntriesExpireAfterTheTtl() throws Exception {
        AtomicLong now = new AtomicLong(1_000_000_000L);
        try (BootstrapRegistryServer s = BootstrapRegistryServer.start("127.0.0.1", 0,
                new RegistryOptions(TOKEN, Duration.ofSeconds(120)), now::get);
             RawHttp h = new RawHttp(s.port())) {
            h.post("/register_dp_rank", "{\"bootstrap_room\":1,\"dp_rank\":0}", AUTH);
            now.addAndGet(Duration.ofSeconds(100).toNanos());
            h.post("/register_dp_rank", "{\"bootstrap_room\":2,\"dp_rank\":0}", AUTH);
            assertEquals(2, json(h.post("/query_dp_ranks", "{\"bootstrap_rooms\":[1,2]}", null)).size());
            now.addAndGet(Duration.ofSeconds(21).toNanos());
            JsonNode m = json(h.post("/query_dp_ranks", "{\"bootstrap_rooms\":[1,2]}", null));
            assertFalse(m.has("1"));
            assertTrue(m.has("2"));
        }
    }

    /**
     * Writes without the token, from anyone who reaches the registry, as fast as it answers them: each was
     * a WARN line (a flood of requests, a flood of the log). One warning a second now, on the registry's
     * clock (held still here), naming how many more were refused; the rest at debug. Each is still a 401.
     */
    @Test
    void refusedWritesWarnOnceASecond() throws Exception {
        AtomicLong now = new AtomicLong(1_000_000_000L);
        try (BootstrapRegistryServer s = BootstrapRegistryServer.start("127.0.0.1", 0,
                new RegistryOptions(TOKEN, Duration.ofSeconds(120)), now::get);
             RawHttp h = new RawHttp(s.port())) {
            for (int i = 0; i < 30; i++) {
                assertEquals(401, h.post("/register_dp_rank", "{\"bootstrap_room\":1,\"dp_rank\":0}", null).status());
                assertEquals(401, h.put(RawHttp.json(RawHttp.registration(1, 0, 1, 0, 7000)), "Bearer wrong").status());
            }
            assertEquals(1, s.unauthorizedWarnings(), "warnings for 60 refused writes within one second");
            now.addAndGet(BootstrapRegistryServer.UNAUTHORIZED_WARN_NANOS);
            assertEquals(401, h.post("/register_dp_rank", "{\"bootstrap_room\":1,\"dp_rank\":0}", null).status());
            assertEquals(2, s.unauthorizedWarnings(), "one more the next second");
            assertEquals(0, s.roomEntryCount());
        }
    }

    @Test
    void sweeperDropsExpiredEntriesNobodyAsksAbout() throws Exception {
        try (BootstrapRegistryServer s = BootstrapRegistryServer.start("127.0.0.1", 0,
                new RegistryOptions(TOKEN, Duration.ofMillis(60)));
             RawHttp h = new RawHttp(s.port())) {
            for (int room = 1; room <= 5; room++) {
                h.post("/register_dp_rank", "{\"bootstrap_room\":" + room + ",\"dp_rank\":0}", AUTH);
            }
            long deadline = System.nanoTime() + Duration.ofSeconds(3).toNanos();
            while (s.roomEntryCount() > 0 && System.nanoTime() < deadline) Thread.sleep(10);
            assertEquals(0, s.roomEntryCount());
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"{", "not json", "{\"attn_tp_size\":1,}", "[1,2]", "\"str\"", "", "{} {}",
            "{\"attn_tp_size\":1,\"attn_tp_size\":2}"})
    void malformedJsonIs400(String body) {
        RawHttp.Reply r = http.put(body, AUTH);
        assertEquals(400, r.status());
        assertTrue(r.body().startsWith("Malformed JSON") || r.body().startsWith("Request body must be a JSON object"), r.body());
        assertFalse(r.body().contains("\tat "), "no stack traces");
        assertEquals(503, http.topology().status());
    }

    record Bad(String field, Object value, String expect) {}

    @Test
    void invalidFieldsAre400NamingTheProblem() {
        List<Bad> cases = List.of(
                new Bad("attn_tp_rank", null, "attn_tp_rank"),
                new Bad("rank_ip", null, "rank_ip"),
                new Bad("attn_tp_size", "2", "attn_tp_size"),
                new Bad("attn_tp_size", 2.5, "attn_tp_size"),
                new Bad("attn_tp_size", 0, "attn_tp_size"),
                new Bad("attn_tp_size", 10_000_000_000L, "attn_tp_size"),
                new Bad("attn_tp_rank", -1, "attn_tp_rank"),
                new Bad("attn_tp_rank", 2, "attn_tp_rank"),
                new Bad("pp_rank", 1, "pp_rank"),
                new Bad("attn_cp_rank", 1, "attn_cp_rank"),
                new Bad("attn_dp_rank", 1, "attn_dp_rank"),
                new Bad("system_dp_rank", 3, "system_dp_rank"),
                new Bad("rank_port", 0, "rank_port"),
                new Bad("rank_port", 70_000, "rank_port"),
                new Bad("rank_ip", "", "rank_ip"),
                new Bad("rank_ip", "a b", "rank_ip"),
                new Bad("rank_ip", 5, "rank_ip"),
                new Bad("page_size", 0, "page_size"),
                new Bad("kv_cache_dtype", " ", "kv_cache_dtype"),
                new Bad("kv_cache_dtype", "x".repeat(300), "kv_cache_dtype"),
                new Bad("enable_dsa_cache_layer_split", "yes", "enable_dsa_cache_layer_split"),
                new Bad("load_balance_method", 3, "load_balance_method"),
                new Bad("prefill_http_port", -1, "prefill_http_port"));
        for (Bad c : cases) {
            Map<String, Object> reg = RawHttp.registration(2, 0, 1, 0, 6000);
            if (c.value() == null) reg.remove(c.field());
            else reg.put(c.field(), c.value());
            RawHttp.Reply r = register(reg);
            assertEquals(400, r.status(), c + " -> " + r.body());
            assertTrue(r.body().contains(c.expect()), c + " -> " + r.body());
        }
        Map<String, Object> huge = RawHttp.registration(60_000, 0, 60_000, 0, 6000);
        assertEquals(400, register(huge).status());
        RawHttp.Reply t = http.topology();
        assertTrue(t.body().contains("(0 workers registered)"), "nothing stored: " + t.body());
    }

    @Test
    void olderSendersWithoutNewerFieldsStillRegister() throws Exception {
        Map<String, Object> reg = RawHttp.registration(1, 0, 1, 0, 6000);
        for (String f : List.of("attn_cp_size", "attn_cp_rank", "system_dp_size", "system_dp_rank",
                "load_balance_method", "enable_dsa_cache_layer_split", "prefill_http_port")) {
            reg.remove(f);
        }
        assertEquals(200, register(reg).status());
        JsonNode info = json(http.topology());
        assertTrue(info.get("follow_bootstrap_room").booleanValue(), "missing load_balance_method follows the room");
        assertTrue(info.get("prefill_http_port").isNull());
        assertEquals(1, info.get("attn_cp_size").intValue());
    }

    @Test
    void otherLoadBalanceMethodDoesNotFollowTheRoom() throws Exception {
        Map<String, Object> reg = RawHttp.registration(1, 0, 1, 0, 6000);
        reg.put("load_balance_method", "round_robin");
        register(reg);
        assertFalse(json(http.topology()).get("follow_bootstrap_room").booleanValue());
    }

    @Test
    void systemDpRankPicksTheGroupWhenSystemDpIsUsed() throws Exception {
        for (int g = 0; g < 2; g++) {
            Map<String, Object> reg = RawHttp.registration(1, 0, 1, 0, 7000 + g);
            reg.put("system_dp_size", 2);
            reg.put("system_dp_rank", g);
            assertEquals(200, register(reg).status());
        }
        assertEquals(2, json(http.topology()).get("dp_size").intValue());
        assertEquals(7001, json(http.route(1, 0, 0, 0)).get("rank_port").intValue());
    }

    @Test
    void oversizedBodyIs413AndTheServerCarriesOn() {
        String big = "{\"pad\":\"" + "x".repeat(80 * 1024) + "\"}";
        RawHttp.Reply r = http.put(big, AUTH);
        assertEquals(413, r.status());
        assertTrue(r.body().contains("too large"));
        assertEquals(413, http.post("/query_dp_ranks", big, null).status());
        assertEquals(200, register(RawHttp.registration(1, 0, 1, 0, 6000)).status());
        assertEquals(200, http.topology().status());
    }

    @Test
    void conflictingTopologyIs400() {
        assertEquals(200, register(RawHttp.registration(2, 0, 1, 0, 6000)).status());
        Map<String, Object> tp = RawHttp.registration(4, 1, 1, 0, 6001);
        Map<String, Object> page = RawHttp.registration(2, 1, 1, 0, 6001);
        page.put("page_size", 16);
        Map<String, Object> dtype = RawHttp.registration(2, 1, 1, 0, 6001);
        dtype.put("kv_cache_dtype", "fp8_e4m3");
        Map<String, Object> pp = RawHttp.registration(2, 1, 2, 0, 6001);
        Map<String, String> expect = Map.of("attn_tp_size", RawHttp.json(tp), "page_size", RawHttp.json(page),
                "kv_cache_dtype", RawHttp.json(dtype), "pp_size", RawHttp.json(pp));
        expect.forEach((field, body) -> {
            RawHttp.Reply r = http.put(body, AUTH);
            assertEquals(400, r.status(), field);
            assertTrue(r.body().contains(field) && r.body().contains("conflicts"), r.body());
        });
        assertTrue(http.topology().body().contains("(1 workers registered)"));
    }

    @Test
    void reRegisteringASlotReplacesItsEndpointWithoutCountingTwice() throws Exception {
        register(RawHttp.registration(2, 0, 1, 0, 6000));
        register(RawHttp.registration(2, 0, 1, 0, 6100));
        RawHttp.Reply t = http.topology();
        assertEquals(503, t.status());
        assertTrue(t.body().contains("(1 workers registered)"), t.body());
        register(RawHttp.registration(2, 1, 1, 0, 6001));
        assertEquals(200, http.topology().status());
        assertEquals(6100, json(http.route(0, 0, 0, 0)).get("rank_port").intValue());
    }

    @Test
    void concurrentRegistrationsAllLand() throws Exception {
        int tp = 8;
        int pp = 8;
        ExecutorService pool = Executors.newFixedThreadPool(16);
        try {
            List<Future<Integer>> results = new ArrayList<>();
            for (int t = 0; t < tp; t++) {
                for (int p = 0; p < pp; p++) {
                    String body = RawHttp.json(RawHttp.registration(tp, t, pp, p, 10_000 + t * pp + p));
                    results.add(pool.submit(() -> http.put(body, AUTH).status()));
                }
            }
            for (Future<Integer> f : results) assertEquals(200, f.get());
        } finally {
            pool.shutdownNow();
        }
        assertEquals(200, http.topology().status());
        Set<Integer> ports = new HashSet<>();
        for (int t = 0; t < tp; t++) {
            for (int p = 0; p < pp; p++) ports.add(json(http.route(0, 0, t, p)).get("rank_port").intValue());
        }
        assertEquals(tp * pp, ports.size());
    }

    @Test
    void closeStopsListeningAndLeavesNoThreads() {
        int port = server.port();
        assertEquals(200, http.get("/health").status());
        server.close();
        server.close();
        assertThrows(ConnectException.class, () -> {
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress("127.0.0.1", port), 1000);
            }
        });
        String prefix = "kvferry-registry-" + port + "-";
        long deadline = System.nanoTime() + Duration.ofSeconds(2).toNanos();
        List<String> left;
        do {
            left = Thread.getAllStackTraces().keySet().stream().filter(Thread::isAlive)
                    .map(Thread::getName).filter(n -> n.startsWith(prefix)).toList();
        } while (!left.isEmpty() && System.nanoTime() < deadline);
        assertEquals(List.of(), left);
    }

    @Test
    void bindingABusyPortFailsClearly() {
        Exception e = assertThrows(UncheckedIOException.class,
                () -> BootstrapRegistryServer.start("127.0.0.1", server.port(), RegistryOptions.defaults(TOKEN)));
        assertTrue(e.getMessage().contains("127.0.0.1:" + server.port()), e.getMessage());
    }

    @Test
    void optionsValidateAndHideTheToken() {
        assertThrows(IllegalArgumentException.class, () -> new RegistryOptions(TOKEN, Duration.ZERO));
        assertEquals(Duration.ofSeconds(120), RegistryOptions.defaults(null).roomEntryTtl());
        assertFalse(RegistryOptions.defaults(TOKEN).toString().contains(TOKEN));
        assertEquals("127.0.0.1", server.host());
    }
}
