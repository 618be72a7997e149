package io.kvferry.ops;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.kvferry.http.BoundedBody;
import io.kvferry.http.HttpUrls;
import io.kvferry.metrics.LogSafe;
import io.kvferry.registry.BootstrapRegistryServer;
import io.kvferry.registry.PrefillRankRegistration;
import io.kvferry.registry.PrefillServerInfo;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Supplier;

/**
 * The cluster as the bootstrap registry sees it, for its status page and {@code kvferry status}: the
 * instance's topology, every registered prefill rank (dp, cp, tp, pp, endpoint), and the status document
 * of each rank's process, fetched from the {@code kvferry_status_url} the rank registered (each distinct
 * URL once, all at once, all within {@link #FETCH_TIMEOUT} plus {@link #FETCH_MARGIN}, headers and body, each
 * body at most {@link #MAX_STATUS_BYTES}); a process that does not answer in time, or answers too much, is
 * listed with the error. Totals add up the processes that answered.
 */
public final class ClusterStatus implements Supplier<ObjectNode> {
    /** How long one process may take to send its status document: the page waits this long (plus {@link #FETCH_MARGIN}) at most. */
    static final Duration FETCH_TIMEOUT = Duration.ofMillis(1500);
    /** What collecting every fetch may take past {@link #FETCH_TIMEOUT} (they run at once; this covers starting them). */
    static final Duration FETCH_MARGIN = Duration.ofMillis(250);
    /** The largest status document read from a process (a few KiB is usual; its tables are bounded). */
    static final int MAX_STATUS_BYTES = 4 * 1024 * 1024;

    private final BootstrapRegistryServer registry;
    /** The largest status document read from a process ({@link #MAX_STATUS_BYTES} but in tests). */
    private final int maxStatusBytes;
    private final HttpClient http;
    /** Status documents to include besides the registered ranks' (copy-on-write: the page reads it while a launcher adds). */
    private final List<String> extraUrls = new CopyOnWriteArrayList<>();
    /** Processes in the registry's own process (a prefill engine role holds its registry), shown without a fetch. */
    private final List<ProcessStatus> local = new CopyOnWriteArrayList<>();
    /** The collection under way, which page loads arriving meanwhile wait for; null when none. */
    private final AtomicReference<CompletableFuture<ObjectNode>> collecting = new AtomicReference<>();
    private final AtomicInteger collections = new AtomicInteger();

    /**
     * @param extraUrls status documents to include besides the registered ranks' (e.g. the decode processes a
     *                  launcher started, which do not register with a prefill's registry)
     */
    public ClusterStatus(BootstrapRegistryServer registry, List<String> extraUrls) {
        this(registry, extraUrls, MAX_STATUS_BYTES);
    }

    /** With another cap on each document than {@link #MAX_STATUS_BYTES} (the tests' small one). */
    ClusterStatus(BootstrapRegistryServer registry, List<String> extraUrls, int maxStatusBytes) {
        this.registry = registry;
        this.maxStatusBytes = maxStatusBytes;
        for (String u : extraUrls) watch(u);
        // Its own executor: the client's dependent stages must not wait for the common pool, which an
        // embedding process may keep busy (a bench run on it held every status fetch until its timeout).
        this.http = HttpClient.newBuilder().connectTimeout(FETCH_TIMEOUT).version(HttpClient.Version.HTTP_1_1)
                .executor(Executors.newVirtualThreadPerTaskExecutor()).build();
    }

    /** Also shows ranks that live in the registry's own process (no URL, no fetch: {@code "url": "local"}). */
    public void local(ProcessStatus status) {
        local.add(status);
    }

    /**
     * Also shows the process whose status document is at {@code statusJsonUrl} (a decode process, which
     * registers with no prefill registry). Idempotent. One that has the shape but no HTTP request can be made
     * to (a host name with an {@code '_'}, say) is listed down on the page with the reason.
     */
    public void watch(String statusJsonUrl) {
        if (!statusJsonUrl.startsWith("http://") || !statusJsonUrl.endsWith("/status.json")) {
            throw new IllegalArgumentException("a status document URL is http://HOST:PORT/status.json, not '" + statusJsonUrl + "'");
        }
        if (!extraUrls.contains(statusJsonUrl)) extraUrls.add(statusJsonUrl);
    }

    /**
     * The cluster document. Page loads that come while one is being collected share its fetches (each gets
     * its own copy of the result): the page is served unauthenticated, and without this every load would
     * open one connection to every registered status URL, so loads in a burst multiplied them.
     */
    @Override
    public ObjectNode get() {
        CompletableFuture<ObjectNode> mine = new CompletableFuture<>();
        CompletableFuture<ObjectNode> underWay = collecting.compareAndExchange(null, mine);
        if (underWay != null) {
            try {
                return underWay.join().deepCopy(); // bounded: a collection ends within its fetch deadline
            } catch (CompletionException e) { // the collector's own failure, as the collector saw it
                if (e.getCause() instanceof RuntimeException r) throw r;
                if (e.getCause() instanceof Error r) throw r;
                throw e;
            }
        }
        try {
            ObjectNode doc = collect();
            collections.incrementAndGet();
            mine.complete(doc);
            return doc.deepCopy();
        } catch (RuntimeException | Error e) {
            mine.completeExceptionally(e);
            throw e;
        } finally {
            collecting.set(null);
        }
    }

    /** How many times the processes' documents were collected (for tests). */
    int collections() {
        return collections.get();
    }

    /** {@code host:port}, an IPv6 literal in brackets ({@code [fd00::1]:5000}; it read {@code fd00::1:5000}). */
    static String hostPort(String host, int port) {
        return (host.indexOf(':') >= 0 && !host.startsWith("[") ? "[" + host + "]" : host) + ":" + port;
    }

    private ObjectNode collect() {
        ObjectNode doc = StatusJson.MAPPER.createObjectNode();
        doc.put("kind", "cluster");
        doc.put("registry", hostPort(registry.host(), registry.port()));
        doc.put("now_ms", System.currentTimeMillis());
        PrefillServerInfo topo = registry.topology();
        if (topo == null) {
            doc.putNull("topology");
        } else {
            ObjectNode t = doc.putObject("topology");
            t.put("attn_tp_size", topo.attnTpSize());
            t.put("attn_cp_size", topo.attnCpSize());
            t.put("dp_size", topo.dpSize());
            t.put("pp_size", topo.ppSize());
            t.put("page_size", topo.pageSize());
            t.put("kv_cache_dtype", LogSafe.text(topo.kvCacheDtype()));
            t.put("follow_bootstrap_room", topo.followBootstrapRoom());
            t.put("expected", topo.totalRanks());
            t.put("registered", registry.registeredRanks());
            t.put("ready", registry.registeredRanks() >= topo.totalRanks());
        }
        ArrayNode ranks = doc.putArray("prefill_ranks");
        Set<String> urls = new LinkedHashSet<>();
        for (PrefillRankRegistration r : registry.registrations()) {
            ObjectNode n = ranks.addObject();
            n.put("dp", r.dpGroup());
            n.put("cp", r.attnCpRank());
            n.put("tp", r.attnTpRank());
            n.put("pp", r.ppRank());
            n.put("endpoint", hostPort(r.rankIp(), r.rankPort()));
            if (r.kvferryStatusUrl() != null) {
                n.put("status_url", r.kvferryStatusUrl());
                urls.add(r.kvferryStatusUrl());
            } else {
                n.putNull("status_url");
            }
        }
        urls.addAll(extraUrls);
        ArrayNode processes = doc.putArray("processes");
        List<Fetch> fetches = new ArrayList<>();
        for (ProcessStatus l : local) fetches.add(new Fetch("local", CompletableFuture.completedFuture(l.get()), () -> { }));
        for (String u : urls) fetches.add(fetch(u));
        // One deadline for them all: HttpRequest.timeout bounds only the wait for a process's headers, so a
        // process that then stalls mid-body would hold the page (and a registry request slot) until the
        // registry's request timeout cut it off.
        long deadline = System.nanoTime() + FETCH_TIMEOUT.plus(FETCH_MARGIN).toNanos();
        long bytes = 0, concluded = 0, peers = 0;
        Map<String, Long> byState = new TreeMap<>(), byKind = new TreeMap<>();
        for (Fetch f : fetches) {
            ObjectNode p = processes.addObject();
            p.put("url", f.url());
            try {
                JsonNode status = f.doc().get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
                String malformed = StatusJson.whyNotProcess(status);
                if (malformed != null) throw new IllegalStateException("not a kvferry process status document: " + malformed);
                p.put("ok", true);
                p.set("status", status);
                JsonNode tot = status.path("totals");
                bytes += tot.path("bytes").asLong();
                concluded += tot.path("rooms_concluded").asLong();
                peers += tot.path("peers").asLong();
                addAll(byState, tot.path("rooms_by_state"));
                addAll(byKind, tot.path("failures_by_kind"));
            } catch (TimeoutException te) {
                f.abort().run();
                p.put("ok", false);
                p.put("error", "no complete status document within the fetch timeout of " + FETCH_TIMEOUT.toMillis() + " ms");
            } catch (InterruptedException ie) {
                Thread.currentThread().interrupt();
                f.abort().run();
                p.put("ok", false);
                p.put("error", "interrupted");
            } catch (Exception ex) {
                Throwable c = ex;
                while ((c instanceof ExecutionException || c instanceof CompletionException) && c.getCause() != null) c = c.getCause();
                p.put("ok", false);
                p.put("error", LogSafe.text(c.getMessage() != null ? c.getMessage() : c.getClass().getSimpleName()));
            }
        }
        ObjectNode totals = doc.putObject("totals");
        totals.put("bytes", bytes);
        totals.put("rooms_concluded", concluded);
        totals.put("peers", peers);
        totals.set("rooms_by_state", StatusJson.MAPPER.valueToTree(byState));
        totals.set("failures_by_kind", StatusJson.MAPPER.valueToTree(byKind));
        return doc;
    }

    /** One process's document on its way, and how to give up on it (cancel the exchange, abort its body). */
    private record Fetch(String url, CompletableFuture<JsonNode> doc, Runnable abort) {}

    private Fetch fetch(String url) {
        BoundedBody.Exchange exchange;
        try {
            exchange = BoundedBody.send(http, HttpRequest.newBuilder(URI.create(url)).timeout(FETCH_TIMEOUT).GET().build(), maxStatusBytes,
                    "a process status document");
        } catch (RuntimeException e) {
            // A URL no request can be made to (watched; the registry refuses such registrations): that
            // process is listed down with the reason, the others are still fetched.
            String why = HttpUrls.whyNotFetchable(url);
            return new Fetch(url, CompletableFuture.failedFuture(new IllegalArgumentException("cannot fetch it: "
                    + (why != null ? why : e.getMessage()))), () -> { });
        }
        return new Fetch(url, exchange.response().thenApply(ClusterStatus::parse), exchange::abort);
    }

    private static JsonNode parse(HttpResponse<byte[]> resp) {
        if (resp.statusCode() != 200) throw new IllegalStateException("HTTP " + resp.statusCode());
        try {
            return StatusJson.MAPPER.readTree(resp.body());
        } catch (JsonProcessingException e) {
            throw new UncheckedIOException("not JSON: " + e.getOriginalMessage(), e);
        } catch (IOException e) { // not from a byte array in memory; for the compiler
            throw new UncheckedIOException(e);
        }
    }

    private static void addAll(Map<String, Long> into, JsonNode counts) {
        for (Iterator<Map.Entry<String, JsonNode>> it = counts.fields(); it.hasNext(); ) {
            Map.Entry<String, JsonNode> f = it.next();
            into.merge(f.getKey(), f.getValue().asLong(), Long::sum);
        }
    }

    /** The distinct status URLs this view fetches, in order (for tests). */
    List<String> urls() {
        List<String> out = new ArrayList<>();
        for (PrefillRankRegistration r : registry.registrations()) {
            if (r.kvferryStatusUrl() != null && !out.contains(r.kvferryStatusUrl())) out.add(r.kvferryStatusUrl());
        }
        for (String u : extraUrls) if (!out.contains(u)) out.add(u);
        return out;
    }
}
