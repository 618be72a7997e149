package io.kvferry.engine.serving;

import io.kvferry.KVFerry;
import io.kvferry.api.DisaggregationMode;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.engine.kv.KvPool;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.UUID;

/** One kvferry KVManager per shard (TP rank × PP stage), as SGLang has one per engine rank. */
final class ShardManagers implements AutoCloseable {
    final KVManager[][] managers; // [stage][rank]

    ShardManagers(EngineSpec spec, TransferSpec t, KvPool[][] pools, DisaggregationMode mode) {
        managers = new KVManager[spec.pp()][spec.tp()];
        String instanceId = mode.name().toLowerCase(Locale.ROOT) + "-" + UUID.randomUUID();
        try {
            for (int s = 0; s < spec.pp(); s++) {
                for (int r = 0; r < spec.tp(); r++) {
                    KVManagerConfig.Builder b = KVManagerConfig.builder()
                            .attnTp(spec.tp(), r)
                            .ppSize(spec.pp())
                            .mla(pools[s][r].latent()) // latent KV is replicated: copied whole, one real sender per decode rank
                            .modelIdentity(spec.model().identity()) // a prefill and a decode of different models never pair
                            .instanceId(instanceId) // every rank of this engine is one decode instance
                            .listenHost(t.listenHost())
                            .meterRegistry(t.meters());
                    if (t.bootstrapAddr() != null) b.bootstrap(t.bootstrapHost(), t.bootstrapPort());
                    if (t.advertiseHost() != null) b.advertise(t.advertiseHost(), 0); // 0: each rank's bound port
                    if (t.authToken() != null) b.authToken(t.authToken());
                    KVManager m = KVFerry.createManager(t.transport(), pools[s][r].kvArgs(r, s), mode, b.build());
                    managers[s][r] = m;
                    if (mode == DisaggregationMode.PREFILL) m.registerToBootstrap();
                }
            }
        } catch (RuntimeException e) {
            close();
            throw e;
        }
    }

    /** Every manager, stage by stage. */
    List<KVManager> all() {
        List<KVManager> out = new ArrayList<>();
        for (KVManager[] s : managers) for (KVManager m : s) if (m != null) out.add(m);
        return out;
    }

    @Override
    public void close() {
        for (KVManager[] s : managers) {
            for (KVManager m : s) {
                if (m != null) m.teardown();
            }
        }
    }
}
