package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.model.Tokenizer;

import java.io.OutputStream;
import java.util.ArrayList;
import java.util.List;

/**
 * The OpenAI routes: {@code POST /v1/completions} and {@code POST /v1/chat/completions} (one path, {@link #answer}: the
 * request's choices, several choices ({@code n}) and {@code best_of} ({@link BestOf}) each a PD request of its own, answered
 * whole or streamed as an {@link Answer} of {@link Choice}s), {@code GET /v1/models} and {@code GET /v1/models/{model}}.
 */
final class OpenAiRoutes {
    private final PdCall pd;
    private final PromptResolver resolver;
    private final Tokenizer tokenizer;
    private final String modelName;
    /** When this router started, in Unix seconds: its model's {@code created} on {@code /v1/models}, as OpenAI's clients require one. */
    private final long started;
    /** The requests' structured outputs, compiled (checked) here before any engine work; the engines compile them again. */
    private final OutputConstraint.Compiler outputs;

    OpenAiRoutes(PdCall pd, PromptResolver resolver, Tokenizer tokenizer, String modelName, long started, OutputConstraint.Compiler outputs) {
        this.outputs = outputs;
        this.pd = pd;
        this.resolver = resolver;
        this.tokenizer = tokenizer;
        this.modelName = modelName;
        this.started = started;
    }


    void completions(HttpExchange ex) throws Exception {
        if (!Http.method(ex, "POST")) return;
        JsonNode req = Http.readJson(ex);
        Prompt.Parsed parsed = RequestParams.prompts(req);
        RequestParams.refuseUnsupported(req, OpenAiShape.COMPLETION);
        int n = RequestParams.n(req, parsed.prompts().size());
        int bestOf = RequestParams.bestOf(req, n, parsed.prompts().size());
        // OpenAI's legacy logprobs: the number of top log probabilities a token (its own always comes too); absent or null: none.
        int logprobs = Http.intField(req, "logprobs", -1, 0, LogprobsShape.MAX_TOP);
        // echo: the text starts with the prompt, and with logprobs the prompt's tokens' come first (lm-evaluation-harness's
        // loglikelihood); max_tokens 0 then asks for the prompt alone.
        boolean echo = Http.booleanField(req, "echo", false);
        int maxTokens = Http.intField(req, "max_tokens", 16, 0, Integer.MAX_VALUE);
        if (maxTokens == 0 && !echo) {
            throw new Http.BadRequest("max_tokens", "max_tokens 0 (the prompt alone, no completion) needs echo: true; without it send at least 1");
        }
        // A prompt-only request has no samples to choose between: best_of's would be the same prefill run again and again.
        if (maxTokens == 0) bestOf = n;
        List<Prompt> prompts = resolver.resolve(parsed, "prompt");
        // best_of > n: every sample's decode reports its tokens' log probabilities, which choose the n shown (BestOf); the
        // answer shows them only where the request asked.
        int sampleLogprobs = bestOf > n ? Math.max(logprobs, 0) : logprobs;
        Ask ask = RequestParams.ask(req, prompts.getFirst(), maxTokens, sampleLogprobs, echo && logprobs >= 0 ? 0 : -1, tokenizer.vocabSize(), outputs);
        resolver.checkMinTokensFit(ask.rules().minTokens(), prompts, "min_tokens");
        answer(ex, req, OpenAiShape.COMPLETION, choices(ask, prompts, bestOf), echo, bestOf > n ? new BestOf(n, bestOf, logprobs >= 0) : null,
                "max_tokens", null);
    }

    /**
     * The choices' asks, index = prompt index * n + sample index ({@code n}: the samples of each prompt, best_of's when it
     * asks for more). Sample {@code j} of a request with a {@code seed} gets seed + j (wrapping): sample 0 is the single
     * request's, and a seeded request gives the same samples again; without one each choice's room is its seed. The
     * prompts are resolved ({@link PromptResolver#resolve(Prompt.Parsed, String)}: tokenized, checked) before.
     */
    static List<Ask> choices(Ask ask, List<Prompt> prompts, int n) {
        List<Ask> asks = new ArrayList<>();
        for (Prompt prompt : prompts) {
            for (int j = 0; j < n; j++) asks.add(ask.sample(prompt, j));
        }
        return asks;
    }

    /**
     * OpenAI's chat: the messages' contents as the prompt ({@link ChatPrompt}: the model has no chat template), then
     * the completion's path. {@code max_completion_tokens} or the older {@code max_tokens} (not both at different
     * values); without either the answer may run to the end of the context, as OpenAI's does.
     */
    void chatCompletions(HttpExchange ex) throws Exception {
        if (!Http.method(ex, "POST")) return;
        JsonNode req = Http.readJson(ex);
        Prompt prompt = Prompt.text(ChatPrompt.of(req.get("messages")));
        RequestParams.refuseUnsupported(req, OpenAiShape.CHAT);
        ChatTools.Tools tools = ChatTools.of(req);
        int maxTokens = Http.intField(req, "max_completion_tokens", Integer.MAX_VALUE, 1, Integer.MAX_VALUE);
        int older = Http.intField(req, "max_tokens", maxTokens, 1, Integer.MAX_VALUE);
        if (req.hasNonNull("max_completion_tokens") && req.hasNonNull("max_tokens") && older != maxTokens) {
            throw new Http.BadRequest("max_tokens", "max_tokens (" + older + ") and max_completion_tokens (" + maxTokens
                    + ") differ; send max_completion_tokens alone");
        }
        prompt = resolver.resolve(prompt, "messages");
        Ask ask = RequestParams.ask(req, prompt, older, RequestParams.chatLogprobs(req), -1, tokenizer.vocabSize(), outputs, tools);
        resolver.checkMinTokensFit(ask.rules().minTokens(), List.of(prompt), "min_tokens");
        answer(ex, req, OpenAiShape.CHAT, choices(ask, List.of(prompt), RequestParams.n(req, 1)), false, null,
                req.hasNonNull("max_completion_tokens") ? "max_completion_tokens" : "max_tokens", tools);
    }

    /**
     * Runs an OpenAI route's request and answers it in the route's {@link OpenAiShape}: one answer, or a stream of
     * chunks (a chat's first names the role), its last with the finish reason, the held-back text and kvferry's
     * extension, then, with {@code stream_options.include_usage}, OpenAI's usage chunk (no choices), then [DONE].
     * Without it a stream carries no usage (OpenAI's rule), whatever the number of choices.
     *
     * <p>{@code asks}: one per choice, in OpenAI's order (index = prompt index * n + sample index). Several run at once,
     * each a request of its own through {@link PdCall#run} (its room, its prefill and decode, its admission slot); the answer
     * lists them by index, its usage their sum, its {@code kvferry} extension theirs ({@code choices}); a stream's chunks
     * come interleaved, each naming its choice, the usage only in the {@code include_usage} chunk ({@link Answer}). Before
     * any runs, the request is charged to its tenant's per-minute limits ({@link RateLimits}; {@code budgetParam}: the
     * field a 400 of them names). {@code tools}: a chat's tool calling (null: none), which shapes each choice's answer
     * ({@link ChatTools}).
     */
    private void answer(HttpExchange ex, JsonNode req, OpenAiShape shape, List<Ask> asks, boolean echo, BestOf bestOf, String budgetParam,
                        ChatTools.Tools tools) throws Exception {
        boolean stream = Http.booleanField(req, "stream", false);
        try {
            pd.admitRates(asks, budgetParam, ex); // the tenant's per-minute limits, once for the request, before any choice runs
        } catch (Failure f) {
            Router.fail(ex, null, f);
            return;
        }
        Router.RequestRecord record = Router.RECORD.get();
        Answer a = new Answer(ex, shape, shape.idPrefix + record.requestId, stream, RequestParams.includeUsage(req) && stream, echo, asks.size(),
                modelName, tokenizer, pd);
        a.tools = tools;
        StructuredOutputs.Spec spec = StructuredOutputs.openAi(req); // checked already: the field a grammar's error names
        a.constraintParam = spec != null ? spec.param() : tools != null ? "tools" : null; // tools: their calls' grammar (recursive parameters)
        List<Choice> choices = new ArrayList<>();
        for (int i = 0; i < asks.size(); i++) choices.add(new Choice(a, i, asks.get(i)));
        if (choices.size() == 1) {
            choices.getFirst().run(record);
        } else {
            // Each choice is a request of its own (its room, its prefill and decode, its admission slot), all at once; its
            // engines are sent the request's id with its index after it (RequestId): one id a call, all found by the request's.
            List<Thread> threads = new ArrayList<>();
            for (Choice c : choices) {
                Router.RequestRecord child = record.child(record.requestId + "-" + c.index);
                threads.add(Thread.ofVirtual().name("choice-" + c.index).start(() -> c.run(child)));
            }
            try {
                for (Thread t : threads) t.join();
            } catch (InterruptedException e) {
                for (Thread t : threads) t.interrupt();
                throw e;
            }
            Router.merge(record, choices.stream().map(c -> c.record).toList());
        }
        Failure early;
        synchronized (a) {
            early = a.early;
        }
        if (early != null) { // no byte sent yet (or no stream): the request's answer is that choice's failure
            Router.fail(ex, null, early);
            return;
        }
        Exception thrown;
        synchronized (a) {
            thrown = a.thrown;
        }
        if (thrown != null) throw thrown; // the client left (every room aborted), or a 400
        ObjectNode usage = Answer.usage(choices); // best_of's samples not shown count too, as OpenAI bills them
        if (!stream) {
            ObjectNode whole = shape.head(a.id, a.created, modelName, false);
            ArrayNode all = whole.putArray("choices");
            List<Choice> shown = bestOf == null ? choices : bestOf.chosen(choices, c -> BestOf.cumulativeLogprob(c.outcome));
            for (int i = 0; i < shown.size(); i++) all.add(shown.get(i).whole(i, bestOf == null || bestOf.showLogprobs()));
            whole.set("usage", usage);
            whole.set("kvferry", shown.size() == 1 ? Answer.extension(shown.getFirst().outcome) : Answer.extensions(shown));
            Http.sendJson(ex, 200, whole);
            return;
        }
        synchronized (a) {
            OutputStream events = a.events();
            boolean anyDone = choices.stream().anyMatch(c -> c.outcome != null);
            if (a.usageChunk && anyDone) {
                ObjectNode last = shape.head(a.id, a.created, modelName, true);
                last.putArray("choices");
                last.set("usage", usage);
                Http.event(events, Http.JSON.writeValueAsString(last));
            }
            Http.event(events, "[DONE]");
            events.close();
        }
        if (a.streamFailure != null) {
            record.countedStatus = a.streamFailure.status;
            record.failureKind = a.streamFailure.kind != null ? a.streamFailure.kind : a.streamFailure.type;
        }
    }

    void models(HttpExchange ex) throws Exception {
        if (!Http.method(ex, "GET")) return;
        ObjectNode out = Http.JSON.createObjectNode();
        out.put("object", "list");
        out.putArray("data").add(modelObject());
        Http.sendJson(ex, 200, out);
    }

    /** {@code GET /v1/models/{model}}: the model this router serves, or a 404 ({@code model_not_found}, as OpenAI) naming the one it serves. */
    void model(HttpExchange ex) throws Exception {
        if (!Http.method(ex, "GET")) return;
        String id = ex.getRequestURI().getPath().substring(Router.MODEL_ROUTE.length());
        if (id.equals(modelName)) {
            Http.sendJson(ex, 200, modelObject());
        } else {
            Http.sendCodedError(ex, 404, "invalid_request_error", "model", "model_not_found", "the model '" + id + "' does not exist here; this router serves '"
                    + modelName + "'");
        }
    }

    /** OpenAI's model object: id, object, created (the router's start), owned_by. */
    private ObjectNode modelObject() {
        ObjectNode m = Http.JSON.createObjectNode();
        m.put("id", modelName);
        m.put("object", "model");
        m.put("created", started);
        m.put("owned_by", "kvferry");
        return m;
    }
}
