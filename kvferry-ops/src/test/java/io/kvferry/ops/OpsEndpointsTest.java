package io.kvferry.ops;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvferry.registry.BootstrapClient;
import io.kvferry.registry.BootstrapRegistryServer;
import io.kvferry.registry.PrefillRankRegistration;
import io.kvferry.registry.RegistryException;
import io.kvferry.registry.RegistryOptions;
import com.sun.net.httpserver.HttpServer;
import io.micrometer.core.instrument.Counter;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.net.ConnectException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.channels.ClosedChannelException;
import java.nio.charset.StandardCharsets;
import java.nio.channels.UnresolvedAddressException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The operating routes on a process's own port and on the registry's, and the cluster view behind them. */
class OpsEndpointsTest {
    private static final String TOKEN = "ops-token";
    private final HttpClient http = HttpClient.newHttpClient();
    private final List<AutoCloseable> closeables = new ArrayList<>();

    @AfterEach
    void close() throws Exception {
        for (int i = closeables.size() - 1; i >= 0; i--) closeables.get(i).close();
    }

    private HttpResponse<String> get(String url) throws Exception {
        return http.send(HttpRequest.newBuilder(URI.create(url)).timeout(Duration.ofSeconds(10)).GET().build(),
                HttpResponse.BodyHandlers.ofString());
    }

    private OpsServer processEndpoint(PrometheusMeterRegistry r, String role) {
        ProcessStatus status = new ProcessStatus(role);
        OpsServer s = OpsServer.start("127.0.0.1", 0, r, status);
        closeables.add(s);
        return s;
    }

    @Test
    void aProcessServesItsMetricsPageAndStatusDocument() throws Exception {
        PrometheusMeterRegistry r = Ops.newRegistry();
        Counter.builder("kvferry_test_things").register(r).increment(3);
        OpsServer s = processEndpoint(r, "prefill");
        HttpResponse<String> metrics = get(s.baseUrl() + "/metrics");
        assertEquals(200, metrics.statusCode());
        assertTrue(metrics.headers().firstValue("Content-Type").orElse("").startsWith("text/plain; version=0.0.4"));
        assertTrue(metrics.body().contains("kvferry_test_things_total 3.0"), metrics.body());
        assertTrue(metrics.body().contains("jvm_memory_used_bytes"), "the JVM's basics are bound too");
        HttpResponse<String> page = get(s.baseUrl() + "/status");
        assertEquals(200, page.statusCode());
        assertTrue(page.body().contains("<script src=\"status.js\">"), page.body());
        assertTrue(page.body().contains("<script src=\"common.js\"></script>\n<script src=\"status.js\">"), "the shared helpers first: " + page.body());
        assertTrue(get(s.baseUrl() + "/status.js").body().contains("function render(doc)"));
        HttpResponse<String> common = get(s.baseUrl() + "/common.js");
        assertTrue(common.headers().firstValue("Content-Type").orElse("").startsWith("text/javascript"), common.headers().toString());
        assertTrue(common.body().contains("function fill(tableId, rows, empty)"), common.body());
        assertTrue(common.body().contains("async function poll(render)"), "the pages' refresh loop: " + common.body());
        String script = get(s.baseUrl() + "/status.js").body();
        assertTrue(script.contains("poll(render);") && !script.contains("setTimeout"), "the page polls through common.js's loop: " + script);
        assertTrue(get(s.baseUrl() + "/status.css").headers().firstValue("Content-Type").orElse("").startsWith("text/css"));
        JsonNode doc = StatusJson.MAPPER.readTree(get(s.baseUrl() + "/status.json").body());
        assertEquals("process", doc.path("kind").asText());
        assertEquals("prefill", doc.path("role").asText());
        assertEquals(0, doc.path("ranks").size());
        assertEquals(404, get(s.baseUrl() + "/statusx").statusCode());
        HttpResponse<String> post = http.send(HttpRequest.newBuilder(URI.create(s.baseUrl() + "/metrics"))
                .POST(HttpRequest.BodyPublishers.ofString("x")).build(), HttpResponse.BodyHandlers.ofString());
        assertEquals(405, post.statusCode());
        HttpResponse<String> postScript = http.send(HttpRequest.newBuilder(URI.create(s.baseUrl() + "/common.js"))
                .POST(HttpRequest.BodyPublishers.ofString("x")).build(), HttpResponse.BodyHandlers.ofString());
        assertEquals(405, postScript.statusCode());
        assertEquals("http://127.0.0.1:" + s.port() + "/status.json", s.statusJsonUrl());
    }

    @Test
    void theRegistryPageListsRegisteredRanksAndFetchesTheirProcesses() throws Exception {
        BootstrapRegistryServer registry = BootstrapRegistryServer.start("127.0.0.1", 0, RegistryOptions.defaults(TOKEN));
        closeables.add(registry);
        PrometheusMeterRegistry metrics = Ops.newRegistry();
        ClusterStatus cluster = RegistryOps.mount(registry, metrics, List.of());
        String base = "http://127.0.0.1:" + registry.port();
        JsonNode empty = StatusJson.MAPPER.readTree(get(base + "/status.json").body());
        assertEquals("cluster", empty.path("kind").asText());
        assertTrue(empty.path("topology").isNull());

        OpsServer up = processEndpoint(Ops.newRegistry(), "prefill");
        // Held, bound and never listening (closed after the test): a connect there is refused, and no server can be
        // given the port meanwhile, as one bound to port 0 could once a closed ServerSocket(0) had freed it.
        Socket hold = new Socket();
        closeables.add(hold);
        hold.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
        int dead = hold.getLocalPort();
        String deadUrl = "http://127.0.0.1:" + dead + "/status.json";
        try (BootstrapClient c = new BootstrapClient("127.0.0.1:" + registry.port(), TOKEN)) {
            c.registerRank(reg(0, 5000, up.statusJsonUrl()));
            c.registerRank(reg(1, 5001, deadUrl));
            RegistryException bad = assertThrows(RegistryException.class, () -> c.registerRank(reg(1, 5001, "http://evil/x?y")));
            assertEquals(400, bad.statusCode());
            assertTrue(bad.getMessage().contains("kvferry_status_url"), bad.getMessage());
        }
        cluster.watch(up.statusJsonUrl()); // a decode process would be added like this; the same URL is fetched once
        JsonNode doc = StatusJson.MAPPER.readTree(get(base + "/status.json").body());
        assertEquals(2, doc.path("topology").path("registered").asInt());
        assertTrue(doc.path("topology").path("ready").asBoolean());
        assertEquals(2, doc.path("prefill_ranks").size());
        assertEquals("127.0.0.1:5000", doc.path("prefill_ranks").get(0).path("endpoint").asText());
        assertEquals(up.statusJsonUrl(), doc.path("prefill_ranks").get(0).path("status_url").asText());
        assertEquals(2, doc.path("processes").size(), doc.toString());
        JsonNode ok = doc.path("processes").get(0), down = doc.path("processes").get(1);
        assertTrue(ok.path("ok").asBoolean(), ok.toString());
        assertEquals("prefill", ok.path("status").path("role").asText());
        assertFalse(down.path("ok").asBoolean());
        assertEquals(deadUrl, down.path("url").asText());
        assertFalse(down.path("error").asText().isEmpty());
        // The registry's own metrics, and its page, on its own port; SGLang's routes untouched.
        String scrape = get(base + "/metrics").body();
        assertTrue(scrape.contains(RegistryOps.REGISTERED + " 2.0"), scrape);
        assertTrue(scrape.contains(RegistryOps.EXPECTED + " 2.0"), scrape);
        assertEquals(200, get(base + "/status").statusCode());
        assertEquals(200, get(base + "/common.js").statusCode(), "the page's shared helpers, on the registry's port too");
        assertEquals("OK", get(base + "/health").body());
        assertThrows(IllegalArgumentException.class, () -> registry.mount("/route", ex -> { }));
        // The terminal view shows the same.
        String text = StatusClient.render(StatusClient.fetch("127.0.0.1:" + registry.port(), Duration.ofSeconds(10)));
        assertTrue(text.contains("registered 2/2 (ready)"), text);
        assertTrue(text.contains("127.0.0.1:5001"), text);
        assertTrue(text.contains("DOWN: "), text);
    }

    @Test
    void statusOfARegistryWithoutThePageSaysSo() throws Exception {
        BootstrapRegistryServer plain = BootstrapRegistryServer.start("127.0.0.1", 0, RegistryOptions.defaults(TOKEN));
        closeables.add(plain);
        StatusClient.StatusException e = assertThrows(StatusClient.StatusException.class,
                () -> StatusClient.fetch("127.0.0.1:" + plain.port(), Duration.ofSeconds(5)));
        assertTrue(e.getMessage().contains("404") && e.getMessage().contains("SGLang"), e.getMessage());
        Socket hold = new Socket(); // bound, never listening: refused, and no server can take the port meanwhile
        closeables.add(hold);
        hold.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
        int port = hold.getLocalPort();
        e = assertThrows(StatusClient.StatusException.class, () -> StatusClient.fetch("127.0.0.1:" + port, Duration.ofSeconds(5)));
        assertTrue(e.getMessage().startsWith("cannot reach http://127.0.0.1:" + port), e.getMessage());
    }

    /** IPv6 addresses read as addresses on the status page: the registry's and each rank's endpoint in brackets. */
    @Test
    void ipv6EndpointsAreBracketed() throws Exception {
        BootstrapRegistryServer registry = BootstrapRegistryServer.start("::1", 0, RegistryOptions.defaults(TOKEN));
        closeables.add(registry);
        RegistryOps.mount(registry, Ops.newRegistry(), List.of());
        try (BootstrapClient c = new BootstrapClient("[::1]:" + registry.port(), TOKEN)) {
            c.registerRank(new PrefillRankRegistration(1, 0, 1, 0, 1, 0, 1, 0, 1, 0, "fd00::1", 5000, 16, "bf16", null, false, null, null));
        }
        JsonNode doc = StatusJson.MAPPER.readTree(get("http://[::1]:" + registry.port() + "/status.json").body());
        assertEquals("[::1]:" + registry.port(), doc.path("registry").asText());
        assertEquals("[fd00::1]:5000", doc.path("prefill_ranks").get(0).path("endpoint").asText());
    }

    /**
     * {@code kvferry status} pointed at a router older than the router's status page (a natural guess across hosts): it says
     * what to point it at instead.
     */
    @Test
    void statusOfARouterNamesWhereTheStatusIs() throws Exception {
        HttpServer router = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 4);
        router.createContext("/", ex -> {
            boolean health = ex.getRequestURI().getPath().equals("/health");
            byte[] b = (health ? "{\"status\":\"ok\",\"healthy_prefills\":1,\"healthy_decodes\":1}"
                    : "{\"error\":{\"message\":\"no route\"}}").getBytes(StandardCharsets.UTF_8);
            ex.sendResponseHeaders(health ? 200 : 404, b.length);
            ex.getResponseBody().write(b);
            ex.close();
        });
        router.start();
        try {
            StatusClient.StatusException e = assertThrows(StatusClient.StatusException.class,
                    () -> StatusClient.fetch("127.0.0.1:" + router.getAddress().getPort(), Duration.ofSeconds(5)));
            assertTrue(e.getMessage().contains("that is a kvferry router older than its status page, which keeps no kvferry status; give --bootstrap a prefill's "
                    + "registry"), e.getMessage());
        } finally {
            router.stop(0);
        }
    }

    /**
     * A router's document in the terminal: its tenants (with and without limits, their buckets and refusals; a router's document without them shows -) and its backends, a down one with its
     * last check's failure (and how long it has been out of rotation, where the document says); its backend cap, its drain's counts and its structured-output compiler's figures; the backends' words (a check's failure quotes an engine's answer) reach the terminal escaped.
     */
    @Test
    void aRouterDocumentRendersItsBackendsAndTenants() throws Exception {
        JsonNode doc = StatusJson.MAPPER.readTree("""
                {"kind":"router","pid":9,"model":"m","now_ms":1,"uptime_ms":1,"status":"degraded",
                 "config":{"max_concurrent_requests":0,"queue_timeout_ms":0,"tenants":true,"max_backends":64},
                 "drain":{"completed":5,"cut":2},
                 "structured_outputs":{"outcomes":{"compiled":3,"cached":7,"refused":1,"deadline":0,"busy":2},"waiting":1,
                   "compiles":4,"compile_seconds":0.006,"mean_compile_ms":1.5},
                 "backends":[{"url":"http://p:1","role":"prefill","healthy":true,"origin":"command_line","in_flight":2,"bootstrap":"p:8998","last_check":"ok",
                   "last_check_age_ms":120},
                  {"url":"http://d:2","role":"decode","healthy":false,"in_flight":0,"last_check":"HTTP 503\\u001b[2J","last_check_age_ms":7},
                  {"url":"http://d:3","role":"decode","healthy":false,"origin":"added","in_flight":0,"out_of_rotation_ms":31500,"last_check":"HTTP 503",
                   "last_check_age_ms":9}],
                 "requests":{"running":3,"waiting":1,"total":10,"by_status":{"200":9,"499":1},"by_class":{"2xx":9,"4xx":1,"5xx":0}},
                 "tokens":{"prompt":100,"generated":50},
                 "rates":{"window_s":60,"requests_per_s":0.5,"server_errors_per_s":0,"prompt_tokens_per_s":5,"generated_tokens_per_s":2.5},
                 "latency":{"window_s":60,"ttft_ms":{"count":9,"p50":12.5,"p99":40,"max":41},"e2e_ms":{"count":0,"p50":0,"p99":0,"max":0}},
                 "tenants":[{"name":"team-a","running":2,"waiting":1,"max_concurrent_requests":2,"requests_per_minute":600,
                   "tokens_per_minute":20000,"remaining_requests":598,"remaining_tokens":1234,"rate_limited_requests":3,"rate_limited_tokens":4},
                  {"name":"team-b","running":1,"waiting":0,"max_concurrent_requests":0,"requests_per_minute":0,"tokens_per_minute":0,
                   "remaining_requests":null,"remaining_tokens":null,"rate_limited_requests":0,"rate_limited_tokens":0},
                  {"name":"old","running":0,"waiting":0,"max_concurrent_requests":0}]}""");
        String out = StatusClient.render(doc);
        assertTrue(out.startsWith("kvferry router process 9 serving m: degraded\n"), out);
        assertTrue(out.contains("requests: running 3  waiting 1  answered 10   by class: 2xx 9  4xx 1  5xx 0"), out);
        assertTrue(out.contains("last 60 s: TTFT p50 12.5 ms  p99 40.0 ms (9 requests)   end-to-end no request"), out);
        assertTrue(out.contains("admission: max concurrent requests no limit  queue timeout 0 ms  tenants yes  max backends 64\n"), out);
        assertTrue(out.contains("\ndrain: 5 completed  2 cut (the requests running when it began)\n"), out);
        assertTrue(out.matches("(?s).*\nstructured outputs [^\n]*\n +compiler +compiled +cached +refused +deadline +busy +waiting"
                + " +mean compile ms\n +router +3 +7 +1 +0 +2 +1 +1\\.50\n.*"), out);
        assertTrue(out.matches("(?s).*\\n +prefill +http://p:1 +up +2 +ok +120 +p:8998\\n.*"), out);
        assertTrue(out.matches("(?s).*\\n +decode +http://d:2 +DOWN +0 +HTTP 503\\\\u001b\\[2J +7 +-\\n.*"), out);
        assertTrue(out.matches("(?s).*\\n +decode \\(added\\) +http://d:3 +DOWN 31 s +0 +HTTP 503 +9 +-\\n.*"),
                "out of rotation for how long; added at run time (the others given at start say nothing): " + out);
        assertFalse(out.contains("\u001b"), "no escape sequence reaches the terminal");
        assertTrue(out.matches("(?s).*\\ntenants\\n +tenant +running +waiting +max concurrent +requests/min left +tokens/min left"
                + " +refused requests +refused tokens\\n +team-a +2 +1 +2 +598 of 600 +1234 of 20000 +3 +4\\n"
                + " +team-b +1 +0 +no limit +no limit +no limit +0 +0\\n"
                + " +old +0 +0 +no limit +- +- +- +-\\n.*"), out);
    }

    @Test
    void aProcessDocumentRendersItsRanksRoomsAndFailures() throws Exception {
        ObjectNode doc = (ObjectNode) StatusJson.MAPPER.readTree("""
                {"kind":"process","role":"decode","pid":42,"now_ms":1,"uptime_ms":1,
                 "ranks":[{"role":"decode","tp_rank":1,"pp_rank":0,"dp_rank":0,"cp_rank":0,"backend":"tcp","endpoint":null,
                   "rooms_by_state":{"Transferring":1},"oldest_rooms":[{"room":9,"state":"Transferring","age_millis":1200,
                   "in_state_millis":300,"peers":"prefill rank 0 at h:1"}],
                   "recent_failures":[{"room":8,"kind":"peer_lost","stage":"transferring","reason":"Lost connection","peer":"p",
                   "at_epoch_millis":1000}],"failures_by_kind":{"peer_lost":1},
                   "peers":[{"name":"prefill rank 0","address":"h:1","data_path":"shm","data_path_note":"","rooms":1,"stripes":0,
                     "silent_millis":5},
                     {"name":"prefill rank 1","address":"h:2","data_path":"tcp","data_path_note":"ucx not used: emulated (no RMA lane)",
                     "rooms":0,"stripes":0,"silent_millis":7}],
                   "bytes_moved":5000000,"rooms_concluded":3}],
                 "totals":{"bytes":5000000,"rooms_concluded":3,"peers":1,"rooms_by_state":{"Transferring":1},
                   "failures_by_kind":{"peer_lost":1}},
                 "engine":{"kv_pages":{"used":1,"cached":2,"free":3},"cached_tokens":32,"prefix_deferrals":0,"draining":true,
                   "drain":{"completed":4,"cut":1},
                   "structured_outputs":{"outcomes":{"compiled":2,"cached":0,"refused":0,"deadline":1,"busy":0},"waiting":0,
                     "compiles":3,"compile_seconds":0.03,"mean_compile_ms":10}}}""");
        String text = StatusClient.render(doc);
        // The engine's row ends with its drain; its compiler's row under structured outputs.
        assertTrue(text.matches("(?s).*\n +decode 42 +1 +2 +3 +32 +- +0 +draining: 4 completed, 1 cut\n.*"), text);
        assertTrue(text.matches("(?s).*\nstructured outputs [^\n]*\n +process +compiled +cached +refused +deadline +busy +waiting"
                + " +mean compile ms\n +decode 42 +2 +0 +0 +1 +0 +0 +10\\.00\n.*"), text);
        assertTrue(text.startsWith("kvferry decode process 42"), text);
        assertTrue(text.contains("rooms by state: Transferring 1   concluded: 3   bytes moved: 5.0 MB"), text);
        assertTrue(text.contains("failures by kind: peer_lost 1"), text);
        assertTrue(text.contains("decode tp1 pp0 dp0  prefill rank 0  h:1"), text);
        // A link whose faster offers were passed over says why, under the table; one without a note adds nothing.
        assertTrue(text.contains("data path notes\n  decode tp1 pp0 dp0 prefill rank 1: ucx not used: emulated (no RMA lane)\n"), text);
        assertFalse(text.contains("prefill rank 0: "), text);
        assertTrue(text.contains("9     Transferring  1200"), text);
        assertTrue(text.contains("peer_lost  transferring"), text);
    }

    /**
     * A status document is another process's text (a registered rank's, a decode's, or what a hostile one
     * serves at its URL): {@code kvferry status} prints none of its control characters to the operator's
     * terminal (an ESC sequence could clear the screen, retitle the window or hide lines) and a newline in a
     * value cannot start a forged row.
     */
    @Test
    void theJsonForATerminalEscapesEveryControlCharacterAndReadsBackTheSame() throws Exception {
        ObjectNode doc = StatusJson.MAPPER.createObjectNode();
        String hostile = "a\u007f\u009b31m\u2028b\u202ec é";
        doc.put("kind", "process").put("role", hostile);
        String json = StatusClient.json(doc);
        for (char c : json.toCharArray()) {
            assertTrue(c == '\n' || c >= 0x20 && c < 0x7f, "U+" + Integer.toHexString(c) + " written as is in: " + json);
        }
        assertEquals(hostile, StatusJson.MAPPER.readTree(json).path("role").asText(), "a JSON reader reads the same string");
    }

    @Test
    void controlCharactersInADocumentNeverReachTheTerminal() throws Exception {
        String esc = "\\u001b[2J\\u001b]0;pwned\\u0007";
        String forged = "x\\n  decode tp9 pp9 dp9  forged";
        ObjectNode doc = (ObjectNode) StatusJson.MAPPER.readTree(("""
                {"kind":"cluster","registry":"h:1%E","now_ms":1,
                 "topology":{"attn_tp_size":1,"attn_cp_size":1,"dp_size":1,"pp_size":1,"page_size":16,"kv_cache_dtype":"bf16%E",
                   "expected":1,"registered":1,"ready":true},
                 "prefill_ranks":[{"dp":0,"cp":0,"tp":0,"pp":0,"endpoint":"h:2%E","status_url":"http://h:3/status.json%E"}],
                 "processes":[{"url":"http://h:3/status.json","ok":true,"status":{"kind":"process","role":"prefill%E","pid":1,
                   "ranks":[{"role":"prefill%E","tp_rank":0,"pp_rank":0,"dp_rank":0,"cp_rank":0,"backend":"tcp",
                     "oldest_rooms":[{"room":"5%E","state":"Transferring%E","age_millis":9,"in_state_millis":1,"peers":"%F"}],
                     "recent_failures":[{"room":"4","kind":"peer_lost%E","stage":"transferring","reason":"%F","peer":"p%E",
                       "at_epoch_millis":1}],
                     "peers":[{"name":"s%F","address":"h:4%E","data_path":"tcp%E","data_path_note":"%F%E","rooms":1,"stripes":0,
                       "silent_millis":"2%E"}]}]}},
                   {"url":"http://h:5/status.json%E","ok":false,"error":"%F%E"}],
                 "totals":{"bytes":0,"rooms_concluded":0,"peers":1,"rooms_by_state":{"Transferring%E":1},
                   "failures_by_kind":{"peer_lost%F":1}}}""").replace("%E", esc).replace("%F", forged));
        String text = StatusClient.render(doc);
        for (char c : text.toCharArray()) {
            boolean control = c < 0x20 && c != '\n' || c == 0x7f || c >= 0x80 && c <= 0x9f;
            assertFalse(control, "control character U+" + Integer.toHexString(c) + " in: " + text);
        }
        assertFalse(text.lines().anyMatch(l -> l.startsWith("  decode tp9")), "a newline in a value starts no row: " + text);
        assertTrue(text.contains("prefill\\u001b[2J"), "the value is shown, escaped: " + text);
        // A process document rendered on its own is treated the same.
        String process = StatusClient.render(doc.path("processes").get(0).path("status"));
        assertTrue(process.startsWith("kvferry prefill\\u001b[2J"), process);
        assertFalse(process.chars().anyMatch(c -> c == 0x1b || c == 0x07), process);
    }

    /** The same for what {@code kvferry status} says about an answer that is not a status document: it may quote it. */
    @Test
    void aBadAnswerIsQuotedWithoutItsControlCharacters() throws Exception {
        try (MisbehavingPeer peer = MisbehavingPeer.answering("nope\u001b]0;pwned\u0007\u001b[2J")) {
            StatusClient.StatusException e = assertThrows(StatusClient.StatusException.class,
                    () -> StatusClient.fetch(peer.address(), Duration.ofSeconds(10)));
            assertTrue(e.getMessage().contains("not JSON"), e.getMessage());
            assertFalse(e.getMessage().chars().anyMatch(c -> c == 0x1b || c == 0x07), e.getMessage());
        }
    }

    @Test
    void aStatusSupplierThatFailsAnswers500WithItsReasonAndTheServerGoesOn() throws Exception {
        boolean[] fail = {true};
        OpsServer s = OpsServer.start("127.0.0.1", 0, Ops.newRegistry(), () -> {
            if (fail[0]) throw new IllegalStateException("rank table is being rebuilt");
            return StatusJson.MAPPER.createObjectNode().put("kind", "process");
        });
        closeables.add(s);
        HttpResponse<String> bad = get(s.baseUrl() + "/status.json");
        assertEquals(500, bad.statusCode());
        assertTrue(bad.headers().firstValue("Content-Type").orElse("").startsWith("application/json"));
        assertTrue(StatusJson.MAPPER.readTree(bad.body()).path("error").asText().contains("rank table is being rebuilt"), bad.body());
        fail[0] = false;
        HttpResponse<String> good = get(s.baseUrl() + "/status.json");
        assertEquals(200, good.statusCode());
        assertEquals("process", StatusJson.MAPPER.readTree(good.body()).path("kind").asText());
    }

    @Test
    void aDocumentWithoutRoomAgesStillRenders() throws Exception {
        JsonNode doc = StatusJson.MAPPER.readTree("""
                {"kind":"process","role":"decode","pid":7,
                 "ranks":[{"role":"decode","tp_rank":0,"pp_rank":0,"dp_rank":0,"cp_rank":0,
                   "oldest_rooms":[{"room":1,"state":"Transferring"},{"room":2,"state":"WaitingForInput","age_millis":50},
                                   {"room":3,"state":"Transferring","age_millis":"soon"}]}]}""");
        String text = StatusClient.render(doc);
        assertTrue(text.startsWith("kvferry decode process 7"), text);
        assertTrue(text.indexOf("2     WaitingForInput") >= 0, text);
        assertTrue(text.indexOf("2     WaitingForInput") < text.indexOf("1     Transferring"), "aged rooms first: " + text);
    }

    @Test
    void anUnreachableAddressIsExplainedByItsCauseNotOnlyItsType() {
        ConnectException wrapped = new ConnectException();
        wrapped.initCause(new UnresolvedAddressException());
        assertTrue(StatusClient.why(wrapped).startsWith("unknown host"), StatusClient.why(wrapped));
        ConnectException refused = new ConnectException();
        refused.initCause(new IOException("Connection refused"));
        assertEquals("Connection refused", StatusClient.why(refused));
        ConnectException closed = new ConnectException();
        closed.initCause(new ClosedChannelException());
        assertEquals("ConnectException (ClosedChannelException)", StatusClient.why(closed));
    }

    private static PrefillRankRegistration reg(int tp, int port, String statusUrl) {
        return new PrefillRankRegistration(2, tp, 1, 0, 1, 0, 1, 0, 1, 0, "127.0.0.1", port, 16, "bf16", null, false, null, statusUrl);
    }
}
