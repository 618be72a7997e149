package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.model.Sampling;
import io.kvferry.engine.model.SamplingRules;

import java.util.Map;
import java.util.TreeMap;
import java.util.function.Supplier;

/**
 * {@code sampling_params} between the router and the engines: temperature, top_p, top_k, seed, and the request's
 * {@link SamplingRules} in SGLang's names ({@code frequency_penalty}, {@code presence_penalty}, {@code repetition_penalty},
 * {@code min_p}, {@code logit_bias}, {@code min_new_tokens}, {@code ignore_eos}, {@code stop_token_ids}) and its structured
 * output ({@code regex} or {@code json_schema}: {@link StructuredOutputs}), each sent only
 * when it is not its default: a request without them sends what it sent before. An engine checks what it is sent as
 * the router checks what a client sends (a bad value is a 400, never a crash).
 */
final class SamplingParams {
    /** The prefix of an engine's sampling fields in a 400's {@code param}. */
    private static final String ENGINE = "sampling_params.";

    private SamplingParams() {
    }

    /**
     * An engine's {@code sampling_params}, checked as the router checks a client's: a bad value, or a token id outside the
     * vocabulary of {@code vocabSize} tokens, is a 400 whose {@code param} names the field ({@code sampling_params.top_p}).
     *
     * @param defaultSeed used when no seed is given (the room: prefill and decode agree on it)
     */
    static Sampling parse(JsonNode n, long defaultSeed, int vocabSize) {
        return parse(n, defaultSeed, vocabSize, null);
    }

    /**
     * As {@link #parse(JsonNode, long, int)}, with the structured output ({@code regex} or {@code json_schema}, SGLang's:
     * {@link StructuredOutputs#sglang}) compiled by {@code outputs} (null: a server without the tokenizer, which refuses one).
     */
    static Sampling parse(JsonNode n, long defaultSeed, int vocabSize, OutputConstraint.Compiler outputs) {
        if (n == null || n.isNull()) return Sampling.GREEDY;
        if (!n.isObject()) throw new Http.BadRequest("sampling_params", "sampling_params must be an object, got " + n);
        float temperature = temperature(n, 0f, ENGINE + "temperature");
        float topP = topP(n, 1f, ENGINE + "top_p");
        long seed = n.has("seed") && !n.get("seed").isNull() ? named(ENGINE + "seed", () -> Http.longField(n, "seed")) : defaultSeed;
        int topK = named(ENGINE + "top_k", () -> Http.intField(n, "top_k", -1, -1, Integer.MAX_VALUE));
        SamplingRules rules = rules(n, "min_new_tokens", "sampling_params")
                .withConstraint(StructuredOutputs.compile(StructuredOutputs.sglang(n), outputs));
        try {
            rules.checkVocab(vocabSize);
            return new Sampling(temperature, topP, seed, topK, rules);
        } catch (IllegalArgumentException e) { // each message starts with the field's name
            throw new Http.BadRequest(ENGINE + e.getMessage().split(" ", 2)[0], e.getMessage());
        }
    }

    /**
     * The rules a request's parameters set: {@code minTokensKey} is the route's name of the minimum ({@code min_tokens}
     * on the OpenAI routes, as vLLM's; {@code min_new_tokens} on {@code /generate}, as SGLang's); {@code within} the
     * object they are keys of ({@code sampling_params}), or null for the body: a 400's {@code param} is the field.
     */
    static SamplingRules rules(JsonNode n, String minTokensKey, String within) {
        String at = within == null ? "" : within + ".";
        float frequency = number(n, "frequency_penalty", 0f, at);
        float presence = number(n, "presence_penalty", 0f, at);
        float repetition = number(n, "repetition_penalty", 1f, at);
        float minP = number(n, "min_p", 0f, at);
        int minTokens = named(at + minTokensKey, () -> Http.intField(n, minTokensKey, 0, 0, Integer.MAX_VALUE));
        boolean ignoreEos = named(at + "ignore_eos", () -> Http.booleanField(n, "ignore_eos", false));
        Map<Integer, Float> bias = logitBias(n.get("logit_bias"), at + "logit_bias");
        int[] stopIds = stopTokenIds(n.get("stop_token_ids"), at + "stop_token_ids");
        try {
            return SamplingRules.of(frequency, presence, repetition, minP, bias, minTokens, ignoreEos, stopIds);
        } catch (IllegalArgumentException e) { // each message starts with the field's name
            throw new Http.BadRequest(at + e.getMessage().split(" ", 2)[0], e.getMessage());
        }
    }

    private static float number(JsonNode n, String key, float dflt, String at) {
        return named(at + key, () -> Http.floatField(n, key, dflt));
    }

    /**
     * {@code temperature} as the sampler takes it, a 32-bit float, checked here so that a refusal ({@code param}: the
     * route's name of the field) echoes the number as sent ({@link Http#numberText}): 1e39, past a float's range, not
     * Infinity.
     */
    static float temperature(JsonNode n, float dflt, String param) {
        float t = named(param, () -> Http.floatField(n, "temperature", dflt));
        if (t >= 0 && !Float.isInfinite(t)) return t;
        JsonNode v = n.get("temperature");
        throw new Http.BadRequest(param, "temperature must be >= 0" + (v.doubleValue() >= 0 ? " and at most " + Float.MAX_VALUE + " (a 32-bit float)" : "")
                + ", got " + Http.numberText(v));
    }

    /** {@code top_p} as the sampler takes it, as {@link #temperature}: 1e-50, which the float rounds to 0, is refused as 1e-50. */
    static float topP(JsonNode n, float dflt, String param) {
        float p = named(param, () -> Http.floatField(n, "top_p", dflt));
        if (p > 0 && p <= 1) return p;
        JsonNode v = n.get("top_p");
        double d = v.doubleValue();
        throw new Http.BadRequest(param, "top_p must be in (0, 1], got " + Http.numberText(v) + (d > 0 && d <= 1 ? " (0 as a 32-bit float)" : ""));
    }

    /** A field's read, its 400 naming the field as the route does ({@code sampling_params.min_p}). */
    static <T> T named(String param, Supplier<T> read) {
        try {
            return read.get();
        } catch (Http.BadRequest e) {
            throw new Http.BadRequest(param, e.getMessage());
        }
    }

    /** OpenAI's {@code logit_bias}: an object of token ids (decimal strings) to biases in [-100, 100]; null or absent: none. */
    private static Map<Integer, Float> logitBias(JsonNode v, String param) {
        Map<Integer, Float> out = new TreeMap<>();
        if (v == null || v.isNull()) return out;
        if (!v.isObject()) throw new Http.BadRequest(param, "logit_bias must be an object of token ids to biases, got " + v);
        for (Map.Entry<String, JsonNode> e : v.properties()) {
            int id;
            try {
                if (!e.getKey().matches("[0-9]{1,10}")) throw new NumberFormatException();
                id = Integer.parseInt(e.getKey());
            } catch (NumberFormatException x) {
                throw new Http.BadRequest(param, "logit_bias keys must be token ids (non-negative integers), got \"" + e.getKey() + "\"");
            }
            if (!e.getValue().isNumber()) throw new Http.BadRequest(param, "logit_bias values must be numbers in [-100, 100], got " + e.getValue());
            if (out.put(id, e.getValue().floatValue()) != null) throw new Http.BadRequest(param, "logit_bias names token " + id + " twice");
        }
        return out;
    }

    /** {@code stop_token_ids}: a list of token ids; null or absent: none. */
    private static int[] stopTokenIds(JsonNode v, String param) {
        if (v == null || v.isNull()) return new int[0];
        if (!v.isArray()) throw new Http.BadRequest(param, "stop_token_ids must be a list of token ids, got " + v);
        int[] out = new int[v.size()];
        for (int i = 0; i < out.length; i++) {
            JsonNode e = v.get(i);
            if (!e.isIntegralNumber() || !e.canConvertToInt() || e.intValue() < 0) {
                throw new Http.BadRequest(param, "stop_token_ids must be a list of token ids (non-negative integers), got " + v);
            }
            out[i] = e.intValue();
        }
        return out;
    }

    static ObjectNode json(Sampling s) {
        var o = Http.JSON.createObjectNode();
        o.put("temperature", s.temperature());
        o.put("top_p", s.topP());
        o.put("seed", s.seed());
        if (s.topK() != -1) o.put("top_k", s.topK());
        SamplingRules r = s.rules();
        if (r.frequencyPenalty() != 0) o.put("frequency_penalty", r.frequencyPenalty());
        if (r.presencePenalty() != 0) o.put("presence_penalty", r.presencePenalty());
        if (r.repetitionPenalty() != 1) o.put("repetition_penalty", r.repetitionPenalty());
        if (r.minP() != 0) o.put("min_p", r.minP());
        if (r.biasTokens().length > 0) {
            ObjectNode bias = o.putObject("logit_bias");
            for (int i = 0; i < r.biasTokens().length; i++) bias.put(Integer.toString(r.biasTokens()[i]), r.biasValues()[i]);
        }
        if (r.minTokens() != 0) o.put("min_new_tokens", r.minTokens());
        if (r.ignoreEos()) o.put("ignore_eos", true);
        if (r.stopTokenIds().length > 0) {
            var ids = o.putArray("stop_token_ids");
            for (int t : r.stopTokenIds()) ids.add(t);
        }
        StructuredOutputs.json(o, r.constraint());
        return o;
    }
}
