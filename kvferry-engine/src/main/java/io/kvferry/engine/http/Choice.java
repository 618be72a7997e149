package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvferry.engine.model.TokenLogprobs;
import io.kvferry.engine.model.Tokenizer;
import io.kvferry.engine.model.ToolCalls;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;

/**
 * One choice of an OpenAI answer: one request through a prefill and a decode ({@link PdCall#run}), its stream's chunks
 * naming its index. {@code echo} (completions): its text starts with its prompt as sent, and the log
 * probabilities, when asked, cover the prompt's tokens (the first one's null, OpenAI's legacy shape) then the
 * completion's, {@code text_offset} over the echoed text. A stream sends the prompt's part as the choice's first
 * chunk, before its first token's (with max_tokens 0, before its last chunk). A chat with tool calling ({@link ChatTools})
 * answers calls as {@code tool_calls}; streamed, as OpenAI streams them: each call's head once its name is complete, then
 * its arguments' fragments as their tokens come ({@link ChatTools.Stream}), a cut leaving the calls so far (never
 * content), so the stream's deltas add up to the whole answer.
 */
final class Choice implements Output {
    final Answer a;
    final int index;
    final Ask ask;
    /** Where the completion's text begins in the choice's text. */
    final int shift;
    /** Characters of the text, and tokens' log probabilities, already sent in chunks. */
    int streamedChars;
    int streamedLogprobs;
    boolean promptSent;
    /**
     * Tool calling streamed ({@link Answer#tools}): auto's text not sent yet while it is {@link ToolCalls#OPEN}'s start;
     * the log probabilities of the tokens no chunk carried yet (held text's, or tokens that wrote only a call's wrapping);
     * {@code plain} once auto's text is known to be text (then streamed as any); {@code calls} once the answer is known to
     * be calls (at once where it must be), which reads the text as it comes ({@code scanned}: its characters read).
     */
    private final StringBuilder held = new StringBuilder();
    private final List<TokenLogprobs> heldLogprobs = new ArrayList<>();
    private boolean plain;
    private ChatTools.Stream calls;
    private int scanned;
    /** Whether this choice's role chunk went (auto's, sent once its answer is known to be text or calls: {@link #role}). */
    private boolean roleSent;
    Router.RequestRecord record;
    Outcome outcome;

    Choice(Answer a, int index, Ask ask) {
        this.a = a;
        this.index = index;
        this.ask = ask;
        this.shift = a.echo ? ask.prompt().text().length() : 0;
        this.promptSent = !a.echo || !a.stream;
    }

    void run(Router.RequestRecord record) {
        this.record = record;
        try {
            outcome = a.pd.run(ask, record, this);
            finish();
        } catch (Failure f) {
            try {
                a.failed(index, f);
            } catch (IOException gone) {
                a.ended(gone);
            }
        } catch (Exception e) {
            if (e instanceof InterruptedException) Thread.currentThread().interrupt();
            a.ended(e);
        }
    }

    private ObjectNode chunk(String text, Finish finish, JsonNode lp) {
        return Answer.indexed(a.shape.answer(a.id, a.created, a.modelName, text, finish, true, false, lp), index);
    }

    @Override
    public void onPrompt(List<TokenLogprobs> input) throws IOException {
        if (promptSent) return;
        JsonNode lp = input == null ? null : promptLogprobs(ask.prompt(), input);
        a.send(chunk(ask.prompt().text(), null, lp));
        promptSent = true;
    }

    @Override
    public void onToken(int tok, String text, TokenLogprobs logprobs, int offset) throws IOException {
        a.check();
        if (!a.stream) return;
        if (a.tools != null && !plain) {
            if (logprobs != null) heldLogprobs.add(logprobs);
            if (calls != null) {
                sendCalls(text);
                return;
            }
            held.append(text);
            if (a.tools.mode() == ChatTools.Mode.AUTO && mayBeCalls() && held.length() < ToolCalls.OPEN.length()) return;
            if (ChatTools.isCalls(a.tools, held)) { // the answer is calls: read as they come, from the held text on
                role(false);
                calls = new ChatTools.Stream();
                sendCalls(held);
                held.setLength(0);
                return;
            }
            plain = true; // auto's text: what was held goes now, the rest as it comes
            role(true);
            String h = held.toString();
            streamedChars += h.length();
            JsonNode lp = heldLogprobs.isEmpty() ? null : a.shape.logprobs(a.tokenizer, heldLogprobs, new int[heldLogprobs.size()], 0, heldLogprobs.size());
            streamedLogprobs += heldLogprobs.size();
            a.send(chunk(h, null, lp));
            return;
        }
        streamedChars += text.length();
        // A chunk carries the log probabilities of its token.
        JsonNode lp = logprobs == null ? null : a.shape.logprobs(a.tokenizer, List.of(logprobs), new int[]{shift + offset}, 0, 1);
        if (logprobs != null) streamedLogprobs++;
        a.send(chunk(text, null, lp));
    }

    @Override
    public void onKeepAlive() throws IOException {
        a.check();
        if (a.stream) a.keepAlive();
    }

    /**
     * The calls' deltas the answer's next {@code text} completes, each a chunk of {@code delta.tool_calls}; the first
     * carries the log probabilities no chunk had yet (a token that wrote only a call's wrapping sends nothing: its log
     * probabilities go with the next delta, or the last chunk).
     */
    private void sendCalls(CharSequence text) throws IOException {
        scanned += text.length();
        for (ArrayNode d : calls.push(text)) {
            JsonNode lp = null;
            if (!heldLogprobs.isEmpty()) {
                lp = a.shape.logprobs(a.tokenizer, heldLogprobs, new int[heldLogprobs.size()], 0, heldLogprobs.size());
                streamedLogprobs += heldLogprobs.size();
                heldLogprobs.clear();
            }
            ObjectNode c = chunk("", null, lp);
            ((ObjectNode) c.get("choices").get(0).get("delta")).set("tool_calls", d);
            a.send(c);
        }
    }

    /**
     * Under auto with one choice ({@link ChatTools#rolePerChoice}), its role chunk, once: content "" before a text answer
     * (as OpenAI's), null before calls; the stream's start sent none.
     */
    private void role(boolean text) throws IOException {
        if (roleSent || !ChatTools.rolePerChoice(a.tools, a.count)) return;
        roleSent = true;
        a.send(a.role(index, text));
    }

    /**
     * Whether auto's held text may still be calls: it and {@link ToolCalls#OPEN} agree as far as both go (compared in place,
     * not copied per token: a call's held text grows to the whole answer).
     */
    private boolean mayBeCalls() {
        int n = Math.min(held.length(), ToolCalls.OPEN.length());
        for (int i = 0; i < n; i++) {
            if (held.charAt(i) != ToolCalls.OPEN.charAt(i)) return false;
        }
        return true;
    }

    /**
     * A stream's last chunk of the choice: what was held back (a possible stop string's start, an incomplete
     * character), the log probabilities of the tokens no chunk had (the one that completed a stop string), the
     * finish reason and vLLM's stop_reason beside it and kvferry's extension; never the usage, which a stream carries only
     * in {@code include_usage}'s chunk (OpenAI's rule), for one choice as for several.
     */
    private void finish() throws IOException {
        if (!a.stream) return;
        Outcome o = outcome;
        if (a.tools != null && !plain && (calls != null || ChatTools.isCalls(a.tools, o.text()))) {
            // The rest of the calls' text: what a possible stop string's start held back (all of it where auto's text was
            // still undecided), the calls so far as they stand at the cut.
            role(false);
            if (calls == null) calls = new ChatTools.Stream();
            sendCalls(o.text().substring(scanned));
            ObjectNode fin = chunk("", o.finish(), unsentLogprobs(o));
            ((ObjectNode) fin.get("choices").get(0)).put("finish_reason", ChatTools.finishReason(a.tools, calls.calls(), o.finish()));
            fin.set("kvferry", Answer.extension(o));
            a.send(fin);
            return;
        }
        role(true);
        String rest = o.text().substring(streamedChars);
        ObjectNode fin = chunk(rest, o.finish(), unsentLogprobs(o));
        // Auto's text that no chunk carried yet (all of it was held, or it is empty): its content here, "" included (with
        // several choices their role chunks had no content).
        if (a.tools != null && !plain) ((ObjectNode) fin.get("choices").get(0).get("delta")).put("content", rest);
        fin.set("kvferry", Answer.extension(o));
        a.send(fin);
    }

    /** The log probabilities of the choice's tokens no chunk carried yet (null: none, or none asked for). */
    private JsonNode unsentLogprobs(Outcome o) {
        return o.logprobs() == null || streamedLogprobs == o.tokens().length ? null
                : a.shape.logprobs(a.tokenizer, o.logprobs(), shifted(o.textOffsets(), shift), streamedLogprobs, o.tokens().length);
    }

    /**
     * The choice of a whole (not streamed) answer, as the answer's {@code at}th; {@code logprobs} false leaves out the
     * log probabilities the request did not ask for (best_of's, which chose it).
     */
    JsonNode whole(int at, boolean logprobs) {
        Outcome o = outcome;
        ObjectNode lp = o.logprobs() == null || !logprobs ? null
                : a.shape.logprobs(a.tokenizer, o.logprobs(), shifted(o.textOffsets(), shift), 0, o.tokens().length);
        if (o.inputLogprobs() != null) lp = LogprobsShape.append(promptLogprobs(ask.prompt(), o.inputLogprobs()), lp);
        String text = a.echo ? ask.prompt().text() + o.text() : o.text();
        ObjectNode one = a.shape.answer(a.id, a.created, a.modelName, text, o.finish(), false, false, lp);
        ObjectNode choice = (ObjectNode) Answer.indexed(one, at).get("choices").get(0);
        ToolCalls.Scanner read = ChatTools.calls(a.tools, o.text());
        if (read != null) ChatTools.whole(choice, a.tools, read, o.finish());
        return choice;
    }

    /**
     * The legacy completions {@code logprobs} of the prompt's tokens (from its first, as echo asks): each token's
     * {@code text_offset} is where its decoded text begins in the prompt's text (the tokenizer gives a text prompt back; a
     * token-id prompt's text is its decoding).
     */
    private ObjectNode promptLogprobs(Prompt prompt, List<TokenLogprobs> input) {
        int[] ids = prompt.ids();
        int[] offsets = new int[ids.length];
        Tokenizer.TextStream text = a.tokenizer.textStream(-1); // as Tokenizer.decode: no token before the first
        int at = 0;
        for (int i = 0; i < ids.length; i++) {
            offsets[i] = Math.min(at, prompt.text().length());
            at += text.push(ids[i]).length();
        }
        return LogprobsShape.completionPrompt(a.tokenizer, input, ids, offsets);
    }

    private static int[] shifted(int[] offsets, int by) {
        int[] out = offsets.clone();
        for (int i = 0; i < out.length; i++) out[i] += by;
        return out;
    }
}
