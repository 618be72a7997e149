package io.kvferry.metrics;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;

/**
 * Makes text that came from the wire (HELLO fields, session ids, STATUS and HELLO_ACK reasons,
 * registry JSON fields) safe to put in a log line: control characters (CR, LF, TAB, ESC, the
 * C1 range, U+2028/U+2029) and bidirectional overrides and isolates (U+202A–U+202E,
 * U+2066–U+2069) become visible escapes, so a peer cannot end a line early and forge the next one,
 * reorder what a line shows, nor drive the operator's terminal; overlong text is clipped. Applied where such
 * text enters a failure reason or a log call, so everything downstream (logs, exceptions, the
 * status page) holds the escaped form.
 */
public final class LogSafe {
    /** Longest text kept; a reason is a sentence, anything longer is clipped with its length said. */
    public static final int MAX_CHARS = 1024;

    private LogSafe() {}

    /** The text with control characters escaped ({@code \n}, {@code \r}, {@code \t}, else {@code \}{@code uXXXX}); null stays null. */
    public static String text(String s) {
        if (s == null) return null;
        int n = s.length();
        int i = 0;
        while (i < n && !needsEscape(s.charAt(i))) i++;
        if (i == n && n <= MAX_CHARS) return s; // the common case: nothing to do, nothing allocated
        StringBuilder b = new StringBuilder(Math.min(n, MAX_CHARS) + 16);
        i = Math.min(i, MAX_CHARS);
        b.append(s, 0, i);
        for (; i < n && b.length() < MAX_CHARS; i++) escapeInto(b, s.charAt(i));
        if (i < n) b.append("…(").append(n).append(" chars)");
        return b.toString();
    }

    /**
     * A value for a {@code key=value} log field: plain when it has no space, quote, backslash, equals
     * sign or control character (and is not empty); else quoted with {@code "}, {@code \} and
     * {@code "} escaped as {@code \\} and {@code \"}, control characters as in {@link #text}, so
     * fields stay separable by a parser. Clipped like {@link #text}; null is {@code -}.
     */
    public static String value(String s) {
        if (s == null) return "-";
        boolean plain = !s.isEmpty() && s.length() <= MAX_CHARS;
        for (int i = 0; plain && i < s.length(); i++) {
            char c = s.charAt(i);
            plain = c != ' ' && c != '"' && c != '\\' && c != '=' && !needsEscape(c);
        }
        if (plain) return s;
        StringBuilder b = new StringBuilder(Math.min(s.length(), MAX_CHARS) + 8).append('"');
        int i = 0;
        for (; i < s.length() && b.length() < MAX_CHARS; i++) {
            char c = s.charAt(i);
            if (c == '"') b.append("\\\"");
            else if (c == '\\') b.append("\\\\");
            else escapeInto(b, c);
        }
        if (i < s.length()) b.append("…(").append(s.length()).append(" chars)");
        return b.append('"').toString();
    }

    /**
     * How a decode's session shows in logs, failure reasons and status pages: {@code session } and the first 12 hex
     * digits of SHA-256 of its id, never the id. A session id is the key under which a prefill rank holds the
     * session (a second registration of it must prove the session key), so it must not be readable where any
     * token holder can look: one that read a decode's id on a status page could register it first on a rank
     * that decode has not reached yet and so keep it out of that rank. The decode can compute its own label.
     */
    public static String session(String sessionId) {
        if (sessionId == null) return "session -";
        try {
            byte[] d = MessageDigest.getInstance("SHA-256")
                    .digest(sessionId.getBytes(StandardCharsets.UTF_8));
            return "session " + HexFormat.of().formatHex(d, 0, 6);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every Java platform has SHA-256", e);
        }
    }

    static boolean needsEscape(char c) {
        return c < 0x20 || c == 0x7f || c >= 0x80 && c <= 0x9f || c == '\u2028' || c == '\u2029'
                || c >= '\u202a' && c <= '\u202e' || c >= '\u2066' && c <= '\u2069';
    }

    private static void escapeInto(StringBuilder b, char c) {
        if (!needsEscape(c)) {
            b.append(c);
            return;
        }
        switch (c) {
            case '\n' -> b.append("\\n");
            case '\r' -> b.append("\\r");
            case '\t' -> b.append("\\t");
            default -> b.append(String.format("\\u%04x", (int) c));
        }
    }
}
