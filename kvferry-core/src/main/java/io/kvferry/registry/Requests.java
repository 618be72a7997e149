package io.kvferry.registry;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import io.kvferry.http.HttpUrls;
import io.kvferry.metrics.LogSafe;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Parses and validates request bodies by hand rather than by data binding, so that every refusal
 * names the offending field and no Jackson coercion (a string "4" or a float 4.5 for an int) slips a
 * value through that the sender did not mean.
 */
final class Requests {
    private Requests() {}

    /** Guards against sizes whose product would make the readiness count meaningless or overflow. */
    static final int MAX_SIZE = 65_536;
    static final long MAX_TOTAL_RANKS = 1L << 20;
    private static final int MAX_STRING = 255;

    /** One {@code /register_dp_rank}: the rooms (one in SGLang's form, several in kvferry's batch) and their DP group. */
    record DpRankRegistration(List<Long> rooms, int dpRank) {}

    static JsonNode parseObject(byte[] body) throws BadRequestException {
        JsonNode node;
        try {
            node = Json.MAPPER.readTree(body);
        } catch (JsonProcessingException e) {
            throw new BadRequestException("Malformed JSON: " + clip(e.getOriginalMessage()));
        } catch (IOException e) {
            throw new BadRequestException("Malformed JSON: " + clip(String.valueOf(e.getMessage())));
        }
        if (node == null || !node.isObject()) throw new BadRequestException("Request body must be a JSON object");
        return node;
    }

    /**
     * Fields SGLang added over time (CP, system DP, DSA split, HTTP port, load-balance method) are
     * optional with their old implied values, so older senders still register; the rest are required.
     */
    static PrefillRankRegistration registration(JsonNode o) throws BadRequestException {
        int tpSize = requiredInt(o, "attn_tp_size");
        int tpRank = requiredInt(o, "attn_tp_rank");
        int cpSize = optionalInt(o, "attn_cp_size", 1);
        int cpRank = optionalInt(o, "attn_cp_rank", 0);
        int dpSize = requiredInt(o, "attn_dp_size");
        int dpRank = requiredInt(o, "attn_dp_rank");
        int ppSize = requiredInt(o, "pp_size");
        int ppRank = requiredInt(o, "pp_rank");
        int sysDpSize = optionalInt(o, "system_dp_size", 1);
        int sysDpRank = optionalInt(o, "system_dp_rank", 0);
        String rankIp = requiredString(o, "rank_ip");
        int rankPort = requiredInt(o, "rank_port");
        int pageSize = requiredInt(o, "page_size");
        String dtype = requiredString(o, "kv_cache_dtype");
        String lbMethod = optionalString(o, "load_balance_method");
        boolean dsa = optionalBoolean(o, "enable_dsa_cache_layer_split", false);
        Integer httpPort = o.hasNonNull("prefill_http_port") ? requiredInt(o, "prefill_http_port") : null;
        String statusUrl = optionalString(o, "kvferry_status_url");

        rankWithin("attn_tp", tpRank, tpSize);
        rankWithin("attn_cp", cpRank, cpSize);
        rankWithin("attn_dp", dpRank, dpSize);
        rankWithin("pp", ppRank, ppSize);
        rankWithin("system_dp", sysDpRank, sysDpSize);
        if (rankPort < 1 || rankPort > 65_535) throw new BadRequestException("rank_port " + rankPort + " is outside [1, 65535]");
        if (pageSize < 1) throw new BadRequestException("page_size must be >= 1, got " + pageSize);
        if (httpPort != null && (httpPort < 0 || httpPort > 65_535)) {
            throw new BadRequestException("prefill_http_port " + httpPort + " is outside [0, 65535]");
        }
        if (!isHostLike(rankIp)) throw new BadRequestException("rank_ip must be a host name or address, got '" + clip(rankIp) + "'");
        if (dtype.isBlank()) throw new BadRequestException("kv_cache_dtype must not be blank");
        if (statusUrl != null && !isStatusUrl(statusUrl)) {
            throw new BadRequestException("kvferry_status_url must be http://HOST:PORT/status.json, got '" + clip(statusUrl) + "'");
        }
        String unfetchable = statusUrl == null ? null : HttpUrls.whyNotFetchable(statusUrl);
        if (unfetchable != null) {
            // the status page would fetch it; refused here, not found broken there
            throw new BadRequestException("kvferry_status_url '" + clip(statusUrl) + "' cannot be fetched: " + unfetchable);
        }
        PrefillRankRegistration reg = new PrefillRankRegistration(tpSize, tpRank, cpSize, cpRank, dpSize, dpRank,
                ppSize, ppRank, sysDpSize, sysDpRank, rankIp, rankPort, pageSize, dtype, lbMethod, dsa, httpPort, statusUrl);
        long total = (long) reg.dpSize() * cpSize * tpSize * ppSize;
        if (total > MAX_TOTAL_RANKS) {
            throw new BadRequestException("dp*cp*tp*pp = " + total + " ranks exceeds the limit of " + MAX_TOTAL_RANKS);
        }
        return reg;
    }

    /**
     * SGLang's {@code {"bootstrap_room", "dp_rank"}}, or kvferry's batch {@code {"bootstrap_rooms": [...],
     * "dp_rank"}} (the rooms one prefill rank took meanwhile, all in its group); not both.
     */
    static DpRankRegistration dpRankRegistration(JsonNode o) throws BadRequestException {
        boolean batch = o.has("bootstrap_rooms");
        if (batch && o.has("bootstrap_room")) throw new BadRequestException("Give 'bootstrap_room' or 'bootstrap_rooms', not both");
        List<Long> rooms = batch ? rooms(o) : List.of(room(o.get("bootstrap_room"), "bootstrap_room"));
        if (rooms.isEmpty()) throw new BadRequestException("Field 'bootstrap_rooms' must not be empty");
        if (rooms.size() > BootstrapClient.MAX_ROOMS_PER_REGISTRATION) {
            throw new BadRequestException("Field 'bootstrap_rooms' holds " + rooms.size() + " rooms; at most "
                    + BootstrapClient.MAX_ROOMS_PER_REGISTRATION + " per registration");
        }
        int dpRank = requiredInt(o, "dp_rank");
        if (dpRank < 0) throw new BadRequestException("dp_rank must be >= 0, got " + dpRank);
        return new DpRankRegistration(rooms, dpRank);
    }

    static List<Long> rooms(JsonNode o) throws BadRequestException {
        JsonNode arr = o.get("bootstrap_rooms");
        if (arr == null || arr.isNull()) throw new BadRequestException("Missing field 'bootstrap_rooms'");
        if (!arr.isArray()) throw new BadRequestException("Field 'bootstrap_rooms' must be a list of integers, got " + kind(arr));
        List<Long> rooms = new ArrayList<>(arr.size());
        for (int i = 0; i < arr.size(); i++) rooms.add(room(arr.get(i), "bootstrap_rooms[" + i + "]"));
        return rooms;
    }

    private static long room(JsonNode n, String name) throws BadRequestException {
        if (n == null || n.isNull()) throw new BadRequestException("Missing field '" + name + "'");
        if (!n.isIntegralNumber() || !n.canConvertToLong()) {
            throw new BadRequestException("Field '" + name + "' must be a 63-bit integer, got " + kind(n));
        }
        long v = n.longValue();
        if (v < 0) throw new BadRequestException("Field '" + name + "' must be >= 0, got " + v);
        return v;
    }

    private static void rankWithin(String name, int rank, int size) throws BadRequestException {
        if (size < 1 || size > MAX_SIZE) throw new BadRequestException(name + "_size " + size + " is outside [1, " + MAX_SIZE + "]");
        if (rank < 0 || rank >= size) {
            throw new BadRequestException(name + "_rank " + rank + " is outside [0, " + name + "_size=" + size + ")");
        }
    }

    private static int requiredInt(JsonNode o, String name) throws BadRequestException {
        JsonNode n = o.get(name);
        if (n == null || n.isNull()) throw new BadRequestException("Missing field '" + name + "'");
        if (!n.isIntegralNumber() || !n.canConvertToInt()) {
            throw new BadRequestException("Field '" + name + "' must be a 32-bit integer, got " + kind(n));
        }
        return n.intValue();
    }

    private static int optionalInt(JsonNode o, String name, int dflt) throws BadRequestException {
        return o.hasNonNull(name) ? requiredInt(o, name) : dflt;
    }

    private static String requiredString(JsonNode o, String name) throws BadRequestException {
        String s = optionalString(o, name);
        if (s == null) throw new BadRequestException("Missing field '" + name + "'");
        return s;
    }

    private static String optionalString(JsonNode o, String name) throws BadRequestException {
        JsonNode n = o.get(name);
        if (n == null || n.isNull()) return null;
        if (!n.isTextual()) throw new BadRequestException("Field '" + name + "' must be a string, got " + kind(n));
        String s = n.textValue();
        if (s.length() > MAX_STRING) throw new BadRequestException("Field '" + name + "' is longer than " + MAX_STRING + " characters");
        return s;
    }

    private static boolean optionalBoolean(JsonNode o, String name, boolean dflt) throws BadRequestException {
        JsonNode n = o.get(name);
        if (n == null || n.isNull()) return dflt;
        if (!n.isBoolean()) throw new BadRequestException("Field '" + name + "' must be a boolean, got " + kind(n));
        return n.booleanValue();
    }

    /**
     * The registry fetches this URL for its status page, so it must be exactly a process's status
     * document: {@code http://}, a host, a port, {@code /status.json}, nothing else.
     */
    static boolean isStatusUrl(String s) {
        String prefix = "http://", suffix = "/status.json";
        if (!s.startsWith(prefix) || !s.endsWith(suffix) || s.length() <= prefix.length() + suffix.length()) return false;
        String hostPort = s.substring(prefix.length(), s.length() - suffix.length());
        int colon = hostPort.lastIndexOf(':');
        if (colon <= 0 || !isHostLike(hostPort.substring(0, colon))) return false;
        String port = hostPort.substring(colon + 1);
        if (port.isEmpty() || port.length() > 5 || !port.chars().allMatch(c -> c >= '0' && c <= '9')) return false;
        int p = Integer.parseInt(port);
        return p >= 1 && p <= 65_535;
    }

    /** Decode will connect to this string, so refuse anything that cannot be a host. */
    private static boolean isHostLike(String s) {
        if (s.isEmpty()) return false;
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c <= ' ' || c == 0x7f || c == '/' || c == '?' || c == '#' || c == '@') return false;
        }
        return true;
    }

    private static String kind(JsonNode n) {
        if (n.isIntegralNumber()) return "out-of-range integer " + clip(n.asText());
        if (n.isNumber()) return "number " + clip(n.asText());
        if (n.isTextual()) return "string";
        return n.getNodeType().name().toLowerCase(Locale.ROOT);
    }

    /** Bounded and with control characters escaped: the text came from the request and goes into a log line and the answer. */
    static String clip(String s) {
        if (s == null) return "";
        return LogSafe.text(s.length() <= 200 ? s : s.substring(0, 200) + "…");
    }
}
