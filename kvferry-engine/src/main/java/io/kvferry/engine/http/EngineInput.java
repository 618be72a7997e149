package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import io.kvferry.engine.kv.PrefixCache;
import io.kvferry.engine.model.LlamaConfig;

import java.util.Locale;

/**
 * What an engine's {@code /generate} reads of the prompt, checked before the request reaches its engine: whoever holds the
 * cluster token may call an engine directly, so each fault is a 400 whose {@code param} is {@code input_ids} and whose
 * message names the element at fault, as the router's own check of a token-id prompt does.
 */
final class EngineInput {
    private EngineInput() {
    }

    /** The request's {@code input_ids}: 1 to seq_len - 1 token ids (room for one output token), each in the vocabulary. */
    static int[] inputIds(JsonNode req, LlamaConfig c) {
        JsonNode v = req.get("input_ids");
        if (v == null || !v.isArray()) throw new Http.BadRequest("input_ids", "input_ids must be an array of token ids, got " + v);
        if (v.isEmpty()) throw new Http.BadRequest("input_ids", "input_ids must hold at least one token id, got []");
        if (v.size() >= c.seqLen()) {
            throw new Http.BadRequest("input_ids", "input_ids has " + v.size() + " tokens; the model's context is " + c.seqLen()
                    + " and must leave room for one output token");
        }
        int[] ids = new int[v.size()];
        for (int i = 0; i < ids.length; i++) {
            JsonNode e = v.get(i);
            if (!e.isIntegralNumber() || !e.canConvertToInt() || e.intValue() < 0 || e.intValue() >= c.vocabSize()) {
                throw new Http.BadRequest("input_ids", "input_ids[" + i + "] must be a token id in the vocabulary [0, " + c.vocabSize()
                        + "), got " + e);
            }
            ids[i] = e.intValue();
        }
        return ids;
    }

    /**
     * The request's {@code cache_salt} (vLLM's), null when absent or null: a non-empty string of at most
     * {@link PrefixCache#MAX_SALT_CHARS} characters without half a UTF-16 surrogate pair, else a 400 naming {@code cache_salt}. The router checks a client's
     * with this too, and the engines check what they are sent.
     */
    static String cacheSalt(JsonNode req) {
        JsonNode v = req.get("cache_salt");
        if (v == null || v.isNull()) return null;
        if (!v.isTextual() || v.textValue().isEmpty()) {
            throw new Http.BadRequest("cache_salt", "cache_salt must be a non-empty string if given, got "
                    + (v.isTextual() ? "\"\"" : v.getNodeType().toString().toLowerCase(Locale.ROOT)));
        }
        if (v.textValue().length() > PrefixCache.MAX_SALT_CHARS) {
            throw new Http.BadRequest("cache_salt", "cache_salt has " + v.textValue().length() + " characters; at most "
                    + PrefixCache.MAX_SALT_CHARS + " are allowed");
        }
        // Half a surrogate pair has no UTF-8 encoding: as a prompt's, it is refused, not sent on as something else.
        return PromptResolver.refuseLoneSurrogate(v.textValue(), "cache_salt");
    }
}
