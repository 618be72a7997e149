package io.kvferry.metrics;

import io.kvferry.plan.CopyPlan;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;

/**
 * The data-path meters of one transport on one rank, resolved once per link (not per write), so a
 * write records into meters it already holds: a few adds per write and one bucket increment per op,
 * nothing allocated.
 */
public final class DataPathMeters {
    private final Counter bytes;
    private final Counter ops;
    private final DistributionSummary opBytes;
    private final DistributionSummary opsPerWrite;

    DataPathMeters(MeterRegistry registry, Tags tags) {
        bytes = Counter.builder(KVFerryMeters.DATAPATH_BYTES).baseUnit("bytes").description("Bytes moved by data-path writes")
                .tags(tags).register(registry);
        ops = Counter.builder(KVFerryMeters.DATAPATH_OPS).description("Data-path ops (a run of pages of one buffer, an aux row, a state slot)")
                .tags(tags).register(registry);
        opBytes = DistributionSummary.builder(KVFerryMeters.DATAPATH_OP_BYTES).description("Bytes of each data-path op")
                .serviceLevelObjectives(KVFerryMeters.OP_BYTES).tags(tags).register(registry);
        opsPerWrite = DistributionSummary.builder(KVFerryMeters.DATAPATH_OPS_PER_WRITE)
                .description("Ops per data-path write (descriptors per transfer)")
                .serviceLevelObjectives(KVFerryMeters.OPS_PER_WRITE).tags(tags).register(registry);
    }

    /** One data-path write moved every op of {@code plan}. */
    public void written(CopyPlan plan) {
        int n = plan.size();
        long total = 0;
        for (int i = 0; i < n; i++) {
            long len = plan.length(i);
            total += len;
            opBytes.record(len);
        }
        bytes.increment(total);
        ops.increment(n);
        opsPerWrite.record(n);
    }
}
