package io.kvferry.engine.http;

import com.fasterxml.jackson.databind.JsonNode;
import io.kvferry.engine.model.OutputConstraint;
import io.kvferry.http.BearerToken;
import io.kvferry.metrics.LogSafe;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.net.ConnectException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpConnectTimeoutException;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.LongSupplier;

/**
 * The router's backends: who they are (one immutable {@link Pool}), whether they serve (the health thread's checks,
 * {@link Probing}), and the HTTP client that calls them (a connect that times out is tried once more; an abort that
 * reached no engine is tried again).
 *
 * <p>State: the pool is one immutable snapshot replaced whole, and only on the health thread, its owner: the
 * {@code /workers} changes ({@link #addIfAbsent}, {@link #remove}) run there as commands, so a change never races a
 * health round; a request reads the snapshot it finds ({@link #pool()}), and one sent to a backend removed meanwhile
 * still ends there. A backend's {@code failedChecks} is the health thread's too (the constructor's before it starts).
 */
final class Backends {
    private static final Logger log = LoggerFactory.getLogger(Router.class); // the router's log, as before the split


    /** The largest /health answer read from a backend (an engine's is a few hundred bytes). */
    static final int MAX_HEALTH_BYTES = 64 << 10;

    /**
     * The backends requests go to, as one immutable snapshot replaced whole. Only the health thread replaces
     * it (the {@code /workers} changes run there as commands), so a change never races a health round;
     * a request reads the snapshot it finds, and one sent to a backend removed meanwhile still ends there.
     */
    private volatile Pool pool;
    private final Probing probing;
    /** The cluster token: sent with every call to an engine; null for none. */
    private final BearerToken clusterToken;
    private final RouterMeters meters;
    private final HttpClient client;
    private final ScheduledExecutorService health;

    /** Checks each of {@code first} once, then starts the health thread, which checks them all every {@link Probing#every}. */
    Backends(Pool first, Probing probing, BearerToken clusterToken, RouterMeters meters) {
        this.pool = first;
        this.probing = probing;
        this.clusterToken = clusterToken;
        this.meters = meters;
        client = HttpClient.newBuilder().connectTimeout(probing.connectTimeout()).executor(Executors.newVirtualThreadPerTaskExecutor()).build();
        first.all().forEach(this::check);
        health = Executors.newSingleThreadScheduledExecutor(r -> Thread.ofPlatform().daemon().name("kvferry-router-health").unstarted(r));
        health.scheduleWithFixedDelay(() -> pool.all().forEach(this::check),
                probing.every().toMillis(), probing.every().toMillis(), TimeUnit.MILLISECONDS);
    }

    /**
     * How long a backend added at run time must have been out of rotation (failing its health checks, or its /health answering
     * not 200) before an add to a full router ({@code --max-backends}) replaces it (one of the command line never is): 30 s, thirty rounds of checks at the default second and
     * ten times the 3 s a backend takes to be marked down, so a backend that restarts (a JVM is up in a few seconds) or a
     * blip of the network never loses its place, while an engine that was SIGKILLed and never came back does, to the
     * replacement that registers in a rolling update. Not a flag: a router at its limit is rare, and DELETE /workers stays.
     */
    static final Duration REPLACE_AFTER = Duration.ofSeconds(30);

    /** The router's clock for {@link #REPLACE_AFTER} (nanoseconds, as {@link System#nanoTime}); tests move it on. */
    volatile LongSupplier clock = System::nanoTime;

    /** One health check, then where it leaves the backend: in rotation, or out of it since when. */
    private void check(Backend b) {
        checkHealth(b);
        b.rotation(clock.getAsLong());
    }

    /**
     * Of {@code pool}'s backends in {@code prefill}'s role added at run time, the one out of rotation the longest, if that is
     * at least {@link #REPLACE_AFTER}; else null. One given on the command line ({@link Backend#fromCommandLine}) is the
     * router's configuration and never replaced: nothing would add it back (an engine added by registration re-asserts
     * itself every few seconds; a URL of the flags does not), so one that took over 30 s to boot, or was down for
     * maintenance, was lost for good.
     */
    Backend replaceable(Pool in, boolean prefill) {
        long now = clock.getAsLong();
        Backend oldest = null;
        for (Backend b : prefill ? in.prefills() : in.decodes()) {
            if (b.fromCommandLine || !b.outOfRotation || b.serves() || now - b.outSinceNanos < REPLACE_AFTER.toNanos()) continue;
            if (oldest == null || b.outSinceNanos - oldest.outSinceNanos < 0) oldest = b;
        }
        return oldest;
    }

    /**
     * How long {@code b} has been out of rotation (ms, on {@link #clock}), as the health thread recorded it
     * ({@link Backend#rotation}): what {@link #replaceable} compares with {@link #REPLACE_AFTER}; null while it serves, or
     * before a health check found it out (a request that found it refused takes it out at once, its check follows).
     */
    Long outOfRotationMillis(Backend b) {
        if (b.serves() || !b.outOfRotation) return null;
        return Math.max(TimeUnit.NANOSECONDS.toMillis(clock.getAsLong() - b.outSinceNanos), 0);
    }

    /** The backends now: the snapshot a request picks from. */
    Pool pool() {
        return pool;
    }

    /** Runs {@code task} on the health thread every {@code millis} (the stalled decode streams' sweep). */
    void every(Runnable task, long millis) {
        health.scheduleWithFixedDelay(task, millis, millis, TimeUnit.MILLISECONDS);
    }


    /**
     * One health check. It passes on a 200 (a prefill's also names its registry). A refused connection
     * (nothing listens) or an answer other than 200 (an engine whose scheduler died answers 503) takes
     * the backend out of rotation at once; a check that times out or is cut off counts, and only
     * {@link Probing#failuresToMarkDown} of them in a row do: a server busy with a burst may answer one
     * check late and still be serving.
     */
    private void checkHealth(Backend b) {
        String failure;
        try {
            HttpResponse<String> r = probe(b);
            if (r.statusCode() == 200) {
                JsonNode health = Http.JSON.readTree(r.body());
                String wrongRole = roleMismatch(b, health);
                if (wrongRole != null) {
                    b.failedChecks++;
                    b.checked(wrongRole);
                    if (b.healthy) log.warn("{} is out of rotation: {}", b, wrongRole);
                    b.healthy = false;
                    return;
                }
                if (b.prefill) b.bootstrap = health.path("bootstrap").asText(null);
                if (!b.healthy) log.warn("{} is healthy again", b);
                b.failedChecks = 0;
                b.unreachable = null;
                b.healthy = true;
                b.checked("ok");
                return;
            }
            b.failedChecks++;
            b.checked("HTTP " + r.statusCode());
            if (b.healthy) log.warn("{} is unhealthy: HTTP {}", b, r.statusCode());
            b.healthy = false;
            return;
        } catch (IOException e) {
            if (isConnectionRefused(e)) {
                b.failedChecks++;
                b.checked("connection refused: " + e);
                markUnreachable(b, e);
                return;
            }
            failure = e.toString();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return;
        }
        b.failedChecks++;
        b.checked(failure);
        if (!b.healthy) return;
        if (b.failedChecks >= probing.failuresToMarkDown()) {
            log.warn("{} is unhealthy: {} health checks failed in a row, the last: {}", b, b.failedChecks, failure);
            b.unreachable = b.failedChecks + " health checks in a row got no answer (the last: " + failure + ")";
            b.healthy = false;
            // Its calls under way would wait for answers that cannot come: with the router cut off from a prefill
            // that its decodes still reach, each request's decode waited for KV until its waiting timeout (300 s),
            // holding its pages, while sending keep-alives. Failing the call aborts the room on the decode.
            if (b.prefill && !b.calls.isEmpty()) {
                log.warn("{}: failing its {} request(s) in flight", b, b.calls.size());
                for (CompletableFuture<?> call : b.calls) call.cancel(true);
            }
        } else {
            log.info("{} failed a health check ({} of {} in a row take it out of rotation): {}", b, b.failedChecks,
                    probing.failuresToMarkDown(), failure);
        }
    }

    /**
     * One /health exchange, headers and body, within the probe timeout: {@link HttpRequest#timeout} bounds
     * only the wait for the headers, so a backend that then stalled mid-body held the one health thread, and
     * with it every backend's checks, for as long as it kept the connection open. Its body is capped too.
     *
     * @throws HttpTimeoutException when the whole answer did not come within the probe timeout (it is cancelled)
     */
    private HttpResponse<String> probe(Backend b) throws IOException, InterruptedException {
        HttpRequest.Builder rb = HttpRequest.newBuilder(b.url.resolve("/health")).timeout(probing.probeTimeout());
        if (clusterToken != null) rb.header("Authorization", clusterToken.header()); // not needed there; harmless
        HttpRequest req = rb.GET().build();
        CompletableFuture<HttpResponse<String>> call = client.sendAsync(req,
                HttpResponse.BodyHandlers.limiting(HttpResponse.BodyHandlers.ofString(), MAX_HEALTH_BYTES));
        try {
            return call.get(probing.probeTimeout().toNanos(), TimeUnit.NANOSECONDS);
        } catch (TimeoutException e) {
            call.cancel(true); // aborts the exchange: its connection is closed
            throw new HttpTimeoutException("no complete health answer (headers and body) within " + probing.probeTimeout().toMillis() + " ms");
        } catch (InterruptedException e) {
            call.cancel(true);
            throw e;
        } catch (ExecutionException e) {
            if (e.getCause() instanceof IOException io) throw io;
            throw new IOException(e.getCause());
        }
    }

    static Backend pick(List<Backend> all, String role) throws Failure {
        Backend best = null;
        for (Backend b : all) {
            if (b.serves() && (best == null || b.inFlight.get() < best.inFlight.get())) best = b;
        }
        if (best == null) throw new Failure(503, "service_unavailable", "no healthy " + role + " instance (" + all + ")");
        return best;
    }

    static void markUnreachable(Backend b, Throwable e) {
        if (b.healthy) log.warn("{} is unreachable: {}", b, e.toString());
        b.healthy = false;
    }

    /**
     * Whether a failed call means nothing listens at the backend: its connection was refused (then it
     * gets no new requests until its health check passes). A connect that timed out is not that: a
     * server whose accept queue a burst filled drops connects it would take a moment later. A failure of
     * one exchange (a reset, a timeout, a bad answer) says nothing about the backend either, often only
     * about that request: the health checks decide those.
     */
    static boolean isConnectionRefused(Throwable e) {
        boolean refused = false;
        for (Throwable c = e; c != null; c = c.getCause()) {
            // The JDK's HttpConnectTimeoutException has a ConnectException("HTTP connect timed out") as its cause.
            if (c instanceof HttpTimeoutException || isTimedOutConnect(c)) return false;
            if (c instanceof ConnectException) refused = true;
        }
        return refused;
    }

    /** Whether a failed call is a connect that timed out: nothing was sent, so the call may be repeated. */
    static boolean isConnectTimeout(Throwable e) {
        for (Throwable c = e; c != null; c = c.getCause()) {
            if (c instanceof HttpConnectTimeoutException || isTimedOutConnect(c)) return true;
        }
        return false;
    }

    private static boolean isTimedOutConnect(Throwable c) {
        return c instanceof ConnectException && c.getMessage() != null && c.getMessage().contains("timed out");
    }

    /**
     * Sends a request to a backend; a connect that times out is tried once more (it sent nothing) before
     * the call fails: a backend a burst has just swamped may accept a moment later.
     */
    <T> CompletableFuture<HttpResponse<T>> sendAsync(HttpRequest req, HttpResponse.BodyHandler<T> handler) {
        return client.sendAsync(req, handler).exceptionallyCompose(e -> {
            Throwable cause = e instanceof CompletionException && e.getCause() != null ? e.getCause() : e;
            if (!isConnectTimeout(cause)) return CompletableFuture.failedFuture(cause);
            log.info("connect to {} timed out; trying once more", req.uri());
            return client.sendAsync(req, handler);
        });
    }

    /** {@link #sendAsync}, waited for. */
    <T> HttpResponse<T> send(HttpRequest req, HttpResponse.BodyHandler<T> handler) throws IOException, InterruptedException {
        try {
            return client.send(req, handler);
        } catch (IOException e) {
            if (!isConnectTimeout(e)) throw e;
            log.info("connect to {} timed out; trying once more", req.uri());
            return client.send(req, handler);
        }
    }

    /**
     * @param headersWithin the limit on the answer's status line and headers (not its body); null for none
     * @param requestId the request's id ({@link RequestId}), sent as {@code X-Request-Id}; null: none
     * @param client whom the request is for ({@link Router.RequestRecord#client}), sent as {@link StructuredOutputs#CLIENT_HEADER}: the
     *               engine's compiler queues it by that, not by the router's address; null (or {@link OutputConstraint.Compiler#ANYONE}): none
     */
    HttpRequest post(Backend b, String path, JsonNode body, Duration headersWithin, String client, String requestId) throws IOException {
        HttpRequest.Builder r = HttpRequest.newBuilder(b.url.resolve(path)).header("Content-Type", "application/json");
        if (requestId != null) r.header(RequestId.HEADER, requestId); // the engine's log lines about the request name it
        if (clusterToken != null) r.header("Authorization", clusterToken.header());
        // Believed by the engine only on a request with the cluster token (StructuredOutputs#forwardedClient).
        if (client != null && !OutputConstraint.Compiler.ANYONE.equals(client)) r.header(StructuredOutputs.CLIENT_HEADER, client);
        if (headersWithin != null) r.timeout(headersWithin);
        return r.POST(HttpRequest.BodyPublishers.ofByteArray(Http.JSON.writeValueAsBytes(body))).build();
    }

    /**
     * How long an abort that reached no engine (no answer: a partition, a blackholed link, a backend
     * restarting) is tried again, {@link #ABORT_RETRY_PAUSE_MILLIS} after each failed try (a try that meets
     * a silent link takes the connect timeout, 10 s). Sent once, a lost abort left the room to its engine's
     * own timeout: a prefill room whose decode never came stayed Bootstrapping for 300 s, holding its
     * request slot, after a 30 s blackhole between the router and the prefill.
     */
    static final long ABORT_RETRY_WINDOW_MILLIS = 60_000;
    static final long ABORT_RETRY_PAUSE_MILLIS = 1_000;

    /** Aborts {@code room} on {@code b}, naming the request the calling thread serves ({@link RequestId#CURRENT}) if it is bound. */
    void abort(Backend b, long room) {
        abort(b, room, RequestId.CURRENT.isBound() ? RequestId.CURRENT.get() : null); // orElse takes no null
    }

    /** As {@link #abort(Backend, long)}, naming {@code requestId} (null: none) in the abort's {@code X-Request-Id}. */
    void abort(Backend b, long room, String requestId) {
        abort(b, room, requestId, System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ABORT_RETRY_WINDOW_MILLIS));
    }

    /** Any answer means the engine has the abort (an unknown room is remembered there); no answer is tried again until {@code deadline}. */
    private void abort(Backend b, long room, String requestId, long deadline) {
        try {
            client.sendAsync(post(b, "/abort", Http.JSON.createObjectNode().put("bootstrap_room", room), null, null, requestId),
                            HttpResponse.BodyHandlers.discarding())
                    .whenComplete((answer, failed) -> {
                        if (failed == null || System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ABORT_RETRY_PAUSE_MILLIS) > deadline) return;
                        try {
                            health.schedule(() -> abort(b, room, requestId, deadline), ABORT_RETRY_PAUSE_MILLIS, TimeUnit.MILLISECONDS);
                        } catch (RejectedExecutionException closed) {
                            // the router is closing
                        }
                    });
        } catch (IOException | RuntimeException ignored) {
            // best effort (a closed client refuses the call): the room's own timeouts end it otherwise
        }
    }

    /**
     * Why a backend whose /health names its role (kvferry's engines do) is not the role it is listed in, or null: a prefill
     * added as a decode was sent decode calls, and each request's second choice met "bootstrap_room … is already in flight
     * on this prefill".
     */
    static String roleMismatch(Backend b, JsonNode health) {
        String role = health.path("role").asText(null), listed = b.prefill ? "prefill" : "decode";
        // The role is the backend's text: escaped before it reaches the log, the status page and the /workers refusal.
        return role == null || role.equals(listed) ? null : "its /health says it is a " + LogSafe.text(role) + " engine, listed as a " + listed;
    }

    /**
     * One health check of a backend before it joins: null when it answered 200 (a prefill naming its bootstrap
     * registry, which the decodes need), else why not.
     */
    String firstCheck(Backend b) throws InterruptedException {
        try {
            HttpResponse<String> r = probe(b);
            if (r.statusCode() != 200) return "its /health answered HTTP " + r.statusCode();
            JsonNode health = Http.JSON.readTree(r.body());
            String wrongRole = roleMismatch(b, health);
            if (wrongRole != null) return wrongRole;
            if (b.prefill) {
                b.bootstrap = health.path("bootstrap").asText(null);
                if (b.bootstrap == null) return "its /health names no bootstrap registry: is it a prefill?";
            }
            b.checked("ok"); // before it joins: nobody else reads it yet
            return null;
        } catch (IOException e) {
            return "its /health failed: " + e;
        }
    }

    /** What an add did: the backend of its URL and role held already ({@code clash}: nothing changed), or the one it replaced (null: none). */
    record Added(Backend clash, Backend replaced) {
    }

    /**
     * Adds {@code b} to the pool, on the health thread, unless a backend of its URL and role is there already (then that
     * one is the answer's {@code clash} and nothing changes). Where the pool holds {@code max} backends already, {@code b}
     * takes the place of the backend of its role added at run time out of rotation the longest, if that is
     * {@link #REPLACE_AFTER} at least ({@link #replaceable}; logged at WARN); else {@link Full}.
     */
    Added addIfAbsent(Backend b, int max) throws Exception {
        return onHealthThread(() -> {
            Backend other = pool.find(b.url, b.prefill);
            if (other != null) return new Added(other, null);
            Backend out = null;
            if (pool.all().size() >= max) {
                out = replaceable(pool, b.prefill);
                if (out == null) throw new Full();
                log.warn("{} replaces {}, out of rotation for {} s ({}): the router holds its limit of {} backends (--max-backends); "
                                + "its {} request(s) in flight end there", b, out, TimeUnit.NANOSECONDS.toSeconds(clock.getAsLong() - out.outSinceNanos),
                        out.lastCheck == null ? "no health check yet" : out.lastCheck.result(), max, out.inFlight.get());
                pool = pool.without(out);
                meters.forget(out);
            }
            pool = pool.with(b);
            meters.backend(b);
            return new Added(null, out);
        });
    }

    /**
     * The backends at {@code u} ({@code type}: "prefill", "decode" or null for either), on the health thread; removed from
     * the pool when exactly one is named.
     */
    List<Backend> remove(URI u, String type) throws Exception {
        return onHealthThread(() -> { // removed only when the URL (and type) names one
            List<Backend> named = pool.all().stream().filter(b -> b.url.equals(u) && (type == null || b.prefill == type.equals("prefill"))).toList();
            if (named.size() == 1) {
                pool = pool.without(named.getFirst());
                meters.forget(named.getFirst());
            }
            return named;
        });
    }


    /** Runs a change of the pool on the health thread, its owner, and waits for it. */
    private <T> T onHealthThread(Callable<T> change) throws Exception {
        try {
            return health.submit(change).get();
        } catch (RejectedExecutionException e) {
            throw new Failure(503, "service_unavailable", "the router is shutting down");
        } catch (ExecutionException e) {
            throw e.getCause() instanceof Exception c ? c : e;
        }
    }

    /** Stops the health thread and cuts the calls still in flight. */
    void close() {
        health.shutdownNow();
        // Not close(): it waits for every call in flight, and a hung backend would hold SIGTERM forever.
        client.shutdownNow();
        try {
            if (!client.awaitTermination(Duration.ofSeconds(5))) log.warn("router: backend calls still in flight after close");
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** {@link #addIfAbsent}'s refusal: the pool holds its most backends already ({@code --max-backends}). */
    static final class Full extends Exception {
        Full() {
            super(null, null, false, false);
        }
    }
}
