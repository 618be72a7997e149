package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import io.kvferry.engine.model.Tokenizer;

import java.io.IOException;
import java.io.OutputStream;
import java.util.List;

/**
 * One OpenAI answer under way: what its choices share. A stream is one response whose chunks the choices write in
 * turn (under this object's lock), each naming its choice's {@code index}. A choice that fails before the stream
 * began fails the request (its status is the answer's; the other choices are cancelled: their rooms aborted on
 * both engines at their next token or keep-alive); one that fails after has its error event, naming its index, and
 * the others go on; one [DONE] ends the stream.
 */
final class Answer {
    final HttpExchange ex;
    final OpenAiShape shape;
    final boolean stream;
    final boolean usageChunk;
    final boolean echo;
    final int count;
    final String id;
    final long created = System.currentTimeMillis() / 1000;
    /** What each choice's chunks and run need: the model's name, the tokenizer, the PD call. */
    final String modelName;
    final Tokenizer tokenizer;
    final PdCall pd;
    /** A chat's tool calling (null: none): each choice's text made its tool calls where it is calls ({@link ChatTools}). */
    ChatTools.Tools tools;
    private OutputStream events;
    /** The failure that is the request's answer (the first before any byte was sent). */
    Failure early;
    /**
     * The request's structured-output field as the client named it ({@code guided_grammar}, {@code structured_outputs.grammar},
     * {@code response_format}): a grammar's error from the engines, which PdCall names as it sent the constraint
     * ({@code sampling_params.ebnf} or {@code .json_schema}), names this instead; null: none.
     */
    String constraintParam;
    /** The first failure of a choice after the stream began (the request is counted with its status). */
    Failure streamFailure;
    /** The first choice's end that is neither an outcome nor a failure: the client left, a 400 (thrown on). */
    Exception thrown;
    /** Set when a choice failed before the stream began or the client left: the other choices stop. */
    private volatile boolean cancelled;

    /** {@code id}: the answer's, the shape's prefix and the request's id ({@link RequestId}), in every chunk and shared by its choices. */
    Answer(HttpExchange ex, OpenAiShape shape, String id, boolean stream, boolean usageChunk, boolean echo, int count, String modelName,
           Tokenizer tokenizer, PdCall pd) {
        this.ex = ex;
        this.shape = shape;
        this.stream = stream;
        this.usageChunk = usageChunk;
        this.echo = echo;
        this.count = count;
        this.modelName = modelName;
        this.tokenizer = tokenizer;
        this.pd = pd;
        this.id = id;
    }

    /** An IOException (the choice's rooms are then aborted, as for a client gone) once the request is cancelled. */
    void check() throws IOException {
        if (cancelled) throw new IOException("cancelled: another choice of the request failed, or its client left");
    }

    void cancel() {
        cancelled = true;
    }

    /** A choice ended by {@code e} (not a failure of its request): the others stop, and the first such is the request's end. */
    synchronized void ended(Exception e) {
        if (thrown == null && early == null) thrown = e;
        cancel();
    }

    /** The stream, begun if it was not (a chat's first chunks name the role, one per choice). */
    synchronized OutputStream events() throws IOException {
        if (events == null) {
            check();
            events = Http.startEvents(ex);
            if (shape == OpenAiShape.CHAT) {
                // Under tool_choice auto with one choice, it names its role itself once its answer is known to be text or
                // calls (Choice, ChatTools.rolePerChoice).
                for (int i = 0; i < count && !ChatTools.rolePerChoice(tools, count); i++) Http.event(events, Http.JSON.writeValueAsString(role(i, null)));
            }
        }
        return events;
    }

    /**
     * A chat's role chunk for choice {@code index}: content {@code ""} (a plain answer's, OpenAI's), under tool calling
     * {@link ChatTools#roleDelta}'s ({@code text}: whether auto's answer is text, null where not known yet).
     */
    ObjectNode role(int index, Boolean text) {
        ObjectNode role = indexed(shape.answer(id, created, modelName, "", null, true, true), index);
        if (tools != null) ChatTools.roleDelta(tools, text, (ObjectNode) role.get("choices").get(0).get("delta"));
        return role;
    }

    synchronized void send(ObjectNode chunk) throws IOException {
        Http.event(events(), Http.JSON.writeValueAsString(chunk));
    }

    synchronized void keepAlive() throws IOException {
        Http.write(events(), Http.KEEP_ALIVE);
    }

    /** A choice failed: the request's answer if nothing was sent yet, else its error event (naming its index when there are several). */
    synchronized void failed(int index, Failure f) throws IOException {
        Failure named = (count == 1 ? f : f.withMessage("choice " + index + ": " + f.getMessage()))
                .param(f.param == null ? null : constraintParam); // an engine's only param: the constraint's field (PdCall), renamed
        if (events == null) {
            if (early == null) early = named;
            cancel();
            return;
        }
        if (streamFailure == null) streamFailure = named;
        ObjectNode ev = Http.errorEvent(named.type, named.kind, named.param, named.getMessage());
        if (count > 1) ((ObjectNode) ev.get("error")).put("index", index);
        Http.event(events, Http.JSON.writeValueAsString(ev));
    }

    /**
     * OpenAI's usage of a request: its finished choices' tokens, summed (each choice's prompt counts once per choice), with
     * {@code prompt_tokens_details.cached_tokens}: the prompt tokens the prefill took from its prefix cache.
     */
    static ObjectNode usage(List<Choice> choices) {
        int prompt = 0, completion = 0, cached = 0;
        for (Choice c : choices) {
            if (c.outcome == null) continue;
            prompt += c.outcome.promptTokens();
            completion += c.outcome.tokens().length;
            cached += c.outcome.cachedTokens();
        }
        ObjectNode usage = Http.JSON.createObjectNode();
        usage.put("prompt_tokens", prompt);
        usage.put("completion_tokens", completion);
        usage.put("total_tokens", prompt + completion);
        usage.putObject("prompt_tokens_details").put("cached_tokens", cached);
        return usage;
    }

    /** kvferry's extension of an answer of several choices: each choice's, in index order. */
    static ObjectNode extensions(List<Choice> choices) {
        ObjectNode k = Http.JSON.createObjectNode();
        ArrayNode each = k.putArray("choices");
        for (Choice c : choices) each.add(c.outcome == null ? Http.JSON.nullNode() : extension(c.outcome));
        return k;
    }

    /** kvferry's extension of the final answer: the token ids, the room, and where the time went. */
    static ObjectNode extension(Outcome o) {
        ObjectNode k = Http.JSON.createObjectNode();
        k.put("bootstrap_room", o.room());
        ArrayNode ids = k.putArray("token_ids");
        for (int t : o.tokens()) ids.add(t);
        k.put("ttft_ms", o.ttftMs());
        k.put("e2e_ms", o.e2eMs());
        if (o.prefill() != null) {
            k.put("prefill_compute_ms", o.prefill().path("compute_ms").asDouble());
            k.put("transfer_ms", o.prefill().path("send_ms").asDouble()); // last chunk sent -> every rank's KV landed
            k.put("kv_pages", o.prefill().path("kv_pages").asInt()); // pages sent after the decode's prefix (0: a zero-page last chunk)
        }
        if (o.decodeTimings() != null) {
            k.put("kv_wait_ms", o.decodeTimings().path("transfer_ms").asDouble()); // decode: metadata sent -> KV landed
            k.put("first_decode_ms", o.decodeTimings().path("first_decode_ms").asDouble());
            k.put("bytes", o.decodeTimings().path("bytes").asLong());
        }
        return k;
    }

    /** A chunk or answer whose one choice is the {@code index}th of the request. */
    static ObjectNode indexed(ObjectNode answer, int index) {
        ((ObjectNode) answer.get("choices").get(0)).put("index", index);
        return answer;
    }
}
