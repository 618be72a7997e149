package io.kvferry.registry;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The registry's view of one prefill instance: the topology fixed by the first registration and the
 * endpoint of every (dp, cp, tp, pp) slot. Registrations are rare (one per rank per start), so one
 * monitor is enough and keeps topology, slots and count consistent with each other.
 */
final class RouteTable {
    private record Slot(int dp, int cp, int tp, int pp) {}

    /** What a reader sees atomically: the topology (null before the first registration) and progress. */
    record State(PrefillServerInfo topology, int registered) {
        boolean ready() {
            return topology != null && registered >= topology.totalRanks();
        }
    }

    private final Map<Slot, RankEndpoint> slots = new HashMap<>();
    /** The registration that filled each slot (its last one), for the status page. */
    private final Map<Slot, PrefillRankRegistration> registrations = new HashMap<>();
    private PrefillServerInfo topology;

    /**
     * Stores one rank. A second registration of a filled slot replaces its endpoint (a restarted rank
     * comes back on a new port) and does not count twice towards readiness.
     *
     * @return true when the slot was already filled
     */
    synchronized boolean register(PrefillRankRegistration reg) throws BadRequestException {
        if (topology == null) {
            topology = PrefillServerInfo.of(reg.attnTpSize(), reg.attnCpSize(), reg.dpSize(), reg.ppSize(),
                    reg.pageSize(), reg.kvCacheDtype(), reg.followBootstrapRoom(), reg.enableDsaCacheLayerSplit(),
                    reg.prefillHttpPort());
        } else {
            checkSame("attn_tp_size", reg.attnTpSize(), topology.attnTpSize());
            checkSame("attn_cp_size", reg.attnCpSize(), topology.attnCpSize());
            checkSame("dp_size", reg.dpSize(), topology.dpSize());
            checkSame("pp_size", reg.ppSize(), topology.ppSize());
            checkSame("page_size", reg.pageSize(), topology.pageSize());
            checkSame("kv_cache_dtype", reg.kvCacheDtype(), topology.kvCacheDtype());
        }
        Slot slot = new Slot(reg.dpGroup(), reg.attnCpRank(), reg.attnTpRank(), reg.ppRank());
        registrations.put(slot, reg);
        return slots.put(slot, new RankEndpoint(reg.rankIp(), reg.rankPort())) != null;
    }

    private static void checkSame(String field, Object got, Object first) throws BadRequestException {
        if (!got.equals(first)) {
            throw new BadRequestException("Registration conflicts with the registered topology: " + field + "="
                    + got + " but the first registration had " + field + "=" + first);
        }
    }

    synchronized State state() {
        return new State(topology, slots.size());
    }

    /** Every slot's registration, ordered by dp, cp, tp, pp. */
    synchronized List<PrefillRankRegistration> registrations() {
        List<PrefillRankRegistration> out = new ArrayList<>(registrations.values());
        out.sort(Comparator.comparingInt(PrefillRankRegistration::dpGroup).thenComparingInt(PrefillRankRegistration::attnCpRank)
                .thenComparingInt(PrefillRankRegistration::attnTpRank).thenComparingInt(PrefillRankRegistration::ppRank));
        return out;
    }

    synchronized RankEndpoint endpoint(int dp, int cp, int tp, int pp) {
        return slots.get(new Slot(dp, cp, tp, pp));
    }
}
