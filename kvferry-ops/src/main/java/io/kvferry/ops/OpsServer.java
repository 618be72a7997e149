package io.kvferry.ops;

import com.fasterxml.jackson.databind.JsonNode;
import com.sun.net.httpserver.HttpServer;
import io.kvferry.http.RequestGate;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.time.Duration;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Supplier;

/**
 * A process's own operating endpoint ({@link OpsHandlers}'s routes on a port of their own), for
 * processes that have no HTTP server to mount them on: the bench roles ({@code kvferry prefill},
 * {@code kvferry decode}) and the bench itself. JDK HttpServer under the bootstrap registry's
 * {@link RequestGate}: each request on a virtual thread (a scrape or a page load holds no platform
 * thread), none older than {@link #REQUEST_TIMEOUT} (a client that sends half a request and stalls has
 * its connection closed), at most {@link #MAX_REQUESTS} under way (one more has its connection closed,
 * as the registry does). Closed by its owner.
 */
public final class OpsServer implements AutoCloseable {
    /** The longest one request may take, first byte to response written: the registry's default. */
    public static final Duration REQUEST_TIMEOUT = Duration.ofSeconds(10);
    /** Requests under way at most; scrapes and page loads are few, so this is far above legitimate use. */
    public static final int MAX_REQUESTS = 256;

    private final HttpServer server;
    private final RequestGate gate;
    private final ScheduledThreadPoolExecutor sweeper;
    private final String host;
    private final AtomicBoolean closed = new AtomicBoolean();

    private OpsServer(HttpServer server, RequestGate gate, ScheduledThreadPoolExecutor sweeper, String host) {
        this.server = server;
        this.gate = gate;
        this.sweeper = sweeper;
        this.host = host;
    }

    /**
     * Binds and starts.
     *
     * @param port 0 picks a free port ({@link #port()} tells which)
     * @throws UncheckedIOException when the address cannot be bound, naming it
     */
    public static OpsServer start(String host, int port, PrometheusMeterRegistry registry, Supplier<? extends JsonNode> status) {
        return start(host, port, registry, status, REQUEST_TIMEOUT, MAX_REQUESTS);
    }

    /** With other limits than the defaults (the tests' short timeouts and small caps). */
    static OpsServer start(String host, int port, PrometheusMeterRegistry registry, Supplier<? extends JsonNode> status,
                           Duration requestTimeout, int maxRequests) {
        HttpServer http;
        try {
            http = HttpServer.create(new InetSocketAddress(host, port), 64);
        } catch (IOException e) {
            throw new UncheckedIOException("cannot bind the status/metrics endpoint to " + host + ":" + port + ": " + e.getMessage(), e);
        }
        String name = "kvferry-ops-" + http.getAddress().getPort();
        RequestGate gate = new RequestGate(name, maxRequests, requestTimeout, false);
        ScheduledThreadPoolExecutor sweeper = new ScheduledThreadPoolExecutor(1,
                r -> Thread.ofPlatform().daemon().name(name + "-sweeper").unstarted(r));
        sweeper.setRemoveOnCancelPolicy(true);
        long period = RequestGate.sweepPeriodMillis(requestTimeout);
        sweeper.scheduleWithFixedDelay(gate::sweep, period, period, TimeUnit.MILLISECONDS);
        http.setExecutor(gate);
        OpsHandlers.install(http, registry, status);
        http.start();
        return new OpsServer(http, gate, sweeper, host);
    }

    public int port() {
        return server.getAddress().getPort();
    }

    /** {@code http://host:port} (the wildcard address shown as 127.0.0.1). */
    public String baseUrl() {
        String h = host.equals("0.0.0.0") || host.equals("::") ? "127.0.0.1" : host;
        if (h.contains(":") && !h.startsWith("[")) h = "[" + h + "]";
        return "http://" + h + ":" + port();
    }

    /** What a prefill rank publishes in its registration ({@code kvferry_status_url}). */
    public String statusJsonUrl() {
        return baseUrl() + "/status.json";
    }

    /** Requests being read or answered right now; for the slow-client tests. */
    int requestsUnderWay() {
        return gate.underWay();
    }

    /** Stops serving: closes every connection, requests under way included (waiting up to a second for them to end). */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) return;
        server.stop(0);
        sweeper.shutdownNow();
        try {
            gate.close(Duration.ofSeconds(1));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
