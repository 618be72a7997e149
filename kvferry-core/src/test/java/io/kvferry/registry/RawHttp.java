package io.kvferry.registry;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpHeaders;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;

/** Plain HTTP against a registry, so the route tests see exactly the status and body SGLang peers would. */
final class RawHttp implements AutoCloseable {
    record Reply(int status, String body, HttpHeaders headers) {}

    private final HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(Duration.ofSeconds(2)).build();
    private final String base;

    RawHttp(int port) {
        this.base = "http://127.0.0.1:" + port;
    }

    Reply send(String method, String pathAndQuery, String body, String authorization) {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(base + pathAndQuery)).timeout(Duration.ofSeconds(5))
                .method(method, body == null ? HttpRequest.BodyPublishers.noBody() : HttpRequest.BodyPublishers.ofString(body));
        if (authorization != null) b.header("Authorization", authorization);
        try {
            HttpResponse<String> r = http.send(b.build(), HttpResponse.BodyHandlers.ofString());
            return new Reply(r.statusCode(), r.body(), r.headers());
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    Reply get(String pathAndQuery) {
        return send("GET", pathAndQuery, null, null);
    }

    Reply route(int dp, int cp, int tp, int pp) {
        return get("/route?prefill_dp_rank=" + dp + "&prefill_cp_rank=" + cp + "&target_tp_rank=" + tp + "&target_pp_rank=" + pp);
    }

    Reply topology() {
        return route(-1, -1, -1, -1);
    }

    Reply put(String json, String authorization) {
        return send("PUT", "/route", json, authorization);
    }

    Reply post(String path, String json, String authorization) {
        return send("POST", path, json, authorization);
    }

    @Override
    public void close() {
        http.shutdownNow();
    }

    /** A valid registration as SGLang sends it; tests override single fields. */
    static Map<String, Object> registration(int tpSize, int tpRank, int ppSize, int ppRank, int port) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("attn_tp_size", tpSize);
        m.put("attn_tp_rank", tpRank);
        m.put("attn_cp_size", 1);
        m.put("attn_cp_rank", 0);
        m.put("attn_dp_size", 1);
        m.put("attn_dp_rank", 0);
        m.put("pp_size", ppSize);
        m.put("pp_rank", ppRank);
        m.put("system_dp_size", 1);
        m.put("system_dp_rank", 0);
        m.put("rank_ip", "10.0.0.5");
        m.put("rank_port", port);
        m.put("page_size", 64);
        m.put("kv_cache_dtype", "auto");
        m.put("load_balance_method", "follow_bootstrap_room");
        m.put("enable_dsa_cache_layer_split", false);
        m.put("prefill_http_port", 30000);
        return m;
    }

    static String json(Object o) {
        try {
            return Json.MAPPER.writeValueAsString(o);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
