package io.kvferry.ops;

import com.fasterxml.jackson.annotation.JsonFormat;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.PropertyNamingStrategies;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvferry.api.KVManager;
import io.kvferry.api.KVManagerInspection;

import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * The status documents, as JSON: a process's ({@code "kind": "process"}: its ranks' {@link KVManagerInspection}s
 * and their totals) and a cluster's ({@code "kind": "cluster"}, {@link ClusterStatus}). Field names are
 * snake_case, as the rest of kvferry's JSON.
 */
public final class StatusJson {
    /**
     * Snake-case names; records serialise by their components. Room ids are 63-bit: written as strings,
     * or JavaScript (whose numbers are doubles) would show another room.
     */
    public static final ObjectMapper MAPPER = new ObjectMapper()
            .setPropertyNamingStrategy(PropertyNamingStrategies.SNAKE_CASE)
            .disable(SerializationFeature.FAIL_ON_EMPTY_BEANS)
            .addMixIn(KVManagerInspection.Room.class, RoomIdAsString.class)
            .addMixIn(KVManagerInspection.Failure.class, RoomIdAsString.class);

    /** Jackson mix-in: the {@code room} component as a JSON string. */
    private abstract static class RoomIdAsString {
        @JsonFormat(shape = JsonFormat.Shape.STRING)
        abstract long room();
    }

    private StatusJson() {}

    /**
     * Why {@code doc} is not a process document the status page can show, or null when it is: the kinds of the
     * fields the page and the cluster totals read (ranks as an array of objects; per rank the room and failure
     * counts as objects of numbers, its rooms, failures and peers as arrays of objects, its bytes and rooms
     * concluded as numbers). A cluster view lists a process whose document is not so as down with this reason,
     * since the page renders every process's ranks at once and one bad document would stop it for all.
     */
    public static String whyNotProcess(JsonNode doc) {
        if (!doc.isObject() || !"process".equals(doc.path("kind").asText())) return "its kind is not \"process\"";
        JsonNode ranks = doc.path("ranks");
        if (!ranks.isArray()) return "ranks is not an array";
        for (int i = 0; i < ranks.size(); i++) {
            JsonNode r = ranks.get(i);
            String at = "ranks[" + i + "]";
            if (!r.isObject()) return at + " is not an object";
            for (String counts : List.of("rooms_by_state", "failures_by_kind")) {
                JsonNode c = r.path(counts);
                if (!c.isObject()) return at + "." + counts + " is not an object";
                for (JsonNode n : c) if (!n.isNumber()) return at + "." + counts + " holds a value that is not a number";
            }
            for (String list : List.of("oldest_rooms", "recent_failures", "peers")) {
                JsonNode l = r.path(list);
                if (!l.isArray()) return at + "." + list + " is not an array";
                for (JsonNode e : l) if (!e.isObject()) return at + "." + list + " holds an entry that is not an object";
            }
            for (String number : List.of("bytes_moved", "rooms_concluded")) {
                if (!r.path(number).isNumber()) return at + "." + number + " is not a number";
            }
        }
        return null;
    }

    /**
     * The document of one process: {@code kind}, {@code role}, {@code pid}, {@code now_ms}, {@code uptime_ms},
     * {@code ranks} (one inspection each) and {@code totals} ({@code bytes}, {@code rooms_concluded},
     * {@code rooms_by_state}, {@code failures_by_kind}, {@code peers}).
     */
    public static ObjectNode process(String role, List<KVManager> managers, long startedEpochMillis) {
        ObjectNode doc = MAPPER.createObjectNode();
        doc.put("kind", "process");
        doc.put("role", role);
        doc.put("pid", ProcessHandle.current().pid());
        long now = System.currentTimeMillis();
        doc.put("now_ms", now);
        doc.put("uptime_ms", now - startedEpochMillis);
        ArrayNode ranks = doc.putArray("ranks");
        long bytes = 0, concluded = 0, peers = 0;
        Map<String, Long> byState = new TreeMap<>(), byKind = new TreeMap<>();
        for (KVManager m : managers) {
            KVManagerInspection in;
            try {
                in = m.inspect();
            } catch (RuntimeException e) {
                continue; // torn down under us: it has nothing to show any more
            }
            ranks.add(MAPPER.valueToTree(in));
            bytes += in.bytesMoved();
            concluded += in.roomsConcluded();
            peers += in.peers().size();
            in.roomsByState().forEach((k, v) -> byState.merge(k, (long) v, Long::sum));
            in.failuresByKind().forEach((k, v) -> byKind.merge(k, v, Long::sum));
        }
        ObjectNode totals = doc.putObject("totals");
        totals.put("bytes", bytes);
        totals.put("rooms_concluded", concluded);
        totals.put("peers", peers);
        totals.set("rooms_by_state", MAPPER.valueToTree(byState));
        totals.set("failures_by_kind", MAPPER.valueToTree(byKind));
        return doc;
    }
}
