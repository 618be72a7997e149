package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.model.SamplingRules;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.OptionalLong;
import java.util.function.Predicate;

/**
 * What the router reads from a request's body besides its prompt and stream flag: the choices (a prompt list,
 * {@code n}), the sampling, stop and log-probability parameters of the OpenAI routes and of {@code /generate}, and the
 * refusals of parameters the engine does not implement (a 400 naming each). Pure: a body in, values or a
 * {@link Http.BadRequest} out.
 */
final class RequestParams {
    private RequestParams() {
    }

    /** Most completions one OpenAI request may ask for: its prompts times {@code n} (each is a PD request of its own). */
    static final int MAX_CHOICES = 64;

    /**
     * A completion's {@code prompt}, as OpenAI's and vLLM's: a string, a list of token ids (one prompt), or a list of 1 to
     * {@link #MAX_CHOICES} strings or of token id lists (a batch: each its own choices).
     */
    static Prompt.Parsed prompts(JsonNode req) {
        JsonNode p = req.get("prompt");
        if (p == null || !p.isArray()) return new Prompt.Parsed(List.of(Prompt.text(Http.textField(req, "prompt"))), false);
        return Prompt.parseList(p, "prompt", true, true);
    }

    /**
     * {@code /generate}'s prompt, SGLang's: exactly one of {@code text} (a string, or a list of strings: a batch) and
     * {@code input_ids} (a list of token ids, or a list of such lists: a batch).
     */
    static Prompt.Parsed generatePrompts(JsonNode req) {
        JsonNode text = req.get("text"), ids = req.get("input_ids");
        boolean hasText = text != null && !text.isNull(), hasIds = ids != null && !ids.isNull();
        if (hasText && hasIds) throw new Http.BadRequest("input_ids", "send one of text and input_ids, not both");
        if (hasIds) {
            if (!ids.isArray()) throw new Http.BadRequest("input_ids", "input_ids must be a list of token ids or a list of such lists, got " + ids);
            return Prompt.parseList(ids, "input_ids", false, true);
        }
        // The field the client sent as null, if it sent one of them so: the param names what it wrote.
        if (!hasText) throw new Http.BadRequest(text == null && ids != null ? "input_ids" : "text", "text (a string or a list of strings) or input_ids (a list of token ids or a list of such lists) is required");
        if (text.isArray()) return Prompt.parseList(text, "text", true, false);
        return new Prompt.Parsed(List.of(Prompt.text(Http.textField(req, "text"))), false);
    }

    /**
     * {@code best_of}: the samples of each prompt the {@code n} choices are the best of (absent or null: n); at least n,
     * and at most {@link #MAX_CHOICES} samples for all the prompts; a stream cannot ask for more than 1 (OpenAI's rule: the
     * best are known only at the end; n alone streams, its best_of being n).
     */
    static int bestOf(JsonNode req, int n, int prompts) {
        int bestOf = Http.intField(req, "best_of", n, 1, MAX_CHOICES);
        if (bestOf < n) throw new Http.BadRequest("best_of", "best_of (" + bestOf + ") must be at least n (" + n + ")");
        if ((long) bestOf * prompts > MAX_CHOICES) {
            throw new Http.BadRequest("best_of", "best_of (" + bestOf + ") times the " + prompts + " prompts asks for " + (long) bestOf * prompts
                    + " samples; a request may ask for at most " + MAX_CHOICES);
        }
        if (req.hasNonNull("best_of") && bestOf > 1 && Http.booleanField(req, "stream", false)) {
            throw new Http.BadRequest("best_of", "best_of (" + bestOf + ") above 1 cannot be streamed (the best are known at the end): send stream false");
        }
        return bestOf;
    }

    /** {@code n}: the choices of each prompt, 1 to {@link #MAX_CHOICES}, and at most {@link #MAX_CHOICES} for all the prompts. */
    static int n(JsonNode req, int prompts) {
        int n = Http.intField(req, "n", 1, 1, MAX_CHOICES);
        if ((long) n * prompts > MAX_CHOICES) {
            throw new Http.BadRequest("n", "n (" + n + ") times the " + prompts + " prompts asks for " + (long) n * prompts
                    + " completions; a request may ask for at most " + MAX_CHOICES);
        }
        return n;
    }

    /**
     * The sampling and stop parameters both OpenAI routes share, with the route's prompt, token limit, top logprobs and
     * first prompt position with input token logprobs (-1: none), the {@code cache_salt}, and the structured output
     * ({@link StructuredOutputs#openAi}, compiled by {@code outputs}: checked before any engine work).
     */
    static Ask ask(JsonNode req, Prompt prompt, int maxTokens, int topLogprobs, int logprobStart, int vocabSize, OutputConstraint.Compiler outputs) {
        return ask(req, prompt, maxTokens, topLogprobs, logprobStart, vocabSize, outputs, null);
    }

    /**
     * As above, with a chat's tool calling ({@link ChatTools}; null: none), the request's structured output then: a request
     * that also sets one of its own is a 400 naming both.
     */
    static Ask ask(JsonNode req, Prompt prompt, int maxTokens, int topLogprobs, int logprobStart, int vocabSize, OutputConstraint.Compiler outputs,
                   ChatTools.Tools tools) {
        StructuredOutputs.Spec spec = StructuredOutputs.openAi(req);
        if (tools != null) {
            if (spec != null) {
                throw new Http.BadRequest(spec.param(), "tools (tool_choice " + tools.mode().name().toLowerCase(Locale.ROOT) + ") and "
                        + spec.param() + " are both set: the answer is the tool calls' language; send tool_choice none, or no " + spec.param());
            }
            spec = tools.spec();
        }
        return new Ask(prompt, maxTokens, SamplingParams.temperature(req, 1.0f, "temperature"), // OpenAI's default
                SamplingParams.topP(req, 1.0f, "top_p"), topK(req), seed(req), StopSequences.parse(req.get("stop"), "stop"), topLogprobs, logprobStart,
                rules(req, "min_tokens", null, maxTokens, vocabSize).withConstraint(StructuredOutputs.compile(spec, outputs)),
                EngineInput.cacheSalt(req));
    }

    /**
     * The penalties, logit bias, min-p and end rules a request sets ({@link SamplingParams#rules}): OpenAI's
     * {@code frequency_penalty}, {@code presence_penalty}, {@code logit_bias} and vLLM's {@code repetition_penalty},
     * {@code min_p}, {@code min_tokens}, {@code ignore_eos}, {@code stop_token_ids} on the OpenAI routes ({@code within}
     * null), SGLang's names in {@code /generate}'s {@code sampling_params} ({@code min_new_tokens}). Token ids must be in
     * the vocabulary and the minimum at most {@code maxTokens}, as vLLM requires; a 400 names the field.
     */
    static SamplingRules rules(JsonNode n, String minTokensKey, String within, int maxTokens, int vocabSize) {
        SamplingRules r = SamplingParams.rules(n, minTokensKey, within);
        String at = within == null ? "" : within + ".";
        try {
            r.checkVocab(vocabSize);
        } catch (IllegalArgumentException e) { // the message starts with the field's name
            throw new Http.BadRequest(at + e.getMessage().split(" ", 2)[0], e.getMessage());
        }
        if (r.minTokens() > maxTokens) {
            throw new Http.BadRequest(at + minTokensKey, minTokensKey + " (" + r.minTokens() + ") must be at most the token limit (" + maxTokens + ")");
        }
        return r;
    }

    /** {@code top_k} (vLLM's extension of OpenAI's routes, SGLang's sampling parameter): -1 (or absent, null) no limit, else at least 1. */
    static int topK(JsonNode n) {
        int k = Http.intField(n, "top_k", -1, -1, Integer.MAX_VALUE);
        if (k == 0) throw new Http.BadRequest("top_k", "top_k must be -1 (no limit) or at least 1, got 0");
        return k;
    }

    /**
     * A chat's log probabilities: {@code logprobs} true asks for each token's, {@code top_logprobs} (0 to
     * {@link LogprobsShape#MAX_TOP}) for that many of the most likely tokens' too, and needs {@code logprobs} true, as
     * OpenAI's does (0 or null without it is a no-op). -1: none.
     */
    static int chatLogprobs(JsonNode req) {
        boolean logprobs = Http.booleanField(req, "logprobs", false);
        int top = Http.intField(req, "top_logprobs", 0, 0, LogprobsShape.MAX_TOP);
        if (!logprobs && top > 0) {
            throw new Http.BadRequest("top_logprobs", "top_logprobs (" + top + ") needs logprobs: true");
        }
        return logprobs ? top : -1;
    }

    /** Whether a stream's request asks for the usage chunk ({@code stream_options.include_usage}). */
    static boolean includeUsage(JsonNode req) {
        JsonNode o = req.get("stream_options");
        if (o == null || o.isNull()) return false;
        if (!o.isObject()) throw new Http.BadRequest("stream_options", "stream_options must be an object, got " + o);
        try {
            return Http.booleanField(o, "include_usage", false);
        } catch (Http.BadRequest e) { // named from the body's top, as every other field's param is
            throw new Http.BadRequest("stream_options.include_usage", "stream_options." + e.getMessage());
        }
    }

    /** The seed, when the request names one (any long; without one the room is the seed). */
    static OptionalLong seed(JsonNode n) {
        return n.has("seed") && !n.get("seed").isNull() ? OptionalLong.of(Http.longField(n, "seed")) : OptionalLong.empty();
    }

    /** The {@code sampling_params} of {@code /generate} that this engine implements. */
    static final List<String> GENERATE_SAMPLING_PARAMS = List.of("max_new_tokens", "temperature", "top_p", "top_k", "seed", "stop",
            "frequency_penalty", "presence_penalty", "repetition_penalty", "min_p", "logit_bias", "min_new_tokens", "ignore_eos", "stop_token_ids",
            "regex", "json_schema", "ebnf");

    /** The value of a parameter the engine does not implement that leaves the answer as the engine gives it. */
    private record NoOp(String value, Predicate<JsonNode> is) {
    }

    /**
     * Sampling parameters of OpenAI, vLLM and SGLang that this engine does not implement, each with its
     * no-op value (their default): a request may send that value (or null), not another. The engine
     * stops at EOS/BOS, trims the stop string and gives special tokens no text, as those defaults say.
     */
    private static final Map<String, NoOp> NO_OPS = Map.ofEntries(
            Map.entry("n", new NoOp("1", v -> v.isIntegralNumber() && v.longValue() == 1)),
            Map.entry("no_stop_trim", new NoOp("false", v -> v.isBoolean() && !v.booleanValue())),
            Map.entry("skip_special_tokens", new NoOp("true", v -> v.isBoolean() && v.booleanValue())),
            Map.entry("spaces_between_special_tokens", new NoOp("true", v -> v.isBoolean() && v.booleanValue())));

    /**
     * The parameters a request sets that the engine does not implement, each with why: a 400 names them all at once
     * ({@code param}: the first), rather than a client fixing them one round trip at a time.
     */
    static final class Refusals {
        private final List<String> params = new ArrayList<>(), reasons = new ArrayList<>();

        void add(String param, String reason) {
            params.add(param);
            reasons.add(reason);
        }

        /** A 400 naming them all, if any; {@code within}: the object they are keys of ({@code sampling_params}), or null for the body. */
        void throwIfAny(String within) {
            if (reasons.isEmpty()) return;
            String all = String.join("; ", reasons);
            throw within == null ? new Http.BadRequest(params.getFirst(), all) : new Http.BadRequest(within + "." + params.getFirst(), within + ": " + all);
        }
    }

    /** Refuses {@code key} unless the request leaves it out, sends null or its no-op value. */
    static void refuseUnlessNoOp(JsonNode in, String key, Refusals refused) {
        JsonNode v = in.get(key);
        NoOp noOp = NO_OPS.get(key);
        if (v != null && !v.isNull() && !noOp.is().test(v)) {
            refused.add(key, key + " is not supported (must be " + noOp.value() + (noOp.value().equals("null") ? "" : ", null") + " or absent), got " + v);
        }
    }

    /**
     * OpenAI parameters that would change the answer and that this engine does not implement: a 400
     * naming every such parameter the request sets, rather than an answer that silently differs from
     * what was asked (or a client fixing them one round trip at a time). Fields that change nothing
     * here ({@code model}, {@code user}: strings; {@code stream_options}, …) are accepted. The penalties, {@code logit_bias} and
     * vLLM's sampling extensions are implemented ({@link #rules}); each route's own are checked here
     * ({@link ChatPrompt#refuseUnsupported}).
     */
    static void refuseUnsupported(JsonNode req, OpenAiShape shape) {
        Refusals refused = new Refusals();
        // Accepted whatever they say, but as OpenAI types them: a number or an object there is a client's mistake.
        for (String named : List.of("model", "user")) {
            JsonNode v = req.get(named);
            if (v != null && !v.isNull() && !v.isTextual()) refused.add(named, named + " must be a string, got " + v);
        }
        if (shape == OpenAiShape.CHAT) {
            JsonNode echo = req.get("echo");
            if (echo != null && !echo.isNull() && !(echo.isBoolean() && !echo.booleanValue())) {
                refused.add("echo", "echo is a /v1/completions parameter (a chat has no echo: must be false, null or absent), got " + echo);
            }
            // best_of chooses among samples on /v1/completions only (BestOf): a chat that asked for the best of several
            // samples was answered with its first n, silently. Its no-op (1, or n) is accepted.
            JsonNode bestOf = req.get("best_of"), n = req.get("n");
            long choices = n != null && n.isIntegralNumber() ? n.longValue() : 1;
            if (bestOf != null && !bestOf.isNull() && !(bestOf.isIntegralNumber() && (bestOf.longValue() == 1 || bestOf.longValue() == choices))) {
                refused.add("best_of", "best_of is a /v1/completions parameter (a chat does not choose among samples: must be 1, n, null or absent), got "
                        + bestOf);
            }
            ChatPrompt.refuseUnsupported(req, refused);
            refused.throwIfAny(null);
            return;
        }
        JsonNode suffix = req.get("suffix");
        if (suffix != null && !suffix.isNull() && !(suffix.isTextual() && suffix.textValue().isEmpty())) {
            refused.add("suffix", "suffix is not supported (must be null or absent), got " + suffix);
        }
        refused.throwIfAny(null);
    }

    /**
     * The {@code sampling_params} of {@code /generate}: a 400 naming every key the engine does not
     * implement (SGLang has many: {@code regex}, {@code n}, …), unless
     * it is null or its no-op value; an unknown key is refused as well, since it may mean anything.
     */
    static void refuseUnsupportedSampling(JsonNode sp) {
        Refusals refused = new Refusals();
        for (Map.Entry<String, JsonNode> e : sp.properties()) {
            String key = e.getKey();
            if (GENERATE_SAMPLING_PARAMS.contains(key) || e.getValue().isNull()) continue;
            if (NO_OPS.containsKey(key)) refuseUnlessNoOp(sp, key, refused);
            else refused.add(key, key + " is not supported (this engine implements " + String.join(", ", GENERATE_SAMPLING_PARAMS) + ")");
        }
        refused.throwIfAny("sampling_params");
    }

    /**
     * SGLang's {@code return_logprob} and {@code top_logprobs_num} (0 to {@link LogprobsShape#MAX_TOP}; more than 0
     * needs {@code return_logprob} true): -1 for none.
     */
    static int generateLogprobs(JsonNode req) {
        boolean asked = Http.booleanField(req, "return_logprob", false);
        int top = Http.intField(req, "top_logprobs_num", 0, 0, LogprobsShape.MAX_TOP);
        if (!asked && top > 0) throw new Http.BadRequest("top_logprobs_num", "top_logprobs_num (" + top + ") needs return_logprob: true");
        return asked ? top : -1;
    }

    /**
     * SGLang's {@code logprob_start_len}: -1 (or absent, null) no input token logprobs, else the first prompt position
     * whose input token logprobs the answer gives (below the prompt's length, checked once it is tokenized); it needs
     * {@code return_logprob} true ({@code topLogprobs} -1: not asked).
     */
    static int logprobStart(JsonNode req, int topLogprobs) {
        int start = Http.intField(req, "logprob_start_len", -1, -1, Integer.MAX_VALUE);
        if (start >= 0 && topLogprobs < 0) {
            throw new Http.BadRequest("logprob_start_len", "logprob_start_len (" + start + ") needs return_logprob: true");
        }
        return start;
    }
}
