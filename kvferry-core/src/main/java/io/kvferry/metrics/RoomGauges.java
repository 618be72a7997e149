package io.kvferry.metrics;

import io.kvferry.api.KVManagerConfig;
import io.kvferry.api.KVPoll;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Tags;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.WeakHashMap;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * The scrape-time gauges of ranks ({@link KVFerryMeters#ROOMS} by state, {@link KVFerryMeters#PEERS}).
 * A registry keeps one gauge per name and tags, and a second registration gets the first's; so the
 * gauges of one tag set are registered once and sum the censuses of every live manager with those
 * tags (two managers of the same coordinates in one process, or one replaced by a restart), and are
 * removed with the last of them, so no gauge keeps a torn-down manager alive or reports it.
 */
final class RoomGauges {
    /** Per registry (weakly: a registry dropped by its owner takes its groups with it), per tag set. Guarded by itself. */
    private static final Map<MeterRegistry, Map<Tags, Group>> GROUPS = new WeakHashMap<>();

    private RoomGauges() {}

    /** The censuses behind one tag set's gauges. */
    private static final class Group {
        final List<RoomCensus> members = new CopyOnWriteArrayList<>();
        final List<Meter> meters = new ArrayList<>();

        double rooms(KVPoll state) {
            long n = 0;
            for (RoomCensus c : members) n += c.rooms(state);
            return n;
        }

        double peers() {
            long n = 0;
            for (RoomCensus c : members) n += c.peers();
            return n;
        }
    }

    /** Adds a census; returns what removes it. */
    static Runnable register(MeterRegistry registry, Tags tags, RoomCensus census) {
        if (registry == KVManagerConfig.NO_METERS) return () -> { }; // keeps nothing: nothing to hold either
        synchronized (GROUPS) {
            Group g = GROUPS.computeIfAbsent(registry, r -> new HashMap<>()).get(tags);
            if (g == null) {
                Group group = new Group();
                g = group;
                for (KVPoll state : KVPoll.values()) {
                    group.meters.add(Gauge.builder(KVFerryMeters.ROOMS, group, x -> x.rooms(state))
                            .description("Rooms this rank tracks, by state").tags(tags).tag("state", stateLabel(state))
                            .strongReference(true).register(registry));
                }
                group.meters.add(Gauge.builder(KVFerryMeters.PEERS, group, Group::peers)
                        .description("Peer links (decode sessions of a prefill rank, prefill links of a decode rank)")
                        .tags(tags).strongReference(true).register(registry));
                GROUPS.get(registry).put(tags, group);
            }
            g.members.add(census);
            Group joined = g;
            return () -> leave(registry, tags, joined, census);
        }
    }

    private static void leave(MeterRegistry registry, Tags tags, Group g, RoomCensus census) {
        synchronized (GROUPS) {
            if (!g.members.remove(census) || !g.members.isEmpty()) return;
            for (Meter m : g.meters) registry.remove(m);
            Map<Tags, Group> byTags = GROUPS.get(registry);
            if (byTags != null) {
                byTags.remove(tags, g);
                if (byTags.isEmpty()) GROUPS.remove(registry);
            }
        }
    }

    /** {@code WaitingForInput} → {@code waiting_for_input}. */
    static String stateLabel(KVPoll state) {
        return switch (state) {
            case Failed -> "failed";
            case Bootstrapping -> "bootstrapping";
            case WaitingForInput -> "waiting_for_input";
            case Transferring -> "transferring";
            case Success -> "success";
        };
    }
}
