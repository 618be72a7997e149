package io.kvferry.engine.serve;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvferry.engine.http.Router;
import io.kvferry.http.BearerToken;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.net.ConnectException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.EnumSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * An engine role's entry in a router's backends ({@code serve --register-with}): it adds itself through the
 * router's {@code POST /workers} once it serves, and takes itself out ({@code DELETE /workers}) when it stops,
 * before its servers close, so the router sends it nothing new while it drains.
 *
 * <p>The first registration is tried at once, then on the re-assertions' schedule (below) until the router takes the
 * engine: a router not up yet (an engine started before it), one answering 5xx (or 408, 429), and a full one (403 with code
 * {@code max_backends}, its {@code --max-backends}: in a rolling update the new engine can register a moment before the old
 * one leaves, and the room it waits for comes then) are each tried again at every tick, with no end, one WARN for each of
 * those three kinds of failure met (not for each try: a long outage whose cause changes, a router answering 503 while it
 * starts and then full, names what the engine waits for now) and one INFO when the router takes it. Before, those attempts ended after 60 s, and an engine whose router came up
 * later, or stayed full longer, was never in it. A refusal that a retry cannot change (any other 4xx: a wrong token, a URL
 * the router calls bad, a router without {@code /workers}) ends the attempts at once, with an ERROR. A router that has the
 * URL in that role already (409: the engine restarted, or the router's flags name it) counts as taking it. Either way the
 * engine serves on; {@link #registered()} completes with the outcome.
 *
 * <p>Once in, the engine re-asserts its entry every {@code reassertEvery} (default {@link #DEFAULT_REASSERT_EVERY}, each
 * wait drawn within &plusmn;20% of it so engines started together do not call in step), the same {@code POST /workers}:
 * a router that restarted (a new pod, a crash) forgot every registered engine, and one that replaced this engine (a
 * full router replaces a backend out of rotation for 30 s: a partitioned engine) does not take it back by itself. A 409
 * (it has it) is the normal answer and silent; a 200 means the router had lost it (one INFO line); a router unreachable
 * or answering 5xx (or 408, 429) is tried again at the next tick, with one WARN when that starts and one INFO when it
 * answers again; a full router (403 {@code max_backends}) is tried at each tick, logged once; any other 4xx (a wrong
 * token, a URL refused) ends the re-assertions with an ERROR, as configuration that a retry cannot fix.
 *
 * <p>One virtual thread makes the attempts, then the re-assertions; close() stops it and waits for it, a re-assertion in
 * flight let end first (up to {@link #FINISH_WITHIN}), so no addition can land after the removal.
 */
public final class WorkerRegistration implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(WorkerRegistration.class);
    private static final ObjectMapper JSON = new ObjectMapper();
    /** One call's limit: the router checks the engine's health before it answers (2 s at most there). */
    static final Duration CALL_TIMEOUT = Duration.ofSeconds(10);
    /**
     * How often a registered engine re-asserts its entry: 5 s, so a router restarted (or one that dropped the engine)
     * serves with it again within some 5 s of answering, a few of the router's own health rounds (1 s, 3 s to mark a
     * backend down). The router answers the usual 409 from its pool's snapshot (a volatile read and a scan of its
     * backends, no lock, not on its health thread): 256 engines at 5 s are some 51 small requests a second, against the
     * 256 health checks a second the router makes of them anyway.
     */
    public static final Duration DEFAULT_REASSERT_EVERY = Duration.ofSeconds(5);
    /** The bounds of {@code serve --register-interval-s}: under a second is a load for nothing, over 5 minutes an outage. */
    public static final long MIN_REASSERT_S = 1;
    public static final long MAX_REASSERT_S = 300;

    /** What one re-assertion found ({@link #reassertNow}). */
    public enum Reassertion {
        /** 409: the router has this engine (the usual answer). */
        HELD,
        /** 200: the router had lost this engine (restarted, or it removed or replaced it) and took it again. */
        RE_REGISTERED,
        /** No answer, or a 5xx (408, 429): tried again at the next tick. */
        FAILING,
        /** 403 {@code max_backends}: the router is full; tried again at the next tick. */
        FULL,
        /** Any other 4xx: the re-assertions end (configuration a retry cannot fix). */
        STOPPED
    }

    private final URI workers;
    private final String selfUrl;
    private final String workerType;
    private final String authorization;
    private final HttpClient client = HttpClient.newBuilder().connectTimeout(CALL_TIMEOUT).build();
    private final CompletableFuture<Void> registered = new CompletableFuture<>();
    private final Duration reassertEvery;
    private final ObjectNode body;
    private final Thread attempts;
    /** Guards {@link #asked} and {@link #ended}; {@link #tickAsked} wakes the re-assertions for {@link #reassertNow}. */
    private final ReentrantLock tick = new ReentrantLock();
    private final Condition tickAsked = tick.newCondition();
    /** Signalled when a POST ends ({@link #posting} false), which close() waits for. */
    private final Condition postEnded = tick.newCondition();
    /** A re-assertion asked for now ({@link #reassertNow}), completed with what it found; null: none. */
    private CompletableFuture<Reassertion> asked;
    /** Why there are no re-assertions (any more), null while they run or before they start. */
    private String ended;
    /** close() was called: no re-assertion starts from now on. */
    private boolean closing;
    /** A re-assertion's POST is in flight: close() lets it end (up to {@link #FINISH_WITHIN}) rather than cut it. */
    private boolean posting;
    /**
     * How long close() waits for a re-assertion in flight before it cuts it: cut, its POST may still reach the router and
     * re-add the engine after the DELETE that follows; waited for, the DELETE comes after it. As long as the DELETE's own limit.
     */
    static final Duration FINISH_WITHIN = Duration.ofSeconds(3);

    /**
     * Starts the attempts, which go on every {@link #DEFAULT_REASSERT_EVERY} until the router takes the engine; once in,
     * the entry is re-asserted as often.
     *
     * @param router     the router's base URL, e.g. {@code http://10.0.0.9:8000}
     * @param selfUrl    this engine's URL as the router must reach it
     * @param workerType {@code prefill} or {@code decode}
     * @param token      the cluster token, which the router's {@code /workers} changes need
     */
    public WorkerRegistration(URI router, String selfUrl, String workerType, String token) {
        this(router, selfUrl, workerType, token, DEFAULT_REASSERT_EVERY);
    }

    /**
     * Starts the attempts, which go on every {@code reassertEvery} (&plusmn;20%) until the router takes the engine; once in,
     * the entry is re-asserted as often.
     *
     * @param router        the router's base URL, e.g. {@code http://10.0.0.9:8000}
     * @param selfUrl       this engine's URL as the router must reach it
     * @param workerType    {@code prefill} or {@code decode}
     * @param token         the cluster token, which the router's {@code /workers} changes need
     * @param reassertEvery how often the engine tries until the router takes it, and re-asserts its entry once in (positive)
     */
    public WorkerRegistration(URI router, String selfUrl, String workerType, String token, Duration reassertEvery) {
        if (reassertEvery.isNegative() || reassertEvery.isZero()) throw new IllegalArgumentException("reassertEvery must be positive: " + reassertEvery);
        this.workers = router.resolve("/workers");
        this.selfUrl = selfUrl;
        this.workerType = workerType;
        this.reassertEvery = reassertEvery;
        this.body = JSON.createObjectNode().put("url", selfUrl).put("worker_type", workerType);
        BearerToken auth = BearerToken.of(token);
        if (auth == null) throw new IllegalArgumentException("registering with a router needs the cluster token");
        this.authorization = auth.header();
        this.attempts = Thread.ofVirtual().name("kvferry-worker-registration").start(() -> {
            try {
                if (attempt()) reassertions();
                else end("never registered: " + registered.exceptionNow().getMessage());
            } finally {
                end("closed");
            }
        });
    }

    /** This engine's URL as the router is given it. */
    public String selfUrl() {
        return selfUrl;
    }

    /** Completes once the router has this engine; completes exceptionally, naming why, when the attempts end without. */
    public CompletableFuture<Void> registered() {
        return registered;
    }

    /** What a first registration's failed try found, each kind logged at WARN once ({@link #attempt}). */
    private enum FirstFailure {
        /** No answer: a router not up yet, or unreachable. */
        UNREACHABLE,
        /** A 5xx, 408 or 429. */
        FAILING,
        /** 403 {@code max_backends}. */
        FULL
    }

    /**
     * The first registration: whether the router took the engine ({@link #registered} completes either way). Tried at once,
     * then at each tick ({@link #nextTick}) until the router takes it, or refuses it with a 4xx a retry cannot change.
     */
    private boolean attempt() {
        String failing = null; // the last failure, once its line was logged
        // The kinds of failure logged at WARN so far: one line for each (not each try), so a long outage whose cause changes
        // (a router that starts answering 503, then is full) names what the engine waits for now.
        EnumSet<FirstFailure> warned = EnumSet.noneOf(FirstFailure.class);
        int tries = 0;
        while (true) {
            String last;
            FirstFailure kind;
            try {
                if (tries > 0) nextTick(false);
                tries++;
                HttpResponse<String> r = postUnlessClosing(tries > 1);
                if (r.statusCode() == 200 || r.statusCode() == 409) { // 409: it has this URL in this role already (a restart, or its flags)
                    log.info("registered with the router at {} as {} {}{}{}", workers, workerType, selfUrl,
                            r.statusCode() == 409 ? " (it had it already)" : "", tries == 1 ? "" : " (try " + tries + ")");
                    registered.complete(null);
                    return true;
                }
                last = "HTTP " + r.statusCode() + ": " + r.body();
                kind = FirstFailure.FAILING;
                if (isFull(r)) {
                    last = "it is full (403 max_backends, its --max-backends): " + last;
                    kind = FirstFailure.FULL;
                } else if (r.statusCode() < 500 && r.statusCode() != 408 && r.statusCode() != 429) {
                    log.error("not registered with the router at {} as {} {}: {}; the configuration is wrong (the token, the URL), this engine "
                            + "serves on, and the router must be given it otherwise (--prefill/--decode, or POST /workers)", workers, workerType, selfUrl, last);
                    registered.completeExceptionally(new IllegalStateException("the router at " + workers + " did not take " + workerType + " "
                            + selfUrl + ": " + last));
                    return false;
                }
            } catch (IOException e) {
                last = e.toString();
                kind = FirstFailure.UNREACHABLE;
            } catch (InterruptedException e) {
                registered.completeExceptionally(new IllegalStateException("stopped before the router at " + workers + " took it"
                        + (failing == null ? "" : " (the last try: " + failing + ")")));
                return false;
            }
            if (warned.add(kind)) {
                log.warn("the router at {} did not take {} {} yet ({}); trying again every ~{} s until it does (a line says when), as long as "
                                + "this engine serves: a router not up yet, answering 5xx, or full (a backend that leaves, or one of this role added at run time out of "
                                + "rotation for 30 s that it replaces, makes room)", workers, workerType, selfUrl, last, Math.max(1, reassertEvery.toSeconds()));
            } else {
                log.debug("the router at {} did not take {} {} yet ({})", workers, workerType, selfUrl, last);
            }
            failing = last;
        }
    }

    private HttpResponse<String> post() throws IOException, InterruptedException {
        return client.send(HttpRequest.newBuilder(workers).timeout(CALL_TIMEOUT).header("Authorization", authorization)
                .POST(HttpRequest.BodyPublishers.ofString(body.toString())).build(), HttpResponse.BodyHandlers.ofString());
    }

    /**
     * Re-asserts this engine's entry now, without waiting for the next tick (tests; the ticks go on as before): the
     * future completes with what the router answered. It fails when there are no re-assertions: before the first
     * registration it waits for it; after one that failed, after a 4xx ended them, or after close, it fails at once.
     */
    public CompletableFuture<Reassertion> reassertNow() {
        tick.lock();
        try {
            if (ended != null) return CompletableFuture.failedFuture(new IllegalStateException("no re-assertions: " + ended));
            if (asked == null) asked = new CompletableFuture<>();
            tickAsked.signal();
            return asked;
        } finally {
            tick.unlock();
        }
    }

    /** No re-assertions from now on ({@code why}, unless one was given already); one asked for fails naming it. */
    private void end(String why) {
        tick.lock();
        try {
            if (ended == null) ended = why;
            if (asked != null) asked.completeExceptionally(new IllegalStateException("no re-assertions: " + ended));
            asked = null;
        } finally {
            tick.unlock();
        }
    }

    /**
     * Waits for the next tick ({@link #reassertEvery}, &plusmn;20%) or, with {@code take}, a {@link #reassertNow}; that one's
     * future, or null. Without {@code take} (the first registration's retries) a re-assertion asked for is left for the
     * re-assertions, which begin once the router has the engine.
     */
    private CompletableFuture<Reassertion> nextTick(boolean take) throws InterruptedException {
        long every = reassertEvery.toNanos();
        long left = ThreadLocalRandom.current().nextLong(every - every / 5, every + every / 5 + 1);
        tick.lock();
        try {
            while ((!take || asked == null) && left > 0 && !closing) left = tickAsked.awaitNanos(left);
            if (closing) throw new InterruptedException("closed");
            if (!take) return null;
            CompletableFuture<Reassertion> now = asked;
            asked = null;
            return now;
        } finally {
            tick.unlock();
        }
    }

    /** {@link #post} (once more: {@link #postOnceMore}), which close() lets end; not begun once close() was called. */
    private HttpResponse<String> postUnlessClosing(boolean onceMore) throws IOException, InterruptedException {
        tick.lock();
        try {
            if (closing) throw new InterruptedException("closed");
            posting = true;
        } finally {
            tick.unlock();
        }
        try {
            return onceMore ? postOnceMore() : post();
        } finally {
            posted();
        }
    }

    /** The POST has ended: close() may go on. */
    private void posted() {
        tick.lock();
        try {
            posting = false;
            postEnded.signalAll();
        } finally {
            tick.unlock();
        }
    }

    /** The re-assertions, one a tick, until close (an interrupt) or a refusal a retry cannot change. */
    private void reassertions() {
        boolean failing = false, fullLogged = false;
        while (true) {
            CompletableFuture<Reassertion> now = null;
            try {
                now = nextTick(true);
                HttpResponse<String> r;
                String failure = null;
                try {
                    r = postUnlessClosing(true);
                } catch (IOException e) {
                    r = null;
                    failure = e.toString();
                }
                int status = r == null ? 0 : r.statusCode();
                Reassertion found;
                if (status == 409) {
                    found = Reassertion.HELD;
                } else if (status == 200) {
                    found = Reassertion.RE_REGISTERED;
                    log.info("re-registered with the router at {} as {} {} (it had forgotten this engine)", workers, workerType, selfUrl);
                } else if (r != null && isFull(r)) {
                    found = Reassertion.FULL;
                    if (!fullLogged) {
                        fullLogged = true;
                        log.warn("the router at {} no longer has {} {} and is full (403 max_backends, its --max-backends); trying again every "
                                + "~{} s, until a backend leaves or one of its role added at run time has been out of rotation for 30 s", workers, workerType, selfUrl,
                                reassertEvery.toSeconds());
                    }
                } else if (r == null || status >= 500 || status == 408 || status == 429) {
                    found = Reassertion.FAILING;
                    if (failure == null) failure = "HTTP " + status + ": " + r.body();
                    if (!failing) {
                        log.warn("re-asserting {} {} with the router at {} fails ({}); trying again every ~{} s (a line says when it answers again)",
                                workerType, selfUrl, workers, failure, reassertEvery.toSeconds());
                    } else {
                        log.debug("re-asserting {} {} with the router at {} still fails: {}", workerType, selfUrl, workers, failure);
                    }
                } else {
                    log.error("stopped re-asserting {} {} with the router at {}: HTTP {}: {}; the configuration is wrong (the token, the URL), "
                            + "and the router must be given this engine otherwise (--prefill/--decode, or POST /workers)", workerType, selfUrl,
                            workers, status, r.body());
                    end("the router at " + workers + " refused it: HTTP " + status);
                    if (now != null) now.complete(Reassertion.STOPPED);
                    return;
                }
                if (failing && found != Reassertion.FAILING && found != Reassertion.RE_REGISTERED) {
                    log.info("the router at {} answers again ({})", workers, found == Reassertion.HELD ? "it has " + workerType + " " + selfUrl : "full");
                }
                failing = found == Reassertion.FAILING;
                if (found == Reassertion.HELD || found == Reassertion.RE_REGISTERED) fullLogged = false;
                if (now != null) now.complete(found);
            } catch (InterruptedException e) {
                end("closed");
                if (now != null) now.completeExceptionally(new IllegalStateException("no re-assertions: closed"));
                return;
            }
        }
    }

    /**
     * {@link #post}, and once more at once if it got no answer on a connection that was made: a pooled connection the
     * router closed (it restarted) fails the first try, and adding what the router has is a 409, so a second is harmless.
     * A connect that failed or timed out is not tried again: nothing listens, or answers, there now.
     */
    private HttpResponse<String> postOnceMore() throws IOException, InterruptedException {
        try {
            return post();
        } catch (IOException e) {
            for (Throwable c = e; c != null; c = c.getCause()) {
                if (c instanceof ConnectException || c instanceof HttpTimeoutException) throw e;
            }
            return post();
        }
    }

    /** A 403 whose error code is {@code max_backends}: the router holds its {@code --max-backends}, a room that can come. */
    private static boolean isFull(HttpResponse<String> r) {
        if (r.statusCode() != 403) return false;
        try {
            return Router.BACKENDS_FULL_CODE.equals(JSON.readTree(r.body()).path("error").path("code").asText(null));
        } catch (IOException | RuntimeException e) {
            return false; // not the router's JSON error: a plain refusal
        }
    }

    /**
     * Stops the attempts (or the re-assertions) and, if the router took this engine, takes it out (a few seconds at most).
     * A router that no longer has it (it restarted, or removed or replaced it: 404) has nothing to take out. A POST in
     * flight (an attempt, a re-assertion) ends first, up to {@link #FINISH_WITHIN}, so its add cannot land after the DELETE.
     */
    @Override
    public void close() {
        try {
            tick.lock();
            try {
                closing = true;
                tickAsked.signal();
                // A POST in flight ends first (no other begins after it), so its add cannot land after the DELETE below.
                long left = FINISH_WITHIN.toNanos();
                while (posting && left > 0) left = postEnded.awaitNanos(left);
            } finally {
                tick.unlock();
            }
            attempts.interrupt();
            attempts.join(CALL_TIMEOUT.toMillis() + 1000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (registered.isDone() && !registered.isCompletedExceptionally()) {
            URI removal = URI.create(workers + "?url=" + URLEncoder.encode(selfUrl, StandardCharsets.UTF_8) + "&worker_type=" + workerType);
            try {
                HttpResponse<String> r = client.send(HttpRequest.newBuilder(removal).timeout(Duration.ofSeconds(3))
                        .header("Authorization", authorization).DELETE().build(), HttpResponse.BodyHandlers.ofString());
                if (r.statusCode() == 200) log.info("removed from the router at {}", workers);
                else if (r.statusCode() == 404) log.info("the router at {} no longer had {} {} (it had forgotten or replaced it): nothing to remove",
                        workers, workerType, selfUrl);
                else log.warn("the router at {} did not remove {} {}: HTTP {}: {}", workers, workerType, selfUrl, r.statusCode(), r.body());
            } catch (IOException e) {
                log.warn("could not remove {} {} from the router at {}: {}", workerType, selfUrl, workers, e.toString());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        client.shutdownNow();
    }
}
