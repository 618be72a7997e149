package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import io.kvferry.engine.model.Tokenizer;

/** vLLM's {@code POST /tokenize} and {@code POST /detokenize}: the model's tokenizer, with no engine involved. */
final class TokenizeRoutes {
    private final Tokenizer tokenizer;
    /** The model's context in tokens ({@code max_model_len}). */
    private final int contextTokens;

    TokenizeRoutes(Tokenizer tokenizer, int contextTokens) {
        this.tokenizer = tokenizer;
        this.contextTokens = contextTokens;
    }


    /**
     * vLLM's {@code POST /tokenize}: {@code {"prompt": "..."}} or a chat's {@code {"messages": [...]}} (the prompt the chat
     * route makes of them, {@link ChatPrompt}) → {@code {"count", "max_model_len", "tokens", "token_strs"}}: the ids the
     * route would send ({@code add_special_tokens}, default true: BOS first), the context's length, and with
     * {@code return_token_strs} each token's text ({@link Tokenizer#tokenText}; else null). A prompt longer than the
     * context is not refused (as vLLM's: the count says whether it fits).
     */
    void tokenize(HttpExchange ex) throws Exception {
        if (!Http.method(ex, "POST")) return;
        JsonNode req = Http.readJson(ex);
        boolean hasPrompt = req.hasNonNull("prompt"), hasMessages = req.hasNonNull("messages");
        if (hasPrompt == hasMessages) {
            // Neither: the field the client sent as null, if it sent one of them so (the param names what it wrote).
            String param = hasPrompt || req.has("prompt") || !req.has("messages") ? "prompt" : "messages";
            throw new Http.BadRequest(param, hasPrompt ? "send one of prompt and messages, not both"
                    : "prompt (a string) or messages (a chat's) is required");
        }
        String text = hasPrompt ? PromptResolver.refuseLoneSurrogate(Http.textField(req, "prompt"), "prompt") : ChatPrompt.of(req.get("messages"));
        boolean special = Http.booleanField(req, "add_special_tokens", true);
        boolean strs = Http.booleanField(req, "return_token_strs", false);
        int[] ids;
        try {
            ids = tokenizer.encode(text, special, false);
        } catch (IllegalArgumentException e) { // a vocab without the byte-fallback token a character needs
            throw new Http.BadRequest(hasPrompt ? "prompt" : "messages", e.getMessage());
        }
        ObjectNode out = Http.JSON.createObjectNode();
        out.put("count", ids.length);
        out.put("max_model_len", contextTokens);
        ArrayNode tokens = out.putArray("tokens");
        for (int t : ids) tokens.add(t);
        if (strs) {
            ArrayNode each = out.putArray("token_strs");
            for (int t : ids) each.add(tokenizer.tokenText(t));
        } else {
            out.putNull("token_strs");
        }
        Http.sendJson(ex, 200, out);
    }

    /**
     * vLLM's {@code POST /detokenize}: {@code {"tokens": [...]}} (each id in the vocab) → {@code {"prompt": "..."}}, the ids'
     * text as {@link Tokenizer#decode} gives it (what a token-id prompt's echo gives back).
     */
    void detokenize(HttpExchange ex) throws Exception {
        if (!Http.method(ex, "POST")) return;
        JsonNode req = Http.readJson(ex);
        JsonNode tokens = req.get("tokens");
        if (tokens == null || !tokens.isArray()) throw new Http.BadRequest("tokens", "tokens must be a list of token ids, got " + tokens);
        int[] ids = new int[tokens.size()];
        for (int i = 0; i < ids.length; i++) {
            JsonNode t = tokens.get(i);
            if (!t.isIntegralNumber() || !t.canConvertToInt() || t.intValue() < 0 || t.intValue() >= tokenizer.vocabSize()) {
                throw new Http.BadRequest("tokens", "tokens[" + i + "] must be a token id in the model's vocab [0, " + tokenizer.vocabSize() + "), got " + t);
            }
            ids[i] = t.intValue();
        }
        ObjectNode out = Http.JSON.createObjectNode();
        out.put("prompt", tokenizer.decode(ids));
        Http.sendJson(ex, 200, out);
    }
}
