package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;

import java.util.ArrayList;
import java.util.List;

/**
 * One prompt of a request, tokenized once: its {@code ids} (what the engines get) and its {@code text} (what an echo gives
 * back). A text prompt's ids are its encoding, BOS first; a token-id prompt ({@code given}: OpenAI's and vLLM's
 * {@code prompt} as a list of ints, SGLang's {@code input_ids}) is sent as given, no BOS added (vLLM's behaviour), and its
 * text is the ids' decoded text ({@link io.kvferry.engine.model.Tokenizer#decode}).
 *
 * <p>{@link #parse} reads the request's shape (a pure function of its JSON); the router then fills in the ids of a
 * text prompt, or checks a token-id prompt against its vocab and context ({@code PromptResolver#resolve}).
 */
record Prompt(String text, int[] ids, boolean given) {
    /** A text prompt, not yet tokenized. */
    static Prompt text(String text) {
        return new Prompt(text, null, false);
    }

    /** The token ids a client gave, not yet checked against the vocab or decoded. */
    static Prompt ids(int[] ids) {
        return new Prompt(null, ids, true);
    }

    /**
     * A list of token ids ({@code node} an array, {@code name} in the message), or a 400 naming the request's field
     * {@code field}: non-empty, each an int (whether it is in the vocab is the router's check).
     */
    static Prompt idList(JsonNode node, String name, String field) {
        if (node.isEmpty()) throw new Http.BadRequest(field, name + " must hold at least one token id, got []");
        int[] ids = new int[node.size()];
        for (int k = 0; k < ids.length; k++) {
            JsonNode e = node.get(k);
            if (!e.isIntegralNumber() || !e.canConvertToInt()) {
                throw new Http.BadRequest(field, name + " must be a list of token ids (integers): element " + k + " is " + e);
            }
            ids[k] = e.intValue();
        }
        return ids(ids);
    }

    /**
     * A request's prompt field {@code field} (OpenAI's {@code prompt}, SGLang's {@code text} or {@code input_ids}) when
     * it is a list ({@code node} an array): a list of ints is one token-id prompt ({@code idsAllowed}), a list of strings or
     * of lists of ints is a batch of 1 to {@link RequestParams#MAX_CHOICES} prompts ({@code textAllowed} for strings). Mixing
     * strings and id lists is refused, as is anything else, with a 400 naming {@code field[i]}.
     *
     * @return the prompts, and whether the list was a batch ({@link Parsed#batch})
     */
    static Parsed parseList(JsonNode node, String field, boolean textAllowed, boolean idsAllowed) {
        String what = (textAllowed ? "strings" : "") + (textAllowed && idsAllowed ? " or " : "") + (idsAllowed ? "lists of token ids" : "");
        if (idsAllowed && !node.isEmpty() && node.get(0).isNumber()) return new Parsed(List.of(idList(node, field, field)), false);
        if (node.isEmpty() || node.size() > RequestParams.MAX_CHOICES) {
            throw new Http.BadRequest(field, field + " must be " + (textAllowed ? "a string or " : "") + (idsAllowed ? "a list of token ids or " : "")
                    + "a list of 1 to " + RequestParams.MAX_CHOICES + " " + what + ", got a list of " + node.size());
        }
        List<Prompt> prompts = new ArrayList<>();
        for (int i = 0; i < node.size(); i++) {
            JsonNode e = node.get(i);
            String name = field + "[" + i + "]";
            if (textAllowed && e.isTextual() && (i == 0 || !prompts.getFirst().given())) {
                prompts.add(text(e.textValue()));
            } else if (idsAllowed && e.isArray() && (i == 0 || prompts.getFirst().given())) {
                prompts.add(idList(e, name, field));
            } else {
                String want = i == 0 ? (textAllowed ? "a string" : "") + (textAllowed && idsAllowed ? " or " : "") + (idsAllowed ? "a list of token ids" : "")
                        : prompts.getFirst().given() ? "a list of token ids, as " + field + "[0] is" : "a string, as " + field + "[0] is";
                throw new Http.BadRequest(field, name + " must be " + want + ", got " + e);
            }
        }
        return new Parsed(prompts, true);
    }

    /** A prompt field's prompts; {@code batch}: it was a list of prompts (answered as several), not one. */
    record Parsed(List<Prompt> prompts, boolean batch) {
    }
}
