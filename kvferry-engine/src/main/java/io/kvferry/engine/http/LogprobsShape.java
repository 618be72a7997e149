package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvferry.engine.model.TokenLogprobs;
import io.kvferry.engine.model.Tokenizer;

import java.util.List;

/**
 * The log probabilities of a run of output tokens ({@link TokenLogprobs}: log softmax of the raw logits, temperature 1)
 * in the three shapes the router answers with: OpenAI's legacy completions ({@code tokens}, {@code token_logprobs},
 * {@code top_logprobs} as {token: logprob} maps, {@code text_offset}), OpenAI's chat ({@code content}: one object a
 * token, with {@code token}, {@code logprob}, {@code bytes}, {@code top_logprobs}) and SGLang's {@code /generate}
 * ({@code [logprob, token_id, text]} triples). A token is named by {@link Tokenizer#tokenText} (distinct tokens, distinct
 * names: a map of the top ones has them all); its {@code bytes} are what it adds to the text ({@link Tokenizer#tokenBytes}).
 */
final class LogprobsShape {
    /** The request parameter's name on each route and the most it may be: {@link TokenLogprobs#MAX_TOP}. */
    static final int MAX_TOP = TokenLogprobs.MAX_TOP;

    private LogprobsShape() {
    }

    /**
     * OpenAI's legacy completions {@code logprobs} of tokens {@code [from, to)}; {@code offsets[i]}: where token i's text
     * begins in the completion's text (a completion without echo: the first token's is 0).
     */
    static ObjectNode completion(Tokenizer t, List<TokenLogprobs> lps, int[] offsets, int from, int to) {
        ObjectNode o = Http.JSON.createObjectNode();
        ArrayNode tokens = o.putArray("tokens"), logprobs = o.putArray("token_logprobs"), top = o.putArray("top_logprobs"),
                offset = o.putArray("text_offset");
        for (int i = from; i < to; i++) {
            TokenLogprobs lp = lps.get(i);
            tokens.add(t.tokenText(lp.token()));
            logprobs.add(lp.logprob());
            ObjectNode m = top.addObject();
            for (int k = 0; k < lp.topTokens().length; k++) m.put(t.tokenText(lp.topTokens()[k]), lp.topLogprobs()[k]);
            offset.add(offsets[i]);
        }
        return o;
    }

    /** OpenAI's chat {@code logprobs} of tokens {@code [from, to)}: {@code content} and {@code refusal} (null). */
    static ObjectNode chat(Tokenizer t, List<TokenLogprobs> lps, int from, int to) {
        ObjectNode o = Http.JSON.createObjectNode();
        ArrayNode content = o.putArray("content");
        for (int i = from; i < to; i++) {
            TokenLogprobs lp = lps.get(i);
            ObjectNode c = chatToken(content.addObject(), t, lp.token(), lp.logprob());
            ArrayNode top = c.putArray("top_logprobs");
            for (int k = 0; k < lp.topTokens().length; k++) chatToken(top.addObject(), t, lp.topTokens()[k], lp.topLogprobs()[k]);
        }
        o.putNull("refusal");
        return o;
    }

    private static ObjectNode chatToken(ObjectNode c, Tokenizer t, int token, float logprob) {
        c.put("token", t.tokenText(token));
        c.put("logprob", logprob);
        ArrayNode bytes = c.putArray("bytes");
        for (byte b : t.tokenBytes(token)) bytes.add(b & 0xff);
        return c;
    }

    /** SGLang's {@code output_token_logprobs} of tokens {@code [0, to)}: {@code [logprob, token_id, text or null]}. */
    static ArrayNode sglangTokens(Tokenizer t, List<TokenLogprobs> lps, int to, boolean withText) {
        ArrayNode out = Http.JSON.createArrayNode();
        for (int i = 0; i < to; i++) sglangTriple(out.addArray(), t, lps.get(i).token(), lps.get(i).logprob(), withText);
        return out;
    }

    /** SGLang's {@code output_top_logprobs} of tokens {@code [0, to)}: a list of triples a token. */
    static ArrayNode sglangTop(Tokenizer t, List<TokenLogprobs> lps, int to, boolean withText) {
        ArrayNode out = Http.JSON.createArrayNode();
        for (int i = 0; i < to; i++) {
            TokenLogprobs lp = lps.get(i);
            ArrayNode at = out.addArray();
            for (int k = 0; k < lp.topTokens().length; k++) sglangTriple(at.addArray(), t, lp.topTokens()[k], lp.topLogprobs()[k], withText);
        }
        return out;
    }

    private static void sglangTriple(ArrayNode a, Tokenizer t, int token, float logprob, boolean withText) {
        a.add(logprob);
        a.add(token);
        if (withText) a.add(t.tokenText(token));
        else a.addNull();
    }

    /**
     * OpenAI's legacy completions {@code logprobs} of an echoed prompt's tokens ({@code ids}, all of them): the first one's
     * {@code token_logprobs} entry null (nothing comes before it), as OpenAI's, and its {@code top_logprobs} entry an empty
     * map (OpenAI's is null, which the official Java client's {@code validate()} rejects); {@code input}: its input token
     * log probabilities from position 0, the first null.
     */
    static ObjectNode completionPrompt(Tokenizer t, List<TokenLogprobs> input, int[] ids, int[] offsets) {
        ObjectNode o = Http.JSON.createObjectNode();
        ArrayNode tokens = o.putArray("tokens"), logprobs = o.putArray("token_logprobs"), top = o.putArray("top_logprobs"),
                offset = o.putArray("text_offset");
        for (int i = 0; i < ids.length; i++) {
            TokenLogprobs lp = input.get(i);
            tokens.add(t.tokenText(ids[i]));
            offset.add(offsets[i]);
            if (lp == null) {
                logprobs.addNull();
                top.addObject(); // OpenAI and vLLM send null; the official Java client's validate() fails on a null map
                continue;
            }
            logprobs.add(lp.logprob());
            ObjectNode m = top.addObject();
            for (int k = 0; k < lp.topTokens().length; k++) m.put(t.tokenText(lp.topTokens()[k]), lp.topLogprobs()[k]);
        }
        return o;
    }

    /** {@code a} with {@code b}'s entries after its own, array by array ({@code b} null: {@code a}). */
    static ObjectNode append(ObjectNode a, ObjectNode b) {
        if (b == null) return a;
        for (String name : List.of("tokens", "token_logprobs", "top_logprobs", "text_offset")) a.withArray(name).addAll((ArrayNode) b.get(name));
        return a;
    }

    /**
     * SGLang's {@code input_token_logprobs}: {@code [logprob, token_id, text or null]} for prompt positions [start,
     * ids.length), the first prompt token's logprob null.
     */
    static ArrayNode sglangInputTokens(Tokenizer t, List<TokenLogprobs> input, int[] ids, int start, boolean withText) {
        ArrayNode out = Http.JSON.createArrayNode();
        for (int i = 0; i < input.size(); i++) {
            TokenLogprobs lp = input.get(i);
            ArrayNode a = out.addArray();
            if (lp == null) {
                a.addNull();
                a.add(ids[start + i]);
                if (withText) a.add(t.tokenText(ids[start + i]));
                else a.addNull();
            } else {
                sglangTriple(a, t, lp.token(), lp.logprob(), withText);
            }
        }
        return out;
    }

    /** SGLang's {@code input_top_logprobs}: a list of triples a prompt position, null for the first prompt token. */
    static ArrayNode sglangInputTop(Tokenizer t, List<TokenLogprobs> input, boolean withText) {
        ArrayNode out = Http.JSON.createArrayNode();
        for (TokenLogprobs lp : input) {
            if (lp == null) {
                out.addNull();
                continue;
            }
            ArrayNode at = out.addArray();
            for (int k = 0; k < lp.topTokens().length; k++) sglangTriple(at.addArray(), t, lp.topTokens()[k], lp.topLogprobs()[k], withText);
        }
        return out;
    }

    /**
     * A decode's token event's log probabilities ({@link DecodeServer#tokenEvent}), or null when it has none; an event whose
     * {@code logprob} is no finite number, or whose {@code top_tokens} and {@code top_logprobs} are not arrays of one length
     * (at most {@code maxTop}) of token ids of the model's {@code vocab} and finite numbers, is a {@link PdCall.BadAnswer}
     * (the request's 502: a top token's text is named by the tokenizer, which refuses an id outside the vocabulary).
     */
    static TokenLogprobs fromEvent(JsonNode ev, int token, int vocab, int maxTop) throws PdCall.BadAnswer {
        JsonNode lp = ev.get("logprob");
        if (lp == null || lp.isNull()) return null;
        float logprob = PdCall.finite(lp, "logprob");
        JsonNode ids = ev.get("top_tokens"), vals = ev.get("top_logprobs");
        if (ids == null && vals == null) return new TokenLogprobs(token, logprob, new int[0], new float[0]);
        if (ids == null || vals == null || !ids.isArray() || !vals.isArray() || ids.size() != vals.size()) {
            throw new PdCall.BadAnswer("top_tokens " + PdCall.shown(ids) + " and top_logprobs " + PdCall.shown(vals)
                    + " are not two arrays of one length");
        }
        if (ids.size() > maxTop) {
            throw new PdCall.BadAnswer(ids.size() + " top_tokens, more than the " + maxTop + " the request asked for");
        }
        int n = ids.size();
        int[] top = new int[n];
        float[] topLp = new float[n];
        for (int k = 0; k < n; k++) {
            top[k] = PdCall.tokenId(ids.get(k), vocab, "top_tokens", k, -1);
            topLp[k] = PdCall.finite(vals.get(k), "top_logprobs", k, -1);
        }
        return new TokenLogprobs(token, logprob, top, topLp);
    }
}
