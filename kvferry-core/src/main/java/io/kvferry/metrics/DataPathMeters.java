package io.kvferry.metrics;

import io.kvferry.api.KVManagerConfig;
import io.kvferry.plan.CopyPlan;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;

import java.util.concurrent.atomic.LongAdder;

/**
 * The data-path meters of one transport on one rank, resolved once per link (not per write), so a
 * write records into meters it already holds, nothing allocated. Per op only one {@link LongAdder}
 * increment in the op's size bucket, per write a few counter adds: a Micrometer histogram per op
 * (count, sum, decaying max, bucket) cost ~4× that in {@code MetricsBench}, which mattered for
 * fragmented plans of one page per op. The buckets are exported as cumulative counters with an {@code le} tag
 * ({@link KVFerryMeters#DATAPATH_OPS_BY_SIZE}), which {@code histogram_quantile} reads like any histogram.
 */
public final class DataPathMeters {
    private final Counter bytes;
    private final Counter ops;
    private final Counter writes;
    /** Ops per size bucket (not cumulative): {@code perBucket[i]} counts ops in (OP_BYTES[i-1], OP_BYTES[i]]; the last is +Inf. */
    private final LongAdder[] perBucket = new LongAdder[KVFerryMeters.OP_BYTES.length + 1];
    /** False for the registry that keeps nothing: then a write records nothing either. */
    private final boolean enabled;

    DataPathMeters(MeterRegistry registry, Tags tags) {
        enabled = registry != KVManagerConfig.NO_METERS;
        bytes = Counter.builder(KVFerryMeters.DATAPATH_BYTES).baseUnit("bytes").description("Bytes moved by data-path writes")
                .tags(tags).register(registry);
        ops = Counter.builder(KVFerryMeters.DATAPATH_OPS).description("Data-path ops (a run of pages of one buffer, an aux row, a state slot)")
                .tags(tags).register(registry);
        writes = Counter.builder(KVFerryMeters.DATAPATH_WRITES)
                .description("Data-path writes (one plan each; ops / writes = descriptors per transfer)").tags(tags).register(registry);
        for (int i = 0; i < perBucket.length; i++) perBucket[i] = new LongAdder();
        for (int i = 0; i < perBucket.length; i++) {
            int upTo = i;
            String le = i < KVFerryMeters.OP_BYTES.length ? Long.toString((long) KVFerryMeters.OP_BYTES[i]) : "+Inf";
            FunctionCounter.builder(KVFerryMeters.DATAPATH_OPS_BY_SIZE, perBucket, b -> cumulative(b, upTo))
                    .description("Data-path ops of at most le bytes (cumulative, like a histogram's buckets)")
                    .tags(tags).tag("le", le).register(registry);
        }
    }

    private static double cumulative(LongAdder[] buckets, int upTo) {
        long n = 0;
        for (int i = 0; i <= upTo; i++) n += buckets[i].sum();
        return n;
    }

    /** One data-path write moved every op of {@code plan}. */
    public void written(CopyPlan plan) {
        if (!enabled) return;
        int n = plan.size();
        double[] bounds = KVFerryMeters.OP_BYTES;
        long total = 0;
        for (int i = 0; i < n; i++) {
            long len = plan.length(i);
            total += len;
            int b = 0;
            while (b < bounds.length && len > bounds[b]) b++;
            perBucket[b].increment();
        }
        bytes.increment(total);
        ops.increment(n);
        writes.increment();
    }
}
