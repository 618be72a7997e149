package io.kvferry.engine.serve;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvferry.engine.http.Router;
import io.kvferry.http.BearerToken;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.slf4j.event.Level;

import java.io.IOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;

/**
 * An engine role's entry in a router's backends ({@code serve --register-with}): it adds itself through the
 * router's {@code POST /workers} once it serves, and takes itself out ({@code DELETE /workers}) when it stops,
 * before its servers close, so the router sends it nothing new while it drains.
 *
 * <p>A router not up yet, or one answering 5xx, is tried again every {@link #RETRY_EVERY} until {@code retryFor}
 * has passed. So is a router that is full (403 with code {@code max_backends}, its {@code --max-backends}): in a
 * rolling update the new engine can register a moment before the old one leaves, and the room it waits for comes
 * then; that is logged once. Any other refusal that a retry cannot change (a 4xx: a wrong token, a URL the router
 * calls bad, a router without {@code /workers}) ends the attempts at once. A router that has the URL in that role already (409: the
 * engine restarted, or the router's flags name it) counts as taking it. Either way the engine serves on
 * and the outcome is logged; {@link #registered()} completes with it. One virtual thread makes the attempts;
 * close() stops it and waits for it, so the removal cannot overtake an addition in flight.
 */
public final class WorkerRegistration implements AutoCloseable {
    private static final Logger log = LoggerFactory.getLogger(WorkerRegistration.class);
    private static final ObjectMapper JSON = new ObjectMapper();
    static final Duration RETRY_EVERY = Duration.ofSeconds(1);
    /** One call's limit: the router checks the engine's health before it answers (2 s at most there). */
    static final Duration CALL_TIMEOUT = Duration.ofSeconds(10);

    private final URI workers;
    private final String selfUrl;
    private final String workerType;
    private final String authorization;
    private final HttpClient client = HttpClient.newBuilder().connectTimeout(CALL_TIMEOUT).build();
    private final CompletableFuture<Void> registered = new CompletableFuture<>();
    private final Thread attempts;

    /**
     * Starts the attempts.
     *
     * @param router     the router's base URL, e.g. {@code http://10.0.0.9:8000}
     * @param selfUrl    this engine's URL as the router must reach it
     * @param workerType {@code prefill} or {@code decode}
     * @param token      the cluster token, which the router's {@code /workers} changes need
     * @param retryFor   how long a router that is not up yet is tried
     */
    public WorkerRegistration(URI router, String selfUrl, String workerType, String token, Duration retryFor) {
        this.workers = router.resolve("/workers");
        this.selfUrl = selfUrl;
        this.workerType = workerType;
        BearerToken auth = BearerToken.of(token);
        if (auth == null) throw new IllegalArgumentException("registering with a router needs the cluster token");
        this.authorization = auth.header();
        this.attempts = Thread.ofVirtual().name("kvferry-worker-registration").start(() -> attempt(retryFor));
    }

    /** This engine's URL as the router is given it. */
    public String selfUrl() {
        return selfUrl;
    }

    /** Completes once the router has this engine; completes exceptionally, naming why, when the attempts end without. */
    public CompletableFuture<Void> registered() {
        return registered;
    }

    private void attempt(Duration retryFor) {
        long deadline = System.nanoTime() + retryFor.toNanos();
        ObjectNode body = JSON.createObjectNode().put("url", selfUrl).put("worker_type", workerType);
        String last;
        boolean fullLogged = false;
        while (true) {
            boolean full = false;
            try {
                HttpResponse<String> r = client.send(HttpRequest.newBuilder(workers).timeout(CALL_TIMEOUT).header("Authorization", authorization)
                        .POST(HttpRequest.BodyPublishers.ofString(body.toString())).build(), HttpResponse.BodyHandlers.ofString());
                if (r.statusCode() == 200 || r.statusCode() == 409) { // 409: it has this URL in this role already (a restart, or its flags)
                    log.info("registered with the router at {} as {} {}{}", workers, workerType, selfUrl,
                            r.statusCode() == 409 ? " (it had it already)" : "");
                    registered.complete(null);
                    return;
                }
                last = "HTTP " + r.statusCode() + ": " + r.body();
                full = isFull(r);
                if (full) { // the room it waits for comes when another backend leaves (a rolling update)
                    if (!fullLogged) {
                        fullLogged = true;
                        log.warn("the router at {} is full (403 max_backends, its --max-backends) and did not take {} {}; trying again every {} s "
                                + "for up to {} s in all, until a backend leaves or one of its role has been out of rotation for 30 s (the router then replaces it)", workers, workerType, selfUrl, RETRY_EVERY.toSeconds(), retryFor.toSeconds());
                    }
                } else if (r.statusCode() >= 400 && r.statusCode() < 500) {
                    break; // asking again changes nothing
                }
            } catch (IOException e) {
                last = e.toString();
            } catch (InterruptedException e) {
                registered.completeExceptionally(new IllegalStateException("stopped before the router at " + workers + " took it"));
                return;
            }
            if (System.nanoTime() + RETRY_EVERY.toNanos() > deadline) {
                last = "still failing after " + retryFor.toSeconds() + " s, the last: " + last;
                break;
            }
            // A full router's retries were announced once (above): each one after at debug.
            log.atLevel(full ? Level.DEBUG : Level.INFO).log("the router at {} did not take {} {} yet ({}); trying again in {} s", workers, workerType,
                    selfUrl, last, RETRY_EVERY.toSeconds());
            try {
                Thread.sleep(RETRY_EVERY);
            } catch (InterruptedException e) {
                registered.completeExceptionally(new IllegalStateException("stopped before the router at " + workers + " took it"));
                return;
            }
        }
        log.error("not registered with the router at {} as {} {}: {}; this engine serves on, the router must be given it otherwise "
                + "(--prefill/--decode, or POST /workers)", workers, workerType, selfUrl, last);
        registered.completeExceptionally(new IllegalStateException("the router at " + workers + " did not take " + workerType + " " + selfUrl
                + ": " + last));
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

    /** Stops the attempts and, if the router took this engine, takes it out (a few seconds at most). */
    @Override
    public void close() {
        attempts.interrupt();
        try {
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
