package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvferry.engine.model.Sampling;

/** {@code sampling_params} between the router and the engines: temperature, top_p, top_k, seed. */
final class SamplingParams {
    private SamplingParams() {
    }

    /** @param defaultSeed used when no seed is given (the room: prefill and decode agree on it) */
    static Sampling parse(JsonNode n, long defaultSeed) {
        if (n == null || n.isNull()) return Sampling.GREEDY;
        if (!n.isObject()) throw new Http.BadRequest("sampling_params must be an object, got " + n);
        float temperature = Http.floatField(n, "temperature", 0f);
        float topP = Http.floatField(n, "top_p", 1f);
        long seed = n.has("seed") && !n.get("seed").isNull() ? Http.longField(n, "seed") : defaultSeed;
        int topK = Http.intField(n, "top_k", -1, -1, Integer.MAX_VALUE);
        try {
            return new Sampling(temperature, topP, seed, topK);
        } catch (IllegalArgumentException e) {
            throw new Http.BadRequest(e.getMessage());
        }
    }

    static ObjectNode json(Sampling s) {
        var o = Http.JSON.createObjectNode();
        o.put("temperature", s.temperature());
        o.put("top_p", s.topP());
        o.put("seed", s.seed());
        if (s.topK() != -1) o.put("top_k", s.topK());
        return o;
    }
}
