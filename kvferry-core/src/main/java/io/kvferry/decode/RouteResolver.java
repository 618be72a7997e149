package io.kvferry.decode;

import io.kvferry.api.FailureKind;
import io.kvferry.api.KVManagerConfig;
import io.kvferry.plan.RankMapping;
import io.kvferry.registry.PrefillServerInfo;
import io.kvferry.registry.RankEndpoint;

import java.net.ConnectException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Works out where the rooms of one (prefill instance, DP group) go — registry lookups, the page
 * size, dtype and DP checks, the rank mapping, and the link set-up through the {@link LinkDirectory}
 * — on a thread of its own, never on the scheduler thread: {@code KVReceiver.init} returns at once
 * and a room waits (Bootstrapping) for its group's resolution, which every room of the group waiting
 * meanwhile shares. So a silent or slow prefill holds up only the rooms bound for it.
 *
 * Few threads ({@link LookupThreads}): one per group whose route is not known, living while it works it out.
 */
final class RouteResolver {
    private final LinkDirectory directory;
    private final KVManagerConfig config;
    private final int engineRank;
    private final int ppRank;
    private final int pageSize;
    private final String kvCacheDtype;
    /** Route resolutions under way, by (instance, DP group): at most one each; the entry leaves as it completes. */
    private final ConcurrentHashMap<LinkDirectory.RouteKey, CompletableFuture<LinkDirectory.Route>> resolving = new ConcurrentHashMap<>();
    /** Their threads: {@link #stop} interrupts them, teardown joins them. */
    final LookupThreads resolvers;

    RouteResolver(LinkDirectory directory, KVManagerConfig config, int engineRank, int ppRank, int pageSize, String kvCacheDtype) {
        this.directory = directory;
        this.config = config;
        this.engineRank = engineRank;
        this.ppRank = ppRank;
        this.pageSize = pageSize;
        this.kvCacheDtype = kvCacheDtype;
        this.resolvers = new LookupThreads("kvferry-decode-bootstrap-" + engineRank);
    }

    /** The prefill's topology could not be fetched (not registered yet, registry unreachable or refusing): {@link #getCause()} says why. */
    static final class TopologyUnavailable extends Exception {
        TopologyUnavailable(RuntimeException cause) {
            super(cause.getMessage(), cause);
        }
    }

    /** The prefill instance cannot serve this decode rank's rooms (page size, dtype, DP group): the room fails with {@link #kind}. */
    static final class RouteRefused extends Exception {
        final FailureKind kind;

        RouteRefused(FailureKind kind, String message) {
            super(message);
            this.kind = kind;
        }
    }

    /**
     * The route of (addr, dp) being worked out: the resolution already under way for that group, or
     * a new one on a resolver thread of its own. It completes with the route (also kept, see
     * {@link LinkDirectory#route}), or fails with {@link TopologyUnavailable}, {@link RouteRefused}, a
     * {@link ConnectException} (the registry points at a rank that is gone: its cached
     * lookups are dropped first), a {@link LinkRefusedException}, another IOException or a
     * RuntimeException. The caller polls it; nothing here runs on the caller's thread.
     */
    CompletableFuture<LinkDirectory.Route> resolve(String addr, int dp) {
        LinkDirectory.RouteKey key = new LinkDirectory.RouteKey(addr, dp);
        CompletableFuture<LinkDirectory.Route> mine = new CompletableFuture<>();
        CompletableFuture<LinkDirectory.Route> running = resolving.putIfAbsent(key, mine);
        if (running != null) return running;
        boolean started = resolvers.start(() -> {
            try {
                LinkDirectory.Route r = buildRoute(addr, dp);
                directory.keepRoute(addr, dp, r);
                resolving.remove(key, mine); // first: a room that finds the route unusable starts a fresh resolution
                mine.complete(r);
            } catch (Throwable e) {
                resolving.remove(key, mine);
                mine.completeExceptionally(e);
            }
        });
        if (!started) {
            resolving.remove(key, mine);
            mine.completeExceptionally(new IllegalStateException("the decode KV manager was torn down"));
        }
        return mine;
    }

    /** Lookups, checks, rank mapping and link set-up for one (instance, DP group); blocks on peers (resolver thread). */
    private LinkDirectory.Route buildRoute(String addr, int dp) throws Exception {
        PrefillServerInfo info;
        try {
            info = directory.topology(addr);
        } catch (RuntimeException e) {
            throw new TopologyUnavailable(e);
        }
        if (info.pageSize() != pageSize) {
            throw new RouteRefused(FailureKind.LAYOUT_REFUSED, "page_size mismatch: prefill at " + addr + " uses " + info.pageSize()
                    + ", decode uses " + pageSize + "; both servers must use the same --page-size value");
        }
        if (!info.kvCacheDtype().equals(kvCacheDtype)) {
            throw new RouteRefused(FailureKind.LAYOUT_REFUSED, "kv_cache_dtype mismatch: prefill at " + addr + " uses "
                    + info.kvCacheDtype() + ", decode uses " + kvCacheDtype);
        }
        if (dp < 0 || dp >= info.dpSize()) {
            throw new RouteRefused(FailureKind.ROUTING, "prefill dp rank " + dp + " is outside the prefill's dp_size " + info.dpSize());
        }
        RankMapping mapping = RankMapping.resolve(info.attnTpSize(), config.attnTpSize(), engineRank, config.isMla(),
                info.attnCpSize(), config.allCpRanksTransfer(), info.ppSize(), config.ppSize(), ppRank);
        // Every rank's address first: each rank listens on its own, so two ranks at one address is a stale or
        // wrong registration (or a hostile registry's fan-out onto one link), refused before any link is opened.
        List<int[]> ranks = new ArrayList<>();
        List<RankEndpoint> endpoints = new ArrayList<>();
        Map<String, String> seen = new HashMap<>();
        for (int cp : mapping.targetCpRanks()) {
            for (int tp : mapping.targetTpRanks()) {
                for (int pp : mapping.targetPpRanks()) {
                    RankEndpoint ep = directory.endpoint(addr, dp, cp, tp, pp);
                    String rank = "dp=" + dp + " cp=" + cp + " tp=" + tp + " pp=" + pp, at = ep.rankIp() + ":" + ep.rankPort();
                    String other = seen.putIfAbsent(at, rank);
                    if (other != null) {
                        directory.forgetPrefill(addr); // the registry may be corrected: look it up afresh next time
                        throw new RouteRefused(FailureKind.ROUTING, "the registry at " + addr + " lists prefill ranks " + other + " and "
                                + rank + " at the same address " + at + "; each rank listens on its own (a stale or wrong registration)");
                    }
                    ranks.add(new int[]{cp, tp});
                    endpoints.add(ep);
                }
            }
        }
        List<DecodeRoom.Target> targets = new ArrayList<>();
        try {
            for (int i = 0; i < endpoints.size(); i++) {
                int cp = ranks.get(i)[0], tp = ranks.get(i)[1];
                PrefillLink link = directory.link(addr, endpoints.get(i));
                targets.add(new DecodeRoom.Target(link, tp, cp, mapping.isDummy(tp, config.isMla())));
            }
        } catch (ConnectException e) {
            // The registry still points at a rank that is gone (a prefill being restarted): look it up afresh next time.
            directory.forgetPrefill(addr);
            throw e;
        }
        return new LinkDirectory.Route(List.copyOf(targets), mapping.requiredPrefillResponseNum(), mapping.requiredDstInfoNum(), info.attnCpSize(),
                config.allCpRanksTransfer() && info.attnCpSize() > 1, new LinkDirectory.CoverageMemo());
    }

    /** Starts no more resolutions and interrupts those under way; teardown then joins {@link #resolvers}. */
    void stop() {
        resolvers.stop();
    }
}
