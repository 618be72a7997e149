package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.kvferry.engine.model.ModelFiles;
import io.kvferry.engine.serving.DecodeEngine;
import io.kvferry.engine.serving.EngineSpec;
import io.kvferry.engine.serving.PrefillEngine;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** A second request of a room still under way on an engine is refused, and the first is unharmed. */
class DuplicateRoomTest {
    static final ObjectMapper JSON = new ObjectMapper();
    static final HttpClient http = HttpClient.newBuilder().executor(Executors.newVirtualThreadPerTaskExecutor()).build();

    static CompletableFuture<HttpResponse<String>> post(int port, String body) {
        return http.sendAsync(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/generate"))
                .POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
    }

    /**
     * kvferry let a new sender take a room id over (its createSender now refuses that too), so before the fix the prefill accepted the duplicate,
     * which took the room's transfer: the first request then failed ("pages exceed the pages declared in
     * init"), or, with another prompt, the decode got the duplicate's KV.
     */
    @Test
    @Timeout(60)
    void aPrefillRefusesASecondRequestOfARoomUnderWayAndTheFirstSucceeds() throws Exception {
        ModelFiles.Loaded model = ModelFiles.load(null, null);
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 64, 32);
        try (EngineStack stack = EngineStack.open(spec, "dup-room-test")) {
            String addr = stack.addr;
            PrefillEngine prefill = stack.prefill;
            PrefillServer ps = stack.prefillServer;
            DecodeServer ds = stack.decodeServer;
            CompletableFuture<HttpResponse<String>> first = post(ps.port(), "{\"bootstrap_room\":7,\"input_ids\":[1,2,3]}");
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (prefill.inFlight() < 1 && System.nanoTime() < until) Thread.sleep(10);
            assertEquals(1, prefill.inFlight(), "the first request never reached the prefill");

            // It waits for its decode; a second request of the same room (another prompt) comes meanwhile.
            HttpResponse<String> dup = post(ps.port(), "{\"bootstrap_room\":7,\"input_ids\":[4,5,6,7]}").get(20, TimeUnit.SECONDS);
            assertEquals(400, dup.statusCode(), dup.body());
            JsonNode e = JSON.readTree(dup.body()).path("error");
            assertEquals("bootstrap_room 7 is already in flight on this prefill", e.path("message").asText(), dup.body());
            assertEquals("invalid_request_error", e.path("type").asText(), dup.body());

            HttpResponse<String> d = post(ds.port(), "{\"bootstrap_room\":7,\"bootstrap_addr\":\"" + addr
                    + "\",\"input_ids\":[1,2,3],\"max_new_tokens\":2}").get(20, TimeUnit.SECONDS);
            assertEquals(200, d.statusCode(), d.body());
            assertTrue(d.body().contains("\"finish_reason\""), d.body());
            HttpResponse<String> p = first.get(20, TimeUnit.SECONDS);
            assertEquals(200, p.statusCode(), "the duplicate harmed the first request: " + p.body());
            assertEquals(0, prefill.outstanding().get(10, TimeUnit.SECONDS));
        }
    }

    /** The decode refused a duplicate through kvferry's own check, but as a 500 internal_error: the client's error is a 400. */
    @Test
    @Timeout(60)
    void aDecodeRefusesASecondRequestOfARoomUnderWayWithA400AndTheFirstSucceeds() throws Exception {
        ModelFiles.Loaded model = ModelFiles.load(null, null);
        EngineSpec spec = new EngineSpec(model.weights(), 1, 1, 16, 1024, 64, 32);
        try (EngineStack stack = EngineStack.open(spec, "dup-room-test")) {
            String addr = stack.addr;
            DecodeEngine decode = stack.decode;
            PrefillServer ps = stack.prefillServer;
            DecodeServer ds = stack.decodeServer;
            String body = "{\"bootstrap_room\":9,\"bootstrap_addr\":\"" + addr + "\",\"input_ids\":[1,2,3],\"max_new_tokens\":2}";
            CompletableFuture<HttpResponse<String>> first = post(ds.port(), body);
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (decode.inFlight() < 1 && System.nanoTime() < until) Thread.sleep(10);
            assertEquals(1, decode.inFlight(), "the first request never reached the decode");

            HttpResponse<String> dup = post(ds.port(), body).get(20, TimeUnit.SECONDS);
            assertEquals(400, dup.statusCode(), dup.body());
            JsonNode e = JSON.readTree(dup.body()).path("error");
            assertEquals("bootstrap_room 9 is already in flight on this decode", e.path("message").asText(), dup.body());
            assertEquals("invalid_request_error", e.path("type").asText(), dup.body());

            HttpResponse<String> p = post(ps.port(), "{\"bootstrap_room\":9,\"input_ids\":[1,2,3]}").get(20, TimeUnit.SECONDS);
            assertEquals(200, p.statusCode(), p.body());
            HttpResponse<String> d = first.get(20, TimeUnit.SECONDS);
            assertEquals(200, d.statusCode(), "the duplicate harmed the first request: " + d.body());
            assertTrue(d.body().contains("\"finish_reason\""), d.body());
        }
    }
}
