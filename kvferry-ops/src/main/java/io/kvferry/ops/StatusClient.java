package io.kvferry.ops;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.SerializableString;
import com.fasterxml.jackson.core.io.CharacterEscapes;
import com.fasterxml.jackson.core.json.JsonWriteFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.ObjectWriter;
import io.kvferry.http.BoundedBody;
import io.kvferry.metrics.LogSafe;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.channels.UnresolvedAddressException;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneId;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.Iterator;
import java.util.List;
import java.util.Map;

/**
 * {@code kvferry status}: reads a registry's {@code /status.json} (or a process's) and renders the
 * same view as the status page, as text for a terminal.
 */
public final class StatusClient {
    /** The largest document read: a cluster's holds each process's (each at most {@link ClusterStatus#MAX_STATUS_BYTES}). */
    static final int MAX_DOCUMENT_BYTES = 64 * 1024 * 1024;
    private static final DateTimeFormatter TIME = DateTimeFormatter.ofPattern("HH:mm:ss").withZone(ZoneId.systemDefault());

    private StatusClient() {}

    /** Thrown with a message for the operator (unreachable, not kvferry's, bad answer). */
    public static final class StatusException extends Exception {
        public StatusException(String message) {
            super(message);
        }
    }

    /**
     * GET {@code http://ADDR/status.json}.
     *
     * @param addr {@code host:port} of a bootstrap registry (or of a process's status endpoint)
     */
    public static JsonNode fetch(String addr, Duration timeout) throws StatusException, InterruptedException {
        String base = addr.startsWith("http://") ? addr : "http://" + addr;
        URI uri;
        try {
            uri = URI.create(base.replaceAll("/+$", "") + "/status.json");
        } catch (IllegalArgumentException e) {
            throw new StatusException("'" + addr + "' is not HOST:PORT: " + e.getMessage());
        }
        HttpResponse<byte[]> resp = get(uri, timeout);
        if (resp.statusCode() == 404) {
            if (isRouter(uri.resolve("/health"), timeout)) {
                throw new StatusException(uri + " answered 404: that is a kvferry router older than its status page, which keeps no kvferry status; give --bootstrap "
                        + "a prefill's registry (its --bootstrap-port, 8998 by default) for the cluster, or a prefill's or decode's HTTP "
                        + "port for that process");
            }
            throw new StatusException(uri + " answered 404: that registry serves no kvferry status (an SGLang registry, "
                    + "or a kvferry older than the status page); GET /route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1"
                    + "&target_pp_rank=-1 still shows its topology");
        }
        if (resp.statusCode() != 200) throw new StatusException(uri + " answered HTTP " + resp.statusCode());
        try {
            JsonNode doc = StatusJson.MAPPER.readTree(resp.body());
            String kind = doc.path("kind").asText();
            if (!kind.equals("cluster") && !kind.equals("process") && !kind.equals("router")) {
                throw new StatusException(uri + " is not a kvferry status document");
            }
            return doc;
        } catch (JsonProcessingException e) {
            // The parser quotes what it read: the other side's bytes, shown escaped like the document's values.
            throw new StatusException(uri + " answered something that is not JSON: " + LogSafe.text(e.getOriginalMessage()));
        } catch (IOException e) {
            throw new StatusException(uri + " answered something that is not JSON: " + LogSafe.text(e.getMessage()));
        }
    }

    /** Whether {@code health} answers as a kvferry router's /health does (its backends counted); false on any failure. */
    private static boolean isRouter(URI health, Duration timeout) throws InterruptedException {
        try {
            HttpResponse<byte[]> r = get(health, timeout);
            JsonNode h = StatusJson.MAPPER.readTree(r.body());
            return h.has("healthy_prefills") && h.has("healthy_decodes");
        } catch (StatusException | IOException | RuntimeException e) {
            return false;
        }
    }

    /**
     * The whole exchange, headers and body, within {@code timeout}, the body at most {@link #MAX_DOCUMENT_BYTES}.
     * {@link HttpRequest#timeout} bounds only the wait for the headers: a registry that sent them and then
     * stalled would hold {@code kvferry status} for ever.
     */
    private static HttpResponse<byte[]> get(URI uri, Duration timeout) throws StatusException, InterruptedException {
        HttpClient http = HttpClient.newBuilder().connectTimeout(timeout).build();
        try {
            return BoundedBody.send(http, HttpRequest.newBuilder(uri).timeout(timeout).GET().build(), MAX_DOCUMENT_BYTES, "a status document")
                    .await(timeout);
        } catch (IllegalArgumentException e) {
            throw new StatusException("cannot fetch " + uri + ": " + e.getMessage());
        } catch (BoundedBody.TooLargeException e) {
            throw new StatusException(uri + " answered too much: " + e.getMessage());
        } catch (HttpTimeoutException e) {
            throw new StatusException("no complete answer (headers and body) from " + uri + " within " + timeout.toMillis() + " ms");
        } catch (IOException e) {
            throw new StatusException("cannot reach " + uri + ": " + why(e));
        } finally {
            http.shutdownNow();
        }
    }

    /**
     * The document as indented JSON for a terminal ({@code kvferry status --json}): every character outside
     * printable ASCII is written as a {@code \\uXXXX} escape, so DEL, the C1 controls and U+2028/2029 that
     * a process's document may carry (Jackson escapes only those below U+0020 by default) reach a pipe or
     * a terminal as text; a JSON reader reads the same strings back.
     */
    public static String json(JsonNode doc) {
        try {
            return TERMINAL_JSON.writeValueAsString(doc);
        } catch (JsonProcessingException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static final ObjectWriter TERMINAL_JSON = new ObjectMapper(JsonFactory.builder()
            .enable(JsonWriteFeature.ESCAPE_NON_ASCII).build())
            .writerWithDefaultPrettyPrinter().with(new DelEscaped());

    /** Jackson's standard escapes plus DEL, the one ASCII control above U+001F. */
    private static final class DelEscaped extends CharacterEscapes {
        private final int[] ascii = CharacterEscapes.standardAsciiEscapesForJSON();

        DelEscaped() {
            ascii[0x7f] = CharacterEscapes.ESCAPE_STANDARD;
        }

        @Override
        public int[] getEscapeCodesForAscii() {
            return ascii;
        }

        @Override
        public SerializableString getEscapeSequence(int ch) {
            return null; // only standard escapes
        }
    }

    /** The terminal view of a cluster, process or router document. */
    public static String render(JsonNode doc) {
        if (doc.path("kind").asText().equals("router")) return renderRouter(doc);
        StringBuilder b = new StringBuilder();
        List<JsonNode> processes = new ArrayList<>();
        if (doc.path("kind").asText().equals("cluster")) {
            b.append("kvferry cluster at registry ").append(text(doc.path("registry"))).append('\n');
            JsonNode t = doc.path("topology");
            if (t.isNull() || t.isMissingNode()) {
                b.append("topology: no prefill rank registered yet\n");
            } else {
                b.append(String.format("topology: tp %d  cp %d  dp %d  pp %d  page_size %d  dtype %s  registered %d/%d%s%n",
                        t.path("attn_tp_size").asInt(), t.path("attn_cp_size").asInt(), t.path("dp_size").asInt(),
                        t.path("pp_size").asInt(), t.path("page_size").asInt(), text(t.path("kv_cache_dtype")),
                        t.path("registered").asInt(), t.path("expected").asInt(), t.path("ready").asBoolean() ? " (ready)" : " (not ready)"));
            }
            b.append("\nprefill ranks\n");
            Table ranks = new Table("dp", "cp", "tp", "pp", "endpoint", "status");
            for (JsonNode r : doc.path("prefill_ranks")) {
                ranks.row(text(r.path("dp")), text(r.path("cp")), text(r.path("tp")), text(r.path("pp")),
                        text(r.path("endpoint")), r.path("status_url").isNull() ? "-" : text(r.path("status_url")));
            }
            b.append(ranks);
            b.append("\nprocesses\n");
            Table procs = new Table("url", "role", "ranks", "state");
            for (JsonNode p : doc.path("processes")) {
                boolean ok = p.path("ok").asBoolean();
                procs.row(text(p.path("url")), ok ? text(p.path("status").path("role")) : "-",
                        ok ? Integer.toString(p.path("status").path("ranks").size()) : "-", ok ? "up" : "DOWN: " + text(p.path("error")));
                if (ok) processes.add(p.path("status"));
            }
            b.append(procs);
        } else {
            b.append("kvferry ").append(text(doc.path("role"))).append(" process ").append(text(doc.path("pid"))).append('\n');
            processes.add(doc);
        }
        JsonNode totals = doc.path("totals");
        b.append(String.format("%nrooms by state: %s   concluded: %d   bytes moved: %s%n", counts(totals.path("rooms_by_state")),
                totals.path("rooms_concluded").asLong(), bytes(totals.path("bytes").asLong())));
        b.append("failures by kind: ").append(counts(totals.path("failures_by_kind"))).append('\n');
        // The reference engine's processes: their KV pages and what their prefix caches served.
        Table engines = new Table("process", "pages used", "cached", "free", "cached tokens", "prompt tokens", "prefix waits", "drain");
        Table outputs = outputsTable("process");
        for (JsonNode p : processes) {
            JsonNode e = p.path("engine");
            if (!e.isObject()) continue;
            JsonNode pages = e.path("kv_pages");
            String process = text(p.path("role")) + " " + text(p.path("pid"));
            engines.row(process, text(pages.path("used")), text(pages.path("cached")),
                    text(pages.path("free")), text(e.path("cached_tokens")), e.has("prompt_tokens") ? text(e.path("prompt_tokens")) : "-",
                    e.has("prefix_deferrals") ? text(e.path("prefix_deferrals")) : "-", drain(e.path("draining"), e.path("drain")));
            if (e.path("structured_outputs").isObject()) outputsRow(outputs, process, e.path("structured_outputs"));
        }
        if (!engines.isEmpty()) {
            b.append("\nengines (KV pages; prompt tokens served from the prefix cache; requests that waited for a shared prefix; drain: "
                    + "no, or the requests a drain met: completed, cut)\n").append(engines);
        }
        if (!outputs.isEmpty()) b.append("\nstructured outputs (specs by outcome since start; waiting now; mean compile time)\n").append(outputs);

        Table peers = new Table("rank", "peer", "address", "data path", "rooms", "silent ms");
        List<String> pathNotes = new ArrayList<>();
        Table rooms = new Table("rank", "room", "state", "age ms", "in state ms", "peers");
        List<String[]> oldest = new ArrayList<>();
        List<JsonNode[]> failures = new ArrayList<>();
        for (JsonNode p : processes) {
            for (JsonNode r : p.path("ranks")) {
                String rank = rankName(r);
                for (JsonNode peer : r.path("peers")) {
                    peers.row(rank, text(peer.path("name")), text(peer.path("address")), text(peer.path("data_path")),
                            text(peer.path("rooms")), text(peer.path("silent_millis")));
                    String note = text(peer.path("data_path_note"));
                    if (!note.isEmpty()) pathNotes.add("  " + rank + " " + text(peer.path("name")) + ": " + clip(note, 200) + "\n");
                }
                for (JsonNode room : r.path("oldest_rooms")) {
                    oldest.add(new String[]{rank, text(room.path("room")), text(room.path("state")), text(room.path("age_millis")),
                            text(room.path("in_state_millis")), text(room.path("peers"))});
                }
                for (JsonNode f : r.path("recent_failures")) failures.add(new JsonNode[]{r, f});
            }
        }
        b.append("\npeers\n").append(peers.isEmpty() ? "  (none)\n" : peers.toString());
        if (!pathNotes.isEmpty()) b.append("data path notes\n").append(String.join("", pathNotes));
        // by age, oldest first; a row without a numeric age (another version's document) sorts last instead of failing the render
        oldest.sort(Comparator.comparingLong((String[] a) -> ageOf(a[3])).reversed());
        for (String[] a : oldest.subList(0, Math.min(oldest.size(), 10))) rooms.row(a);
        b.append("\noldest rooms in flight\n").append(rooms.isEmpty() ? "  (none)\n" : rooms.toString());
        failures.sort(Comparator.comparingLong((JsonNode[] a) -> a[1].path("at_epoch_millis").asLong()).reversed());
        Table fails = new Table("time", "rank", "room", "kind", "stage", "peer", "reason");
        for (JsonNode[] f : failures.subList(0, Math.min(failures.size(), 10))) {
            fails.row(TIME.format(Instant.ofEpochMilli(f[1].path("at_epoch_millis").asLong())), rankName(f[0]), text(f[1].path("room")),
                    text(f[1].path("kind")), text(f[1].path("stage")), text(f[1].path("peer")), clip(text(f[1].path("reason")), 100));
        }
        b.append("\nrecent failures\n").append(fails.isEmpty() ? "  (none)\n" : fails.toString());
        return b.toString();
    }

    /**
     * The terminal view of a router's document ({@code GET /status.json} of {@code kvferry serve --role router}): its state,
     * requests in it and waiting, answered since start by status, tokens, the last minute's rates and latencies, its
     * backends with their last health check, its tenants (names only, their limits, rate buckets and refusals), its admission settings
     * ({@code --max-backends} among them), its drain once begun (the requests it met: completed, cut) and its structured-output
     * compiler (specs by outcome, waiting now, mean compile time).
     */
    static String renderRouter(JsonNode doc) {
        StringBuilder b = new StringBuilder();
        b.append("kvferry router process ").append(text(doc.path("pid"))).append(" serving ").append(text(doc.path("model")))
                .append(": ").append(text(doc.path("status"))).append('\n');
        JsonNode req = doc.path("requests"), tokens = doc.path("tokens"), rates = doc.path("rates"), lat = doc.path("latency");
        b.append(String.format("%nrequests: running %d  waiting %d  answered %d   by class: %s%n", req.path("running").asLong(),
                req.path("waiting").asLong(), req.path("total").asLong(), counts(req.path("by_class"))));
        b.append("by status: ").append(counts(req.path("by_status"))).append('\n');
        b.append(String.format("tokens: prompt %d  generated %d%n", tokens.path("prompt").asLong(), tokens.path("generated").asLong()));
        b.append(String.format("last %.0f s: %.2f requests/s  %.2f server errors/s  %.1f prompt tokens/s  %.1f generated tokens/s%n",
                rates.path("window_s").asDouble(), rates.path("requests_per_s").asDouble(), rates.path("server_errors_per_s").asDouble(),
                rates.path("prompt_tokens_per_s").asDouble(), rates.path("generated_tokens_per_s").asDouble()));
        b.append(String.format("last %d s: TTFT %s   end-to-end %s%n", lat.path("window_s").asInt(), percentiles(lat.path("ttft_ms")),
                percentiles(lat.path("e2e_ms"))));
        JsonNode c = doc.path("config");
        b.append(String.format("admission: max concurrent requests %s  queue timeout %d ms  tenants %s%s%n",
                c.path("max_concurrent_requests").asInt() == 0 ? "no limit" : text(c.path("max_concurrent_requests")),
                c.path("queue_timeout_ms").asLong(), c.path("tenants").asBoolean() ? "yes" : "no",
                c.path("max_backends").isNumber() ? "  max backends " + c.path("max_backends").asLong() : ""));
        if (doc.path("drain").isObject()) {
            b.append(String.format("drain: %s completed  %s cut (the requests running when it began)%n", count(doc.path("drain").path("completed")),
                    count(doc.path("drain").path("cut"))));
        }
        if (doc.path("structured_outputs").isObject()) {
            Table outputs = outputsTable("compiler");
            outputsRow(outputs, "router", doc.path("structured_outputs"));
            b.append("\nstructured outputs (specs by outcome since start; waiting now; mean compile time)\n").append(outputs);
        }
        Table backends = new Table("role", "url", "state", "in flight", "last check", "age ms", "bootstrap");
        for (JsonNode be : doc.path("backends")) {
            // Out of rotation for how long (a full router's add replaces one added at run time out config.replace_after_ms): "DOWN 31 s".
            // One added at run time (POST /workers, a registration) says so: "decode (added)"; the others were given at start, kept.
            backends.row(text(be.path("role")) + ("added".equals(be.path("origin").asText(null)) ? " (added)" : ""), text(be.path("url")), be.path("healthy").asBoolean() ? "up"
                            : "DOWN" + (be.path("out_of_rotation_ms").isNumber() ? " " + be.path("out_of_rotation_ms").asLong() / 1000 + " s" : ""),
                    text(be.path("in_flight")), clip(text(be.path("last_check")), 100),
                    be.path("last_check_age_ms").isNumber() ? text(be.path("last_check_age_ms")) : "-",
                    be.path("bootstrap").isTextual() ? text(be.path("bootstrap")) : "-");
        }
        b.append("\nbackends\n").append(backends.isEmpty() ? "  (none)\n" : backends.toString());
        if (doc.path("tenants").isArray()) {
            Table tenants = new Table("tenant", "running", "waiting", "max concurrent", "requests/min left", "tokens/min left",
                    "refused requests", "refused tokens");
            for (JsonNode t : doc.path("tenants")) {
                tenants.row(text(t.path("name")), text(t.path("running")), text(t.path("waiting")),
                        t.path("max_concurrent_requests").asInt() == 0 ? "no limit" : text(t.path("max_concurrent_requests")),
                        perMinute(t.path("remaining_requests"), t.path("requests_per_minute")),
                        perMinute(t.path("remaining_tokens"), t.path("tokens_per_minute")),
                        count(t.path("rate_limited_requests")), count(t.path("rate_limited_tokens")));
            }
            b.append("\ntenants\n").append(tenants.isEmpty() ? "  (none)\n" : tenants.toString());
        }
        return b.toString();
    }

    /**
     * A tenant's per-minute limit as "REMAINING of LIMIT" (what its bucket holds now), "no limit" (0), or "-" where the
     * document has no such field (a router older than its tenants' rates in its status).
     */
    private static String perMinute(JsonNode remaining, JsonNode limit) {
        if (!limit.isNumber()) return "-";
        if (limit.asLong() <= 0) return "no limit";
        return remaining.asLong() + " of " + limit.asLong();
    }

    /** The table of structured-output compilers' figures, one row each ({@link #outputsRow}). */
    private static Table outputsTable(String first) {
        return new Table(first, "compiled", "cached", "refused", "deadline", "busy", "waiting", "mean compile ms");
    }

    /** A compiler's {@code structured_outputs} object as a row: its outcomes' counts, the specs waiting, the mean compile time. */
    private static void outputsRow(Table t, String who, JsonNode o) {
        JsonNode by = o.path("outcomes");
        t.row(who, count(by.path("compiled")), count(by.path("cached")), count(by.path("refused")), count(by.path("deadline")),
                count(by.path("busy")), count(o.path("waiting")),
                o.path("mean_compile_ms").isNumber() ? String.format("%.2f", o.path("mean_compile_ms").asDouble()) : "-");
    }

    /** An engine's drain state: "-" (a document without it), "no", or the requests its drain met. */
    private static String drain(JsonNode draining, JsonNode drain) {
        if (!draining.isBoolean()) return "-";
        if (!draining.asBoolean()) return "no";
        return "draining: " + count(drain.path("completed")) + " completed, " + count(drain.path("cut")) + " cut";
    }

    /** A count of the document, or "-" where it has none. */
    private static String count(JsonNode n) {
        return n.isNumber() ? Long.toString(n.asLong()) : "-";
    }

    /** "p50 X ms  p99 Y ms (N requests)", or "no request" for a window without one. */
    private static String percentiles(JsonNode s) {
        if (s.path("count").asInt() == 0) return "no request";
        return String.format("p50 %.1f ms  p99 %.1f ms (%d requests)", s.path("p50").asDouble(), s.path("p99").asDouble(), s.path("count").asInt());
    }

    /** The first message in the cause chain (HttpClient wraps socket errors without one), else the root cause's type. */
    static String why(Throwable e) {
        Throwable root = e;
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof UnresolvedAddressException) return "unknown host (" + e.getClass().getSimpleName() + ")";
            if (t.getMessage() != null && !t.getMessage().isBlank()) return t.getMessage();
            root = t;
            if (t.getCause() == t) break;
        }
        return root == e ? e.getClass().getSimpleName() : e.getClass().getSimpleName() + " (" + root.getClass().getSimpleName() + ")";
    }

    private static long ageOf(String millis) {
        try {
            return Long.parseLong(millis);
        } catch (NumberFormatException e) {
            return Long.MIN_VALUE;
        }
    }

    private static String rankName(JsonNode r) {
        return text(r.path("role")) + " tp" + r.path("tp_rank").asInt() + " pp" + r.path("pp_rank").asInt()
                + " dp" + r.path("dp_rank").asInt() + (r.path("cp_rank").asInt() != 0 ? " cp" + r.path("cp_rank").asInt() : "");
    }

    private static String counts(JsonNode n) {
        if (!n.fields().hasNext()) return "none";
        StringBuilder b = new StringBuilder();
        for (Iterator<Map.Entry<String, JsonNode>> it = n.fields(); it.hasNext(); ) {
            Map.Entry<String, JsonNode> f = it.next();
            if (!b.isEmpty()) b.append("  ");
            b.append(LogSafe.text(f.getKey())).append(' ').append(f.getValue().asLong());
        }
        return b.toString();
    }

    static String bytes(long n) {
        if (n < 1_000_000) return n + " B";
        if (n < 1_000_000_000L) return String.format("%.1f MB", n / 1e6);
        return String.format("%.2f GB", n / 1e9);
    }

    /**
     * A value of the document as terminal text: the document is other processes' words (a registered rank's, a
     * decode's, a peer's), so its control characters are shown as escapes, never sent to the terminal (an ESC
     * sequence could clear the screen or hide lines; a newline would start a forged row).
     */
    private static String text(JsonNode n) {
        return LogSafe.text(n.asText());
    }

    private static String clip(String s, int n) {
        return s.length() <= n ? s : s.substring(0, n - 1) + "…";
    }

    /** A plain text table with columns as wide as their widest cell. */
    private static final class Table {
        private final String[] header;
        private final List<String[]> rows = new ArrayList<>();

        Table(String... header) {
            this.header = header;
        }

        void row(String... cells) {
            rows.add(cells);
        }

        boolean isEmpty() {
            return rows.isEmpty();
        }

        @Override
        public String toString() {
            int[] w = new int[header.length];
            for (int i = 0; i < w.length; i++) w[i] = header[i].length();
            for (String[] r : rows) for (int i = 0; i < w.length; i++) w[i] = Math.max(w[i], r[i].length());
            StringBuilder b = new StringBuilder();
            line(b, header, w);
            for (String[] r : rows) line(b, r, w);
            return b.toString();
        }

        private static void line(StringBuilder b, String[] cells, int[] w) {
            b.append("  ");
            for (int i = 0; i < cells.length; i++) {
                b.append(cells[i]);
                if (i < cells.length - 1) b.append(" ".repeat(w[i] - cells[i].length() + 2));
            }
            b.append('\n');
        }
    }
}
