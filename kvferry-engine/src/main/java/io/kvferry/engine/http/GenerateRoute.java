package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.engine.model.SamplingRules;
import io.kvferry.engine.model.TokenLogprobs;
import io.kvferry.engine.model.Tokenizer;

import java.io.IOException;
import java.io.OutputStream;
import java.util.ArrayList;
import java.util.List;
import java.util.OptionalLong;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

/**
 * SGLang's {@code POST /generate}: one prompt, streamed or not, or a batch of them answered whole as a list; each a PD
 * request through {@link PdCall#run}, its answer SGLang's ({@code text}, {@code output_ids}, {@code meta_info}).
 */
final class GenerateRoute {
    private final PdCall pd;
    private final PromptResolver resolver;
    private final Tokenizer tokenizer;

    /** The requests' structured outputs, compiled (checked) here before any engine work; the engines compile them again. */
    private final OutputConstraint.Compiler outputs;

    GenerateRoute(PdCall pd, PromptResolver resolver, Tokenizer tokenizer, OutputConstraint.Compiler outputs) {
        this.outputs = outputs;
        this.pd = pd;
        this.resolver = resolver;
        this.tokenizer = tokenizer;
    }


    /**
     * SGLang's /generate: {"text" or "input_ids" (exactly one; a list of texts or of id lists: a batch, {@link #generateBatch};
     * given ids are sent as they are, no BOS added), "sampling_params": {"max_new_tokens", "temperature", "top_p", "top_k",
     * "seed", "stop", and the rules' ({@link RequestParams#rules}): "frequency_penalty", …, the structured output's "regex" or
     * "json_schema" ({@link StructuredOutputs#sglang})}, "stream", "return_logprob", "top_logprobs_num", "return_text_in_logprobs"}.
     */
    void generate(HttpExchange ex) throws Exception {
        if (!Http.method(ex, "POST")) return;
        JsonNode req = Http.readJson(ex);
        Prompt.Parsed parsed = RequestParams.generatePrompts(req);
        // rid (the request's id, or its batch entries') before any other field, so each of their 400s carries it.
        Router.RequestRecord record = Router.RECORD.get();
        List<String> rids = rids(req, record, parsed.batch() ? parsed.prompts().size() : 0, ex);
        String field = parsed.prompts().getFirst().given() ? "input_ids" : "text";
        List<Prompt> prompts = resolver.resolve(parsed, field);
        Prompt prompt = prompts.getFirst();
        JsonNode sp = req.path("sampling_params");
        // SGLang's sampling_params is Optional: null means its defaults, as leaving it out does.
        if (!sp.isMissingNode() && !sp.isNull() && !sp.isObject()) {
            throw new Http.BadRequest("sampling_params", "sampling_params must be an object, got " + sp);
        }
        RequestParams.refuseUnsupportedSampling(sp);
        int topLogprobs = RequestParams.generateLogprobs(req);
        int logprobStart = RequestParams.logprobStart(req, topLogprobs);
        boolean withText = Http.booleanField(req, "return_text_in_logprobs", false);
        // max_new_tokens 0 (SGLang's too): the prompt alone, for its input token logprobs; the prefill only.
        // Each field's 400 names it as sampling_params.<field>, as the rules' and the engines' own checks do.
        int maxNew = SamplingParams.named("sampling_params.max_new_tokens", () -> Http.intField(sp, "max_new_tokens", 128, 0, Integer.MAX_VALUE));
        float temperature = SamplingParams.temperature(sp, 1.0f, "sampling_params.temperature");
        float topP = SamplingParams.topP(sp, 1.0f, "sampling_params.top_p");
        int topK = SamplingParams.named("sampling_params.top_k", () -> RequestParams.topK(sp));
        OptionalLong seed = SamplingParams.named("sampling_params.seed", () -> RequestParams.seed(sp));
        StopSequences stop = StopSequences.parse(sp.get("stop"), "sampling_params.stop");
        SamplingRules rules = RequestParams.rules(sp, "min_new_tokens", "sampling_params", maxNew, tokenizer.vocabSize())
                .withConstraint(StructuredOutputs.compile(StructuredOutputs.sglang(sp), outputs));
        resolver.checkMinTokensFit(rules.minTokens(), prompts, "sampling_params.min_new_tokens");
        String salt = EngineInput.cacheSalt(req);
        Ask ask;
        try {
            ask = new Ask(prompt, maxNew, temperature, topP, topK, seed, stop, topLogprobs, logprobStart, rules, salt);
        } catch (Http.BadRequest e) { // a temperature, top_p or top_k out of range (Ask names the field)
            throw new Http.BadRequest("sampling_params." + e.param, e.getMessage());
        }
        boolean stream = Http.booleanField(req, "stream", false);
        if (parsed.batch() && stream) {
            throw new Http.BadRequest("stream", "a batch (" + (field.equals("text") ? "text a list" : "input_ids a list of lists")
                    + ") is answered whole: stream must be false");
        }
        List<Ask> asks = parsed.batch() ? OpenAiRoutes.choices(ask, prompts, 1) : List.of(ask);
        try {
            pd.admitRates(asks, "sampling_params.max_new_tokens", ex); // the tenant's per-minute limits, once for the request
        } catch (Failure f) {
            Router.fail(ex, null, f);
            return;
        }
        if (parsed.batch()) {
            generateBatch(ex, asks, rids, withText, field);
            return;
        }
        OutputStream[] events = new OutputStream[1];
        StringBuilder sofar = new StringBuilder();
        List<TokenLogprobs> logprobsSoFar = new ArrayList<>();
        List<List<TokenLogprobs>> input = new ArrayList<>(1); // the prompt's, once known
        int[][] ids = new int[1][]; // the prompt's tokens, once input token logprobs need them
        int[] completion = new int[1]; // the tokens streamed so far
        try {
            Outcome o = pd.run(ask, record, new Output() {
                @Override
                public void onPrompt(List<TokenLogprobs> inputLogprobs) {
                    if (inputLogprobs != null) input.add(inputLogprobs);
                }

                @Override
                public void onToken(int tok, String text, TokenLogprobs logprobs, int offset) throws IOException {
                    sofar.append(text);
                    if (!stream) return;
                    if (events[0] == null) events[0] = Http.startEvents(ex);
                    ObjectNode e = Http.JSON.createObjectNode();
                    e.put("text", sofar.toString()); // SGLang streams the text so far
                    // and SGLang's meta_info on every chunk: the request's id, no finish_reason yet, the tokens so far
                    // (cached_tokens and e2e_latency come with the last chunk: the prefill's answer may not be in yet).
                    ObjectNode meta = e.putObject("meta_info");
                    meta.put("id", record.requestId);
                    meta.putNull("finish_reason");
                    meta.put("prompt_tokens", ask.prompt().ids().length);
                    meta.put("completion_tokens", ++completion[0]);
                    if (logprobs != null) { // and, asked, the log probabilities so far (SGLang's, not incremental)
                        logprobsSoFar.add(logprobs);
                        if (!input.isEmpty()) inputLogprobsMeta(meta, input.getFirst(), ask, ids, withText);
                        logprobsMeta(meta, logprobsSoFar, logprobsSoFar.size(), topLogprobs, withText);
                    }
                    Http.event(events[0], Http.JSON.writeValueAsString(e));
                }

                @Override
                public void onKeepAlive() throws IOException {
                    if (!stream) return;
                    if (events[0] == null) events[0] = Http.startEvents(ex);
                    Http.write(events[0], Http.KEEP_ALIVE);
                }
            });
            ObjectNode out = generated(o, record.requestId, ask, ids, withText);
            if (stream) {
                if (events[0] == null) events[0] = Http.startEvents(ex);
                Http.event(events[0], Http.JSON.writeValueAsString(out));
                Http.event(events[0], "[DONE]");
                events[0].close();
            } else {
                Http.sendJson(ex, 200, out);
            }
        } catch (Failure f) {
            Router.fail(ex, events[0], f);
        }
    }

    /**
     * SGLang's {@code rid}: the request's id ({@link RequestId}), a string for one prompt, a list of one per prompt for a
     * batch ({@code batch} prompts; 0: one prompt). One prompt's becomes the request's (its answer's {@code X-Request-Id} and
     * {@code meta_info.id}); a client's {@code X-Request-Id} that differs is a 400 naming {@code rid}. Returns a batch's
     * entries' ids (without {@code rid}: the request's id, {@code -<i>} after it), null for one prompt.
     */
    static List<String> rids(JsonNode req, Router.RequestRecord record, int batch, HttpExchange ex) {
        JsonNode rid = req.get("rid");
        boolean none = rid == null || rid.isNull();
        if (batch == 0) {
            if (none) return null;
            if (!rid.isTextual()) throw new Http.BadRequest("rid", "rid must be a string for one prompt (a list of strings for a batch), got " + rid.getNodeType());
            String id = rid.textValue();
            RequestId.check(id, "rid");
            if (record.requestIdGiven && !id.equals(record.requestId)) {
                throw new Http.BadRequest("rid", "rid and the X-Request-Id header name different ids; send one of them, or the same id in both");
            }
            record.requestId = id;
            ex.getResponseHeaders().set(RequestId.HEADER, id);
            return null;
        }
        List<String> ids = new ArrayList<>(batch);
        if (none) {
            for (int i = 0; i < batch; i++) ids.add(record.requestId + "-" + i);
            return ids;
        }
        if (!rid.isArray()) {
            throw new Http.BadRequest("rid", "a batch's rid must be a list of strings, one per prompt (" + batch + "), got " + rid.getNodeType());
        }
        if (rid.size() != batch) throw new Http.BadRequest("rid", "rid has " + rid.size() + " ids for a batch of " + batch + " prompts: give one per prompt");
        for (int i = 0; i < batch; i++) {
            JsonNode e = rid.get(i);
            String param = "rid[" + i + "]";
            if (!e.isTextual()) throw new Http.BadRequest(param, param + " must be a string, got " + e.getNodeType());
            RequestId.check(e.textValue(), param);
            int before = ids.indexOf(e.textValue());
            if (before >= 0) throw new Http.BadRequest(param, param + " repeats rid[" + before + "]: each prompt of a batch needs its own id");
            ids.add(e.textValue());
        }
        return ids;
    }

    /** SGLang's answer of one finished request; {@code id}: its {@code meta_info.id}, the request's (or batch entry's) id. */
    private ObjectNode generated(Outcome o, String id, Ask ask, int[][] ids, boolean withText) {
        ObjectNode out = Http.JSON.createObjectNode();
        out.put("text", o.text());
        ArrayNode outputIds = out.putArray("output_ids");
        for (int t : o.tokens()) outputIds.add(t);
        ObjectNode meta = out.putObject("meta_info");
        meta.put("id", id); // SGLang's: the request's rid
        meta.put("prompt_tokens", o.promptTokens());
        meta.put("completion_tokens", o.tokens().length);
        meta.put("cached_tokens", o.cachedTokens()); // SGLang's: the prompt tokens the prefill took from its prefix cache
        meta.set("finish_reason", o.finish().sglang(o.tokens().length)); // SGLang's object: type, and matched or length
        meta.put("e2e_latency", o.e2eMs() / 1000);
        if (o.inputLogprobs() != null) inputLogprobsMeta(meta, o.inputLogprobs(), ask, ids, withText);
        if (o.logprobs() != null) logprobsMeta(meta, o.logprobs(), o.tokens().length, ask.topLogprobs(), withText);
        return out;
    }

    /**
     * SGLang's batch {@code /generate}: each prompt a request of its own through {@link PdCall#run}, all at once, answered as a
     * list in the prompts' order. The first to fail fails the request (its message names {@code field[i]}: {@code text}
     * or {@code input_ids}), the others' rooms aborted at their next token or keep-alive.
     */
    private void generateBatch(HttpExchange ex, List<Ask> asks, List<String> rids, boolean withText, String field) throws Exception {
        int count = asks.size();
        Outcome[] outcomes = new Outcome[count];
        List<Router.RequestRecord> records = new ArrayList<>();
        AtomicReference<Failure> failure = new AtomicReference<>();
        AtomicReference<Exception> thrown = new AtomicReference<>();
        AtomicBoolean cancelled = new AtomicBoolean();
        List<Thread> threads = new ArrayList<>();
        Router.RequestRecord whole = Router.RECORD.get();
        for (int i = 0; i < count; i++) {
            int index = i;
            Router.RequestRecord record = whole.child(rids.get(i));
            records.add(record);
            Output out = new Output() {
                @Override
                public void onToken(int token, String text, TokenLogprobs logprobs, int offset) throws IOException {
                    onKeepAlive();
                }

                @Override
                public void onKeepAlive() throws IOException {
                    if (cancelled.get()) throw new IOException("cancelled: another text of the batch failed");
                }
            };
            threads.add(Thread.ofVirtual().name("batch-" + i).start(() -> {
                try {
                    outcomes[index] = pd.run(asks.get(index), record, out);
                } catch (Failure f) {
                    failure.compareAndSet(null, f.withMessage(field + "[" + index + "]: " + f.getMessage()));
                    cancelled.set(true);
                } catch (Exception e) {
                    thrown.compareAndSet(null, e);
                    cancelled.set(true);
                }
            }));
        }
        try {
            for (Thread t : threads) t.join();
        } catch (InterruptedException e) {
            for (Thread t : threads) t.interrupt();
            throw e;
        }
        Router.merge(whole, records);
        if (failure.get() != null) {
            Router.fail(ex, null, failure.get());
            return;
        }
        if (thrown.get() != null) throw thrown.get();
        ArrayNode all = Http.JSON.createArrayNode();
        for (int i = 0; i < count; i++) all.add(generated(outcomes[i], rids.get(i), asks.get(i), new int[1][], withText));
        Http.sendJson(ex, 200, all);
    }

    /** SGLang's meta_info input token log probabilities: input_token_logprobs, and input_top_logprobs when top ones are asked. */
    private void inputLogprobsMeta(ObjectNode meta, List<TokenLogprobs> input, Ask ask, int[][] ids, boolean withText) {
        if (ids[0] == null) ids[0] = ask.prompt().ids();
        meta.set("input_token_logprobs", LogprobsShape.sglangInputTokens(tokenizer, input, ids[0], ask.logprobStart(), withText));
        if (ask.topLogprobs() > 0) meta.set("input_top_logprobs", LogprobsShape.sglangInputTop(tokenizer, input, withText));
    }

    /** SGLang's meta_info log probabilities of the first {@code to} tokens: output_token_logprobs, and output_top_logprobs when asked. */
    private void logprobsMeta(ObjectNode meta, List<TokenLogprobs> lps, int to, int top, boolean withText) {
        meta.set("output_token_logprobs", LogprobsShape.sglangTokens(tokenizer, lps, to, withText));
        if (top > 0) meta.set("output_top_logprobs", LogprobsShape.sglangTop(tokenizer, lps, to, withText));
    }
}
