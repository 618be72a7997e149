package io.kvferry.engine.http;

import com.sun.net.httpserver.Headers;
import com.sun.net.httpserver.HttpExchange;

import java.util.List;

/**
 * A tenant's per-minute limits ({@code requests_per_minute}, {@code tokens_per_minute} of {@code --tenants-file}: {@link
 * Tenants}, {@link RateBucket}), charged once per HTTP request at its admission, after it is read and checked and before
 * any engine is called or any concurrency slot waited for:
 *
 * <ul>
 * <li>requests: 1 per HTTP request, whatever its choices or batch entries;</li>
 * <li>tokens: the request's work as the router runs it, every choice (n, best_of's samples) and batch entry a request of its
 * own: for each, its prompt's tokens plus its completion budget ({@code max_tokens}, or the route's default; at most what
 * the context leaves after the prompt). When the request ends the budget its decodes did not use goes back
 * ({@link #settle}): the tokens they generated stay charged, whether it succeeded or failed.</li>
 * </ul>
 *
 * A request over a limit is a 429 {@code rate_limit_error} with {@code Retry-After} (the seconds until the bucket holds
 * what it needs, rounded up), counted in {@link RouterMeters#RATE_LIMITED}; a request whose tokens are more than the
 * whole {@code tokens_per_minute} is a 400: it could never fit, and OpenAI's clients retry 429s by themselves.
 * Each answer of a limited tenant charged or refused here (the 400 too) carries OpenAI's {@code x-ratelimit-*} headers (what the buckets held just after
 * this request's charge), {@code x-ratelimit-reset-*} included (the time until the bucket would be full again).
 */
final class RateLimits {
    static final String LIMIT_REQUESTS = "x-ratelimit-limit-requests";
    static final String REMAINING_REQUESTS = "x-ratelimit-remaining-requests";
    static final String LIMIT_TOKENS = "x-ratelimit-limit-tokens";
    static final String REMAINING_TOKENS = "x-ratelimit-remaining-tokens";
    static final String RESET_REQUESTS = "x-ratelimit-reset-requests";
    static final String RESET_TOKENS = "x-ratelimit-reset-tokens";

    private RateLimits() {
    }

    /**
     * A request's completion budget on a model of {@code contextTokens}: its {@code max_tokens} as far as the context holds
     * it after the prompt (the decode stops there).
     */
    static long budget(Ask ask, int contextTokens) {
        return Math.max(0, Math.min(ask.maxTokens(), (long) contextTokens - ask.prompt().ids().length));
    }

    /**
     * Charges the request of {@code asks} (its choices or batch entries, resolved) to its tenant's buckets, if it has any
     * ({@code record.tenant}): returns once admitted, its {@code x-ratelimit-*} headers set on {@code ex}'s answer; a
     * {@link Failure} 429 (its headers set too) when a bucket is short, nothing taken; a 400 ({@link Http.BadRequest}
     * of {@code budgetParam}, the route's max_tokens field) when the tokens could never fit.
     */
    static void admit(Router.RequestRecord record, List<Ask> asks, int contextTokens, String budgetParam, HttpExchange ex, RouterMeters meters)
            throws Failure {
        Tenants.Tenant t = record.tenant;
        if (t == null || t.requests == null && t.tokens == null) return;
        RateBucket requests = t.requests, tokens = t.tokens;
        long budget = 0, charge = 0;
        // The limits as read once here: each take is priced at its own, and any refund given back at it (RateBucket#give).
        int requestsLimit = requests == null ? 0 : requests.limit(), tokensLimit = tokens == null ? 0 : tokens.limit();
        if (tokens != null) {
            for (Ask a : asks) {
                long b = budget(a, contextTokens);
                budget += b;
                charge += a.prompt().ids().length + b;
            }
            if (charge > tokensLimit) {
                meters.rateLimited(t.name, RouterMeters.LIMIT_TOKENS);
                headers(ex, requests, tokens); // the limits it can never fit, as a 429 names them
                throw new Http.BadRequest(budgetParam, "tenant " + t.name + "'s limit is " + tokensLimit + " tokens per minute "
                        + "(tokens_per_minute in --tenants-file) and this request counts " + charge + " (prompt tokens plus " + budgetParam
                        + (asks.size() > 1 ? ", for each of its " + asks.size() + " choices or prompts" : "") + "): it can never fit; ask for fewer tokens");
            }
        }
        if (requests != null) {
            long wait = requests.take(1, requestsLimit);
            if (wait > 0) throw refused(t, ex, meters, RouterMeters.LIMIT_REQUESTS, wait, requestsLimit + " requests per minute "
                    + "(requests_per_minute in --tenants-file)");
        }
        if (tokens != null) {
            long wait = tokens.take(charge, tokensLimit);
            if (wait > 0) {
                if (requests != null) requests.give(1, requestsLimit); // not admitted: its request is not counted
                throw refused(t, ex, meters, RouterMeters.LIMIT_TOKENS, wait, tokensLimit + " tokens per minute (tokens_per_minute "
                        + "in --tenants-file): this request counts " + charge);
            }
            record.chargedTokens = tokens;
            record.chargedBudget = budget;
            record.chargedLimit = tokensLimit;
        }
        headers(ex, requests, tokens);
    }

    private static Failure refused(Tenants.Tenant t, HttpExchange ex, RouterMeters meters, String limit, long waitNanos, String what) {
        meters.rateLimited(t.name, limit);
        headers(ex, t.requests, t.tokens);
        long seconds = RateBucket.retryAfterSeconds(waitNanos);
        return new Failure(429, "rate_limit_error", "tenant " + t.name + " is over its limit of " + what + "; retry in " + seconds + " s")
                .retryAfter(seconds);
    }

    /**
     * The {@code x-ratelimit-*} headers of the limits the tenant has: each limit, what its bucket holds now, and the time
     * until it is full again if nothing more is taken ({@link RateBucket#resetForm}).
     */
    private static void headers(HttpExchange ex, RateBucket requests, RateBucket tokens) {
        Headers h = ex.getResponseHeaders();
        if (requests != null) {
            h.set(LIMIT_REQUESTS, Integer.toString(requests.limit()));
            h.set(REMAINING_REQUESTS, Long.toString(requests.remaining()));
            h.set(RESET_REQUESTS, RateBucket.resetForm(requests.untilFull()));
        }
        if (tokens != null) {
            h.set(LIMIT_TOKENS, Integer.toString(tokens.limit()));
            h.set(REMAINING_TOKENS, Long.toString(tokens.remaining()));
            h.set(RESET_TOKENS, RateBucket.resetForm(tokens.untilFull()));
        }
    }

    /**
     * Once the request is over: the budget its decodes did not use back to the tokens bucket it was charged to, at the limit
     * it was charged at (a reload since may have changed the bucket's).
     */
    static void settle(Router.RequestRecord record) {
        RateBucket b = record.chargedTokens;
        if (b == null) return;
        record.chargedTokens = null;
        b.give(record.chargedBudget - Math.min(record.generated, record.chargedBudget), record.chargedLimit);
    }
}
