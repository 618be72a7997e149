package io.kvferry.ops;

import io.micrometer.core.instrument.binder.jvm.JvmMemoryMetrics;
import io.micrometer.core.instrument.binder.jvm.JvmThreadMetrics;
import io.micrometer.core.instrument.binder.system.ProcessorMetrics;
import io.micrometer.core.instrument.binder.system.UptimeMetrics;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;

/** The process-wide pieces: one Prometheus registry per process, shared by all its ranks. */
public final class Ops {
    private Ops() {}

    /**
     * A Prometheus registry with the JVM's own basics (memory, threads, CPU, uptime) bound; hand it
     * to every manager of the process ({@code KVManagerConfig.Builder.meterRegistry}) and serve it
     * with {@link OpsHandlers#metrics}.
     */
    public static PrometheusMeterRegistry newRegistry() {
        PrometheusMeterRegistry r = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
        new JvmMemoryMetrics().bindTo(r);
        new JvmThreadMetrics().bindTo(r);
        new ProcessorMetrics().bindTo(r);
        new UptimeMetrics().bindTo(r);
        return r;
    }
}
