package io.kvferry.metrics;

import io.kvferry.api.KVManagerConfig;
import io.kvferry.plan.CopyPlan;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;

import java.util.HashMap;
import java.util.Map;
import java.util.WeakHashMap;
import java.util.concurrent.atomic.LongAdder;

/**
 * The data-path meters of one transport on one rank, resolved once per link (not per write), so a
 * write records into meters it already holds, nothing allocated. Per op only one {@link LongAdder}
 * increment in the op's size bucket, per write a few counter adds: a Micrometer histogram per op
 * (count, sum, decaying max, bucket) cost ~4× that in {@code MetricsBench}, which mattered for
 * fragmented plans of one page per op. The buckets are exported as cumulative counters with an {@code le} tag
 * ({@link KVFerryMeters#DATAPATH_OPS_BY_SIZE}), which {@code histogram_quantile} reads like any histogram.
 *
 * <p>The buckets of one registry and tag set are shared by every manager with those tags, as the counters
 * beside them are (a registry keeps one meter per name and tags and hands a later registration the first):
 * a rank torn down and created again (a restart, the bench's waves) goes on counting into the same buckets.
 * They live as long as their registry (a function counter holds its object only weakly, so buckets held by
 * one manager alone would read NaN once it was collected).
 */
public final class DataPathMeters {
    /**
     * Per registry (weakly: a registry dropped by its owner takes its buckets with it), per tag set: the size
     * buckets its ops-by-size counters read, held here for as long as the registry. Guarded by itself.
     */
    private static final Map<MeterRegistry, Map<Tags, LongAdder[]>> BUCKETS = new WeakHashMap<>();

    private final Counter bytes;
    private final Counter ops;
    private final Counter writes;
    /** Ops per size bucket (not cumulative): {@code perBucket[i]} counts ops in (OP_BYTES[i-1], OP_BYTES[i]]; the last is +Inf. */
    private final LongAdder[] perBucket;
    /** False for the registry that keeps nothing: then a write records nothing either. */
    private final boolean enabled;

    DataPathMeters(MeterRegistry registry, Tags tags) {
        enabled = registry != KVManagerConfig.NO_METERS;
        perBucket = enabled ? sharedBuckets(registry, tags) : newBuckets();
        bytes = Counter.builder(KVFerryMeters.DATAPATH_BYTES).baseUnit("bytes").description("Bytes moved by data-path writes")
                .tags(tags).register(registry);
        ops = Counter.builder(KVFerryMeters.DATAPATH_OPS).description("Data-path ops (a run of pages of one buffer, an aux row, a state slot)")
                .tags(tags).register(registry);
        writes = Counter.builder(KVFerryMeters.DATAPATH_WRITES)
                .description("Data-path writes (one plan each; ops / writes = descriptors per transfer)").tags(tags).register(registry);
    }

    private static LongAdder[] newBuckets() {
        LongAdder[] buckets = new LongAdder[KVFerryMeters.OP_BYTES.length + 1];
        for (int i = 0; i < buckets.length; i++) buckets[i] = new LongAdder();
        return buckets;
    }

    /** The buckets of this registry and tag set, registered as cumulative counters by the first to ask. */
    private static LongAdder[] sharedBuckets(MeterRegistry registry, Tags tags) {
        synchronized (BUCKETS) {
            return BUCKETS.computeIfAbsent(registry, r -> new HashMap<>()).computeIfAbsent(tags, t -> {
                LongAdder[] buckets = newBuckets();
                for (int i = 0; i < buckets.length; i++) {
                    int upTo = i;
                    String le = i < KVFerryMeters.OP_BYTES.length ? Long.toString((long) KVFerryMeters.OP_BYTES[i]) : "+Inf";
                    FunctionCounter.builder(KVFerryMeters.DATAPATH_OPS_BY_SIZE, buckets, b -> cumulative(b, upTo))
                            .description("Data-path ops of at most le bytes (cumulative, like a histogram's buckets)")
                            .tags(t).tag("le", le).register(registry);
                }
                return buckets;
            });
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
