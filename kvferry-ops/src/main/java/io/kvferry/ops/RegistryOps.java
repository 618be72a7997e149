package io.kvferry.ops;

import io.kvferry.api.KVBootstrapServer;
import io.kvferry.registry.BootstrapRegistryServer;
import io.kvferry.registry.PrefillServerInfo;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;

import java.util.List;

/**
 * Adds the operating routes to a bootstrap registry's own port: {@code /status} (the cluster page),
 * {@code /status.json} ({@link ClusterStatus}), the page's files, and {@code /metrics} with the
 * registry's gauges, so {@code http://HOST:8998/status} shows the cluster and {@code kvferry status
 * --bootstrap HOST:8998} reads it. SGLang's routes are untouched.
 */
public final class RegistryOps {
    /** Prefill ranks registered with the registry. */
    public static final String REGISTERED = "kvferry_registry_ranks_registered";
    /** Prefill ranks the registered topology expects (dp × cp × tp × pp; 0 before the first registration). */
    public static final String EXPECTED = "kvferry_registry_ranks_expected";

    private RegistryOps() {}

    /**
     * @param metrics   the process's registry: gets the registry's gauges, served on {@code /metrics}
     * @param extraUrls further process status documents the page should include (decode processes)
     */
    public static ClusterStatus mount(BootstrapRegistryServer registry, PrometheusMeterRegistry metrics, List<String> extraUrls) {
        return mount(registry, metrics, extraUrls, true);
    }

    /**
     * The same for a registry started through {@code KVFerry.startBootstrapServer} (an engine holds it as a
     * {@link KVBootstrapServer}); null when it is not kvferry's (then it serves no page).
     *
     * @param serveMetrics false when the process serves {@code /metrics} on another port already (one scrape
     *                     target per process)
     */
    public static ClusterStatus mountIfKvferry(KVBootstrapServer server, PrometheusMeterRegistry metrics, boolean serveMetrics) {
        return server instanceof BootstrapRegistryServer r ? mount(r, metrics, List.of(), serveMetrics) : null;
    }

    private static ClusterStatus mount(BootstrapRegistryServer registry, PrometheusMeterRegistry metrics, List<String> extraUrls,
                                       boolean serveMetrics) {
        Gauge.builder(REGISTERED, registry, r -> r.registeredRanks()).description("Prefill ranks registered").register(metrics);
        Gauge.builder(EXPECTED, registry, r -> {
            PrefillServerInfo t = r.topology();
            return t == null ? 0 : t.totalRanks();
        }).description("Prefill ranks the registered topology expects").register(metrics);
        ClusterStatus cluster = new ClusterStatus(registry, extraUrls);
        OpsHandlers.routes(metrics, cluster).forEach((path, handler) -> {
            if (serveMetrics || !path.equals("/metrics")) registry.mount(path, handler);
        });
        return cluster;
    }
}
