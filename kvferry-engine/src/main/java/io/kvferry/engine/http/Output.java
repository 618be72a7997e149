package io.kvferry.engine.http;

import io.kvferry.engine.model.TokenLogprobs;

import java.io.IOException;
import java.util.List;

/** The stream of one request, as the handler formats it. */
interface Output {
    /**
     * A piece of text (may be empty while a multi-byte character is incomplete) for one token; {@code logprobs}: its
     * log probabilities (null unless the request asked for them), {@code offset}: where its text begins in the
     * completion's text.
     */
    void onToken(int token, String text, TokenLogprobs logprobs, int offset) throws IOException;

    /**
     * The decode is alive and the request waits (its keep-alive, after a second without a token): a stream
     * begins, if it has not, and passes a comment on, so a client that left is noticed now, not at the first
     * token (its room then runs its prefill and transfer for nobody). A stream begun so reports a later
     * failure as an error event, as after a token; one that fails within the first second still gets its status.
     */
    default void onKeepAlive() throws IOException {
    }

    /**
     * Once, before the first token (or, for a prompt-only request, before the end): the prompt's input token log
     * probabilities when the request asked for them ({@link Outcome#inputLogprobs}), else null. An echo's stream
     * sends the prompt's part here, so it arrives first.
     */
    default void onPrompt(List<TokenLogprobs> inputLogprobs) throws IOException {
    }
}
