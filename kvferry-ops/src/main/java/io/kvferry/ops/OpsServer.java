package io.kvferry.ops;

import com.fasterxml.jackson.databind.JsonNode;
import com.sun.net.httpserver.HttpServer;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.function.Supplier;

/**
 * A process's own operating endpoint ({@link OpsHandlers}'s routes on a port of their own), for
 * processes that have no HTTP server to mount them on: the bench roles ({@code kvferry prefill},
 * {@code kvferry decode}) and the bench itself. JDK HttpServer, as the registry uses; handlers run on
 * virtual threads (a scrape or a page load holds no platform thread). Closed by its owner.
 */
public final class OpsServer implements AutoCloseable {
    private final HttpServer server;
    private final ExecutorService executor;
    private final String host;

    private OpsServer(HttpServer server, ExecutorService executor, String host) {
        this.server = server;
        this.executor = executor;
        this.host = host;
    }

    /**
     * Binds and starts.
     *
     * @param port 0 picks a free port ({@link #port()} tells which)
     * @throws UncheckedIOException when the address cannot be bound, naming it
     */
    public static OpsServer start(String host, int port, PrometheusMeterRegistry registry, Supplier<? extends JsonNode> status) {
        HttpServer http;
        try {
            http = HttpServer.create(new InetSocketAddress(host, port), 64);
        } catch (IOException e) {
            throw new UncheckedIOException("cannot bind the status/metrics endpoint to " + host + ":" + port + ": " + e.getMessage(), e);
        }
        ExecutorService exec = Executors.newVirtualThreadPerTaskExecutor();
        http.setExecutor(exec);
        OpsHandlers.install(http, registry, status);
        http.start();
        return new OpsServer(http, exec, host);
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

    @Override
    public void close() {
        server.stop(0);
        executor.shutdownNow();
    }
}
