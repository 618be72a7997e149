package io.kvferry.engine.http;

import com.sun.net.httpserver.HttpExchange;

import java.util.HexFormat;
import java.util.concurrent.ThreadLocalRandom;
import java.util.regex.Pattern;

/**
 * A request's id, one for a client's request across the router, its prefill and its decode: the client's
 * {@code X-Request-Id} (or SGLang's {@code rid} on {@code /generate}) when it is one, else 128 random bits in hex, made
 * where the request enters (the router; an engine called directly). Every answer of the generation routes carries it
 * back in {@code X-Request-Id}, and every log line about the request names it as {@code request_id=ID}.
 *
 * <p>The rule, {@link #PATTERN}: 1 to {@link #MAX_CHARS} characters of {@code [A-Za-z0-9._~:@+=/-]}, which holds
 * UUIDs, ULIDs, base64 and Kubernetes-style names; no space and no control character, so an id put into a log line
 * keeps it one line and one field. Anything else is refused (a 400), not escaped or cut: an id an operator greps for
 * must be the one the client sent.
 */
final class RequestId {
    /** The header that carries a request's id, both ways (client to router, router to engines, each answer). */
    static final String HEADER = "X-Request-Id";
    /** The longest id taken. */
    static final int MAX_CHARS = 128;
    /** The characters an id is made of (one to {@link #MAX_CHARS}). */
    static final Pattern PATTERN = Pattern.compile("[A-Za-z0-9._~:@+=/-]{1," + MAX_CHARS + "}");
    /** What a refusal says of the rule. */
    static final String RULE = rule(MAX_CHARS);
    /**
     * The longest id an engine takes: a client's id with the router's suffix for one of several choices or a batch's
     * entries, {@code -<index>} (a dash and an int's digits).
     */
    static final int ENGINE_MAX_CHARS = MAX_CHARS + 1 + 10;
    /** The ids an engine takes: the same characters, up to {@link #ENGINE_MAX_CHARS}. */
    static final Pattern ENGINE_PATTERN = Pattern.compile("[A-Za-z0-9._~:@+=/-]{1," + ENGINE_MAX_CHARS + "}");

    /**
     * The id of the request the running thread serves (an engine's exchange, the router's PD call of a choice or batch
     * entry): what an abort it sends names. Bound on the request's own thread, never on a scheduler's.
     */
    static final ScopedValue<String> CURRENT = ScopedValue.newInstance();

    private RequestId() {
    }

    private static String rule(int most) {
        return "1 to " + most + " characters of A-Z a-z 0-9 . _ ~ : @ + = / - (no spaces or control characters: the id goes into log lines)";
    }

    /** Whether {@code id} is one ({@link #PATTERN}); null is not. */
    static boolean valid(String id) {
        return id != null && PATTERN.matcher(id).matches();
    }

    /** A new id: 128 random bits from the source the router's answer ids came from, as 32 lowercase hex digits. */
    static String generate() {
        ThreadLocalRandom r = ThreadLocalRandom.current();
        return HexFormat.of().toHexDigits(r.nextLong()) + HexFormat.of().toHexDigits(r.nextLong());
    }

    /**
     * {@code given} when it is an id; a new one when it is null (none given); else a 400 naming {@code param} (the header,
     * {@code rid}, {@code rid[i]}) that says the rule.
     */
    static String orNew(String given, String param) {
        if (given == null) return generate();
        check(given, param);
        return given;
    }

    /** A 400 naming {@code param} unless {@code id} is one. */
    static void check(String id, String param) {
        if (!valid(id)) throw new Http.BadRequest(param, param + " must be " + RULE + "; got " + describe(id));
    }

    /**
     * An engine's exchange's id ({@code /generate}, {@code /abort}): its {@code X-Request-Id} (up to {@link #ENGINE_MAX_CHARS}
     * characters), or a new one when it has none (an engine called directly), set on its answer's headers; a malformed one is a 400.
     */
    static String ofEngine(HttpExchange ex) {
        String given = ex.getRequestHeaders().getFirst(HEADER);
        String id = given == null ? generate() : given;
        if (!ENGINE_PATTERN.matcher(id).matches()) {
            throw new Http.BadRequest(HEADER, HEADER + " must be " + rule(ENGINE_MAX_CHARS) + "; got " + describe(id));
        }
        ex.getResponseHeaders().set(HEADER, id);
        return id;
    }

    /**
     * The exchange's id: its {@code X-Request-Id}, or a new one when it has none; set on its answer's headers at once, so
     * every answer sent after this (an error too) carries it. A malformed header is a 400 naming it (sent without the header).
     */
    static String of(HttpExchange ex) {
        String id = orNew(ex.getRequestHeaders().getFirst(HEADER), HEADER);
        ex.getResponseHeaders().set(HEADER, id);
        return id;
    }

    /** A refused id for its 400's message: its length, and the first characters, any outside the rule as \\uXXXX. */
    private static String describe(String id) {
        StringBuilder b = new StringBuilder();
        b.append(id.length()).append(" characters");
        if (id.isEmpty()) return b.toString();
        b.append(", '");
        for (int i = 0; i < Math.min(id.length(), 32); i++) {
            char c = id.charAt(i);
            if (PATTERN.matcher(String.valueOf(c)).matches()) b.append(c);
            else b.append(String.format("\\u%04x", (int) c));
        }
        return b.append(id.length() > 32 ? "…'" : "'").toString();
    }
}
