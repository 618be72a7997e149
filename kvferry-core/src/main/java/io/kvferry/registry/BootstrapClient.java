package io.kvferry.registry;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import io.kvferry.http.BoundedBody;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.net.ConnectException;
import java.net.URI;
import java.net.URISyntaxException;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ThreadLocalRandom;

/**
 * Talks to one bootstrap registry (kvferry's or SGLang's): prefill ranks register with it, decode ranks
 * look prefill ranks up. Thread-safe; close it to release the HTTP client's threads.
 *
 * <p>Retries: every call except {@link #health()} follows the {@link RetryPolicy}. Unreachable
 * registries, timeouts and 5xx/408/429 answers are retried with backoff; other answers (400, 401, 404,
 * 405, 413) fail at once because repeating the same request cannot change them. A 503 on the read
 * routes means "not every prefill rank has registered yet": those calls keep retrying it and, if the
 * last attempt still gets 503, throw {@link RegistryNotReadyException}, so a caller that wants to wait
 * longer can catch exactly that and try again later. Use a policy of one attempt for a single probe.
 *
 * <p>Limits: the address comes with each request and the read routes are unauthenticated, so a reply
 * is untrusted input. One exchange (headers and body) must complete within the policy's request
 * timeout, a reply body may hold at most {@link #MAX_REPLY_BYTES}, and a topology's sizes must be
 * within what the registry itself accepts; past any of them the call throws a {@link RegistryException}
 * that names the limit and the address, and nothing more of the reply is read.
 */
public final class BootstrapClient implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(BootstrapClient.class);

    /** SGLang's heartbeat uses (2 s connect, 3 s read): a health probe must not stall its caller. */
    private static final Duration CONNECT_TIMEOUT = Duration.ofSeconds(2);
    private static final Duration HEALTH_TIMEOUT = Duration.ofSeconds(3);
    /**
     * The largest reply body read. The longest legitimate reply is {@code POST /query_dp_ranks} for a
     * request at the server's 64 KiB cap: about 3,300 room ids of up to 19 digits, answered with some
     * 28 bytes each, ~92 KiB; topology and endpoint replies are a few hundred bytes. 256 KiB leaves
     * room for another registry's formatting (SGLang's) and still bounds what a hostile one can make
     * the decode's scheduler thread buffer.
     */
    static final int MAX_REPLY_BYTES = 256 * 1024;

    private final String address;
    private final URI base;
    private final String authorization;
    private final RetryPolicy policy;
    private final HttpClient http;
    /** Whether {@link #close} shuts {@link #http} down (false for one shared by many clients, see {@link #sharing}). */
    private final boolean ownsHttp;

    /** A client with {@link RetryPolicy#defaults()}. */
    public BootstrapClient(String address, String authToken) {
        this(address, authToken, RetryPolicy.defaults());
    }

    /**
     * @param address   "host:port"; IPv6 as "[::1]:8998" (the bare "::1:8998" is read as splitting at
     *                  the last colon); an "http://" prefix is tolerated
     * @param authToken bearer token for the write routes; null sends none (the registry will refuse writes)
     */
    public BootstrapClient(String address, String authToken, RetryPolicy policy) {
        this(address, authToken, policy, httpClient(policy), true);
    }

    private BootstrapClient(String address, String authToken, RetryPolicy policy, HttpClient http, boolean ownsHttp) {
        this.address = Objects.requireNonNull(address, "address");
        this.base = baseUri(address);
        this.policy = Objects.requireNonNull(policy, "policy");
        if (authToken != null && authToken.chars().anyMatch(c -> c < 0x20 || c == 0x7f)) {
            throw new IllegalArgumentException("auth token contains control characters");
        }
        this.authorization = authToken == null || authToken.isBlank() ? null : "Bearer " + authToken.strip();
        this.http = Objects.requireNonNull(http, "http");
        this.ownsHttp = ownsHttp;
    }

    /**
     * The JDK client a {@link BootstrapClient} with {@code policy} makes its requests with. Each one starts
     * a selector thread that lives until it is shut down: a caller that talks to many registries (a decode:
     * one per prefill instance it ever served) shares one through {@link #sharing} and shuts it down itself.
     */
    public static HttpClient httpClient(RetryPolicy policy) {
        return HttpClient.newBuilder()
                .version(HttpClient.Version.HTTP_1_1)
                .connectTimeout(min(policy.requestTimeout(), CONNECT_TIMEOUT))
                .followRedirects(HttpClient.Redirect.NEVER)
                .build();
    }

    /**
     * A client of the registry at {@code address} that makes its requests with {@code http} (made by
     * {@link #httpClient} with the same policy) and leaves it running at {@link #close}: holding one costs
     * no thread.
     */
    public static BootstrapClient sharing(HttpClient http, String address, String authToken, RetryPolicy policy) {
        return new BootstrapClient(address, authToken, policy, http, false);
    }

    /** The address this client was created with. */
    public String address() {
        return address;
    }

    /** The registry's base URI, e.g. {@code http://[::1]:8998}. */
    public URI baseUri() {
        return base;
    }

    /**
     * {@code PUT /route}: announces one prefill rank. Unlike SGLang, which only logs a failed
     * registration, this throws: a rank nobody can find should not look healthy.
     *
     * @throws RegistryException on 400/401 at once, otherwise after the last attempt
     */
    public void registerRank(PrefillRankRegistration reg) {
        Objects.requireNonNull(reg, "reg");
        call("PUT /route", request("/route").PUT(jsonBody(reg)));
    }

    /**
     * {@code GET /route} with all ranks -1: the prefill topology.
     *
     * @throws RegistryNotReadyException when every attempt got 503 (not all prefill ranks registered)
     * @throws RegistryException         for any other failure, including a reply that is not a topology
     */
    public PrefillServerInfo fetchTopology() {
        String body = call("GET /route (topology)", request(routeQuery(-1, -1, -1, -1)).GET());
        PrefillServerInfo info;
        try {
            info = Json.MAPPER.readValue(body, PrefillServerInfo.class);
        } catch (JsonProcessingException e) {
            throw unexpected("GET /route (topology)", body, e);
        }
        if (info.pageSize() < 1 || info.kvCacheDtype() == null) throw unexpected("GET /route (topology)", body, null);
        // The decode's rank mapping loops over these sizes and opens a link per target: refuse what the
        // registry itself would never accept from a prefill rank (Requests) before anyone loops.
        sizeWithin("attn_tp_size", info.attnTpSize(), body);
        sizeWithin("attn_cp_size", info.attnCpSize(), body);
        sizeWithin("dp_size", info.dpSize(), body);
        sizeWithin("pp_size", info.ppSize(), body);
        if (info.totalRanks() > Requests.MAX_TOTAL_RANKS) {
            throw new RegistryException("GET /route (topology) to " + base + " returned dp_size*attn_cp_size*attn_tp_size*pp_size = "
                    + info.totalRanks() + " ranks, over the registry's limit of " + Requests.MAX_TOTAL_RANKS, 200, body);
        }
        return info;
    }

    private void sizeWithin(String field, int size, String body) {
        if (size < 1 || size > Requests.MAX_SIZE) {
            throw new RegistryException("GET /route (topology) to " + base + " returned " + field + " " + size
                    + ", outside the registry's limit [1, " + Requests.MAX_SIZE + "]", 200, body);
        }
    }

    /**
     * {@code GET /route} with concrete ranks: where that prefill rank listens.
     *
     * @throws RegistryNotReadyException when every attempt got 503
     * @throws RegistryException         with status 404 when no rank is registered there
     */
    public RankEndpoint fetchRankEndpoint(int dpRank, int cpRank, int tpRank, int ppRank) {
        String what = "GET /route (dp=" + dpRank + " cp=" + cpRank + " tp=" + tpRank + " pp=" + ppRank + ")";
        String body = call(what, request(routeQuery(dpRank, cpRank, tpRank, ppRank)).GET());
        RankEndpoint ep;
        try {
            ep = Json.MAPPER.readValue(body, RankEndpoint.class);
        } catch (JsonProcessingException e) {
            throw unexpected(what, body, e);
        }
        if (ep.rankIp() == null || ep.rankIp().isBlank() || ep.rankPort() < 1 || ep.rankPort() > 65_535) {
            throw unexpected(what, body, null);
        }
        return ep;
    }

    /** {@code POST /register_dp_rank}: records which DP group serves a room (needs the token). */
    public void registerDpRank(long room, int dpRank) {
        Map<String, Object> body = Map.of("bootstrap_room", room, "dp_rank", dpRank);
        call("POST /register_dp_rank", request("/register_dp_rank").POST(jsonBody(body)));
    }

    /**
     * Records that DP group {@code dpRank} serves every one of {@code rooms} (at most
     * {@link #MAX_ROOMS_PER_REGISTRATION}): one {@code POST /register_dp_rank} in kvferry's batch form
     * ({@code "bootstrap_rooms"}) where the registry takes it, one per room in SGLang's form where it
     * does not. A 500 to the batch is not retried (SGLang's registry fails on the missing
     * {@code "bootstrap_room"} with 500). A refusal that may mean "unknown form" (400, 404, 405, 422,
     * 500) from a registry that does not name {@code bootstrap_rooms} in it is answered by posting the
     * first room alone: if that succeeds the registry lacks the batch form, this client registers room
     * by room from then on and the rest follow; if it fails too, the request itself was bad.
     *
     * @return the rooms that could not be registered, each with why; empty when all were
     */
    public Map<Long, RuntimeException> registerDpRanks(List<Long> rooms, int dpRank) {
        Objects.requireNonNull(rooms, "rooms");
        if (rooms.size() > MAX_ROOMS_PER_REGISTRATION) {
            throw new IllegalArgumentException(rooms.size() + " rooms in one registration; at most " + MAX_ROOMS_PER_REGISTRATION);
        }
        Map<Long, RuntimeException> failed = new HashMap<>();
        int from = 0;
        if (rooms.size() > 1 && batchRegistrations) {
            try {
                call("POST /register_dp_rank", request("/register_dp_rank")
                        .POST(jsonBody(Map.of("bootstrap_rooms", rooms, "dp_rank", dpRank))), false);
                return failed;
            } catch (RegistryException e) {
                // kvferry's registry names the field of a batch it refuses: it knows the form, the request is bad.
                boolean knowsTheForm = e.responseBody() != null && e.responseBody().contains("bootstrap_rooms");
                if (!mayNotKnowTheBatchForm(e.statusCode()) || knowsTheForm) return allFailed(rooms, e);
                try {
                    registerDpRank(rooms.get(0), dpRank);
                } catch (RuntimeException single) {
                    return allFailed(rooms, e); // the single form fails too: the request, not the form, is refused
                }
                batchRegistrations = false;
                log.info("the registry at {} does not take batched dp_rank registrations ({}): registering rooms one by one",
                        base, e.statusCode());
                from = 1;
            }
        }
        for (long room : rooms.subList(from, rooms.size())) {
            try {
                registerDpRank(room, dpRank);
            } catch (RuntimeException e) {
                failed.put(room, e);
            }
        }
        return failed;
    }

    private static Map<Long, RuntimeException> allFailed(List<Long> rooms, RuntimeException why) {
        Map<Long, RuntimeException> out = new HashMap<>();
        for (long room : rooms) out.put(room, why);
        return out;
    }

    /** A refusal a registry without the batch form gives it: SGLang's fails on the missing "bootstrap_room" (500); others do not route it. */
    private static boolean mayNotKnowTheBatchForm(int status) {
        return status == 400 || status == 404 || status == 405 || status == 422 || status == 500;
    }

    /** Rooms one {@link #registerDpRanks} may carry: ~20 KiB of JSON, well inside a registry's 64 KiB body limit. */
    public static final int MAX_ROOMS_PER_REGISTRATION = 1024;

    /** Whether the registry has not refused the batch form of {@code /register_dp_rank} yet; only ever turns false. */
    private volatile boolean batchRegistrations = true;

    /**
     * {@code POST /query_dp_ranks}: the DP groups of those rooms the registry knows (and whose entries
     * have not expired); unknown rooms are simply absent from the result.
     */
    public Map<Long, Integer> queryDpRanks(Collection<Long> rooms) {
        Objects.requireNonNull(rooms, "rooms");
        if (rooms.isEmpty()) return Map.of();
        String body = call("POST /query_dp_ranks",
                request("/query_dp_ranks").POST(jsonBody(Map.of("bootstrap_rooms", rooms))));
        try {
            JsonNode node = Json.MAPPER.readTree(body);
            if (node == null || !node.isObject()) throw unexpected("POST /query_dp_ranks", body, null);
            Map<Long, Integer> out = new HashMap<>();
            for (Map.Entry<String, JsonNode> e : node.properties()) {
                if (!e.getValue().isIntegralNumber() || !e.getValue().canConvertToInt()) {
                    throw unexpected("POST /query_dp_ranks", body, null);
                }
                out.put(Long.parseLong(e.getKey()), e.getValue().intValue());
            }
            return out;
        } catch (JsonProcessingException | NumberFormatException e) {
            throw unexpected("POST /query_dp_ranks", body, e);
        }
    }

    /**
     * {@code GET /health}, once, with short timeouts: for heartbeats, which count failures themselves.
     * Never throws.
     */
    public boolean health() {
        Duration timeout = min(policy.requestTimeout(), HEALTH_TIMEOUT);
        HttpRequest req = HttpRequest.newBuilder(base.resolve("/health")).timeout(timeout).GET().build();
        try {
            return exchange(req, timeout).statusCode() == 200;
        } catch (IOException | RuntimeException e) {
            log.debug("health check of {} failed: {}", address, e.toString());
            return false;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    /** Shuts the HTTP client down, unless it is a shared one ({@link #sharing}), which its owner shuts down. */
    @Override
    public void close() {
        if (ownsHttp) http.shutdownNow();
    }

    // ------------------------------------------------------------------ plumbing

    /** Runs one request under the retry policy and returns the body of its 200 answer. */
    private String call(String what, HttpRequest.Builder builder) {
        return call(what, builder, true);
    }

    /**
     * As {@link #call(String, HttpRequest.Builder)}; {@code retry500} false: a 500 is an answer (a registry
     * that cannot handle the request), not retried; 503/408/429 and transport errors still are.
     */
    private String call(String what, HttpRequest.Builder builder, boolean retry500) {
        HttpRequest req = builder.build();
        int status = RegistryException.NO_RESPONSE;
        String body = null;
        Exception error = null;
        for (int attempt = 1; attempt <= policy.attempts(); attempt++) {
            if (attempt > 1) {
                Duration wait = policy.backoff(attempt - 1, ThreadLocalRandom.current());
                log.debug("{} to {}: attempt {}/{} failed ({}); retrying in {} ms", what, base, attempt - 1,
                        policy.attempts(), outcome(status, body, error), wait.toMillis());
                try {
                    Thread.sleep(wait);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new RegistryException(what + " to " + base + " interrupted", status, body, e);
                }
            }
            try {
                HttpResponse<byte[]> resp = exchange(req, policy.requestTimeout());
                status = resp.statusCode();
                body = new String(resp.body(), StandardCharsets.UTF_8);
                error = null;
                if (status == 200) return body;
                if (!retryable(status) || (status == 500 && !retry500)) {
                    throw new RegistryException(what + " to " + base + " refused: " + outcome(status, body, null)
                            + " (not retried)", status, body);
                }
            } catch (BoundedBody.TooLargeException e) {
                // Not retried: the same registry would send the same reply again.
                throw new RegistryException(what + " to " + base + " refused: " + e.getMessage(), e.status(), null, e);
            } catch (IOException e) {
                status = RegistryException.NO_RESPONSE;
                body = null;
                error = e;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new RegistryException(what + " to " + base + " interrupted", status, body, e);
            }
        }
        String msg = what + " to " + base + " failed after " + policy.attempts() + " attempt"
                + (policy.attempts() == 1 ? "" : "s") + ": " + outcome(status, body, error);
        if (status == 503) {
            // A prefill still registering its ranks: normal while a cluster starts; the caller decides when it is a failure.
            log.info(msg);
            throw new RegistryNotReadyException(msg, body);
        }
        log.warn(msg);
        throw new RegistryException(msg, status, body, error);
    }

    /**
     * One exchange, headers and body, within {@code timeout}. {@link HttpRequest#timeout} bounds only
     * the wait for the headers, so a peer that then drips the body a byte at a time would hold the
     * caller (the decode's scheduler thread) for as long as it likes: the whole exchange waits here
     * instead, and at the deadline it is cancelled, which aborts the connection.
     */
    private HttpResponse<byte[]> exchange(HttpRequest req, Duration timeout) throws IOException, InterruptedException {
        return BoundedBody.send(http, req, MAX_REPLY_BYTES, "a registry reply").await(timeout);
    }

    private static boolean retryable(int status) {
        return status >= 500 || status == 408 || status == 429;
    }

    private static String outcome(int status, String body, Exception error) {
        if (error != null) {
            // HttpClient often wraps the socket error without a message of its own; show the first real one.
            String m = null;
            for (Throwable t = error; t != null && m == null; t = t.getCause()) {
                if (t.getMessage() != null && !t.getMessage().isBlank() && !t.getMessage().equals(String.valueOf(t.getCause()))) {
                    m = t.getMessage();
                }
            }
            if (m == null && error instanceof ConnectException) {
                // No message anywhere: name the root cause's type (a refused connect says "Connection refused").
                Throwable root = error;
                while (root.getCause() != null && root.getCause() != root) root = root.getCause();
                m = root == error ? "connection refused or host unreachable" : "no message; caused by " + root.getClass().getName();
            }
            return error.getClass().getSimpleName() + (m == null ? "" : ": " + m);
        }
        return "HTTP " + status + (body == null || body.isBlank() ? "" : ": " + Requests.clip(body.strip()));
    }

    private RegistryException unexpected(String what, String body, Exception cause) {
        return new RegistryException(what + " to " + base + " returned an unexpected body: "
                + Requests.clip(body), 200, body, cause);
    }

    private HttpRequest.Builder request(String pathAndQuery) {
        HttpRequest.Builder b = HttpRequest.newBuilder(base.resolve(pathAndQuery)).timeout(policy.requestTimeout());
        if (authorization != null) b.header("Authorization", authorization);
        return b;
    }

    private static String routeQuery(int dp, int cp, int tp, int pp) {
        return "/route?prefill_dp_rank=" + dp + "&prefill_cp_rank=" + cp + "&target_tp_rank=" + tp
                + "&target_pp_rank=" + pp;
    }

    private static HttpRequest.BodyPublisher jsonBody(Object value) {
        try {
            return HttpRequest.BodyPublishers.ofByteArray(Json.MAPPER.writeValueAsBytes(value));
        } catch (JsonProcessingException e) {
            throw new IllegalArgumentException("cannot serialise " + value.getClass().getSimpleName(), e);
        }
    }

    private static Duration min(Duration a, Duration b) {
        return a.compareTo(b) <= 0 ? a : b;
    }

    /**
     * Why {@code address} cannot be a registry address ({@code host:port}, {@code [ipv6]:port}, optionally
     * {@code http://}), or null when it can: a request naming such an address cannot be served, however
     * long it is retried.
     */
    public static String addressProblem(String address) {
        if (address == null) return "bootstrap address is null (want host:port)";
        try {
            baseUri(address);
            return null;
        } catch (IllegalArgumentException e) {
            return e.getMessage();
        }
    }

    static URI baseUri(String address) {
        String a = address.strip();
        if (a.regionMatches(true, 0, "http://", 0, 7)) a = a.substring(7);
        while (a.endsWith("/")) a = a.substring(0, a.length() - 1);
        String host;
        String port;
        if (a.startsWith("[")) {
            int close = a.indexOf(']');
            if (close < 0 || close + 1 >= a.length() || a.charAt(close + 1) != ':') {
                throw new IllegalArgumentException("bootstrap address '" + address + "' is not [ipv6]:port");
            }
            host = a.substring(1, close);
            port = a.substring(close + 2);
        } else {
            int colon = a.lastIndexOf(':');
            if (colon < 0) throw new IllegalArgumentException("bootstrap address '" + address + "' has no port (want host:port)");
            host = a.substring(0, colon);
            port = a.substring(colon + 1);
        }
        int p;
        try {
            p = Integer.parseInt(port);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("bootstrap address '" + address + "' has a bad port '" + port + "'");
        }
        if (host.isEmpty()) throw new IllegalArgumentException("bootstrap address '" + address + "' has no host");
        if (p < 1 || p > 65_535) throw new IllegalArgumentException("bootstrap address '" + address + "' has port " + p + " outside [1, 65535]");
        URI uri;
        try {
            uri = new URI("http://" + (host.indexOf(':') >= 0 ? "[" + host + "]" : host) + ":" + p);
        } catch (URISyntaxException e) {
            throw new IllegalArgumentException("bootstrap address '" + address + "' is not a valid host:port: " + e.getMessage(), e);
        }
        if (uri.getHost() == null) {
            throw new IllegalArgumentException("bootstrap address '" + address + "' has a host that is not a valid URI host");
        }
        return uri;
    }
}
