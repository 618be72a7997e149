package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Executors;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** The HTTP calls the router tests make: a JSON POST, its 200 answer, a stream's events. */
final class RouterCalls {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final HttpClient HTTP = HttpClient.newBuilder().executor(Executors.newVirtualThreadPerTaskExecutor()).build();

    private RouterCalls() {
    }

    static HttpResponse<String> post(int port, String path, String body) throws Exception {
        return HTTP.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
                .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(body)).build(), HttpResponse.BodyHandlers.ofString());
    }

    /** The answer of a call that must succeed. */
    static JsonNode ok(int port, String path, String body) throws Exception {
        HttpResponse<String> r = post(port, path, body);
        assertEquals(200, r.statusCode(), body + " -> " + r.body());
        return JSON.readTree(r.body());
    }

    /** The events of a stream that must succeed, before its [DONE]. */
    static List<JsonNode> events(int port, String path, String body) throws Exception {
        HttpResponse<String> r = post(port, path, body);
        assertEquals(200, r.statusCode(), body + " -> " + r.body());
        List<String> lines = r.body().lines().filter(l -> l.startsWith("data: ")).toList();
        assertEquals("data: [DONE]", lines.getLast());
        List<JsonNode> out = new ArrayList<>();
        for (String l : lines.subList(0, lines.size() - 1)) out.add(JSON.readTree(l.substring(6)));
        return out;
    }
}
