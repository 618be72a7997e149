package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;

import java.util.ArrayList;
import java.util.List;

/**
 * OpenAI's {@code stop}: up to four strings; the output ends right before the first occurrence of any
 * of them, which is not part of the text. Applied by the router to the decoded text as tokens arrive.
 */
final class StopSequences {
    static final StopSequences NONE = new StopSequences(List.of());
    /** OpenAI's limit on the number of stop strings. */
    static final int MAX_STRINGS = 4;
    /** Longest stop string accepted: {@link #heldBack} compares each prefix of each string after every token. */
    static final int MAX_CHARS = 512;

    private final List<String> strings;
    private final int longest;

    private StopSequences(List<String> strings) {
        this.strings = List.copyOf(strings);
        this.longest = strings.stream().mapToInt(String::length).max().orElse(0);
    }

    /**
     * {@code stop} of a request: absent or null, a string, or a list of 1 to 4 non-empty strings, none holding half a UTF-16
     * surrogate pair.
     *
     * @param param the field as the error's {@code param} names it ({@code stop}, {@code sampling_params.stop})
     */
    static StopSequences parse(JsonNode n, String param) {
        if (n == null || n.isNull()) return NONE;
        List<String> out = new ArrayList<>();
        if (n.isTextual()) {
            out.add(n.textValue());
        } else if (n.isArray() && n.size() <= MAX_STRINGS) {
            for (JsonNode e : n) {
                if (!e.isTextual()) throw new Http.BadRequest(param, "stop must be a string or a list of strings, got " + n);
                out.add(e.textValue());
            }
        } else {
            throw new Http.BadRequest(param, "stop must be a string or a list of at most " + MAX_STRINGS + " strings, got "
                    + (n.isArray() ? "a list of " + n.size() : n.toString()));
        }
        for (String s : out) {
            if (s.isEmpty()) throw new Http.BadRequest(param, "stop strings must not be empty");
            if (s.length() > MAX_CHARS) throw new Http.BadRequest(param, "stop strings must be at most " + MAX_CHARS + " characters, got " + s.length());
            // Half a surrogate pair never matches whole text, but it matched the first half of an emoji's pair: the answer was cut
            // inside a character, and its text ended in a lone surrogate.
            PromptResolver.refuseLoneSurrogate(s, param);
        }
        return out.isEmpty() ? NONE : new StopSequences(out);
    }

    boolean isEmpty() {
        return strings.isEmpty();
    }

    /** A stop string found in the text: where it starts, and which it is. */
    record Match(int at, String string) {
    }

    /**
     * Where the first stop string in {@code text} starts, or -1. Only a match ending at or after
     * {@code newFrom} can be new (the text before it was searched already), so the search starts a
     * stop string's length before it.
     */
    int firstMatch(CharSequence text, int newFrom) {
        Match m = match(text, newFrom);
        return m == null ? -1 : m.at();
    }

    /**
     * The first stop string in {@code text} ({@link #firstMatch}), or null: of those starting at the same place, the
     * first in the request's list. Its string is vLLM's {@code stop_reason} and SGLang's {@code matched}.
     */
    Match match(CharSequence text, int newFrom) {
        String t = text.toString();
        int from = Math.max(0, newFrom - longest + 1);
        Match best = null;
        for (String s : strings) {
            int at = t.indexOf(s, from);
            if (at >= 0 && (best == null || at < best.at())) best = new Match(at, s);
        }
        return best;
    }

    /**
     * How many characters at the end of {@code text} may be the start of a stop string: a stream holds
     * them back until the next tokens show whether they are, so no text past a stop is ever sent.
     */
    int heldBack(CharSequence text) {
        int n = text.length();
        int held = 0;
        for (String s : strings) {
            for (int k = Math.min(s.length() - 1, n); k > held; k--) {
                if (endsWith(text, n, s, k)) {
                    held = k;
                    break;
                }
            }
        }
        return held;
    }

    private static boolean endsWith(CharSequence text, int n, String stop, int k) {
        for (int i = 0; i < k; i++) if (text.charAt(n - k + i) != stop.charAt(i)) return false;
        return true;
    }
}
