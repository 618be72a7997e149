package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.serving.DecodeEngine;
import io.kvferry.engine.serving.EngineSpec;
import io.kvferry.engine.serving.TransferSpec;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;

/** A decode's /generate whose bootstrap_addr cannot be a registry's address is the client's error, answered at once. */
class DecodeBootstrapAddrTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final HttpClient http = HttpClient.newBuilder().executor(Executors.newVirtualThreadPerTaskExecutor()).build();

    /**
     * Before the fix each of these was retried for the whole bootstrap timeout (15 s) and then answered
     * 500 kv_transfer_error "prefill_unreachable".
     */
    @Test
    @Timeout(60)
    void aMalformedBootstrapAddrIsA400NamingIt() throws Exception {
        ModelFiles.Loaded model = ModelFiles.load(null, null);
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 64, 32);
        String[][] cases = {
                {"nonsense", "has no port"},
                {"", "has no port"},
                {":8998", "has no host"},
                {"127.0.0.1:99999", "has port 99999 outside [1, 65535]"},
                {"127.0.0.1:http", "has a bad port 'http'"},
                {"a b:1", "is not a valid host:port"},
                {"[::1:80", "is not [ipv6]:port"},
        };
        try (DecodeEngine decode = new DecodeEngine(spec, new TransferSpec("tcp", null, "addr-test", "127.0.0.1"));
             DecodeServer ds = new DecodeServer(decode, "127.0.0.1", 0)) {
            List<CompletableFuture<HttpResponse<String>>> answers = new ArrayList<>();
            for (int i = 0; i < cases.length; i++) {
                String body = JSON.createObjectNode().put("bootstrap_room", 100 + i).put("bootstrap_addr", cases[i][0])
                        .put("max_new_tokens", 2).set("input_ids", JSON.createArrayNode().add(1).add(2).add(3)).toString();
                answers.add(http.sendAsync(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + ds.port() + "/generate"))
                        .POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString()));
            }
            for (int i = 0; i < cases.length; i++) {
                HttpResponse<String> r = answers.get(i).get(30, TimeUnit.SECONDS);
                assertEquals(400, r.statusCode(), cases[i][0] + " -> " + r.body());
                JsonNode e = JSON.readTree(r.body()).path("error");
                assertEquals("bootstrap_addr '" + cases[i][0] + "' " + cases[i][1], e.path("message").asText().replaceAll(" \\(.*", ""),
                        cases[i][0] + " -> " + r.body());
                assertEquals("invalid_request_error", e.path("type").asText(), r.body());
            }
            assertEquals(0, decode.inFlight());
        }
    }

    @Test
    void everyAddressFormKvferryTakesIsAccepted() {
        for (String ok : new String[]{"127.0.0.1:8998", "prefill-0:8998", "http://10.0.0.1:8998/", "HTTP://h:1", "[::1]:8998", " h:65535 "}) {
            assertNull(DecodeServer.whyNotBootstrapAddr(ok), ok);
        }
        assertNotNull(DecodeServer.whyNotBootstrapAddr("h:0"));
    }
}
