package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvferry.engine.model.TokenLogprobs;
import io.kvferry.engine.model.Tokenizer;

import java.util.List;

/**
 * How the router's two OpenAI routes shape one answer: {@code /v1/completions} (a choice's {@code text},
 * objects {@code text_completion}) and {@code /v1/chat/completions} (a choice's {@code message} or, streamed,
 * its {@code delta}; objects {@code chat.completion} and {@code chat.completion.chunk}). Everything else (the
 * request's run, usage, the {@code kvferry} extension, {@code [DONE]}, a failed stream's error event) is the
 * router's one path for both.
 */
enum OpenAiShape {
    COMPLETION("/v1/completions", "cmpl-", "text_completion", "text_completion") {
        @Override
        void choice(ObjectNode choice, String text, boolean streamed, boolean first) {
            choice.put("text", text);
        }

        @Override
        ObjectNode logprobs(Tokenizer t, List<TokenLogprobs> lps, int[] offsets, int from, int to) {
            return LogprobsShape.completion(t, lps, offsets, from, to);
        }
    },
    CHAT("/v1/chat/completions", "chatcmpl-", "chat.completion", "chat.completion.chunk") {
        @Override
        void choice(ObjectNode choice, String text, boolean streamed, boolean first) {
            if (!streamed) {
                ObjectNode message = choice.putObject("message");
                message.put("role", "assistant");
                message.put("content", text);
                message.putNull("refusal");
                return;
            }
            ObjectNode delta = choice.putObject("delta");
            if (first) delta.put("role", "assistant"); // OpenAI's first chunk: the role, with empty content
            if (first || !text.isEmpty()) delta.put("content", text);
        }

        @Override
        ObjectNode logprobs(Tokenizer t, List<TokenLogprobs> lps, int[] offsets, int from, int to) {
            return LogprobsShape.chat(t, lps, from, to);
        }
    };

    /** The route's path (its requests' metrics label). */
    final String route;
    /** The prefix of its answers' ids. */
    final String idPrefix;
    private final String object;
    private final String chunkObject;

    OpenAiShape(String route, String idPrefix, String object, String chunkObject) {
        this.route = route;
        this.idPrefix = idPrefix;
        this.object = object;
        this.chunkObject = chunkObject;
    }

    /** The route's part of a choice: its text as a completion's {@code text}, a chat's {@code message} or stream {@code delta}. */
    abstract void choice(ObjectNode choice, String text, boolean streamed, boolean first);

    /** A choice's {@code logprobs} of tokens {@code [from, to)} in the route's shape ({@link LogprobsShape}). */
    abstract ObjectNode logprobs(Tokenizer t, List<TokenLogprobs> lps, int[] offsets, int from, int to);

    /** An answer ({@code streamed} false) or a stream's chunk without its choices: id, object, created, model. */
    ObjectNode head(String id, long created, String model, boolean streamed) {
        ObjectNode c = Http.JSON.createObjectNode();
        c.put("id", id);
        c.put("object", streamed ? chunkObject : object);
        c.put("created", created);
        c.put("model", model);
        return c;
    }

    /**
     * An answer or a stream's chunk with its one choice: {@code text}, and {@code finish} (null until the last chunk):
     * its {@code finish_reason} and, beside it, vLLM's {@code stop_reason} ({@link Finish#stopReason}; a chunk before
     * the last has neither's value). {@code first}: the stream's first chunk (a chat's names the role).
     */
    ObjectNode answer(String id, long created, String model, String text, Finish finish, boolean streamed, boolean first) {
        return answer(id, created, model, text, finish, streamed, first, null);
    }

    /** As above, with the choice's {@code logprobs} (null: none, as a request that did not ask for them gets). */
    ObjectNode answer(String id, long created, String model, String text, Finish finish, boolean streamed, boolean first, JsonNode logprobs) {
        ObjectNode c = head(id, created, model, streamed);
        ObjectNode choice = c.putArray("choices").addObject();
        choice.put("index", 0);
        choice(choice, text, streamed, first);
        if (logprobs == null) choice.putNull("logprobs");
        else choice.set("logprobs", logprobs);
        if (finish == null) {
            choice.putNull("finish_reason");
        } else {
            choice.put("finish_reason", finish.reason());
            choice.set("stop_reason", finish.stopReason());
        }
        return c;
    }
}
