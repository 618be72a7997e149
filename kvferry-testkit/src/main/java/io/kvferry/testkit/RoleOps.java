package io.kvferry.testkit;

import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.ops.Ops;
import io.kvferry.ops.OpsServer;
import io.kvferry.ops.ProcessStatus;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;

/**
 * The operating side of a process running ranks (a role process, or the embedded bench): one Prometheus
 * registry every manager records into, the process's status document, and its endpoint ({@code /metrics},
 * {@code /status}, {@code /status.json}) when it serves one. Owned and closed by whoever made it.
 */
public final class RoleOps implements AutoCloseable {
    /** Records nothing and serves nothing (tests that start managers of their own). */
    public static final RoleOps NONE = new RoleOps(null, new ProcessStatus("none"), null);

    private final PrometheusMeterRegistry registry;
    private final ProcessStatus status;
    private final OpsServer server;

    private RoleOps(PrometheusMeterRegistry registry, ProcessStatus status, OpsServer server) {
        this.registry = registry;
        this.status = status;
        this.server = server;
    }

    /**
     * A registry and an endpoint on {@code host:port} (0 = any free port; negative = no endpoint, the
     * metrics are still kept for {@link #scrape()}).
     *
     * @param role what the process is (prefill, decode, bench)
     */
    public static RoleOps serve(String role, String host, int port) {
        PrometheusMeterRegistry r = Ops.newRegistry();
        ProcessStatus s = new ProcessStatus(role);
        OpsServer server = port < 0 ? null : OpsServer.start(host, port, r, s);
        return new RoleOps(r, s, server);
    }

    /** Where the managers record ({@link KVManagerConfig#NO_METERS} for {@link #NONE}). */
    public MeterRegistry meters() {
        return registry == null ? KVManagerConfig.NO_METERS : registry;
    }

    /** The Prometheus registry itself (null for {@link #NONE}), e.g. to add a registry's gauges to it. */
    public PrometheusMeterRegistry prometheus() {
        return registry;
    }

    /** {@code http://host:port/status.json} of this process, or null when it serves none. */
    public String statusUrl() {
        return server == null ? null : server.statusJsonUrl();
    }

    /** {@code http://host:port} of this process's endpoint, or null. */
    public String baseUrl() {
        return server == null ? null : server.baseUrl();
    }

    /** A manager of this process: shown on its status page until it {@link #left}. */
    public void joined(KVManager m) {
        status.add(m);
    }

    public void left(KVManager m) {
        status.remove(m);
    }

    /** The registry's scrape now, in the Prometheus text format ("" for {@link #NONE}). */
    public String scrape() {
        return registry == null ? "" : registry.scrape();
    }

    @Override
    public void close() {
        if (server != null) server.close();
        if (registry != null) registry.close();
    }
}
