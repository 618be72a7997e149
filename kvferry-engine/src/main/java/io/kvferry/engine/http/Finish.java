package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * Why an answer ended, as each client reads it: OpenAI's {@code finish_reason} ({@link #reason}: {@code stop} or
 * {@code length}), vLLM's {@code stop_reason} ({@link #stopReason}) and SGLang's {@code meta_info.finish_reason}
 * object ({@link #sglang}).
 *
 * @param reason        {@code stop} or {@code length}
 * @param matchedString the stop string that ended it (the router's match: {@link StopSequences}), else null
 * @param matchedToken  the token that ended it (the decode's {@code matched}): a stop token id or the model's end
 *                      (EOS, or BOS for llama2.c's checkpoints); -1 when no token did
 * @param modelEnd      {@code matchedToken} ended it as the model's end (EOS / BOS, the request not ignoring them), not as
 *                      one of the request's {@code stop_token_ids}
 */
record Finish(String reason, String matchedString, int matchedToken, boolean modelEnd) {
    /** Max tokens (or the model's context) ended it. */
    static final Finish LENGTH = new Finish("length", null, -1, false);

    /** A stop string ended it. */
    static Finish string(String matched) {
        return new Finish("stop", matched, -1, false);
    }

    /** A token ended it: the model's end ({@code modelEnd}) or a stop token id. */
    static Finish token(int matched, boolean modelEnd) {
        return new Finish("stop", null, matched, modelEnd);
    }

    /**
     * vLLM's {@code stop_reason}: the matched stop string, or the matched stop token id (an int), or null when the
     * model's end token or the length ended the answer.
     */
    JsonNode stopReason() {
        if (matchedString != null) return Http.JSON.getNodeFactory().textNode(matchedString);
        if (matchedToken >= 0 && !modelEnd) return Http.JSON.getNodeFactory().numberNode(matchedToken);
        return Http.JSON.nullNode();
    }

    /**
     * SGLang's {@code meta_info.finish_reason} ({@code FINISH_MATCHED_STR}, {@code FINISH_MATCHED_TOKEN} and
     * {@code FINISH_LENGTH}'s {@code to_json}): {@code {"type": "stop", "matched": string or token id}} (SGLang names
     * EOS as the token it matched, as it does a stop token id) or {@code {"type": "length", "length": tokens}}.
     *
     * @param completionTokens the answer's tokens: a length end's {@code length} (max_new_tokens, unless the model's
     *                         context ended it first)
     */
    ObjectNode sglang(int completionTokens) {
        ObjectNode o = Http.JSON.createObjectNode();
        o.put("type", reason);
        if (!"stop".equals(reason)) o.put("length", completionTokens);
        else if (matchedString != null) o.put("matched", matchedString);
        else if (matchedToken >= 0) o.put("matched", matchedToken);
        else o.putNull("matched");
        return o;
    }
}
