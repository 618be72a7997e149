package io.kvferry.engine.http;

import io.kvferry.engine.model.Tokenizer;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * The request's prompts read against the model: a text prompt tokenized once, a token-id prompt checked (each id in the
 * vocab), both refused with a 400 when they leave no room in the context for one output token; and the check that a
 * text holds no unpaired UTF-16 surrogate.
 */
final class PromptResolver {
    private final Tokenizer tokenizer;
    /** The model's context in tokens: a prompt must leave room in it for one output token. */
    private final int contextTokens;

    PromptResolver(Tokenizer tokenizer, int contextTokens) {
        this.tokenizer = tokenizer;
        this.contextTokens = contextTokens;
    }


    /**
     * The prompt's token ids, or a 400 naming the context when it cannot fit (same words as the engines'
     * own check). A text of more bytes than the context's tokens can stand for is refused before it is
     * encoded: a 1 MB prompt costs nothing but its read.
     */
    int[] promptIds(String prompt) {
        refuseLoneSurrogate(prompt);
        long mostBytes = (long) (contextTokens - 1) * tokenizer.maxTokenBytes();
        if (prompt.length() >= mostBytes || prompt.getBytes(StandardCharsets.UTF_8).length >= mostBytes) {
            throw new Http.BadRequest("the prompt has " + prompt.getBytes(StandardCharsets.UTF_8).length + " bytes, more than the model's context of "
                    + contextTokens + " tokens can hold (a token stands for at most " + tokenizer.maxTokenBytes()
                    + " bytes) with room for one output token");
        }
        int[] ids;
        try {
            ids = tokenizer.encode(prompt, true, false);
        } catch (IllegalArgumentException e) { // a vocab without the byte-fallback token a character of the prompt needs
            throw new Http.BadRequest(e.getMessage());
        }
        if (ids.length >= contextTokens) {
            throw new Http.BadRequest("the prompt has " + ids.length + " tokens; the model's context is " + contextTokens
                    + " and must leave room for one output token");
        }
        return ids;
    }

    /**
     * The request's prompts, each tokenized once ({@link Prompt}): a text prompt's ids ({@link #promptIds}), a token-id
     * prompt's checked (each id in the vocab, the whole leaving room in the context for one output token) and decoded to its
     * text. A 400 names {@code field[i]} for a prompt of a batch ({@link Prompt.Parsed#batch}), before any runs.
     */
    List<Prompt> resolve(Prompt.Parsed parsed, String field) {
        List<Prompt> out = new ArrayList<>();
        List<Prompt> prompts = parsed.prompts();
        for (int i = 0; i < prompts.size(); i++) {
            try {
                out.add(resolve(prompts.get(i), field));
            } catch (Http.BadRequest e) {
                if (!parsed.batch()) throw e;
                throw new Http.BadRequest(field, field + "[" + i + "]: " + e.getMessage());
            }
        }
        return out;
    }

    /** One prompt, tokenized or checked ({@link #resolve(Prompt.Parsed, String)}); {@code field} names a token-id prompt's faults. */
    Prompt resolve(Prompt p, String field) {
        if (!p.given()) {
            try {
                return new Prompt(p.text(), promptIds(p.text()), false);
            } catch (Http.BadRequest e) { // too long, or half a surrogate pair: the field is the route's (prompt, text, messages)
                if (e.param != null) throw e;
                throw new Http.BadRequest(field, e.getMessage());
            }
        }
        int[] ids = p.ids();
        for (int k = 0; k < ids.length; k++) {
            if (ids[k] < 0 || ids[k] >= tokenizer.vocabSize()) {
                throw new Http.BadRequest(field, "token id " + ids[k] + " (element " + k + ") is not in the model's vocab [0, " + tokenizer.vocabSize() + ")");
            }
        }
        if (ids.length >= contextTokens) {
            throw new Http.BadRequest(field, "the prompt has " + ids.length + " tokens; the model's context is " + contextTokens
                    + " and must leave room for one output token");
        }
        return new Prompt(tokenizer.decode(ids), ids, true);
    }

    /**
     * A 400 naming the first unpaired UTF-16 surrogate of the prompt: JSON lets a string hold one
     * (a JSON {@code \\u} escape of a surrogate half alone), but it is no character, and encoding it as UTF-8 would turn it into '?'
     * silently: the model would answer a prompt the client never sent.
     */
    static void refuseLoneSurrogate(String prompt) {
        refuseLoneSurrogate(prompt, null);
    }

    /** As {@link #refuseLoneSurrogate(String)} for the request field {@code field} (null: the prompt); returns {@code text}. */
    static String refuseLoneSurrogate(String text, String field) {
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (Character.isHighSurrogate(c) && i + 1 < text.length() && Character.isLowSurrogate(text.charAt(i + 1))) {
                i++;
            } else if (Character.isSurrogate(c)) {
                throw new Http.BadRequest(field, (field == null ? "the prompt" : field) + " holds an unpaired UTF-16 surrogate \\u"
                        + String.format("%04x", (int) c) + " at character " + i + ": it is not a Unicode character and has no UTF-8 encoding");
            }
        }
        return text;
    }

    /**
     * A 400 naming {@code field} when {@code minTokens} output tokens cannot fit after one of the prompts: the answer ends at
     * the context's end, so such a minimum could never hold (the token limit alone may be larger than what the context leaves).
     */
    void checkMinTokensFit(int minTokens, List<Prompt> prompts, String field) {
        for (Prompt p : prompts) {
            int left = contextTokens - p.ids().length;
            if (minTokens > left) {
                throw new Http.BadRequest(field, field + " (" + minTokens + ") must be at most the tokens the model's context ("
                        + contextTokens + ") leaves after the prompt's " + p.ids().length + ": " + left);
            }
        }
    }
}
